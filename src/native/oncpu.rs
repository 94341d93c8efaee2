//! An exit's time: how long the exiting worker ran on its CPU, from the moment the
//! orchestrator lets it go to its last switch away, read from the scheduler's own
//! `sched:sched_switch` records. Time it spent runnable but waiting for the CPU (other
//! processes' load) is between its switches, so it is not in the sum.
//!
//! ```text
//!   orchestrator:  release ──────────────────────────────────────► dead switch seen
//!   worker's CPU:    ...  |in ── run ──out|  others run  |in ── run ──out (X/Z)|
//!                         └── counted ───┘   (waiting)   └───── counted ──────┘
//! ```
//!
//! Not the task's own clock (a `task-clock` event on its pid): since 6.16 (4f6fc7821283,
//! "perf: Fix sample vs do_exit()") do_exit() stops the task's perf events before
//! exit_mm(), so such a count holds none of the mm's teardown (on this host, 6.18: 0.05
//! ms for an exit whose exit_mmap() freed 256 MiB of 4K pages in 250 ms). Not the wall
//! time until the pid is gone either: that holds the wait for a CPU on a loaded host,
//! and release_task() frees the pid before the task's last instructions run.
//!
//! What the window leaves out, all of it after the task's last switch: the next task's
//! finish_task_switch() drops the dead task's mm (mmdrop: the pgd and the mm_struct,
//! unless a lazy-TLB kernel thread still borrows it and drops it later) and its
//! task_struct reference (the task_struct and kernel stack are freed after an RCU grace
//! period); and the page-table pages exit_mmap() frees go through tlb_remove_table(),
//! which on x86 (MMU_GATHER_RCU_TABLE_FREE, unconditional since a37259732a7d) frees
//! them in an RCU callback. What it keeps: everything on the CPU while the task is
//! switched in, interrupts it takes and the hypervisor's steal included.

use super::perf::{perf_event_open, PerfEventAttr, Ring, ATTR_SIZE, PERF_RECORD_LOST, PERF_RECORD_SAMPLE};
use super::perf::{PERF_SAMPLE_RAW, PERF_SAMPLE_TIME};
use super::tracefs::{self, IOC_SET_FILTER, PERF_TYPE_TRACEPOINT};
use std::ffi::CString;
use std::time::{Duration, Instant};

/// The `unavailable` key when exits cannot be timed (their phases then have no time).
pub const KEY: &str = "time.exit";

/// sched_switch's `prev_state` of a task that switched away dead: the report bits of
/// EXIT_DEAD (reaped at once, as the runner's workers are) and EXIT_ZOMBIE.
const EXIT_STATES: i64 = 0x10 | 0x20;

/// Ring data pages: a few dozen 72-byte records an exit, even preempted often.
const DATA_PAGES: usize = 8;

/// How long an exit may take before it is a runner defect.
const LIMIT: Duration = Duration::from_secs(60);

/// `sched:sched_switch`'s id and where its fields are in a record's raw data.
#[derive(Clone, Copy, Debug)]
pub struct Switch {
    id: u64,
    prev_pid: usize,
    prev_state: usize,
    next_pid: usize,
}

impl Switch {
    /// Reads the tracepoint's id and format (see `tracefs::with`).
    pub fn load() -> Result<Switch, String> {
        tracefs::with(|dir| {
            let dir = dir.join("events/sched/sched_switch");
            let read = |f: &str| std::fs::read_to_string(dir.join(f)).map_err(|e| format!("sched_switch/{f}: {e}"));
            let id = read("id")?
                .trim()
                .parse()
                .map_err(|e| format!("sched_switch/id: {e}"))?;
            let at = tracefs::field_offsets(&read("format")?);
            let off = |f: &str| at.get(f).copied().ok_or(format!("sched_switch has no field {f}"));
            Ok(Switch {
                id,
                prev_pid: off("prev_pid")?,
                prev_state: off("prev_state")?,
                next_pid: off("next_pid")?,
            })
        })?
    }
}

/// One task's switches on one CPU, recorded from before it is released.
pub struct OnCpu {
    ring: Ring,
    tp: Switch,
    pid: i32,
}

impl OnCpu {
    /// Starts recording `pid`'s switches in and out on `cpu`, the one CPU it may run on.
    pub fn open(tp: Switch, pid: i32, cpu: i32) -> Result<OnCpu, String> {
        let attr = PerfEventAttr {
            type_: PERF_TYPE_TRACEPOINT,
            size: ATTR_SIZE,
            config: tp.id,
            sample_period: 1,
            sample_type: PERF_SAMPLE_TIME | PERF_SAMPLE_RAW,
            ..PerfEventAttr::default()
        };
        let fd =
            perf_event_open(&attr, -1, cpu).map_err(|e| format!("perf_event_open(sched_switch, cpu {cpu}): {e}"))?;
        let filter = CString::new(format!("prev_pid == {pid} || next_pid == {pid}")).expect("no NUL");
        // SAFETY: fd is a perf event we own; the filter is a NUL-terminated string that
        // outlives the call.
        if unsafe { libc::ioctl(std::os::fd::AsRawFd::as_raw_fd(&fd), IOC_SET_FILTER, filter.as_ptr()) } != 0 {
            return Err(format!(
                "setting the sched_switch filter: {}",
                std::io::Error::last_os_error()
            ));
        }
        let ring = Ring::map(fd, DATA_PAGES).map_err(|e| e.to_string())?;
        Ok(OnCpu { ring, tp, pid })
    }

    /// Waits for the task's switch away dead and returns the ns it spent on the CPU
    /// from its first switch in (the task is blocked when the recording opens; the end
    /// of that block, if the recording caught it, is not counted).
    pub fn until_dead(&self) -> Result<u64, String> {
        let start = Instant::now();
        let mut rec = Vec::new();
        let (mut tail, mut since, mut total) = (self.ring.tail(), None, 0);
        loop {
            let head = self.ring.head();
            while tail < head {
                let hdr = self.ring.read_u64(tail);
                let (kind, size) = (hdr as u32, (hdr >> 48) as usize);
                self.ring.read(tail, size.max(8), &mut rec);
                tail += size.max(8) as u64;
                match kind {
                    // { header; u64 time; u32 size; u8 raw[size]; }
                    PERF_RECORD_SAMPLE => {
                        let time = u64::from_ne_bytes(rec[8..16].try_into().expect("8 bytes"));
                        let raw = &rec[20..];
                        let i32_at = |off: usize| i32::from_ne_bytes(raw[off..off + 4].try_into().expect("4 bytes"));
                        let state = i64::from_ne_bytes(raw[self.tp.prev_state..][..8].try_into().expect("8 bytes"));
                        if i32_at(self.tp.next_pid) == self.pid {
                            since = Some(time);
                        } else if i32_at(self.tp.prev_pid) == self.pid {
                            if let Some(t) = since.take() {
                                total += time - t;
                            }
                            if state & EXIT_STATES != 0 {
                                return Ok(total);
                            }
                        }
                    }
                    PERF_RECORD_LOST => return Err(format!("the sched_switch ring of pid {} lost records", self.pid)),
                    _ => {}
                }
            }
            self.ring.set_tail(tail);
            if start.elapsed() > LIMIT {
                return Err(format!("pid {} never switched away dead", self.pid));
            }
            std::thread::sleep(Duration::from_micros(100));
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use std::sync::atomic::{AtomicBool, Ordering};

    /// A child on CPU 0 that maps and writes `mib` MiB of 4K pages, says so on `ready`,
    /// and exits when `go` is written.
    fn child(mib: usize) -> (libc::pid_t, i32) {
        let (mut ready, mut go) = ([0; 2], [0; 2]);
        // SAFETY: two pipes into valid arrays.
        unsafe {
            assert_eq!(libc::pipe(ready.as_mut_ptr()), 0);
            assert_eq!(libc::pipe(go.as_mut_ptr()), 0);
        }
        // SAFETY: the child makes only raw system calls and a byte loop (the test
        // process has threads), then _exits.
        let pid = unsafe { libc::fork() };
        if pid == 0 {
            // SAFETY: as above; every pointer is the child's own.
            unsafe {
                let mut set: libc::cpu_set_t = std::mem::zeroed();
                libc::CPU_SET(0, &mut set);
                libc::sched_setaffinity(0, std::mem::size_of::<libc::cpu_set_t>(), &set);
                let len = mib << 20;
                let p = libc::mmap(
                    std::ptr::null_mut(),
                    len,
                    libc::PROT_READ | libc::PROT_WRITE,
                    libc::MAP_PRIVATE | libc::MAP_ANONYMOUS,
                    -1,
                    0,
                ) as *mut u8;
                libc::madvise(p.cast(), len, libc::MADV_NOHUGEPAGE);
                for off in (0..len).step_by(4096) {
                    std::ptr::write_volatile(p.add(off), 1);
                }
                let b = 0u8;
                libc::write(ready[1], (&b as *const u8).cast(), 1);
                let mut r = 0u8;
                libc::read(go[0], (&mut r as *mut u8).cast(), 1);
                libc::_exit(0);
            }
        }
        let mut b = 0u8;
        // SAFETY: reading one byte into b from our pipe end.
        unsafe {
            assert_eq!(libc::read(ready[0], (&mut b as *mut u8).cast(), 1), 1);
            libc::close(ready[0]);
            libc::close(ready[1]);
            libc::close(go[0]);
        }
        (pid, go[1])
    }

    /// Runs `f` while two threads at nice -10 pinned on CPU 0 spin there.
    fn saturated<R>(f: impl FnOnce() -> R) -> R {
        let stop = AtomicBool::new(false);
        std::thread::scope(|s| {
            for _ in 0..2 {
                s.spawn(|| {
                    // SAFETY: pinning and renicing this thread only.
                    unsafe {
                        let mut set: libc::cpu_set_t = std::mem::zeroed();
                        libc::CPU_SET(0, &mut set);
                        libc::sched_setaffinity(0, std::mem::size_of::<libc::cpu_set_t>(), &set);
                        libc::setpriority(libc::PRIO_PROCESS, 0, -10);
                    }
                    while !stop.load(Ordering::Relaxed) {
                        std::hint::spin_loop();
                    }
                });
            }
            std::thread::sleep(Duration::from_millis(20));
            let r = f();
            stop.store(true, Ordering::Relaxed);
            r
        })
    }

    /// One exit of `mib` MiB timed, with CPU 0 saturated from the child's release if
    /// `busy` (its pages are written before, on a free CPU): (its time on the CPU, the
    /// wall time from release to the dead switch seen), both in ms.
    fn timed_exit(tp: Switch, mib: usize, busy: bool) -> (f64, f64) {
        let (pid, go) = child(mib);
        // Blocked in read once its wchan is not 0.
        while std::fs::read_to_string(format!("/proc/{pid}/wchan")).is_ok_and(|w| w.trim() == "0") {
            std::thread::yield_now();
        }
        let release = || {
            let on = OnCpu::open(tp, pid, 0).unwrap();
            let t = Instant::now();
            // SAFETY: one byte to our pipe end.
            unsafe {
                libc::write(go, b"x".as_ptr().cast(), 1);
                libc::close(go);
            }
            let ns = on.until_dead().unwrap();
            (ns as f64 / 1e6, t.elapsed().as_secs_f64() * 1e3)
        };
        let timed = if busy { saturated(release) } else { release() };
        // SAFETY: reaping our own child.
        unsafe { libc::waitpid(pid, std::ptr::null_mut(), 0) };
        timed
    }

    /// An exit timed while CPU 0 is saturated by busy threads that outweigh it takes
    /// many times its time on the CPU in wall time, and its time on the CPU stays near
    /// the figure timed without them: the window holds the exit's work, not its waits.
    ///
    /// Two threads at nice -10 leave a task at nice 0 about 5 % of the CPU (weights
    /// 9548, 9548 and 1024), but a tick preempts the exit only once its slice is used
    /// (EEVDF's base slice: 0.7 ms times 1 + log2 of the CPUs, up to 8, in
    /// kernel/sched/fair.c, so 1.4 ms here and at most 2.8 ms), and ticks come every
    /// 4 ms at this host's HZ=250 (10 ms at HZ=100). An exit shorter than a tick can
    /// finish unpreempted: CI once timed 64 MiB in 3.6 ms on the CPU and 3.95 ms wall,
    /// saturated. So the exit is sized from a first 64 MiB exit's rate to take 30 ms
    /// free. That rate varies: 64 MiB took 9 to 12 ms when this test was written
    /// (bd954c4) and 2.6 to 5.2 ms two days later on the same kind of machine, and a
    /// size from it lands at 0.64 to 1.1 times its aim. Measured here (624 to 697 MiB):
    /// 24.3 to 25.7 ms free, 25.8 to 38.3 ms on the CPU saturated (each preemption
    /// refills the caches), 487 to 712 ms wall, 17 to 20 times the CPU; a window summed
    /// from the first switch in to the dead switch fails it (399 to 627 ms against 21).
    #[test]
    fn an_exit_on_a_saturated_cpu_is_timed_as_on_an_idle_one() {
        let tp = match Switch::load() {
            // SAFETY: geteuid has no preconditions.
            Ok(tp) if unsafe { libc::geteuid() } == 0 => tp,
            Ok(_) => return eprintln!("SKIP: not root (a CPU-wide perf event needs root)"),
            Err(e) => return eprintln!("SKIP: {e}"),
        };
        const FREE_MS: f64 = 30.0;
        let probe = timed_exit(tp, 64, false).0;
        let mib = ((64.0 * FREE_MS / probe).ceil() as usize).clamp(64, 4096);
        let idle = (0..3).map(|_| timed_exit(tp, mib, false).0).fold(f64::MAX, f64::min);
        let busy: Vec<(f64, f64)> = (0..3).map(|_| timed_exit(tp, mib, true)).collect();
        eprintln!("exit of {mib} MiB (64 MiB: {probe:.3} ms): free {idle:.3} ms on the CPU, saturated {busy:.3?} (on the CPU, wall)");
        let busy_cpu = busy.iter().map(|b| b.0).fold(f64::MAX, f64::min);
        assert!(busy_cpu < 2.0 * idle, "saturated {busy:?} against free {idle}");
        for &(cpu, wall) in &busy {
            assert!(
                wall > 3.0 * cpu,
                "the busy threads did not make the exit wait: {busy:?}"
            );
        }
    }
}
