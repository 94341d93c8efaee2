//! Keeping khugepaged out of a host run. The model has no khugepaged daemon, and on the
//! host it collapses a workload's pte-mapped ranges into new THPs whenever its timer or
//! a wake-up lets it scan (CI once saw `fork_pmd_thp.wl` end PMD-mapped: the parent's
//! range collapsed between its last op and the layout read).
//!
//! mm/khugepaged.c's thread loops `khugepaged_do_scan(); khugepaged_wait_work();` and
//! waits in one of two ways:
//!
//! ```text
//!   list of mms non-empty ──► sleep scan_sleep_millisecs, or until a sleep knob write
//!   list empty            ──► sleep until an mm registers (MADV_HUGEPAGE, a THP fault)
//! ```
//!
//! So a run parks it three ways: both sleep knobs at their maximum (saved and restored
//! with the THP knobs), this process's mm registered with a MADV_HUGEPAGE range (see
//! `Registration`) so the list is never empty and a workload's own registration wakes nothing, and
//! after every knob write the thread is seen back asleep in its wait before an op runs
//! (a sleep knob write, or a THP enable that starts the thread, runs one scan first).
//! `pages_collapsed` read at the start and end of a run proves it stayed parked.

use std::path::Path;
use std::time::{Duration, Instant};

/// The sleep knobs, relative to the THP directory, and the longest sleep they take
/// (msecs_to_jiffies caps it at about 49 days).
pub const PARK: [(&str, &str); 2] = [
    ("khugepaged/scan_sleep_millisecs", "4294967295"),
    ("khugepaged/alloc_sleep_millisecs", "4294967295"),
];

/// Where the thread sleeps when parked: its main wait (inlined into `khugepaged` on
/// 6.18), or the allocation-failure sleep where it is not inlined into the scan (a
/// lock sleep inside the scan shows the scan's function, so that name cannot count).
const ASLEEP_IN: [&str; 3] = ["khugepaged", "khugepaged_wait_work", "khugepaged_alloc_sleep"];

/// How long one scan pass may take before a run gives up on it: a guard against a
/// hang, not a tolerance (a pass over 4,096 pages takes milliseconds).
const SETTLE_LIMIT: Duration = Duration::from_secs(30);

/// The khugepaged kthread: comm `khugepaged`, a child of kthreadd (pid 2). None when
/// THP is off everywhere (the thread is stopped then).
fn thread() -> Option<u32> {
    std::fs::read_dir("/proc").ok()?.flatten().find_map(|e| {
        let pid: u32 = e.file_name().to_str()?.parse().ok()?;
        let (comm, state, ppid) = stat(pid)?;
        (comm == "khugepaged" && ppid == 2)
            .then_some(pid)
            .filter(|_| state != 'Z')
    })
}

/// (comm, state, ppid) from /proc/PID/stat.
fn stat(pid: u32) -> Option<(String, char, u32)> {
    let s = std::fs::read_to_string(format!("/proc/{pid}/stat")).ok()?;
    let (open, close) = (s.find('(')?, s.rfind(')')?);
    let mut rest = s[close + 1..].split_whitespace();
    let state = rest.next()?.chars().next()?;
    let ppid = rest.next()?.parse().ok()?;
    Some((s[open + 1..close].to_string(), state, ppid))
}

/// Waits until khugepaged sleeps in one of its waits (or does not exist).
pub fn settle() -> Result<(), String> {
    let start = Instant::now();
    // Found once: the knob write that started or stopped the thread has returned, and
    // none is made while this waits.
    let Some(pid) = thread() else { return Ok(()) };
    loop {
        let state = stat(pid).map_or('?', |s| s.1);
        let wchan = std::fs::read_to_string(format!("/proc/{pid}/wchan")).unwrap_or_default();
        if state == 'S' && ASLEEP_IN.contains(&wchan.trim()) {
            return Ok(());
        }
        if start.elapsed() > SETTLE_LIMIT {
            return Err(format!(
                "khugepaged (pid {pid}) did not go back to sleep within {} s after a THP knob write (state {state}, wchan '{}')",
                SETTLE_LIMIT.as_secs(),
                wchan.trim()
            ));
        }
        std::thread::sleep(Duration::from_millis(1));
    }
}

/// How many times the khugepaged thread has been scheduled in (/proc/PID/schedstat's
/// third field): unchanged over a window means it never woke in it.
pub fn thread_runs() -> Option<u64> {
    let s = std::fs::read_to_string(format!("/proc/{}/schedstat", thread()?)).ok()?;
    s.split_whitespace().nth(2)?.parse().ok()
}

/// `khugepaged/pages_collapsed` under `thp`: every collapse khugepaged made on the host.
pub fn pages_collapsed(thp: &Path) -> Option<u64> {
    std::fs::read_to_string(thp.join("khugepaged/pages_collapsed"))
        .ok()?
        .trim()
        .parse()
        .ok()
}

/// An inaccessible MADV_HUGEPAGE range of this process holding one PMD range that has no
/// page table: once PMD THP is enabled, `khugepaged_enter_vma` registers this mm, and it
/// stays on khugepaged's list until the process exits.
///
/// ```text
///   one page   PMD range (never touched: a scan finds no page table, SCAN_PMD_NULL)
///   ├──┼───────────────────────────────────┤
///   faulted     PMD-aligned
/// ```
///
/// Outside a fault, `__thp_vma_allowable_orders` allows nothing to a VMA without an
/// anon_vma (6.12, 6.18, 7.3), so a never-faulted range registers nothing: the page below
/// the PMD range is written once, while the VMA is still writable, to give it one. Then
/// PROT_NONE keeps the whole VMA out of the runner's warm-up, and MADV_DONTFORK out of
/// the workers (they join the list at fork, by `khugepaged_fork`, as the mm is marked).
pub struct Registration {
    addr: *mut libc::c_void,
    len: usize,
}

const PMD: usize = 2 << 20;

impl Registration {
    pub fn new() -> Result<Registration, String> {
        // SAFETY: sysconf has no preconditions.
        let page = unsafe { libc::sysconf(libc::_SC_PAGESIZE) } as usize;
        let err = |what: &str| {
            format!(
                "{what} for khugepaged registration: {}",
                std::io::Error::last_os_error()
            )
        };
        let reserve = 3 * PMD;
        // SAFETY: a fresh private anonymous mapping; nothing else refers to it.
        let p = unsafe {
            libc::mmap(
                std::ptr::null_mut(),
                reserve,
                libc::PROT_READ | libc::PROT_WRITE,
                libc::MAP_PRIVATE | libc::MAP_ANONYMOUS | libc::MAP_NORESERVE,
                -1,
                0,
            )
        };
        if p == libc::MAP_FAILED {
            return Err(err("mmap"));
        }
        let (base, aligned) = (p as usize, (p as usize + page + PMD - 1) & !(PMD - 1));
        let (start, end) = (aligned - page, aligned + PMD);
        // SAFETY: both trims lie inside the reservation just mapped; [start, end) keeps
        // one page below a PMD-aligned range and the range itself. The write is to that
        // page, mapped read-write above; mprotect and madvise change only this VMA.
        unsafe {
            if start > base {
                libc::munmap(p, start - base);
            }
            if base + reserve > end {
                libc::munmap(end as *mut libc::c_void, base + reserve - end);
            }
            std::ptr::write_volatile(start as *mut u8, 1);
            if libc::mprotect(start as *mut libc::c_void, end - start, libc::PROT_NONE) != 0
                || libc::madvise(start as *mut libc::c_void, end - start, libc::MADV_DONTFORK) != 0
            {
                let e = err("mprotect/madvise");
                libc::munmap(start as *mut libc::c_void, end - start);
                return Err(e);
            }
        }
        Ok(Registration {
            addr: start as *mut libc::c_void,
            len: end - start,
        })
    }

    /// Registers this mm if PMD THP is enabled now (a no-op once registered, or while
    /// it is not: the thread is stopped then and registration waits for the next write).
    pub fn register(&self) {
        // SAFETY: the range is this value's own mapping; MADV_HUGEPAGE only sets a VMA
        // flag. Failure (THP compiled out) leaves nothing to park against.
        unsafe { libc::madvise(self.addr, self.len, libc::MADV_HUGEPAGE) };
    }
}

impl Drop for Registration {
    fn drop(&mut self) {
        // SAFETY: unmapping the range this value mapped and owns.
        unsafe { libc::munmap(self.addr, self.len) };
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn stat_reads_comm_state_and_parent_even_with_parens_in_the_name() {
        let (comm, state, ppid) = std::thread::spawn(|| {
            let name = std::ffi::CString::new("x) (y z").unwrap();
            // SAFETY: PR_SET_NAME reads a NUL-terminated name of at most 16 bytes; gettid
            // has no preconditions.
            let tid = unsafe {
                libc::prctl(libc::PR_SET_NAME, name.as_ptr());
                libc::gettid()
            };
            stat(tid as u32).unwrap()
        })
        .join()
        .unwrap();
        assert_eq!(comm, "x) (y z");
        assert_eq!(state, 'R', "the thread was running while it read its own stat");
        // SAFETY: getppid has no preconditions.
        assert_eq!(ppid, unsafe { libc::getppid() } as u32);
    }

    #[test]
    fn the_registration_range_is_inaccessible_and_has_its_one_page() {
        let r = Registration::new().unwrap();
        r.register();
        let smaps = std::fs::read_to_string("/proc/self/smaps").unwrap();
        let start = format!("{:x}-", r.addr as usize);
        let is_header = |l: &str| {
            l.split_whitespace()
                .next()
                .is_some_and(|t| t.contains('-') && !t.ends_with(':'))
        };
        let mut lines = smaps.lines().skip_while(|l| !l.starts_with(&start));
        let header = lines.next().expect("the registration's VMA in smaps");
        assert!(header.contains(" ---p "), "{header}");
        let fields: Vec<&str> = lines.take_while(|l| !is_header(l)).collect();
        // The faulted page, which gives the VMA its anon_vma, and no other.
        assert!(fields.contains(&"Anonymous:             4 kB"), "{fields:#?}");
        let flags = fields.iter().find(|l| l.starts_with("VmFlags:")).unwrap();
        assert!(flags.contains(" dc"), "MADV_DONTFORK: {flags}");
        assert!(flags.contains(" hg"), "MADV_HUGEPAGE: {flags}");
        assert_eq!(r.len, PMD + 4096);
        assert_eq!((r.addr as usize + 4096) % PMD, 0);
    }
}
