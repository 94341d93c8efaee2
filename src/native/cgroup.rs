//! A cgroup v1 memory cgroup for the workload's `memlimit`, removed however the run
//! ends: on drop, and from the knob guard's panic and signal paths (moving its tasks
//! out and rmdir are open/read/write/close/rmdir calls on buffers prepared before).
//!
//! The workload's processes run in /sys/fs/cgroup/memory/foliolab-<pid> with
//! memory.limit_in_bytes set. They run on CPU 0 (every worker does): the charge stock
//! is per CPU, and a task that moved between CPUs would leave pages charged ahead on
//! the one it left.

use std::ffi::CString;
use std::sync::atomic::{AtomicPtr, Ordering};

/// The cgroup v1 memory hierarchy's root.
const ROOT: &str = "/sys/fs/cgroup/memory";

/// The paths take_down needs, NUL-terminated, prepared while the cgroup is made.
struct Paths {
    dir: CString,
    limit: CString,
    procs: CString,
    root_procs: CString,
}

/// The live cgroup's paths (null when none), read by the signal handler.
static LIVE: AtomicPtr<Paths> = AtomicPtr::new(std::ptr::null_mut());

/// The workload's memory cgroup, for as long as it lives.
pub struct MemCgroup(());

impl MemCgroup {
    /// Makes the cgroup with `limit` bytes, and moves `pids` (the workers, which run
    /// on CPU 0: see `worker::serve`) into it.
    pub fn create(limit: u64, pids: &[libc::pid_t]) -> Result<MemCgroup, String> {
        let root = std::path::Path::new(ROOT);
        if !root.join("memory.limit_in_bytes").exists() {
            return Err(format!("memlimit: no cgroup v1 memory controller at {ROOT}"));
        }
        let dir = root.join(format!("foliolab-{}", std::process::id()));
        std::fs::create_dir(&dir).map_err(|e| format!("memlimit: creating {}: {e}", dir.display()))?;
        let c = |p: &std::path::Path| CString::new(p.as_os_str().as_encoded_bytes()).expect("no NUL in a path");
        let paths = Box::new(Paths {
            dir: c(&dir),
            limit: c(&dir.join("memory.limit_in_bytes")),
            procs: c(&dir.join("cgroup.procs")),
            root_procs: c(&root.join("cgroup.procs")),
        });
        LIVE.store(Box::into_raw(paths), Ordering::SeqCst);
        let guard = MemCgroup(());
        std::fs::write(dir.join("memory.limit_in_bytes"), limit.to_string())
            .map_err(|e| format!("memlimit: writing memory.limit_in_bytes: {e}"))?;
        for &pid in pids {
            std::fs::write(dir.join("cgroup.procs"), pid.to_string())
                .map_err(|e| format!("memlimit: moving pid {pid} into {}: {e}", dir.display()))?;
        }
        Ok(guard)
    }
}

/// Lifts the limit, moves every task of the cgroup back to the root one and removes
/// the cgroup, if this process made one. Called before the swap device is taken
/// down: swapoff charges the pages it reads back to this cgroup, and at its limit,
/// with the device closed to reclaim, it would fail. Async-signal-safe:
/// open/read/write/close/rmdir/nanosleep on the prepared paths, pids passed on as read.
pub(crate) fn take_down() {
    let p = LIVE.swap(std::ptr::null_mut(), Ordering::SeqCst);
    if p.is_null() {
        return;
    }
    // SAFETY: a non-null LIVE is a leaked Box<Paths>, never freed (freeing is not
    // async-signal-safe; it is one small allocation per run).
    let paths = unsafe { &*p };
    let mut buf = [0u8; 4096];
    // SAFETY: a NUL-terminated path and a static buffer.
    unsafe {
        let fd = libc::open(paths.limit.as_ptr(), libc::O_WRONLY | libc::O_CLOEXEC);
        if fd >= 0 {
            libc::write(fd, b"-1".as_ptr().cast(), 2);
            libc::close(fd);
        }
    }
    // A task forking as it is moved may leave its child behind: a few rounds.
    for _ in 0..100 {
        // SAFETY: NUL-terminated paths, a stack buffer of buf.len() bytes, a valid
        // timespec.
        unsafe {
            let fd = libc::open(paths.procs.as_ptr(), libc::O_RDONLY | libc::O_CLOEXEC);
            let n = if fd >= 0 {
                let n = libc::read(fd, buf.as_mut_ptr().cast(), buf.len());
                libc::close(fd);
                n.max(0) as usize
            } else {
                0
            };
            for pid in buf[..n].split(|&b| b == b'\n').filter(|l| !l.is_empty()) {
                let out = libc::open(paths.root_procs.as_ptr(), libc::O_WRONLY | libc::O_CLOEXEC);
                if out >= 0 {
                    libc::write(out, pid.as_ptr().cast(), pid.len());
                    libc::close(out);
                }
            }
            if libc::rmdir(paths.dir.as_ptr()) == 0 {
                return;
            }
            let t = libc::timespec {
                tv_sec: 0,
                tv_nsec: 10_000_000,
            };
            libc::nanosleep(&t, std::ptr::null_mut());
        }
    }
}

impl Drop for MemCgroup {
    fn drop(&mut self) {
        let dir = LIVE.load(Ordering::SeqCst);
        // SAFETY: a non-null LIVE points to Paths that are never freed.
        let shown = (!dir.is_null()).then(|| unsafe { (*dir).dir.to_string_lossy().into_owned() });
        take_down();
        if let Some(dir) = shown {
            if std::path::Path::new(&dir).exists() {
                eprintln!("foliolab: the memory cgroup {dir} could not be removed: rmdir it by hand");
            }
        }
    }
}
