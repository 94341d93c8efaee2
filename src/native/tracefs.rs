//! Reading tracefs (tracepoint ids and formats) without touching the host's mounts:
//! the host's own tracefs mount where there is one, else one mounted in a mount
//! namespace of a thread's own, which no other process sees and which goes away with
//! the thread however the caller ends, so concurrent readers never see each other's
//! mount and none is ever left behind.

use std::collections::HashMap;
use std::ffi::CString;
use std::path::Path;

pub(crate) const PERF_TYPE_TRACEPOINT: u32 = 2;
/// `PERF_EVENT_IOC_SET_FILTER`, `_IOW('$', 6, char *)`.
pub(crate) const IOC_SET_FILTER: libc::c_ulong = 0x4008_2406;

/// tracefs's usual mount point, which exists (empty) when it is not mounted.
const TRACEFS: &str = "/sys/kernel/tracing";

/// The offset of each field in a tracepoint's raw data, from its `format` file.
pub(crate) fn field_offsets(format: &str) -> HashMap<String, usize> {
    let mut found = HashMap::new();
    for line in format.lines() {
        // `field:unsigned long address;	offset:8;	size:8;	signed:0;`
        let Some(decl) = line.trim().strip_prefix("field:") else {
            continue;
        };
        let mut parts = decl.split(';');
        let name = parts.next().unwrap_or("").split_whitespace().last().unwrap_or("");
        let name = name.split('[').next().unwrap_or(name);
        let off = parts
            .find_map(|p| p.trim().strip_prefix("offset:"))
            .and_then(|o| o.parse().ok());
        if let Some(off) = off {
            found.insert(name.to_string(), off);
        }
    }
    found
}

/// Where tracefs is mounted, from /proc/mounts. Mounts of foliolab's own earlier
/// versions (`foliolab-tracefs-<pid>`, made and removed by another recorder) are not
/// taken: they may vanish while read.
fn mount_point(mounts: &str) -> Option<String> {
    mounts.lines().find_map(|l| {
        let f: Vec<&str> = l.split_whitespace().collect();
        (f.get(2) == Some(&"tracefs") && !f[1].contains("foliolab-tracefs-")).then(|| f[1].to_string())
    })
}

/// `read` run on a tracefs directory; the outer error says why none could be had.
pub(crate) fn with<T: Send>(read: impl FnOnce(&Path) -> T + Send) -> Result<T, String> {
    let mounts = std::fs::read_to_string("/proc/mounts").map_err(|e| format!("/proc/mounts: {e}"))?;
    if let Some(dir) = mount_point(&mounts) {
        return Ok(read(Path::new(&dir)));
    }
    std::thread::scope(|s| s.spawn(|| mount_private().map(|()| read(Path::new(TRACEFS)))).join())
        .expect("tracefs thread")
}

/// Mounts tracefs on its usual place in a new mount namespace of the calling thread
/// (the thread must end after: its namespace ends with it).
fn mount_private() -> Result<(), String> {
    let c = |s: &str| CString::new(s).expect("no NUL");
    let fail = |what: &str| {
        format!(
            "no tracefs mounted, and {what} failed: {} (needs root)",
            std::io::Error::last_os_error()
        )
    };
    // SAFETY: unshare and mount take flags and NUL-terminated strings; they change only
    // this thread's view of the mounts (CLONE_NEWNS unshares its fs too).
    unsafe {
        if libc::unshare(libc::CLONE_NEWNS) != 0 {
            return Err(fail("a private mount namespace"));
        }
        // Nothing mounted here propagates back to the host's namespace.
        if libc::mount(
            std::ptr::null(),
            c("/").as_ptr(),
            std::ptr::null(),
            libc::MS_REC | libc::MS_PRIVATE,
            std::ptr::null(),
        ) != 0
        {
            return Err(fail("making the namespace private"));
        }
        if libc::mount(
            c("nodev").as_ptr(),
            c(TRACEFS).as_ptr(),
            c("tracefs").as_ptr(),
            0,
            std::ptr::null(),
        ) != 0
        {
            return Err(fail(&format!("mounting one on {TRACEFS}")));
        }
    }
    Ok(())
}
