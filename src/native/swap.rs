//! A zram swap device on the host for the workload's `swapon`, taken down however the
//! run ends: on drop, and from the knob guard's panic and signal paths (swapoff and a
//! zram reset are async-signal-safe system calls and writes).
//!
//! Only an unused zram0 is taken (disksize 0, not in /proc/swaps): the host's own swap,
//! if it has one, is never touched.

use std::ffi::CStr;
use std::io::Write;
use std::path::Path;
use std::sync::atomic::{AtomicBool, Ordering};

const SYS: &str = "/sys/block/zram0";
const DEV: &CStr = c"/dev/zram0";
const RESET: &CStr = c"/sys/block/zram0/reset";

/// Set while this process has zram0 swapped on.
static ON: AtomicBool = AtomicBool::new(false);

/// The swap header (union swap_header, version 1) for a device of `pages` pages of
/// 4K: version at 1024, last_page at 1028, no bad pages, "SWAPSPACE2" at the end of
/// the first page.
fn header(pages: u64) -> Vec<u8> {
    let mut h = vec![0u8; 4096];
    h[1024..1028].copy_from_slice(&1u32.to_le_bytes());
    h[1028..1032].copy_from_slice(&((pages - 1) as u32).to_le_bytes());
    h[4086..].copy_from_slice(b"SWAPSPACE2");
    h
}

/// zram0 as a swap device of `size` bytes, for as long as it lives.
pub struct ZramSwap(());

impl ZramSwap {
    pub fn on(size: u64) -> Result<ZramSwap, String> {
        let sys = Path::new(SYS);
        let disksize = std::fs::read_to_string(sys.join("disksize"))
            .map_err(|e| format!("swapon: {SYS}/disksize: {e} (no zram device on this host)"))?;
        if disksize.trim() != "0" {
            return Err(format!(
                "swapon: zram0 is in use (disksize {}): foliolab takes only an unused one",
                disksize.trim()
            ));
        }
        let swaps = std::fs::read_to_string("/proc/swaps").unwrap_or_default();
        if swaps.lines().any(|l| l.starts_with("/dev/zram0 ")) {
            return Err("swapon: /dev/zram0 is already a swap device".into());
        }
        std::fs::write(sys.join("disksize"), size.to_string())
            .map_err(|e| format!("swapon: writing {SYS}/disksize: {e}"))?;
        let guard = ZramSwap(());
        let mut dev = std::fs::OpenOptions::new()
            .write(true)
            .open("/dev/zram0")
            .map_err(|e| format!("swapon: /dev/zram0: {e}"))?;
        dev.write_all(&header(size / 4096))
            .and_then(|()| dev.sync_all())
            .map_err(|e| format!("swapon: writing the swap header: {e}"))?;
        drop(dev);
        ON.store(true, Ordering::SeqCst);
        // SAFETY: DEV is a NUL-terminated path; no flags (default priority).
        if unsafe { libc::swapon(DEV.as_ptr(), 0) } != 0 {
            ON.store(false, Ordering::SeqCst);
            return Err(format!("swapon(/dev/zram0): {}", std::io::Error::last_os_error()));
        }
        Ok(guard)
    }
}

/// swapoff (which reads every swapped-out page back first) and a reset of zram0, if
/// this process swapped it on. Async-signal-safe.
pub(crate) fn take_down() {
    if !ON.swap(false, Ordering::SeqCst) {
        return;
    }
    // SAFETY: NUL-terminated static paths; a failed swapoff leaves the reset to fail
    // with EBUSY, harmlessly.
    unsafe {
        libc::swapoff(DEV.as_ptr());
        let fd = libc::open(RESET.as_ptr(), libc::O_WRONLY | libc::O_CLOEXEC);
        if fd >= 0 {
            libc::write(fd, b"1".as_ptr().cast(), 1);
            libc::close(fd);
        }
    }
}

impl Drop for ZramSwap {
    fn drop(&mut self) {
        take_down();
        // The reset returned disksize to 0 if everything went: otherwise say so.
        let left = std::fs::read_to_string(format!("{SYS}/disksize")).unwrap_or_default();
        if left.trim() != "0" {
            eprintln!(
                "foliolab: zram0 could not be reset (disksize {}): run `swapoff /dev/zram0; echo 1 > {SYS}/reset`",
                left.trim()
            );
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn the_header_is_version_1_with_the_last_page_and_the_magic() {
        let h = header(4096);
        assert_eq!(&h[1024..1032], &[1, 0, 0, 0, 0xff, 0x0f, 0, 0]);
        assert_eq!(&h[4086..], b"SWAPSPACE2");
        assert!(h[..1024].iter().all(|b| *b == 0));
    }
}
