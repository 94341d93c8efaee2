//! Saving, setting and restoring the host's THP knobs. The host is shared, so every knob
//! a run may write is put back however the run ends: by `Drop`, by a panic hook, or by a
//! signal handler (SIGINT, SIGTERM, SIGHUP) that uses only async-signal-safe calls on
//! buffers formatted before the run.

use crate::hw::Granule;
use crate::mm::thp_sysfs::ThpKnobs;
use std::ffi::CString;
use std::path::{Path, PathBuf};
use std::sync::atomic::{AtomicI32, AtomicPtr, Ordering};
use std::sync::Once;

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

/// Writes every pending knob back. Async-signal-safe: open/write/close on prepared buffers.
fn restore_pending() {
    // SAFETY: getpid has no preconditions.
    if unsafe { libc::getpid() } != OWNER.load(Ordering::SeqCst) {
        return;
    }
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
}

#[derive(Debug, thiserror::Error)]
#[error("cannot set THP knob {knob} to '{value}' (it is '{found}'): {reason}")]
pub struct KnobError {
    pub knob: String,
    pub value: String,
    pub found: String,
    pub reason: String,
}

impl KnobGuard {
    /// Saves every knob of `ThpKnobs::defaults` under `dir`, arms the restore paths, and
    /// writes the spec defaults.
    pub fn arm(dir: &Path) -> Result<KnobGuard, KnobError> {
        let (mut saved, mut missing) = (Vec::new(), Vec::new());
        for (knob, _) in ThpKnobs::defaults(Granule::K4) {
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
        let guard = KnobGuard {
            dir: dir.to_path_buf(),
            saved,
            missing,
            list: Box::into_raw(Box::new(list)),
        };
        install_handlers();
        // SAFETY: getpid has no preconditions.
        OWNER.store(unsafe { libc::getpid() }, Ordering::SeqCst);
        PENDING.store(guard.list, Ordering::SeqCst);
        for (knob, value) in ThpKnobs::defaults(Granule::K4) {
            if guard.saved.iter().any(|(k, _)| *k == knob) {
                guard.set(&knob, &value)?;
            }
        }
        Ok(guard)
    }

    /// Writes `value` to `knob`. A knob that cannot be written is fine only if it already
    /// holds the value: a run under other settings would not be the workload's run.
    pub fn set(&self, knob: &str, value: &str) -> Result<(), KnobError> {
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
        Err(KnobError {
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

    /// A fake sysfs tree: knobs are set to the defaults and put back on drop.
    #[test]
    fn knobs_are_saved_set_and_restored() {
        let dir = std::env::temp_dir().join(format!("foliolab-knobs-{}", std::process::id()));
        std::fs::create_dir_all(dir.join("khugepaged")).unwrap();
        for (knob, _) in ThpKnobs::defaults(Granule::K4) {
            if knob != "hugepages-16kB/enabled" {
                std::fs::create_dir_all(dir.join(&knob).parent().unwrap()).unwrap();
                std::fs::write(dir.join(&knob), "always [never]\n").unwrap();
            }
        }
        {
            let g = KnobGuard::arm(&dir).unwrap();
            assert_eq!(g.missing.len(), 1, "{:?}", g.missing);
            assert_eq!(std::fs::read_to_string(dir.join("enabled")).unwrap(), "madvise");
            assert_eq!(
                std::fs::read_to_string(dir.join("hugepages-2048kB/enabled")).unwrap(),
                "inherit"
            );
            g.set("hugepages-64kB/enabled", "always").unwrap();
            assert!(g.saved().iter().all(|(_, v)| v == "never"));
        }
        assert_eq!(
            std::fs::read_to_string(dir.join("hugepages-64kB/enabled")).unwrap(),
            "never"
        );
        assert_eq!(std::fs::read_to_string(dir.join("enabled")).unwrap(), "never");
        std::fs::remove_dir_all(&dir).unwrap();
    }
}
