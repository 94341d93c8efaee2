//! Saving, setting and restoring the host's THP knobs. The host is shared, so every knob
//! a run may write is put back however the run ends: by `Drop`, by a panic hook, or by a
//! signal handler (SIGINT, SIGTERM, SIGHUP) that uses only async-signal-safe calls on
//! buffers formatted before the run.
//!
//! The knobs are global, so runs serialize on one system-wide lock, an exclusive flock
//! on `KNOB_LOCK` held from before the knobs are saved until after they are restored:
//! two concurrent runs would otherwise run under each other's settings and each put
//! back what the other had set.

use super::khugepaged;
use crate::hw::Granule;
use crate::mm::thp_sysfs::ThpKnobs;
use std::ffi::CString;
use std::path::{Path, PathBuf};
use std::sync::atomic::{AtomicI32, AtomicPtr, Ordering};
use std::sync::Once;

/// The host-wide lock file for THP knob writers (`/run/lock` is a tmpfs every process
/// of the host sees, unlike a private /tmp).
pub const KNOB_LOCK: &str = "/run/lock/foliolab-thp.lock";

/// `(path, value)` pairs to write back, formatted for `open`/`write`.
type RestoreList = Vec<(CString, Vec<u8>)>;

/// The pending restore list (null when none), read by the signal handler.
static PENDING: AtomicPtr<RestoreList> = AtomicPtr::new(std::ptr::null_mut());
/// Only the process that saved the knobs restores them (workers are forks of it).
static OWNER: AtomicI32 = AtomicI32::new(0);

const SIGNALS: [libc::c_int; 3] = [libc::SIGINT, libc::SIGTERM, libc::SIGHUP];

/// The value sysfs shows: the bracketed choice of `always [madvise] never`, else the text.
pub fn current_value(shown: &str) -> &str {
    let s = shown.trim();
    match (s.find('['), s.find(']')) {
        (Some(a), Some(b)) if a < b => &s[a + 1..b],
        _ => s,
    }
}

/// Writes every pending knob back, and takes down a workload's swap device and
/// memory cgroup. Async-signal-safe: open/write/close on prepared buffers, swapoff,
/// rmdir.
fn restore_pending() {
    // SAFETY: getpid has no preconditions.
    if unsafe { libc::getpid() } != OWNER.load(Ordering::SeqCst) {
        return;
    }
    super::cgroup::take_down();
    super::swap::take_down();
    let list = PENDING.load(Ordering::SeqCst);
    if list.is_null() {
        return;
    }
    // SAFETY: a non-null PENDING points to a leaked RestoreList that is never freed while
    // published (KnobGuard::drop unpublishes before freeing).
    for (path, value) in unsafe { &*list } {
        // SAFETY: path is NUL-terminated and value a live buffer of value.len() bytes.
        unsafe {
            let fd = libc::open(path.as_ptr(), libc::O_WRONLY | libc::O_TRUNC | libc::O_CLOEXEC);
            if fd >= 0 {
                libc::write(fd, value.as_ptr().cast(), value.len());
                libc::close(fd);
            }
        }
    }
}

extern "C" fn on_signal(sig: libc::c_int) {
    restore_pending();
    // SAFETY: raise is async-signal-safe; SA_RESETHAND made the disposition the default,
    // so this ends the process with the signal it got.
    unsafe {
        libc::raise(sig);
    }
}

fn install_handlers() {
    static ONCE: Once = Once::new();
    ONCE.call_once(|| {
        let prev = std::panic::take_hook();
        std::panic::set_hook(Box::new(move |info| {
            restore_pending();
            prev(info);
        }));
        for sig in SIGNALS {
            // SAFETY: a zeroed sigaction is valid; on_signal has the handler signature and
            // only makes async-signal-safe calls.
            unsafe {
                let mut sa: libc::sigaction = std::mem::zeroed();
                sa.sa_sigaction = on_signal as extern "C" fn(libc::c_int) as libc::sighandler_t;
                sa.sa_flags = libc::SA_RESETHAND;
                libc::sigemptyset(&mut sa.sa_mask);
                libc::sigaction(sig, &sa, std::ptr::null_mut());
            }
        }
    });
}

/// For forked workers: their signals just end them; the owner restores the knobs.
pub fn reset_signals_in_child() {
    for sig in SIGNALS {
        // SAFETY: resetting a disposition to the default is always valid.
        unsafe {
            libc::signal(sig, libc::SIG_DFL);
        }
    }
}

/// The knobs of one host, saved at creation and written back when dropped.
pub struct KnobGuard {
    dir: PathBuf,
    /// Knob name -> value found, for the knobs that exist.
    saved: Vec<(String, String)>,
    /// What the host lacks, for `unavailable`.
    pub missing: Vec<(String, String)>,
    list: *mut RestoreList,
    /// This process's mm on khugepaged's list, for the real sysfs tree only.
    registration: Option<khugepaged::Registration>,
    collapsed_by_writes: std::cell::Cell<u64>,
    /// Held (flock) for the guard's life; dropped after the knobs are restored.
    _lock: std::fs::File,
}

#[derive(Debug, thiserror::Error)]
pub enum KnobError {
    #[error("cannot set THP knob {knob} to '{value}' (it is '{found}'): {reason}")]
    Set {
        knob: String,
        value: String,
        found: String,
        reason: String,
    },
    #[error("THP knob lock {path}: {reason}")]
    Lock { path: String, reason: String },
    #[error("{0}")]
    Khugepaged(String),
}

/// Takes the exclusive lock on `path`, saying on stderr whom it waits for.
fn lock_knobs(path: &Path) -> Result<std::fs::File, KnobError> {
    use std::io::{Read, Seek, Write};
    use std::os::fd::AsRawFd;
    let fail = |e: std::io::Error| KnobError::Lock {
        path: path.display().to_string(),
        reason: e.to_string(),
    };
    if let Some(dir) = path.parent() {
        std::fs::create_dir_all(dir).map_err(fail)?;
    }
    let mut f = std::fs::OpenOptions::new()
        .read(true)
        .write(true)
        .create(true)
        .truncate(false)
        .open(path)
        .map_err(fail)?;
    // SAFETY: flock on a file descriptor we own.
    if unsafe { libc::flock(f.as_raw_fd(), libc::LOCK_EX | libc::LOCK_NB) } != 0 {
        // /proc/locks names the holder even in the moment between its flock and its
        // writing its pid into the file (which then still reads empty).
        let holder = flock_holder(&f).map(|pid| pid.to_string()).or_else(|| {
            let mut text = String::new();
            let _ = f.read_to_string(&mut text);
            Some(text.trim().to_string()).filter(|t| !t.is_empty())
        });
        eprintln!(
            "foliolab: waiting for the THP knobs: another run ({}) holds {}",
            holder.map_or("pid unknown".to_string(), |pid| format!("pid {pid}")),
            path.display()
        );
        // SAFETY: as above; this one blocks until the holder is done.
        if unsafe { libc::flock(f.as_raw_fd(), libc::LOCK_EX) } != 0 {
            return Err(fail(std::io::Error::last_os_error()));
        }
    }
    f.set_len(0).map_err(fail)?;
    f.rewind().map_err(fail)?;
    write!(f, "{}", std::process::id()).map_err(fail)?;
    Ok(f)
}

/// The pid holding a flock on `f`'s file, from /proc/locks (`N: FLOCK ADVISORY WRITE
/// PID MAJ:MIN:INODE START END`).
fn flock_holder(f: &std::fs::File) -> Option<u32> {
    use std::os::unix::fs::MetadataExt;
    let ino = f.metadata().ok()?.ino().to_string();
    let locks = std::fs::read_to_string("/proc/locks").ok()?;
    locks.lines().find_map(|l| {
        let fields: Vec<&str> = l.split_whitespace().collect();
        let held = fields.get(1) == Some(&"FLOCK") && fields.get(5)?.rsplit(':').next() == Some(ino.as_str());
        held.then(|| fields.get(4)?.parse().ok()).flatten()
    })
}

impl KnobGuard {
    /// Takes the knob lock `lock`, saves every knob of `ThpKnobs::defaults` and
    /// khugepaged's sleep knobs under `dir`, arms the restore paths, writes the spec
    /// defaults and parks khugepaged.
    pub fn arm(dir: &Path, lock: &Path) -> Result<KnobGuard, KnobError> {
        let lock = lock_knobs(lock)?;
        let (mut saved, mut missing) = (Vec::new(), Vec::new());
        let park = khugepaged::PARK.map(|(k, v)| (k.to_string(), v.to_string()));
        for (knob, _) in ThpKnobs::defaults(Granule::K4).into_iter().chain(park.clone()) {
            match std::fs::read_to_string(dir.join(&knob)) {
                Ok(s) => saved.push((knob, current_value(&s).to_string())),
                Err(e) => missing.push((knob, e.to_string())),
            }
        }
        let list: RestoreList = saved
            .iter()
            .map(|(k, v)| {
                let path = CString::new(dir.join(k).into_os_string().into_encoded_bytes()).expect("path without NUL");
                (path, v.clone().into_bytes())
            })
            .collect();
        // Only the real sysfs tree controls this host's khugepaged (tests use fake trees).
        let real = dir.canonicalize().ok() == Path::new(super::THP_DIR).canonicalize().ok();
        let guard = KnobGuard {
            dir: dir.to_path_buf(),
            saved,
            missing,
            list: Box::into_raw(Box::new(list)),
            registration: if real {
                Some(khugepaged::Registration::new().map_err(KnobError::Khugepaged)?)
            } else {
                None
            },
            collapsed_by_writes: std::cell::Cell::new(0),
            _lock: lock,
        };
        install_handlers();
        // SAFETY: getpid has no preconditions.
        OWNER.store(unsafe { libc::getpid() }, Ordering::SeqCst);
        PENDING.store(guard.list, Ordering::SeqCst);
        for (knob, value) in ThpKnobs::defaults(Granule::K4).into_iter().chain(park) {
            if guard.saved.iter().any(|(k, _)| *k == knob) {
                guard.write(&knob, &value)?;
            }
        }
        guard.park()?;
        Ok(guard)
    }

    /// Writes `value` to `knob`. A knob that cannot be written is fine only if it already
    /// holds the value: a run under other settings would not be the workload's run.
    /// Then waits for khugepaged to be parked again (see `khugepaged`).
    /// A write that starts the thread (THP enabled again) lets it scan once at once, as
    /// the kernel's khugepaged() does before its first sleep; what that scan collapsed,
    /// host-wide, is added to `collapsed_by_writes`.
    pub fn set(&self, knob: &str, value: &str) -> Result<(), KnobError> {
        let before = khugepaged::pages_collapsed(&self.dir);
        self.write(knob, value)?;
        self.park()?;
        if let (Some(a), Some(b)) = (before, khugepaged::pages_collapsed(&self.dir)) {
            self.collapsed_by_writes
                .set(self.collapsed_by_writes.get() + b.wrapping_sub(a));
        }
        Ok(())
    }

    /// Collapses khugepaged made while a knob write was being waited out.
    pub fn collapsed_by_writes(&self) -> u64 {
        self.collapsed_by_writes.get()
    }

    /// This mm on khugepaged's list, and the thread asleep in its wait.
    fn park(&self) -> Result<(), KnobError> {
        if let Some(r) = &self.registration {
            r.register();
            khugepaged::settle().map_err(KnobError::Khugepaged)?;
        }
        Ok(())
    }

    fn write(&self, knob: &str, value: &str) -> Result<(), KnobError> {
        let path = self.dir.join(knob);
        let Err(e) = std::fs::write(&path, value) else {
            return Ok(());
        };
        let found = std::fs::read_to_string(&path)
            .map(|s| current_value(&s).to_string())
            .unwrap_or_default();
        if found == value {
            return Ok(());
        }
        Err(KnobError::Set {
            knob: knob.to_string(),
            value: value.to_string(),
            found,
            reason: e.to_string(),
        })
    }

    /// The values found at creation.
    pub fn saved(&self) -> &[(String, String)] {
        &self.saved
    }
}

impl Drop for KnobGuard {
    fn drop(&mut self) {
        restore_pending();
        PENDING.store(std::ptr::null_mut(), Ordering::SeqCst);
        // SAFETY: list came from Box::into_raw in arm and is no longer published.
        drop(unsafe { Box::from_raw(self.list) });
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn bracketed_values() {
        assert_eq!(current_value("always [madvise] never\n"), "madvise");
        assert_eq!(current_value("always defer defer+madvise [madvise] never"), "madvise");
        assert_eq!(current_value("511\n"), "511");
    }

    #[test]
    fn the_lock_holder_is_named_before_it_writes_its_pid() {
        use std::os::fd::AsRawFd;
        let path = std::env::temp_dir().join(format!("foliolab-holder-{}", std::process::id()));
        let held = std::fs::File::create(&path).unwrap();
        // SAFETY: flock on a file descriptor we own.
        assert_eq!(unsafe { libc::flock(held.as_raw_fd(), libc::LOCK_EX) }, 0);
        let other = std::fs::File::open(&path).unwrap();
        assert_eq!(flock_holder(&other), Some(std::process::id()));
        drop(held);
        assert_eq!(flock_holder(&other), None);
        std::fs::remove_file(&path).unwrap();
    }

    /// Guards publish one process-wide restore list, so the tests that arm one take turns.
    static ARMING: std::sync::Mutex<()> = std::sync::Mutex::new(());

    /// A fake sysfs tree with every default knob but the 16K one, each at `never`.
    fn fake_tree(name: &str) -> std::path::PathBuf {
        let dir = std::env::temp_dir().join(format!("foliolab-{name}-{}", std::process::id()));
        std::fs::create_dir_all(dir.join("khugepaged")).unwrap();
        for (knob, _) in ThpKnobs::defaults(Granule::K4) {
            if knob != "hugepages-16kB/enabled" {
                std::fs::create_dir_all(dir.join(&knob).parent().unwrap()).unwrap();
                std::fs::write(dir.join(&knob), "always [never]\n").unwrap();
            }
        }
        for (knob, _) in khugepaged::PARK {
            std::fs::write(dir.join(knob), "10000\n").unwrap();
        }
        dir
    }

    /// Knobs are set to the defaults and put back on drop.
    #[test]
    fn knobs_are_saved_set_and_restored() {
        let _turn = ARMING.lock().unwrap_or_else(|e| e.into_inner());
        let dir = fake_tree("knobs");
        {
            let g = KnobGuard::arm(&dir, &dir.join("lock")).unwrap();
            assert_eq!(g.missing.len(), 1, "{:?}", g.missing);
            assert_eq!(std::fs::read_to_string(dir.join("enabled")).unwrap(), "madvise");
            assert_eq!(
                std::fs::read_to_string(dir.join("hugepages-2048kB/enabled")).unwrap(),
                "inherit"
            );
            g.set("hugepages-64kB/enabled", "always").unwrap();
            g.set("hugepages-64kB/shmem_enabled", "always").unwrap();
            let parked = |k: &str| khugepaged::PARK.iter().any(|(p, _)| *p == k);
            assert!(g
                .saved()
                .iter()
                .all(|(k, v)| v == if parked(k) { "10000" } else { "never" }));
            for (knob, value) in khugepaged::PARK {
                assert_eq!(
                    std::fs::read_to_string(dir.join(knob)).unwrap(),
                    value,
                    "khugepaged parked"
                );
            }
        }
        for (knob, _) in khugepaged::PARK {
            assert_eq!(
                std::fs::read_to_string(dir.join(knob)).unwrap(),
                "10000",
                "khugepaged unparked"
            );
        }
        assert_eq!(
            std::fs::read_to_string(dir.join("hugepages-64kB/shmem_enabled")).unwrap(),
            "never",
            "the shmem knobs are restored too"
        );
        assert_eq!(
            std::fs::read_to_string(dir.join("hugepages-64kB/enabled")).unwrap(),
            "never"
        );
        assert_eq!(std::fs::read_to_string(dir.join("enabled")).unwrap(), "never");
        std::fs::remove_dir_all(&dir).unwrap();
    }

    /// A second run arms only after the first has restored the knobs, and saves what
    /// was there before both.
    #[test]
    fn a_second_guard_waits_until_the_first_has_restored() {
        let _turn = ARMING.lock().unwrap_or_else(|e| e.into_inner());
        let dir = fake_tree("knoblock");
        let lock = dir.join("lock");
        let first = KnobGuard::arm(&dir, &lock).unwrap();
        first.set("hugepages-64kB/enabled", "always").unwrap();
        let (d, l) = (dir.clone(), lock.clone());
        let second = std::thread::spawn(move || {
            let g = KnobGuard::arm(&d, &l).unwrap();
            g.saved()
                .iter()
                .find(|(k, _)| k == "hugepages-64kB/enabled")
                .unwrap()
                .1
                .clone()
        });
        std::thread::sleep(std::time::Duration::from_millis(200));
        assert!(!second.is_finished(), "the second guard did not wait");
        drop(first);
        assert_eq!(second.join().unwrap(), "never");
        assert_eq!(
            std::fs::read_to_string(dir.join("hugepages-64kB/enabled")).unwrap(),
            "never"
        );
        std::fs::remove_dir_all(&dir).unwrap();
    }
}
