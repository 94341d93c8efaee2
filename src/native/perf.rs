//! Per-op fault attribution: a software perf event samples every minor fault the
//! worker takes (user and kernel mode) with its address, so an op's count is the faults
//! on the workload's own regions, and a fault anywhere else is a runner defect that
//! shows up by address instead of as a mysterious extra count.
//!
//! The kernel raises `PERF_COUNT_SW_PAGE_FAULTS_MIN` from `mm_account_fault()` only for
//! faults that came with user or kernel registers; faults it takes on the process's
//! behalf through GUP (MAP_POPULATE, mlock, MADV_POPULATE_*) bump `min_flt` without a
//! perf event. So an op's count is `inside + (getrusage delta - sampled total)`.
//!
//! ```text
//!   mmap'd ring: | control page | data area (2^n pages)                    |
//!                                 ^ data_tail (ours)      ^ data_head (kernel's)
//!   record:      | type u32 | misc u16 | size u16 | ip u64 | addr u64 |
//! ```
//! Software events with a sample period of 1 are never throttled (the overflow path
//! passes `throttle = 0` for a single overflow), and a full ring shows up as a
//! `PERF_RECORD_LOST` record, which is reported, never ignored.

use std::io;
use std::os::fd::{AsRawFd, FromRawFd, OwnedFd};
use std::sync::atomic::{fence, Ordering};

const PERF_TYPE_SOFTWARE: u32 = 1;
const PERF_COUNT_SW_PAGE_FAULTS_MIN: u64 = 5;
const PERF_SAMPLE_IP: u64 = 1 << 0;
const PERF_SAMPLE_ADDR: u64 = 1 << 3;
pub(crate) const PERF_SAMPLE_TIME: u64 = 1 << 2;
pub(crate) const PERF_SAMPLE_RAW: u64 = 1 << 10;
pub(crate) const PERF_RECORD_LOST: u32 = 2;
pub(crate) const PERF_RECORD_SAMPLE: u32 = 9;
/// `perf_event_attr` flag bits (the C bitfield, low bits first).
const ATTR_EXCLUDE_HV: u64 = 1 << 6;
const PERF_FLAG_FD_CLOEXEC: libc::c_ulong = 1 << 3;
/// `PERF_ATTR_SIZE_VER7`: the fields up to `sig_data`.
pub(crate) const ATTR_SIZE: u32 = 128;

/// Offsets into the control page (`struct perf_event_mmap_page`).
const DATA_HEAD: usize = 1024;
const DATA_TAIL: usize = 1032;

/// Data area pages: 512 KiB, 21,845 records of 24 bytes. `Sampler::CHUNK` accesses
/// between drains keeps a run far from filling it even at two faults per access.
const DATA_PAGES: usize = 128;

/// `struct perf_event_attr` up to `sig_data`.
#[repr(C)]
#[derive(Default)]
pub(crate) struct PerfEventAttr {
    pub(crate) type_: u32,
    pub(crate) size: u32,
    pub(crate) config: u64,
    pub(crate) sample_period: u64,
    pub(crate) sample_type: u64,
    pub(crate) read_format: u64,
    pub(crate) flags: u64,
    pub(crate) wakeup_events: u32,
    pub(crate) bp_type: u32,
    pub(crate) config1: u64,
    pub(crate) config2: u64,
    pub(crate) branch_sample_type: u64,
    pub(crate) sample_regs_user: u64,
    pub(crate) sample_stack_user: u32,
    pub(crate) clockid: i32,
    pub(crate) sample_regs_intr: u64,
    pub(crate) aux_watermark: u32,
    pub(crate) sample_max_stack: u16,
    pub(crate) reserved_2: u16,
    pub(crate) aux_sample_size: u32,
    pub(crate) reserved_3: u32,
    pub(crate) sig_data: u64,
}

const _: () = assert!(std::mem::size_of::<PerfEventAttr>() == ATTR_SIZE as usize);

/// At most this many out-of-region faults are kept per op, with their code address.
const MAX_STRAYS: usize = 16;

/// What one op's samples said. The op's window is the ring positions `[from, until)`:
/// the samples between its two getrusage reads (see `Sampler::settled`). A sample before
/// `from` is a fault this runner took before the first read, outside the getrusage
/// delta: it is never counted, only reported as a stray.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Tally {
    /// Faults on a live region of the workload, inside the window.
    pub inside: u64,
    /// Every sampled fault inside the window.
    pub total: u64,
    /// Faults outside the regions, in the window or before it.
    pub stray_count: u64,
    /// `(fault address, code address)` of faults outside the regions (the first few).
    pub strays: Vec<(u64, u64)>,
    /// Records the kernel dropped because the ring was full.
    pub lost: u64,
    from: u64,
    until: u64,
}

impl Default for Tally {
    fn default() -> Tally {
        Tally {
            inside: 0,
            total: 0,
            stray_count: 0,
            strays: Vec::new(),
            lost: 0,
            from: 0,
            until: u64::MAX,
        }
    }
}

impl Tally {
    /// Back to `Tally::default()`, keeping the strays' allocation: a push inside the
    /// next window then allocates nothing.
    pub fn clear(&mut self) {
        let mut strays = std::mem::take(&mut self.strays);
        strays.clear();
        *self = Tally {
            strays,
            ..Tally::default()
        };
    }

    /// The window opens at ring position `from` (from `Sampler::settled`).
    pub fn open(&mut self, from: u64) {
        self.from = from;
    }

    /// The window closes at ring position `until`; later samples are not the op's.
    pub fn close(&mut self, until: u64) {
        self.until = until;
    }
}

/// A minor-fault sampler on the calling process.
pub struct Sampler {
    ring: Ring,
}

impl Sampler {
    /// Accesses a touch makes between two drains.
    pub const CHUNK: u64 = 4096;

    /// Opens the event on this process (any CPU) and maps its ring, pre-faulting every
    /// page of it so that draining takes no fault of its own.
    pub fn open() -> io::Result<Sampler> {
        let attr = PerfEventAttr {
            type_: PERF_TYPE_SOFTWARE,
            size: ATTR_SIZE,
            config: PERF_COUNT_SW_PAGE_FAULTS_MIN,
            sample_period: 1,
            sample_type: PERF_SAMPLE_IP | PERF_SAMPLE_ADDR,
            flags: ATTR_EXCLUDE_HV,
            ..PerfEventAttr::default()
        };
        let fd = perf_event_open(&attr, 0, -1)
            .map_err(|e| io::Error::new(e.kind(), format!("perf_event_open(minor page faults): {e}")))?;
        let ring = Ring::map(fd, DATA_PAGES)?;
        for off in (0..ring.len).step_by(page_size()) {
            // SAFETY: off is inside the mapping just made.
            unsafe { std::ptr::read_volatile(ring.base.add(off)) };
        }
        let s = Sampler { ring };
        // The control page is written (data_tail) on every drain: take its write fault now.
        s.discard();
        Ok(s)
    }

    /// Drops every record written so far (faults between ops are the runner's own).
    pub fn discard(&self) {
        let head = self.ring.head();
        self.ring.set_tail(head);
    }

    /// `read()` (a getrusage) with no fault sampled while it ran, and the ring position
    /// after it: every sampled fault before that position is in the value read, none
    /// after it is. A runner page under migration by another process faults even after
    /// the warm-up; without this, such a fault between a sample and the read (seen once
    /// in CI: 5 samples, 4 counted) left the op's samples and its getrusage delta
    /// covering different faults. The read is repeated only while a fault straddles it;
    /// the op itself runs once.
    pub fn settled<T>(&self, read: impl Fn() -> T) -> (T, u64) {
        loop {
            let head = self.ring.head();
            let v = read();
            if self.ring.head() == head {
                return (v, head);
            }
        }
    }

    /// Reads every record written since the last drain into `t`; `inside` says whether
    /// a fault address lies in one of the workload's live regions.
    pub fn drain(&self, t: &mut Tally, inside: impl Fn(u64) -> bool) {
        let head = self.ring.head().min(t.until);
        let mut tail = self.ring.tail();
        while tail < head {
            let hdr = self.ring.read_u64(tail);
            let (kind, size) = (hdr as u32, hdr >> 48);
            match kind {
                PERF_RECORD_SAMPLE => {
                    let (ip, addr) = (self.ring.read_u64(tail + 8), self.ring.read_u64(tail + 16));
                    let in_window = tail >= t.from;
                    t.total += in_window as u64;
                    if in_window && inside(addr) {
                        t.inside += 1;
                    } else {
                        t.stray_count += 1;
                        if t.strays.len() < MAX_STRAYS {
                            t.strays.push((addr, ip));
                        }
                    }
                }
                // struct { header; u64 id; u64 lost; }
                PERF_RECORD_LOST => t.lost += self.ring.read_u64(tail + 16),
                _ => {}
            }
            tail += size.max(8);
        }
        self.ring.set_tail(tail);
    }

    /// For a forked child: the ring is not mapped there (perf maps it VM_DONTCOPY) and
    /// the event measures the parent, so close the fd without unmapping anything.
    pub fn forget_in_child(self) {
        let s = std::mem::ManuallyDrop::new(self);
        // SAFETY: the fd is ours and is not used again; the struct is never dropped.
        unsafe { libc::close(s.ring.fd.as_raw_fd()) };
    }
}

/// `perf_event_open(attr, pid, cpu)`, no group, close-on-exec.
pub(crate) fn perf_event_open(attr: &PerfEventAttr, pid: i32, cpu: i32) -> io::Result<OwnedFd> {
    // SAFETY: attr is a valid perf_event_attr of the size it states; no group fd.
    let fd = unsafe {
        libc::syscall(
            libc::SYS_perf_event_open,
            attr as *const PerfEventAttr,
            pid,
            cpu,
            -1,
            PERF_FLAG_FD_CLOEXEC,
        )
    };
    if fd < 0 {
        let e = io::Error::last_os_error();
        return Err(io::Error::new(
            e.kind(),
            format!("{e} (needs root or kernel.perf_event_paranoid <= 1)"),
        ));
    }
    // SAFETY: the syscall returned a new file descriptor that nothing else owns.
    Ok(unsafe { OwnedFd::from_raw_fd(fd as i32) })
}

/// A perf event's mmap'd ring buffer: a control page and 2^n data pages.
pub(crate) struct Ring {
    pub(crate) fd: OwnedFd,
    base: *mut u8,
    len: usize,
    data_size: u64,
}

impl Ring {
    /// Maps `data_pages` (a power of two) data pages of `fd`'s ring.
    pub(crate) fn map(fd: OwnedFd, data_pages: usize) -> io::Result<Ring> {
        let len = (1 + data_pages) * page_size();
        // SAFETY: mapping a perf fd with 1 + 2^n pages read-write is its documented use.
        let base = unsafe {
            libc::mmap(
                std::ptr::null_mut(),
                len,
                libc::PROT_READ | libc::PROT_WRITE,
                libc::MAP_SHARED,
                fd.as_raw_fd(),
                0,
            )
        };
        if base == libc::MAP_FAILED {
            return Err(io::Error::other(format!(
                "mmap of the perf ring: {}",
                io::Error::last_os_error()
            )));
        }
        Ok(Ring {
            fd,
            base: base.cast(),
            len,
            data_size: (data_pages * page_size()) as u64,
        })
    }

    fn word(&self, off: usize) -> *mut u64 {
        // SAFETY: DATA_HEAD and DATA_TAIL lie in the control page, 8-byte aligned.
        unsafe { self.base.add(off).cast() }
    }

    /// data_head: a volatile read, then a fence, as perf_event_open(2) documents.
    pub(crate) fn head(&self) -> u64 {
        // SAFETY: data_head is written by the kernel and read here only.
        let head = unsafe { std::ptr::read_volatile(self.word(DATA_HEAD)) };
        fence(Ordering::Acquire);
        head
    }

    pub(crate) fn tail(&self) -> u64 {
        // SAFETY: data_tail is only written by us.
        unsafe { std::ptr::read_volatile(self.word(DATA_TAIL)) }
    }

    /// Hands the data up to `tail` back to the kernel.
    pub(crate) fn set_tail(&self, tail: u64) {
        fence(Ordering::Release);
        // SAFETY: data_tail is ours to write.
        unsafe { std::ptr::write_volatile(self.word(DATA_TAIL), tail) };
    }

    /// The word at ring position `pos`. A record may wrap past the end of the data
    /// area, but records are 8-byte aligned, so no word straddles it.
    pub(crate) fn read_u64(&self, pos: u64) -> u64 {
        let off = page_size() as u64 + pos % self.data_size;
        // SAFETY: off is inside the data area of the mapping.
        unsafe { std::ptr::read_volatile(self.base.add(off as usize).cast::<u64>()) }
    }

    /// Copies `n` bytes (a multiple of 8) from ring position `pos` into `out`.
    pub(crate) fn read(&self, pos: u64, n: usize, out: &mut Vec<u8>) {
        out.clear();
        for i in (0..n as u64).step_by(8) {
            out.extend_from_slice(&self.read_u64(pos + i).to_ne_bytes());
        }
    }
}

impl Drop for Ring {
    fn drop(&mut self) {
        // SAFETY: base/len are the mapping made in map.
        unsafe { libc::munmap(self.base.cast(), self.len) };
    }
}

fn page_size() -> usize {
    // SAFETY: sysconf has no preconditions.
    unsafe { libc::sysconf(libc::_SC_PAGESIZE) as usize }
}

#[cfg(test)]
mod tests {
    use super::*;

    /// Sampling needs perf_event_open, which unprivileged runs may not have.
    fn sampler_or_skip(test: &str) -> Option<Sampler> {
        match Sampler::open() {
            Ok(s) => Some(s),
            Err(e) => {
                eprintln!("SKIP {test}: {e}");
                None
            }
        }
    }

    #[test]
    fn every_fault_on_a_fresh_mapping_is_sampled_at_its_address() {
        let Some(s) = sampler_or_skip("every_fault_on_a_fresh_mapping_is_sampled_at_its_address") else {
            return;
        };
        let pages = 3 * Sampler::CHUNK as usize;
        let len = pages * 4096;
        // SAFETY: a fresh private anonymous mapping, unmapped below.
        let p = unsafe {
            libc::mmap(
                std::ptr::null_mut(),
                len,
                libc::PROT_READ | libc::PROT_WRITE,
                libc::MAP_PRIVATE | libc::MAP_ANONYMOUS,
                -1,
                0,
            )
        } as u64;
        // SAFETY: as above; no THP, so every page is its own fault. Not copied by a fork:
        // another test's fork (lib tests run in threads of one process) write-protects
        // the pages written so far, and the page whose fault had just returned then
        // faults again (a thread forking in a loop gave 37 such second faults over 5
        // mappings of this size, and none with MADV_DONTFORK).
        unsafe {
            libc::madvise(p as *mut _, len, libc::MADV_NOHUGEPAGE);
            libc::madvise(p as *mut _, len, libc::MADV_DONTFORK);
        }
        let mut t = Tally::default();
        s.discard();
        for (i, a) in (p..p + len as u64).step_by(4096).enumerate() {
            // SAFETY: a is inside the mapping.
            unsafe { std::ptr::write_volatile(a as *mut u8, 1) };
            if i as u64 % Sampler::CHUNK == Sampler::CHUNK - 1 {
                s.drain(&mut t, |x| (p..p + len as u64).contains(&x));
            }
        }
        s.drain(&mut t, |x| (p..p + len as u64).contains(&x));
        // SAFETY: the mapping made above.
        unsafe { libc::munmap(p as *mut _, len) };
        assert_eq!(t.lost, 0);
        assert_eq!(t.inside, pages as u64, "{t:?}");
    }

    fn minflt() -> i64 {
        let mut ru = std::mem::MaybeUninit::<libc::rusage>::zeroed();
        // SAFETY: ru is a valid rusage buffer; RUSAGE_THREAD reads this thread's.
        unsafe {
            libc::getrusage(libc::RUSAGE_THREAD, ru.as_mut_ptr());
            ru.assume_init().ru_minflt
        }
    }

    #[test]
    fn only_faults_between_the_settled_reads_are_the_windows() {
        let Some(s) = sampler_or_skip("only_faults_between_the_settled_reads_are_the_windows") else {
            return;
        };
        // SAFETY: a fresh private anonymous mapping of three pages, unmapped below.
        let p = unsafe {
            libc::mmap(
                std::ptr::null_mut(),
                3 * 4096,
                libc::PROT_READ | libc::PROT_WRITE,
                libc::MAP_PRIVATE | libc::MAP_ANONYMOUS,
                -1,
                0,
            )
        } as u64;
        let touch = |i: u64| {
            // SAFETY: page i of the mapping.
            unsafe { std::ptr::write_volatile((p + i * 4096) as *mut u8, 1) }
        };
        let mut t = Tally::default();
        s.discard();
        touch(0); // before the window: a stray, not counted
        let (before, from) = s.settled(minflt);
        t.open(from);
        touch(1); // the op's
        let (after, until) = s.settled(minflt);
        t.close(until);
        touch(2); // after the window: not the op's
        let whole = |x: u64| (p..p + 3 * 4096).contains(&x);
        s.drain(&mut t, whole);
        // SAFETY: the mapping made above.
        unsafe { libc::munmap(p as *mut _, 3 * 4096) };
        assert_eq!((t.inside, t.total, t.stray_count), (1, 1, 1), "{t:?}");
        assert_eq!(t.strays[0].0, p);
        assert_eq!(after - before, t.total as i64);
    }
}
