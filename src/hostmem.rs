//! Host memory for the model's largest array, the memmap.
//!
//! The memmap of a gigabyte of model RAM is 8 MiB that the zap and fault paths touch
//! page by page; on 4 KiB host pages that is thousands of host TLB entries, and the
//! walks for them stall every access. `HugeBuf` asks the host for 2 MiB-aligned
//! memory with MADV_HUGEPAGE, so one host TLB entry covers a whole section where the
//! host's THP policy allows it.

use std::alloc::{self, Layout};
use std::ops::{Deref, DerefMut};
use std::ptr::NonNull;

/// The host's PMD size on x86-64 and arm64 with 4K pages.
const HUGE: usize = 2 << 20;

/// A fixed-length array of `T` in 2 MiB-aligned, THP-advised host memory.
pub struct HugeBuf<T: Copy> {
    ptr: NonNull<T>,
    len: usize,
}

// SAFETY: HugeBuf owns its elements exclusively, like Box<[T]>.
unsafe impl<T: Copy + Send> Send for HugeBuf<T> {}
// SAFETY: shared access only hands out &[T], like Box<[T]>.
unsafe impl<T: Copy + Sync> Sync for HugeBuf<T> {}

impl<T: Copy> HugeBuf<T> {
    fn layout(len: usize) -> Layout {
        let bytes = std::mem::size_of::<T>()
            .checked_mul(len)
            .expect("HugeBuf size overflows");
        Layout::from_size_align(bytes.max(1), HUGE.max(std::mem::align_of::<T>())).expect("HugeBuf layout")
    }

    /// Allocate room for `len` elements, advised for huge pages.
    fn alloc(len: usize) -> NonNull<T> {
        let layout = Self::layout(len);
        // SAFETY: the layout has a non-zero size.
        let raw = unsafe { alloc::alloc(layout) };
        let Some(ptr) = NonNull::new(raw as *mut T) else {
            alloc::handle_alloc_error(layout);
        };
        // SAFETY: [raw, raw + size) is memory this buffer owns; madvise only changes
        // how the host backs it, and failing (no THP) is harmless.
        unsafe { libc::madvise(raw as *mut libc::c_void, layout.size(), libc::MADV_HUGEPAGE) };
        ptr
    }

    /// `len` copies of `value`.
    pub fn new(len: usize, value: T) -> HugeBuf<T> {
        let ptr = Self::alloc(len);
        for i in 0..len {
            // SAFETY: i < len, inside the allocation; T is Copy, so nothing is dropped.
            unsafe { ptr.as_ptr().add(i).write(value) };
        }
        HugeBuf { ptr, len }
    }
}

impl<T: Copy> Deref for HugeBuf<T> {
    type Target = [T];
    fn deref(&self) -> &[T] {
        // SAFETY: ptr holds len initialized elements owned by self.
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
        // SAFETY: allocated in `new` with this same layout.
        unsafe { alloc::dealloc(self.ptr.as_ptr() as *mut u8, Self::layout(self.len)) };
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn buffers_are_huge_page_aligned_and_filled() {
        let mut b = HugeBuf::new(HUGE / 8 + 3, 7u64);
        assert_eq!(b.as_ptr() as usize % HUGE, 0);
        assert!(b.iter().all(|&x| x == 7));
        b[HUGE / 8 + 2] = 5;
        assert_eq!(b[HUGE / 8 + 2], 5);
        assert_eq!(b.len(), HUGE / 8 + 3);
    }
}
