//! Host memory: the budget every command checks before it starts and keeps to while it
//! runs (`Budget`, `Watch`), and the model's largest array, the memmap (`HugeBuf`).
//!
//! The memmap of a gigabyte of model RAM is 4 MiB that the zap and fault paths touch
//! page by page. `HugeBuf` reserves the whole array at once as anonymous, lazily
//! backed host memory (like the kernel's vmemmap: a terabyte machine reserves
//! address space, not memory), so an element is one index away with no section
//! table in between. Each array is used densely from its start (the memmap, the
//! order-0 folio entries, table storage, large-folio slots) and laid out so that past
//! its first `HEAD` bytes it lies in 2 MiB-aligned memory advised MADV_HUGEPAGE:
//!
//! ```text
//!   ptr          ptr + HEAD (2 MiB aligned)
//!    |  4K pages  |  2 MiB page  |  2 MiB page  | ...
//! ```
//!
//! A small run uses only the head and has the host clear no 2 MiB page for it; a
//! large one gets one host fault, and one TLB entry, per 2 MiB from there on, where
//! the host's THP policy allows. On the development host a 4K host page cost 3.5 µs
//! to fault in (16 MiB: 15.0 ms), a 2 MiB page about 0.4 ms (16 MiB: 3.0 ms); on a
//! later one (tasks/speed.md, twenty-fifth round) a 4K page cost 1.2-1.7 µs to
//! populate and a 2 MiB page 31-225 µs. Every array has this one layout: the last that
//! kept to 4K pages throughout, the LRU flags, and the one with a larger head, the
//! large-folio records, each cost the host more 4K pages than they saved.
//!
//! The head is 64 KiB (it was 256 KiB, about where 4K pages and a 2 MiB page cost the
//! host the same). Each array of a large run fills its head, so every 4K page of it is
//! paid on top of the huge pages; 256 KiB heads cost the 1 GiB runs 150 host faults
//! more. A run that fills an array between 64 and 256 KiB (about 16-64 MiB touched)
//! now has the host clear a 2 MiB page for it instead (tasks/speed.md, twenty-sixth
//! round: 32 MiB touched took 0.1-0.3 ms more, every larger size measured less).

use std::ops::{Deref, DerefMut};
use std::ptr::NonNull;

/// The host's PMD size on x86-64 and arm64 with 4K pages.
const HUGE: usize = 2 << 20;

/// The first bytes of every `HugeBuf`, left to 4K host pages.
const HEAD: usize = 64 << 10;

/// The most host memory a `HugeBuf` backs beyond the elements it was asked for: the
/// rest of a 2 MiB page (`populate_to` backs whole ones past the head).
pub const MAX_AHEAD: u64 = HUGE as u64;

/// A fixed-length array of `T` in 2 MiB-aligned, lazily backed host memory.
pub struct HugeBuf<T: Copy> {
    ptr: NonNull<T>,
    len: usize,
    /// Bytes mapped at `ptr` (a whole number of host pages).
    bytes: usize,
    /// Elements [0, populated) were backed by `populate_to`.
    populated: usize,
}

// SAFETY: HugeBuf owns its elements exclusively, like Box<[T]>.
unsafe impl<T: Copy + Send> Send for HugeBuf<T> {}
// SAFETY: shared access only hands out &[T], like Box<[T]>.
unsafe impl<T: Copy + Sync> Sync for HugeBuf<T> {}

impl<T: Copy> HugeBuf<T> {
    /// `len` elements of all-zero bytes. The host backs a page of them only when it
    /// is first touched: 4K pages in the first `HEAD` bytes, past them a 2 MiB huge
    /// page where the host allows.
    ///
    /// # Safety
    /// All-zero bytes must be a valid `T`.
    pub unsafe fn zeroed(len: usize) -> HugeBuf<T> {
        assert!(std::mem::align_of::<T>() <= 4096, "HugeBuf alignment");
        let size = std::mem::size_of::<T>()
            .checked_mul(len)
            .expect("HugeBuf size overflows")
            .max(1);
        // Whole 2 MiB pages after the head, so the last one can be huge too.
        let bytes = HEAD + size.saturating_sub(HEAD).next_multiple_of(HUGE);
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
        let start = (base + HEAD).next_multiple_of(HUGE) - HEAD;
        // SAFETY: [base, start) and [start + bytes, base + span) lie inside the mapping
        // just made and nothing refers to them; madvise only changes how the host backs
        // [start + HEAD, start + bytes), and failing (no THP) is harmless.
        unsafe {
            if start > base {
                libc::munmap(raw, start - base);
            }
            if base + span > start + bytes {
                libc::munmap((start + bytes) as *mut libc::c_void, base + span - start - bytes);
            }
            if bytes > HEAD {
                libc::madvise((start + HEAD) as *mut libc::c_void, bytes - HEAD, libc::MADV_HUGEPAGE);
            }
        }
        HugeBuf {
            ptr: NonNull::new(start as *mut T).expect("mmap returned null"),
            len,
            bytes,
            populated: 0,
        }
    }
}

impl<T: Copy> HugeBuf<T> {
    /// Have the host back the pages holding elements `range` now, writable, in one
    /// call (MADV_POPULATE_WRITE) instead of one host fault per 4K page at the first
    /// store to each. Where the host has no MADV_POPULATE_WRITE (before Linux 5.14),
    /// a store to each page does it; the elements keep their values either way.
    fn populate(&mut self, range: std::ops::Range<usize>) {
        const HOST_PAGE: usize = 4096;
        let size = std::mem::size_of::<T>();
        let base = self.ptr.as_ptr() as usize;
        let start = (base + range.start * size) & !(HOST_PAGE - 1);
        let end = (base + range.end * size)
            .next_multiple_of(HOST_PAGE)
            .min(base + self.bytes);
        if start >= end {
            return;
        }
        // SAFETY: [start, end) lies inside the mapping this HugeBuf owns; populating
        // only allocates host pages and changes no byte.
        let ok = unsafe { libc::madvise(start as *mut libc::c_void, end - start, libc::MADV_POPULATE_WRITE) } == 0;
        if !ok {
            for page in (start..end).step_by(HOST_PAGE) {
                // SAFETY: an aligned byte inside the mapping; reading and storing back
                // the value it holds leaves the contents as they were.
                unsafe {
                    let b = page as *mut u8;
                    std::ptr::write_volatile(b, std::ptr::read_volatile(b));
                }
            }
        }
    }
}

impl<T: Copy> HugeBuf<T> {
    /// For an array used from its start up, as slots are handed out: have the host
    /// back elements [0, `need`) now, `chunk` bytes beyond what was backed at a time
    /// (`populate`), so a run that uses n chunks makes n calls instead of a host fault
    /// per 4K page; past the head, a whole 2 MiB page a call.
    pub fn populate_to(&mut self, need: usize, chunk: usize) {
        if need <= self.populated {
            return;
        }
        let size = std::mem::size_of::<T>();
        let per = (chunk / size).max(1);
        let mut to = need.next_multiple_of(per).min(self.len);
        if to * size > HEAD {
            // The elements that end by the next 2 MiB boundary: the huge page the last
            // chunk falls in, and none of the next.
            let base = self.ptr.as_ptr() as usize;
            let end = (base + to * size).next_multiple_of(HUGE) - base;
            to = (end / size).min(self.len);
        }
        self.populate(self.populated..to);
        self.populated = to;
    }
    /// Elements `populate_to` has backed (for memory reports).
    pub fn populated(&self) -> usize {
        self.populated
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

/// MemAvailable from /proc/meminfo, in bytes; None where the host does not say. One
/// read of the file's start, where the line is (its third), not the file grown read
/// by read: this runs as every model run starts.
pub fn mem_available() -> Option<u64> {
    use std::io::Read;
    let mut buf = [0u8; 4096];
    let n = std::fs::File::open("/proc/meminfo").ok()?.read(&mut buf).ok()?;
    let info = std::str::from_utf8(&buf[..n]).ok()?;
    let line = info.lines().find_map(|l| l.strip_prefix("MemAvailable:"))?;
    let kb: u64 = line.trim().strip_suffix("kB")?.trim().parse().ok()?;
    kb.checked_mul(1024)
}

/// This process's resident set, in bytes (/proc/self/statm); None where the host does
/// not say.
pub fn rss() -> Option<u64> {
    rss_from(&std::fs::read_to_string("/proc/self/statm").ok()?)
}

/// The resident set in a /proc/self/statm text.
fn rss_from(statm: &str) -> Option<u64> {
    let pages: u64 = statm.split_whitespace().nth(1)?.parse().ok()?;
    // SAFETY: sysconf has no preconditions.
    let page = unsafe { libc::sysconf(libc::_SC_PAGESIZE) };
    pages.checked_mul(u64::try_from(page).ok()?)
}

/// What a command leaves the rest of the host: an eighth of MemAvailable, and at least
/// 256 MiB, so that a run the budget admits does not push the host into reclaim.
pub fn margin(available: u64) -> u64 {
    (available / 8).max(256 << 20)
}

/// Per-unit host costs, measured on the development host (x86-64, Linux 6.18, glibc
/// malloc; peak RSS by `/usr/bin/time -v`). Where a cost follows from a type's size it
/// is computed beside that type instead (`sim::host_bytes_per_frame`,
/// `SwapInfo::host_bytes`), so the estimate follows a change of layout.
pub mod cost {
    /// The program itself before any model memory: a run that maps nothing peaks at
    /// 15 MiB (debug build) and 9 MiB (release); rounded up for the allocator's slack.
    pub const BASE: u64 = 32 << 20;
    /// One `mark` phase: its label and a copy of every counter. `repeat 20000` /
    /// `mark a` / `end` peaks 650 MiB above `repeat 2`: 33 KiB each.
    pub const PHASE: u64 = 40 << 10;
    /// One live model process (mm, its pgd, its region table) and the executor's
    /// record of it: 4096 live forks of a process with one touched page peak 73 MiB
    /// above one fork, 18 KiB each.
    pub const PROCESS: u64 = 24 << 10;
}

/// The host memory one command will take, by part, checked before the command starts
/// against MemAvailable less a `margin`. Each part is named by what the user can make
/// smaller, so a refusal says which knob to turn.
#[derive(Clone, Debug)]
pub struct Budget {
    what: String,
    parts: Vec<(String, u64)>,
}

impl Budget {
    /// A budget for `what` ("running x.wl"), holding the program's own `cost::BASE`.
    pub fn new(what: impl Into<String>) -> Budget {
        Budget {
            what: what.into(),
            parts: vec![("the program itself".into(), cost::BASE)],
        }
    }

    /// Adds `bytes` for `part`, which names what makes it smaller ("model RAM: lower
    /// --set ram").
    pub fn add(&mut self, part: impl Into<String>, bytes: u64) -> &mut Budget {
        self.parts.push((part.into(), bytes));
        self
    }

    /// The whole estimate (saturating: an estimate past 2^64 is refused, not wrapped).
    pub fn total(&self) -> u64 {
        self.parts.iter().fold(0, |t, (_, b)| t.saturating_add(*b))
    }

    /// Checks the budget against this host's MemAvailable now, and returns the watch
    /// that keeps the command to it while it runs.
    pub fn check(&self) -> Result<Watch, String> {
        let available = mem_available();
        self.check_against(available)?;
        Ok(Watch::new(available))
    }

    /// Refuses the command when its estimate exceeds `available` less the margin; a
    /// host that does not say what is available is not checked.
    pub fn check_against(&self, available: Option<u64>) -> Result<(), String> {
        let Some(avail) = available else { return Ok(()) };
        let total = self.total();
        let usable = avail.saturating_sub(margin(avail));
        if total <= usable {
            return Ok(());
        }
        let mut parts: Vec<&(String, u64)> = self.parts.iter().filter(|(_, b)| *b > 0).collect();
        parts.sort_by_key(|p| std::cmp::Reverse(p.1));
        let parts: Vec<String> = parts
            .iter()
            .map(|(p, b)| format!("{} for {p}", fmt_bytes(*b)))
            .collect();
        Err(format!(
            "{} needs up to {} of host memory, more than the {} it may use (MemAvailable {} less a margin of {}): {}",
            self.what,
            fmt_bytes(total),
            fmt_bytes(usable),
            fmt_bytes(avail),
            fmt_bytes(margin(avail)),
            parts.join("; ")
        ))
    }
}

/// Refuses `what` when its `needed` bytes (one part, besides the program itself) do not
/// fit `available` less the margin.
pub fn check_fits(what: &str, needed: u64, available: Option<u64>) -> Result<(), String> {
    Budget::new(what).add("its model", needed).check_against(available)
}

/// Keeps a running command inside the host memory it may use: `tick` once per unit of
/// work (an op, a record) and every `EVERY`th reads the resident set; past the limit
/// (the resident set at the check plus what was then usable) the command stops with an
/// error instead of pushing the host into reclaim or the OOM killer. It only fires when
/// an estimate was wrong or the host's memory was taken by someone else meanwhile.
pub struct Watch {
    limit: Option<u64>,
    n: u32,
    /// /proc/self/statm, kept open: opening it each time cost more than the reads.
    statm: Option<std::fs::File>,
}

impl Watch {
    /// At 1 << 12 a 64K-folio touch of 1 GiB read it 64 times, 2.5 % of its samples on
    /// the development host (tasks/speed.md, twenty-second round). Between two
    /// reads a page-by-page run grows the model's host memory by about 3 MiB, by count
    /// (a struct page, its LRU flags, its share of a pte table and of a large-folio
    /// record: some 45 bytes a unit), well inside the 256 MiB margin at least.
    const EVERY: u32 = 1 << 16;

    fn new(available: Option<u64>) -> Watch {
        let limit = available
            .zip(rss())
            .map(|(avail, rss)| rss.saturating_add(avail.saturating_sub(margin(avail))));
        let statm = limit.and_then(|_| std::fs::File::open("/proc/self/statm").ok());
        Watch { limit, n: 0, statm }
    }

    /// A watch that never fires (for a command whose budget was not checked).
    pub fn none() -> Watch {
        Watch {
            limit: None,
            n: 0,
            statm: None,
        }
    }

    /// Counts a unit of work; an error once the resident set has passed the limit.
    #[inline(always)]
    pub fn tick(&mut self) -> Result<(), String> {
        self.n += 1;
        if self.n < Self::EVERY {
            return Ok(());
        }
        self.check()
    }

    /// Counts `n` units of work at once: one check when they reach `EVERY`, where `n`
    /// ticks would make it at one of them.
    #[inline(always)]
    pub fn tick_n(&mut self, n: u64) -> Result<(), String> {
        self.n = self.n.saturating_add(u32::try_from(n).unwrap_or(u32::MAX));
        if self.n < Self::EVERY {
            return Ok(());
        }
        self.check()
    }

    /// Every `EVERY`th tick: the resident set against the limit.
    #[cold]
    #[inline(never)]
    fn check(&mut self) -> Result<(), String> {
        self.n = 0;
        let rss = self.statm.as_ref().and_then(|f| {
            use std::os::unix::fs::FileExt;
            let mut buf = [0u8; 128];
            let n = f.read_at(&mut buf, 0).ok()?;
            rss_from(std::str::from_utf8(&buf[..n]).ok()?)
        });
        match (self.limit, rss) {
            (Some(limit), Some(rss)) if rss > limit => Err(format!(
                "stopped: host memory in use reached {}, past the {} this command may use",
                fmt_bytes(rss),
                fmt_bytes(limit)
            )),
            _ => Ok(()),
        }
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
    fn populating_backs_pages_at_once_and_keeps_their_contents() {
        // SAFETY: all-zero bytes are a valid u64.
        let mut b: HugeBuf<u64> = unsafe { HugeBuf::zeroed(1 << 20) };
        // SAFETY: advice on b's own mapping: 4K host pages whatever the host's THP
        // settings, so a store backs exactly one page.
        unsafe { libc::madvise(b.as_ptr() as *mut libc::c_void, 8 << 20, libc::MADV_NOHUGEPAGE) };
        b[3] = 7;
        // Host pages resident among the first 1 MiB (256 pages), by mincore.
        let resident = |b: &HugeBuf<u64>| {
            let mut vec = [0u8; 256];
            // SAFETY: the range is inside b's mapping, page aligned, and `vec` has a
            // byte for each of its pages.
            let r = unsafe { libc::mincore(b.as_ptr() as *mut libc::c_void, 1 << 20, vec.as_mut_ptr()) };
            assert_eq!(r, 0, "mincore");
            vec.iter().filter(|&&v| v & 1 != 0).count()
        };
        assert_eq!(resident(&b), 1, "only the page stored to");
        b.populate(0..(1 << 17));
        assert_eq!(resident(&b), 256, "the whole megabyte, backed by the call");
        assert_eq!((b[3], b[4], b[(1 << 17) - 1]), (7, 0, 0));
        // Past the end of the mapping is clamped, an empty range does nothing.
        b.populate((1 << 20) - 1..(1 << 20) + 1000);
        b.populate(5..5);
        assert_eq!(b[(1 << 20) - 1], 0);
    }

    #[test]
    fn populating_to_a_need_backs_whole_chunks_beyond_it_once() {
        // SAFETY: all-zero bytes are a valid u64.
        let mut b: HugeBuf<u64> = unsafe { HugeBuf::zeroed(10_000) };
        b.populate_to(1, 4096);
        assert_eq!(b.populated(), 512, "the first chunk of 4 KiB");
        b[511] = 9;
        b.populate_to(512, 4096);
        assert_eq!(b.populated(), 512, "within what was backed: nothing");
        b.populate_to(513, 4096);
        assert_eq!((b.populated(), b[511]), (1024, 9), "the next chunk, contents kept");
        b.populate_to(9_999, 4096);
        assert_eq!(b.populated(), 10_000, "the last chunk ends at the array's end");
    }

    #[test]
    fn past_the_head_populating_backs_a_whole_huge_page() {
        // SAFETY: all-zero bytes are a valid u64.
        let mut b: HugeBuf<u64> = unsafe { HugeBuf::zeroed(1 << 20) };
        b.populate_to(1, 4096);
        assert_eq!(b.populated(), 512, "in the head: a chunk");
        b.populate_to(HEAD / 8 + 1, 4096);
        assert_eq!(b.populated(), (HEAD + HUGE) / 8, "past it: to the 2 MiB boundary");
        let mut vec = vec![0u8; (HEAD + HUGE) / 4096];
        // SAFETY: the range is inside b's mapping (8 MiB), page aligned, and `vec` has
        // a byte for each of its pages.
        let r = unsafe { libc::mincore(b.as_ptr() as *mut libc::c_void, HEAD + HUGE, vec.as_mut_ptr()) };
        assert_eq!(r, 0, "mincore");
        assert!(
            vec.iter().all(|&v| v & 1 != 0),
            "every page up to the boundary is backed"
        );
        b.populate_to(HEAD / 8 + HUGE / 8 + 1, 4096);
        assert_eq!(b.populated(), (HEAD + 2 * HUGE) / 8, "the next huge page");
        b.populate_to((1 << 20) - 1, 4096);
        assert_eq!(b.populated(), 1 << 20, "the last ends at the array's end");
    }

    #[test]
    fn sizes_that_do_not_fit_are_refused_naming_both() {
        assert_eq!(
            check_fits("boot --ram 100T", 200 << 30, Some(6 << 30)).unwrap_err(),
            "boot --ram 100T needs up to 200.0 GiB of host memory, more than the 5.2 GiB it may use \
             (MemAvailable 6.0 GiB less a margin of 768.0 MiB): 200.0 GiB for its model; 32.0 MiB for \
             the program itself"
        );
        assert!(check_fits("x", 1 << 30, Some(2 << 30)).is_ok());
        // The margin: 1.9 GiB of 2 GiB would leave the host less than 256 MiB.
        assert!(check_fits("x", 1900 << 20, Some(2 << 30)).is_err());
        assert!(check_fits("x", 1 << 60, None).is_ok());
        assert_eq!(fmt_bytes(512), "512 bytes");
        assert_eq!(fmt_bytes(3 << 19), "1.5 MiB");
        assert!(mem_available().is_some_and(|b| b > 0));
    }

    #[test]
    fn a_refusal_names_the_parts_largest_first() {
        let mut b = Budget::new("running t.wl");
        b.add("phases: fewer marks", 3 << 30)
            .add("model RAM: lower --set ram", 1 << 30);
        let e = b.check_against(Some(4 << 30)).unwrap_err();
        assert!(
            e.ends_with(": 3.0 GiB for phases: fewer marks; 1.0 GiB for model RAM: lower --set ram; 32.0 MiB for the program itself"),
            "{e}"
        );
        assert_eq!(Budget::new("x").add("y", u64::MAX).total(), u64::MAX);
    }

    #[test]
    fn the_watch_fires_only_past_its_limit() {
        let mut w = Watch {
            limit: Some(1 << 20),
            n: 0,
            statm: std::fs::File::open("/proc/self/statm").ok(),
        };
        let results: Vec<bool> = (0..Watch::EVERY).map(|_| w.tick().is_ok()).collect();
        assert!(
            results[..Watch::EVERY as usize - 1].iter().all(|&ok| ok),
            "only every EVERYth tick reads"
        );
        assert!(
            !results[Watch::EVERY as usize - 1],
            "a test binary holds more than 1 MiB"
        );
        let mut w = Watch::new(mem_available());
        assert!((0..Watch::EVERY).all(|_| w.tick().is_ok()));
        let mut w = Watch {
            limit: Some(1 << 20),
            n: 0,
            statm: std::fs::File::open("/proc/self/statm").ok(),
        };
        assert!(w.tick_n(u64::from(Watch::EVERY) - 1).is_ok(), "short of EVERY: no read");
        assert!(w.tick_n(1).is_err(), "reaching it reads");
        assert!(w.tick_n(u64::MAX).is_err(), "a run past it reads once");
    }

    #[test]
    fn buffers_are_huge_page_aligned_past_their_head_and_zeroed() {
        // SAFETY: zero is a valid u64.
        let mut b = unsafe { HugeBuf::<u64>::zeroed(HUGE / 8 + 3) };
        assert_eq!((b.as_ptr() as usize + HEAD) % HUGE, 0);
        assert!(b.iter().all(|&x| x == 0));
        b[HUGE / 8 + 2] = 5;
        assert_eq!(b[HUGE / 8 + 2], 5);
        assert_eq!(b.len(), HUGE / 8 + 3);
    }

    #[test]
    fn a_terabyte_memmap_reserves_address_space_only() {
        // 2^28 struct pages of 16 bytes: 4 GiB reserved, nothing touched.
        // SAFETY: zero is a valid [u64; 2].
        let b = unsafe { HugeBuf::<[u64; 2]>::zeroed(1 << 28) };
        assert_eq!(b[(1 << 28) - 1], [0; 2]);
    }
}
