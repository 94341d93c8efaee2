//! Watching the kernel's periodic memcg statistics flush. Reclaim in a memory cgroup
//! reads its list sizes through `lruvec_page_state` (inactive_is_low), which shows
//! them as of the last rstat flush; `flush_memcg_stats_dwork` flushes every 2 s
//! (FLUSH_TIME), on a timer of its own, and reclaim's own flush is rate-limited to
//! the same period. The model reads a new cgroup's sizes as at its creation, so a
//! flush between `memlimit` and the end of a run changes which pages the host swaps
//! (measured on `lru_memlimit_order0.wl` at load ~12: every run that swapped out 6,166
//! to 6,169 pages instead of the model's 6,175 had a flush inside it, 5 of 12).
//!
//! So the runner counts the flush worker's runs with a tracepoint counter
//! (workqueue:workqueue_execute_start, filtered on the worker function's address),
//! starts the cgroup just after one, and calls a flush before the run ends a
//! measurement defect.

use super::perf::{perf_event_open, PerfEventAttr, ATTR_SIZE};
use super::tracefs::{self, IOC_SET_FILTER, PERF_TYPE_TRACEPOINT};
use std::ffi::CString;
use std::os::fd::{AsRawFd, OwnedFd};
use std::time::{Duration, Instant};

const EVENT: &str = "events/workqueue/workqueue_execute_start/id";
const WORKER: &str = "flush_memcg_stats_dwork";
/// The `unavailable` key when the flushes cannot be watched.
pub const KEY: &str = "memcg.stat_flushes";
/// The flush period is 2 s; waiting longer than this for one means it is not running.
const WAIT_LIMIT: Duration = Duration::from_secs(5);

/// One counting event per online CPU: how many times the flush worker has started.
pub struct FlushWatch {
    fds: Vec<OwnedFd>,
}

impl FlushWatch {
    pub fn open() -> Result<FlushWatch, String> {
        let id = tracepoint_id()?;
        let addr = kallsyms_address(WORKER)?;
        let filter = CString::new(format!("function == 0x{addr:x}")).expect("no NUL");
        let attr = PerfEventAttr {
            type_: PERF_TYPE_TRACEPOINT,
            size: ATTR_SIZE,
            config: id,
            ..PerfEventAttr::default()
        };
        let cpus = std::fs::read_to_string("/sys/devices/system/cpu/online").map_err(|e| format!("cpu/online: {e}"))?;
        let mut fds = Vec::new();
        for cpu in super::parse_node_list(cpus.trim()) {
            let fd = perf_event_open(&attr, -1, cpu as i32)
                .map_err(|e| format!("perf_event_open(workqueue_execute_start, cpu {cpu}): {e}"))?;
            // SAFETY: fd is a perf event we own; the filter is a NUL-terminated string
            // that outlives the call.
            if unsafe { libc::ioctl(fd.as_raw_fd(), IOC_SET_FILTER, filter.as_ptr()) } != 0 {
                return Err(format!(
                    "setting the tracepoint filter: {}",
                    std::io::Error::last_os_error()
                ));
            }
            fds.push(fd);
        }
        Ok(FlushWatch { fds })
    }

    /// Flush worker runs since the events opened, over every CPU.
    pub fn count(&self) -> u64 {
        self.fds
            .iter()
            .map(|fd| {
                let mut v = 0u64;
                // SAFETY: reading one u64 count from a perf event fd we own into `v`.
                let n = unsafe { libc::read(fd.as_raw_fd(), (&mut v as *mut u64).cast(), 8) };
                if n == 8 {
                    v
                } else {
                    0
                }
            })
            .sum()
    }

    /// Returns just after the flush worker has started once more.
    pub fn wait_for_next(&self) -> Result<(), String> {
        let (start, from) = (Instant::now(), self.count());
        while self.count() == from {
            if start.elapsed() > WAIT_LIMIT {
                return Err(format!("{WORKER} did not run within {} s", WAIT_LIMIT.as_secs()));
            }
            std::thread::sleep(Duration::from_micros(200));
        }
        Ok(())
    }
}

/// The address of a kernel function, from /proc/kallsyms (zero when not root).
fn kallsyms_address(name: &str) -> Result<u64, String> {
    let text = std::fs::read_to_string("/proc/kallsyms").map_err(|e| format!("/proc/kallsyms: {e}"))?;
    let addr = text
        .lines()
        .find_map(|l| {
            let mut f = l.split_whitespace();
            let (a, _, n) = (f.next()?, f.next()?, f.next()?);
            (n == name).then(|| u64::from_str_radix(a, 16).ok()).flatten()
        })
        .ok_or_else(|| format!("{name} is not in /proc/kallsyms"))?;
    if addr == 0 {
        return Err("/proc/kallsyms shows no addresses (kptr_restrict)".into());
    }
    Ok(addr)
}

/// The tracepoint's id, from tracefs.
fn tracepoint_id() -> Result<u64, String> {
    tracefs::with(|dir| {
        let id = std::fs::read_to_string(dir.join(EVENT)).map_err(|e| format!("tracefs {EVENT}: {e}"))?;
        id.trim().parse().map_err(|_| format!("tracefs {EVENT}: {id:?}"))
    })?
}

#[cfg(test)]
mod tests {
    use super::*;

    /// The flush worker runs every 2 s on any host with memory cgroups, so a watch sees
    /// it start within the wait (skipped where the tracepoint cannot be opened).
    #[test]
    fn the_watch_sees_the_flush_worker_start() {
        let w = match FlushWatch::open() {
            Ok(w) => w,
            Err(why) => {
                println!("SKIP the_watch_sees_the_flush_worker_start: {why}");
                return;
            }
        };
        let before = w.count();
        w.wait_for_next().unwrap();
        assert!(w.count() > before);
    }
}
