//! Host memory for the model's largest array, the memmap.
//!
//! The memmap of a gigabyte of model RAM is 8 MiB that the zap and fault paths touch
//! page by page. `HugeBuf` reserves the whole array at once as anonymous, lazily
//! backed host memory (like the kernel's vmemmap: a terabyte machine reserves
//! address space, not memory), so an element is one index away with no section
//! table in between. The reservation is 2 MiB aligned and advised MADV_HUGEPAGE, so
//! one host TLB entry covers 2 MiB of it where the host's THP policy allows.

use std::ops::{Deref, DerefMut};
use std::ptr::NonNull;

/// The host's PMD size on x86-64 and arm64 with 4K pages.
const HUGE: usize = 2 << 20;

/// A fixed-length array of `T` in 2 MiB-aligned, THP-advised, lazily backed host memory.
pub struct HugeBuf<T: Copy> {
    ptr: NonNull<T>,
    len: usize,
    /// Bytes mapped at `ptr` (a whole number of host pages).
    bytes: usize,
}

// SAFETY: HugeBuf owns its elements exclusively, like Box<[T]>.
unsafe impl<T: Copy + Send> Send for HugeBuf<T> {}
// SAFETY: shared access only hands out &[T], like Box<[T]>.
unsafe impl<T: Copy + Sync> Sync for HugeBuf<T> {}

impl<T: Copy> HugeBuf<T> {
    /// `len` elements of all-zero bytes. The host backs a page of them only when it
    /// is first touched.
    ///
    /// # Safety
    /// All-zero bytes must be a valid `T`.
    pub unsafe fn zeroed(len: usize) -> HugeBuf<T> {
        assert!(std::mem::align_of::<T>() <= HUGE, "HugeBuf alignment");
        let bytes = std::mem::size_of::<T>()
            .checked_mul(len)
            .expect("HugeBuf size overflows")
            .max(1)
            .next_multiple_of(HUGE);
        let span = bytes + HUGE;
        // SAFETY: a fresh private anonymous mapping; no existing memory is affected.
        // NORESERVE: the reservation is address space, charged only as it is touched.
        let raw = unsafe {
            libc::mmap(
                std::ptr::null_mut(),
                span,
                libc::PROT_READ | libc::PROT_WRITE,
                libc::MAP_PRIVATE | libc::MAP_ANONYMOUS | libc::MAP_NORESERVE,
                -1,
                0,
            )
        };
        assert_ne!(raw, libc::MAP_FAILED, "cannot reserve {bytes} bytes of host memory");
        let base = raw as usize;
        let start = base.next_multiple_of(HUGE);
        // SAFETY: [base, start) and [start + bytes, base + span) lie inside the mapping
        // just made and nothing refers to them; madvise only changes how the host backs
        // [start, start + bytes), and failing (no THP) is harmless.
        unsafe {
            if start > base {
                libc::munmap(raw, start - base);
            }
            if base + span > start + bytes {
                libc::munmap((start + bytes) as *mut libc::c_void, base + span - start - bytes);
            }
            libc::madvise(start as *mut libc::c_void, bytes, libc::MADV_HUGEPAGE);
        }
        HugeBuf {
            ptr: NonNull::new(start as *mut T).expect("mmap returned null"),
            len,
            bytes,
        }
    }
}

impl<T: Copy> Deref for HugeBuf<T> {
    type Target = [T];
    fn deref(&self) -> &[T] {
        // SAFETY: ptr holds len elements owned by self, initialized (all-zero, valid
        // per `zeroed`'s contract, or written since).
        unsafe { std::slice::from_raw_parts(self.ptr.as_ptr(), self.len) }
    }
}

impl<T: Copy> DerefMut for HugeBuf<T> {
    fn deref_mut(&mut self) -> &mut [T] {
        // SAFETY: as in deref, and &mut self guarantees exclusive access.
        unsafe { std::slice::from_raw_parts_mut(self.ptr.as_ptr(), self.len) }
    }
}

impl<T: Copy> Drop for HugeBuf<T> {
    fn drop(&mut self) {
        // SAFETY: exactly the range `zeroed` kept mapped; no reference outlives self.
        unsafe { libc::munmap(self.ptr.as_ptr() as *mut libc::c_void, self.bytes) };
    }
}

/// MemAvailable from /proc/meminfo, in bytes; None where the host does not say.
pub fn mem_available() -> Option<u64> {
    let info = std::fs::read_to_string("/proc/meminfo").ok()?;
    let line = info.lines().find_map(|l| l.strip_prefix("MemAvailable:"))?;
    let kb: u64 = line.trim().strip_suffix("kB")?.trim().parse().ok()?;
    kb.checked_mul(1024)
}

/// Refuse to start `what` when it needs more host memory than is `available`, instead
/// of growing until the host's allocator or OOM killer ends it.
pub fn check_fits(what: &str, needed: u64, available: Option<u64>) -> Result<(), String> {
    match available {
        Some(avail) if needed > avail => Err(format!(
            "{what} needs up to {} of host memory, but only {} is available (MemAvailable in /proc/meminfo)",
            fmt_bytes(needed),
            fmt_bytes(avail)
        )),
        _ => Ok(()),
    }
}

/// Bytes in the largest binary unit that leaves a number of at least 1: 3.5 GiB.
pub fn fmt_bytes(n: u64) -> String {
    let units = ["bytes", "KiB", "MiB", "GiB", "TiB", "PiB", "EiB"];
    let i = ((63 - n.max(1).leading_zeros()) / 10) as usize;
    if i == 0 {
        return format!("{n} bytes");
    }
    format!("{:.1} {}", n as f64 / (1u64 << (10 * i)) as f64, units[i])
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn sizes_that_do_not_fit_are_refused_naming_both() {
        assert_eq!(
            check_fits("boot --ram 100T", 200 << 30, Some(6 << 30)).unwrap_err(),
            "boot --ram 100T needs up to 200.0 GiB of host memory, but only 6.0 GiB is available \
             (MemAvailable in /proc/meminfo)"
        );
        assert!(check_fits("x", 1 << 30, Some(2 << 30)).is_ok());
        assert!(check_fits("x", 1 << 60, None).is_ok());
        assert_eq!(fmt_bytes(512), "512 bytes");
        assert_eq!(fmt_bytes(3 << 19), "1.5 MiB");
        assert!(mem_available().is_some_and(|b| b > 0));
    }

    #[test]
    fn buffers_are_huge_page_aligned_and_zeroed() {
        // SAFETY: zero is a valid u64.
        let mut b = unsafe { HugeBuf::<u64>::zeroed(HUGE / 8 + 3) };
        assert_eq!(b.as_ptr() as usize % HUGE, 0);
        assert!(b.iter().all(|&x| x == 0));
        b[HUGE / 8 + 2] = 5;
        assert_eq!(b[HUGE / 8 + 2], 5);
        assert_eq!(b.len(), HUGE / 8 + 3);
    }

    #[test]
    fn a_terabyte_memmap_reserves_address_space_only() {
        // 2^28 struct pages of 32 bytes: 8 GiB reserved, nothing touched.
        // SAFETY: zero is a valid [u64; 4].
        let b = unsafe { HugeBuf::<[u64; 4]>::zeroed(1 << 28) };
        assert_eq!(b[(1 << 28) - 1], [0; 4]);
    }
}
