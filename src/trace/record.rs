//! `foliolab record`: run a program on the host and write its address-space operations
//! and page faults, per process, in order, to a trace.
//!
//! Why perf_event_open on tracepoints, with no helper binary: one inherited event per
//! CPU follows the program and every child it forks, into per-CPU rings the kernel
//! fills without waking us per event; perf's side-band records give exec, fork, exit
//! and every new mapping with its protection and file (including what the kernel maps
//! at exec: the [stack], the binary, ld.so); `exceptions:page_fault_user` gives each
//! user fault's address and error code (write or read), and `page_fault_kernel` those
//! the kernel takes on user addresses for the program (read(2) into a fresh buffer),
//! which populate its memory just the same; `raw_syscalls` filtered to the
//! address-space syscalls gives their arguments and results, which side-band records
//! lack (munmap, madvise, mremap, brk shrinking); `task:task_newtask` gives clone flags,
//! so a vfork or posix_spawn child that shares its parent's mm is not taken for a fork.
//!
//! ```text
//!   per CPU c:  fault ──┬─► ring c (16 MiB) ──► rounds ──► ordered by time ──► Tracker ──► Writer
//!               enter ──┤      (SET_OUTPUT)       (perf's rule: flush what is older than
//!               exit  ──┤                          the previous round's newest record)
//!               newtask─┘
//! ```
//! A record the kernel drops (`PERF_RECORD_LOST`) fails the recording: a trace with a
//! hole would replay as a different program.

use super::format::{Event, Header, MapCause, MapKind, Trailer, Writer};
use crate::native::perf::{
    perf_event_open, PerfEventAttr, Ring, ATTR_SIZE, PERF_RECORD_LOST, PERF_RECORD_SAMPLE, PERF_SAMPLE_RAW,
    PERF_SAMPLE_TIME,
};
use crate::native::tracefs::{self, IOC_SET_FILTER, PERF_TYPE_TRACEPOINT};
use std::collections::HashMap;
use std::ffi::CString;
use std::io;
use std::os::fd::AsRawFd;
use std::path::Path;

const PERF_SAMPLE_TID: u64 = 1 << 1;
const PERF_SAMPLE_REGS_USER: u64 = 1 << 12;
/// perf_sample_regs_abi: the program runs 32-bit code (ia32 on x86_64).
const PERF_SAMPLE_REGS_ABI_32: u64 = 1;
const A_DISABLED: u64 = 1 << 0;
const A_INHERIT: u64 = 1 << 1;
const A_MMAP: u64 = 1 << 8;
const A_COMM: u64 = 1 << 9;
const A_ENABLE_ON_EXEC: u64 = 1 << 12;
const A_TASK: u64 = 1 << 13;
const A_WATERMARK: u64 = 1 << 14;
const A_MMAP_DATA: u64 = 1 << 17;
const A_SAMPLE_ID_ALL: u64 = 1 << 18;
const A_MMAP2: u64 = 1 << 23;
const A_COMM_EXEC: u64 = 1 << 24;
const PERF_RECORD_COMM: u32 = 3;
const PERF_RECORD_EXIT: u32 = 4;
const PERF_RECORD_THROTTLE: u32 = 5;
const PERF_RECORD_FORK: u32 = 7;
const PERF_RECORD_MMAP2: u32 = 10;
const PERF_RECORD_MISC_COMM_EXEC: u16 = 1 << 13;
const IOC_SET_OUTPUT: libc::c_ulong = 0x2405;
const CLONE_VM: u64 = 0x100;
/// The end of x86_64's user address space (47 bits).
const USER_END: u64 = 1 << 47;
const MAP_SHARED: u32 = 0x01;
const MAP_STACK: u64 = 0x20000;

/// The x86_64 syscall numbers recorded.
mod nr {
    pub const MMAP: u64 = 9;
    pub const MPROTECT: u64 = 10;
    pub const MUNMAP: u64 = 11;
    pub const BRK: u64 = 12;
    pub const MREMAP: u64 = 25;
    pub const MADVISE: u64 = 28;
    pub const PKEY_MPROTECT: u64 = 329;
    pub const ALL: [u64; 7] = [MMAP, MPROTECT, MUNMAP, BRK, MREMAP, MADVISE, PKEY_MPROTECT];
}

/// Per-CPU ring: 4096 pages (16 MiB) hold about 250,000 fault samples of 64 bytes,
/// a quarter second of a fault-bound program on one CPU; the reader wakes at 1/4.
const RING_PAGES: usize = 4096;

#[derive(Debug, thiserror::Error)]
pub enum RecordError {
    #[error("record: {0}")]
    Setup(String),
    #[error("record: {0}: {1}")]
    Io(String, io::Error),
}

/// A tracepoint's id and the offsets, in its raw data, of the two fields read from
/// it: resolved once, so that decoding a sample looks nothing up.
struct Tracepoint {
    id: u64,
    at: [usize; 2],
}

/// Reads `events/<group>/<name>/{id,format}` under a tracefs mount, and the offsets of
/// `fields`.
fn read_tracepoint(tracefs: &Path, event: &str, fields: [&str; 2]) -> Result<Tracepoint, RecordError> {
    let dir = tracefs.join("events").join(event);
    let id = std::fs::read_to_string(dir.join("id"))
        .map_err(|e| RecordError::Setup(format!("tracepoint {event}: {e} (this kernel lacks it?)")))?;
    let id = id
        .trim()
        .parse()
        .map_err(|_| RecordError::Setup(format!("tracepoint {event}: id {id:?}")))?;
    let format =
        std::fs::read_to_string(dir.join("format")).map_err(|e| RecordError::Io(format!("{event} format"), e))?;
    let found = tracefs::field_offsets(&format);
    let off = |f: &str| {
        found
            .get(f)
            .copied()
            .ok_or_else(|| RecordError::Setup(format!("tracepoint {event} has no field {f}")))
    };
    Ok(Tracepoint {
        id,
        at: [off(fields[0])?, off(fields[1])?],
    })
}

/// The tracepoints, read from tracefs (see `native::tracefs`).
struct Tracepoints {
    fault: Tracepoint,
    kfault: Tracepoint,
    enter: Tracepoint,
    exit: Tracepoint,
    newtask: Tracepoint,
    /// sched:sched_process_exec, sampled with the user registers' ABI.
    exec: Tracepoint,
}

impl Tracepoints {
    fn read(dir: &Path) -> Result<Tracepoints, RecordError> {
        Ok(Tracepoints {
            fault: read_tracepoint(dir, "exceptions/page_fault_user", ["address", "error_code"])?,
            kfault: read_tracepoint(dir, "exceptions/page_fault_kernel", ["address", "error_code"])?,
            enter: read_tracepoint(dir, "raw_syscalls/sys_enter", ["id", "args"])?,
            exit: read_tracepoint(dir, "raw_syscalls/sys_exit", ["id", "ret"])?,
            newtask: read_tracepoint(dir, "task/task_newtask", ["pid", "clone_flags"])?,
            exec: read_tracepoint(dir, "sched/sched_process_exec", ["filename", "pid"])?,
        })
    }

    fn load() -> Result<Tracepoints, RecordError> {
        tracefs::with(Self::read).map_err(RecordError::Setup)?
    }
}

/// What one ring record said, with its time; ordered across CPUs before the Tracker.
#[derive(Debug)]
enum Rec {
    Fault {
        pid: u32,
        addr: u64,
        write: bool,
        kernel: bool,
    },
    Enter {
        tid: u32,
        nr: u64,
        args: [u64; 4],
    },
    Exit {
        pid: u32,
        tid: u32,
        nr: u64,
        ret: i64,
    },
    NewTask {
        tid: u32,
        flags: u64,
    },
    Map {
        pid: u32,
        tid: u32,
        start: u64,
        len: u64,
        prot: u8,
        kind: MapKind,
    },
    Exec {
        pid: u32,
        comm: String,
    },
    Fork {
        pid: u32,
        ppid: u32,
        tid: u32,
    },
    TaskExit {
        pid: u32,
        tid: u32,
    },
    /// A process exec'd a 32-bit (ia32) program: its syscalls have other numbers.
    Ia32 {
        pid: u32,
        file: String,
    },
}

fn u32_at(b: &[u8], off: usize) -> u32 {
    u32::from_ne_bytes(b[off..off + 4].try_into().expect("4 bytes"))
}
fn u64_at(b: &[u8], off: usize) -> u64 {
    u64::from_ne_bytes(b[off..off + 8].try_into().expect("8 bytes"))
}

/// The mapping kind of an MMAP2 record: perf names anonymous memory `//anon`, the
/// kernel's own mappings `[name]`, and files by path.
fn map_kind(name: &str, flags: u32) -> MapKind {
    match name {
        "[stack]" => MapKind::Stack,
        "//anon" | "[heap]" if flags & MAP_SHARED == 0 => MapKind::Anon,
        "//anon" => MapKind::Shared,
        n if n.starts_with('[') => MapKind::Special,
        n if n.starts_with("/dev/zero") || n.starts_with("/SYSV") || n.starts_with("/memfd:") => MapKind::Shared,
        _ if flags & MAP_SHARED != 0 => MapKind::Shared,
        _ => MapKind::File,
    }
}

/// Field offsets inside a sample record (TID | TIME | RAW): header 8, pid/tid 8,
/// time 8, raw size 4, then the tracepoint's raw data.
const S_PID: usize = 8;
const S_TIME: usize = 16;
const S_RAW: usize = 24;

struct Decoder {
    tp: Tracepoints,
    lost: u64,
    throttled: u64,
}

impl Decoder {
    /// One record's bytes → (time, what it says); None for records that say nothing here.
    fn decode(&mut self, b: &[u8]) -> Result<Option<(u64, Rec)>, RecordError> {
        let kind = u32_at(b, 0);
        let misc = u16::from_ne_bytes([b[4], b[5]]);
        let n = b.len();
        // sample_id_all: pid, tid, time at the end of every side-band record.
        let sid_time = || u64_at(b, n - 8);
        let rec = match kind {
            PERF_RECORD_SAMPLE => {
                let (pid, tid, time) = (u32_at(b, S_PID), u32_at(b, S_PID + 4), u64_at(b, S_TIME));
                let raw = &b[S_RAW + 4..];
                let ty = u16::from_ne_bytes([raw[0], raw[1]]) as u64;
                let tp = &self.tp;
                let r = if ty == tp.fault.id || ty == tp.kfault.id {
                    let f = if ty == tp.fault.id { &tp.fault } else { &tp.kfault };
                    let (addr, code) = (u64_at(raw, f.at[0]), u64_at(raw, f.at[1]));
                    // A kernel-mode fault counts only on a user address.
                    if ty == tp.kfault.id && addr >= USER_END {
                        return Ok(None);
                    }
                    // x86 page-fault error code: bit 1 is a write access.
                    Rec::Fault {
                        pid,
                        addr,
                        write: code & 2 != 0,
                        kernel: ty == tp.kfault.id,
                    }
                } else if ty == tp.enter.id {
                    let a = tp.enter.at[1];
                    Rec::Enter {
                        tid,
                        nr: u64_at(raw, tp.enter.at[0]),
                        args: [
                            u64_at(raw, a),
                            u64_at(raw, a + 8),
                            u64_at(raw, a + 16),
                            u64_at(raw, a + 24),
                        ],
                    }
                } else if ty == tp.exit.id {
                    Rec::Exit {
                        pid,
                        tid,
                        nr: u64_at(raw, tp.exit.at[0]),
                        ret: u64_at(raw, tp.exit.at[1]) as i64,
                    }
                } else if ty == tp.newtask.id {
                    Rec::NewTask {
                        tid: u32_at(raw, tp.newtask.at[0]),
                        flags: u64_at(raw, tp.newtask.at[1]),
                    }
                } else if ty == tp.exec.id {
                    // REGS_USER follows the raw data: the ABI, then the registers.
                    let raw_size = u32_at(b, S_RAW) as usize;
                    if u64_at(b, S_RAW + 4 + raw_size) != PERF_SAMPLE_REGS_ABI_32 {
                        return Ok(None);
                    }
                    // __data_loc char[] filename: offset and length in the raw data.
                    let loc = u32_at(raw, tp.exec.at[0]) as usize;
                    let name = raw.get(loc & 0xffff..(loc & 0xffff) + (loc >> 16)).unwrap_or(&[]);
                    let name = &name[..name.iter().position(|&c| c == 0).unwrap_or(name.len())];
                    Rec::Ia32 {
                        pid,
                        file: String::from_utf8_lossy(name).into_owned(),
                    }
                } else {
                    return Err(RecordError::Setup(format!("sample of unknown tracepoint {ty}")));
                };
                return Ok(Some((time, r)));
            }
            PERF_RECORD_MMAP2 => {
                let name_end = n - 16;
                let name = &b[72..name_end];
                let name = String::from_utf8_lossy(&name[..name.iter().position(|&c| c == 0).unwrap_or(name.len())]);
                Rec::Map {
                    pid: u32_at(b, 8),
                    tid: u32_at(b, 12),
                    start: u64_at(b, 16),
                    len: u64_at(b, 24),
                    prot: u32_at(b, 64) as u8,
                    kind: map_kind(&name, u32_at(b, 68)),
                }
            }
            PERF_RECORD_COMM if misc & PERF_RECORD_MISC_COMM_EXEC != 0 => {
                let name = &b[16..n - 16];
                let comm = String::from_utf8_lossy(&name[..name.iter().position(|&c| c == 0).unwrap_or(name.len())]);
                Rec::Exec {
                    pid: u32_at(b, 8),
                    comm: comm.into_owned(),
                }
            }
            PERF_RECORD_FORK => Rec::Fork {
                pid: u32_at(b, 8),
                ppid: u32_at(b, 12),
                tid: u32_at(b, 16),
            },
            PERF_RECORD_EXIT => Rec::TaskExit {
                pid: u32_at(b, 8),
                tid: u32_at(b, 16),
            },
            PERF_RECORD_LOST => {
                self.lost += u64_at(b, 16);
                return Ok(None);
            }
            PERF_RECORD_THROTTLE => {
                self.throttled += 1;
                return Ok(None);
            }
            _ => return Ok(None),
        };
        Ok(Some((sid_time(), rec)))
    }
}

/// Turns ordered records into trace events: processes numbered as they appear,
/// threads folded into their process, syscalls paired with their results.
struct Tracker<W: io::Write> {
    out: Writer<W>,
    /// tgid → (trace process, live threads).
    procs: HashMap<u32, (u32, u32)>,
    next_proc: u32,
    /// tid → the address-space syscall it is inside, with its first arguments and,
    /// for mmap, the kind of mapping its MMAP2 record showed.
    inside: HashMap<u32, (u64, [u64; 4], Option<MapKind>)>,
    clone_flags: HashMap<u32, u64>,
    /// New processes (by tid) whose task_newtask sample, which perf writes after the
    /// FORK record, has not come yet: (pid, ppid).
    pending_fork: HashMap<u32, (u32, u32)>,
}

impl<W: io::Write> Tracker<W> {
    fn proc_of(&mut self, pid: u32) -> u32 {
        if let Some(p) = self.procs.get(&pid) {
            return p.0;
        }
        let p = self.next_proc;
        self.next_proc += 1;
        self.procs.insert(pid, (p, 1));
        p
    }

    /// A new process `pid`, child of `ppid`, created with `flags`.
    fn fork(&mut self, pid: u32, ppid: u32, flags: u64) -> Event {
        let parent = self.proc_of(ppid);
        // A reused pid whose exit fell in the same round: a new process anyway.
        self.procs.remove(&pid);
        let child = self.proc_of(pid);
        Event::Fork {
            parent,
            child,
            share_mm: flags & CLONE_VM != 0,
        }
    }

    /// A record of process `pid` whose fork still waits for its clone flags: the
    /// task_newtask sample never came, so it is taken for a fork without CLONE_VM.
    fn settle_fork(&mut self, pid: u32) -> io::Result<()> {
        if let Some((p, ppid)) = self.pending_fork.remove(&pid) {
            let e = self.fork(p, ppid, 0);
            self.out.write(&e)?;
        }
        Ok(())
    }

    fn feed(&mut self, r: Rec) -> io::Result<()> {
        if !self.pending_fork.is_empty() {
            if let Rec::Fault { pid, .. }
            | Rec::Exit { pid, .. }
            | Rec::Map { pid, .. }
            | Rec::Exec { pid, .. }
            | Rec::TaskExit { pid, .. } = &r
            {
                self.settle_fork(*pid)?;
            }
        }
        let e = match r {
            Rec::Fault {
                pid,
                addr,
                write,
                kernel,
            } => Event::Fault {
                proc: self.proc_of(pid),
                addr,
                write,
                kernel,
            },
            Rec::Enter { tid, nr, args } => {
                self.inside.insert(tid, (nr, args, None));
                return Ok(());
            }
            Rec::Exit { pid, tid, nr, ret } => {
                let Some((enr, [a0, a1, a2, a3], mapped)) = self.inside.remove(&tid) else {
                    return Ok(());
                };
                if enr != nr {
                    return Ok(());
                }
                let proc = self.proc_of(pid);
                match nr {
                    nr::MUNMAP if ret == 0 => Event::Munmap {
                        proc,
                        start: a0,
                        len: a1,
                    },
                    nr::MPROTECT | nr::PKEY_MPROTECT if ret == 0 => Event::Mprotect {
                        proc,
                        start: a0,
                        len: a1,
                        prot: a2 as u8,
                    },
                    // ENOMEM: advice applied to the mapped parts of a range with holes.
                    nr::MADVISE if ret == 0 || ret == -12 => Event::Madvise {
                        proc,
                        start: a0,
                        len: a1,
                        advice: a2 as u32,
                    },
                    nr::MREMAP if !(-4095..0).contains(&ret) => Event::Mremap {
                        proc,
                        old: a0,
                        old_len: a1,
                        new: ret as u64,
                        new_len: a2,
                    },
                    nr::BRK => Event::Brk { proc, brk: ret as u64 },
                    nr::MMAP if !(-4095..0).contains(&ret) => match mapped {
                        Some(kind) => Event::Map {
                            proc,
                            start: ret as u64,
                            len: a1,
                            prot: a2 as u8,
                            kind,
                            cause: MapCause::Mmap,
                            nohuge: a3 & MAP_STACK != 0,
                        },
                        None => return Ok(()),
                    },
                    _ => return Ok(()),
                }
            }
            Rec::NewTask { tid, flags } => match self.pending_fork.remove(&tid) {
                Some((pid, ppid)) => self.fork(pid, ppid, flags),
                None => {
                    self.clone_flags.insert(tid, flags);
                    return Ok(());
                }
            },
            Rec::Map {
                pid,
                tid,
                start,
                len,
                prot,
                kind,
            } => {
                // The record shows the VMA after any merge, not the range asked for: an
                // mmap's range comes from its result, mprotect's and mremap's too.
                let cause = match self.inside.get_mut(&tid) {
                    Some((nr::MMAP, _, mapped)) => {
                        *mapped = Some(kind);
                        return Ok(());
                    }
                    Some((nr::MPROTECT | nr::PKEY_MPROTECT | nr::MREMAP, ..)) => return Ok(()),
                    // The heap as it now is; the replay maps what it grew by.
                    Some((nr::BRK, ..)) => MapCause::Brk,
                    // The kernel's own mappings at exec.
                    _ => MapCause::Mmap,
                };
                Event::Map {
                    proc: self.proc_of(pid),
                    start,
                    len,
                    prot,
                    kind,
                    cause,
                    nohuge: false,
                }
            }
            Rec::Exec { pid, comm } => Event::Exec {
                proc: self.proc_of(pid),
                comm,
            },
            Rec::Fork { pid, ppid, tid } => {
                if pid == ppid {
                    self.clone_flags.remove(&tid);
                    self.proc_of(pid);
                    self.procs.get_mut(&pid).expect("just found").1 += 1;
                    return Ok(());
                }
                match self.clone_flags.remove(&tid) {
                    Some(flags) => self.fork(pid, ppid, flags),
                    None => {
                        self.pending_fork.insert(tid, (pid, ppid));
                        return Ok(());
                    }
                }
            }
            Rec::Ia32 { .. } => return Ok(()),
            Rec::TaskExit { pid, tid } => {
                self.inside.remove(&tid);
                let Some(p) = self.procs.get_mut(&pid) else {
                    return Ok(());
                };
                p.1 -= 1;
                if p.1 > 0 {
                    return Ok(());
                }
                let proc = p.0;
                self.procs.remove(&pid);
                Event::Exit { proc }
            }
        };
        self.out.write(&e)
    }
}

/// What to record.
pub struct Options<'a> {
    pub command: &'a [String],
    pub output: &'a Path,
    /// Run the program with ADDR_NO_RANDOMIZE, so two runs map the same addresses.
    pub no_aslr: bool,
}

/// A finished recording.
#[derive(Debug)]
pub struct Recorded {
    pub trailer: Trailer,
    pub bytes: u64,
}

/// The events of one CPU: the first carries the side-band records, the rest write
/// into its ring.
struct CpuRings {
    ring: Ring,
    _others: Vec<std::os::fd::OwnedFd>,
}

fn online_cpus() -> Vec<i32> {
    // SAFETY: sysconf has no preconditions.
    let n = unsafe { libc::sysconf(libc::_SC_NPROCESSORS_CONF) }.max(1) as i32;
    (0..n).collect()
}

fn open_rings(tp: &Tracepoints, pid: i32) -> Result<Vec<CpuRings>, RecordError> {
    let base = |id: u64, extra: u64| PerfEventAttr {
        type_: PERF_TYPE_TRACEPOINT,
        size: ATTR_SIZE,
        config: id,
        sample_period: 1,
        sample_type: PERF_SAMPLE_TID | PERF_SAMPLE_TIME | PERF_SAMPLE_RAW,
        flags: A_DISABLED | A_INHERIT | A_ENABLE_ON_EXEC | A_SAMPLE_ID_ALL | A_WATERMARK | extra,
        wakeup_events: (RING_PAGES * 4096 / 4) as u32,
        ..PerfEventAttr::default()
    };
    let side = A_MMAP | A_MMAP2 | A_MMAP_DATA | A_COMM | A_COMM_EXEC | A_TASK;
    let filter = CString::new(
        nr::ALL
            .iter()
            .map(|n| format!("id == {n}"))
            .collect::<Vec<_>>()
            .join(" || "),
    )
    .expect("no NUL");
    let mut out = Vec::new();
    for cpu in online_cpus() {
        let open = |attr: &PerfEventAttr, what: &str| {
            perf_event_open(attr, pid, cpu)
                .map_err(|e| RecordError::Setup(format!("perf_event_open({what}) on cpu {cpu}: {e}")))
        };
        let lead = match open(&base(tp.fault.id, side), "exceptions:page_fault_user") {
            Ok(fd) => fd,
            // A CPU that is not online has no events.
            Err(_)
                if std::fs::read_to_string(format!("/sys/devices/system/cpu/cpu{cpu}/online"))
                    .is_ok_and(|s| s.trim() == "0") =>
            {
                continue
            }
            Err(e) => return Err(e),
        };
        let ring = Ring::map(lead, RING_PAGES).map_err(|e| RecordError::Setup(format!("cpu {cpu}: {e}")))?;
        let mut others = Vec::new();
        // Each exec, with the ABI of the program it starts (one register sampled: perf
        // takes no empty set).
        let exec = PerfEventAttr {
            sample_type: PERF_SAMPLE_TID | PERF_SAMPLE_TIME | PERF_SAMPLE_RAW | PERF_SAMPLE_REGS_USER,
            sample_regs_user: 1,
            ..base(tp.exec.id, 0)
        };
        for (attr, what, filtered) in [
            (base(tp.kfault.id, 0), "exceptions:page_fault_kernel", false),
            (base(tp.enter.id, 0), "raw_syscalls:sys_enter", true),
            (base(tp.exit.id, 0), "raw_syscalls:sys_exit", true),
            (base(tp.newtask.id, 0), "task:task_newtask", false),
            (exec, "sched:sched_process_exec", false),
        ] {
            let fd = open(&attr, what)?;
            // SAFETY: both are perf event fds of this process; SET_OUTPUT takes an fd,
            // SET_FILTER a NUL-terminated string.
            unsafe {
                if libc::ioctl(fd.as_raw_fd(), IOC_SET_OUTPUT, ring.fd.as_raw_fd()) != 0 {
                    return Err(RecordError::Setup(format!(
                        "{what}: SET_OUTPUT: {}",
                        io::Error::last_os_error()
                    )));
                }
                if filtered && libc::ioctl(fd.as_raw_fd(), IOC_SET_FILTER, filter.as_ptr()) != 0 {
                    return Err(RecordError::Setup(format!(
                        "{what}: SET_FILTER: {}",
                        io::Error::last_os_error()
                    )));
                }
            }
            others.push(fd);
        }
        out.push(CpuRings { ring, _others: others });
    }
    Ok(out)
}

/// The host's THP knobs: `enabled` and each size's `hugepages-<size>kB/enabled`.
pub fn thp_knobs(dir: &Path) -> Vec<(String, String)> {
    let mut knobs = Vec::new();
    let read = |p: &Path| {
        std::fs::read_to_string(p)
            .ok()
            .map(|s| crate::native::knobs::current_value(&s).to_string())
    };
    if let Some(v) = read(&dir.join("enabled")) {
        knobs.push(("enabled".to_string(), v));
    }
    let mut sizes: Vec<_> = std::fs::read_dir(dir)
        .into_iter()
        .flatten()
        .flatten()
        .filter_map(|e| e.file_name().to_str().map(String::from))
        .filter(|n| n.starts_with("hugepages-"))
        .collect();
    sizes.sort_by_key(|n| {
        n.trim_start_matches("hugepages-")
            .trim_end_matches("kB")
            .parse::<u64>()
            .unwrap_or(0)
    });
    for s in sizes {
        if let Some(v) = read(&dir.join(&s).join("enabled")) {
            knobs.push((format!("{s}/enabled"), v));
        }
    }
    knobs
}

/// SIGINT ignored while alive; the previous disposition restored on drop.
struct IgnoreSigint(libc::sigaction);

impl IgnoreSigint {
    fn new() -> IgnoreSigint {
        // SAFETY: all-zero sigactions are valid to fill; SIG_IGN needs no handler.
        unsafe {
            let mut ign: libc::sigaction = std::mem::zeroed();
            ign.sa_sigaction = libc::SIG_IGN;
            let mut old: libc::sigaction = std::mem::zeroed();
            libc::sigaction(libc::SIGINT, &ign, &mut old);
            IgnoreSigint(old)
        }
    }
}

impl Drop for IgnoreSigint {
    fn drop(&mut self) {
        // SAFETY: restoring the disposition saved in new.
        unsafe { libc::sigaction(libc::SIGINT, &self.0, std::ptr::null_mut()) };
    }
}

/// Forks the program stopped on a pipe, so the events exist before it execs.
struct Child {
    pid: i32,
    go: i32,
    exec_err: i32,
}

fn spawn_stopped(command: &[String], no_aslr: bool) -> Result<Child, RecordError> {
    let argv: Vec<CString> = command
        .iter()
        .map(|a| CString::new(a.as_str()).map_err(|_| RecordError::Setup(format!("argument {a:?} holds a NUL"))))
        .collect::<Result<_, _>>()?;
    let mut ptrs: Vec<*const libc::c_char> = argv.iter().map(|a| a.as_ptr()).collect();
    ptrs.push(std::ptr::null());
    let (mut go, mut err) = ([0i32; 2], [0i32; 2]);
    // SAFETY: two-element arrays for pipe2.
    if unsafe { libc::pipe2(go.as_mut_ptr(), libc::O_CLOEXEC) } != 0
        || unsafe { libc::pipe2(err.as_mut_ptr(), libc::O_CLOEXEC) } != 0
    {
        return Err(RecordError::Io("pipe".into(), io::Error::last_os_error()));
    }
    // SAFETY: the child only makes async-signal-safe calls on memory prepared above.
    let pid = unsafe { libc::fork() };
    if pid < 0 {
        return Err(RecordError::Io("fork".into(), io::Error::last_os_error()));
    }
    if pid == 0 {
        crate::native::knobs::reset_signals_in_child();
        // SAFETY: fds from pipe2; argv pointers live (copied address space).
        unsafe {
            let mut b = 0u8;
            libc::read(go[0], (&mut b as *mut u8).cast(), 1);
            if no_aslr {
                libc::personality(libc::ADDR_NO_RANDOMIZE as libc::c_ulong);
            }
            libc::execvp(ptrs[0], ptrs.as_ptr());
            let e = *libc::__errno_location();
            libc::write(err[1], (&e as *const i32).cast(), 4);
            libc::_exit(127);
        }
    }
    // SAFETY: closing the child's ends in the parent.
    unsafe {
        libc::close(go[0]);
        libc::close(err[1]);
    }
    Ok(Child {
        pid,
        go: go[1],
        exec_err: err[0],
    })
}

/// User + system time of a rusage.
pub fn rusage_ns(ru: &libc::rusage) -> u64 {
    let tv = |t: libc::timeval| t.tv_sec as u64 * 1_000_000_000 + t.tv_usec as u64 * 1000;
    tv(ru.ru_utime) + tv(ru.ru_stime)
}

/// getrusage(`who`) as user + system nanoseconds.
pub fn cpu_ns(who: libc::c_int) -> u64 {
    // SAFETY: an all-zero rusage is valid; getrusage fills it.
    let mut ru: libc::rusage = unsafe { std::mem::zeroed() };
    // SAFETY: as above.
    unsafe { libc::getrusage(who, &mut ru) };
    rusage_ns(&ru)
}

/// Records `o.command` into `o.output`.
pub fn record(o: &Options, thp_dir: &Path) -> Result<Recorded, RecordError> {
    if !cfg!(target_arch = "x86_64") {
        return Err(RecordError::Setup(
            "recording reads x86_64 syscall numbers and fault error codes; this host is not x86_64".into(),
        ));
    }
    if o.command.is_empty() {
        return Err(RecordError::Setup("no command to record".into()));
    }
    let tp = Tracepoints::load()?;
    let file = std::fs::File::create(o.output).map_err(|e| RecordError::Io(o.output.display().to_string(), e))?;
    let mut uts: libc::utsname = unsafe { std::mem::zeroed() };
    // SAFETY: uname fills the struct.
    unsafe { libc::uname(&mut uts) };
    let field = |f: &[libc::c_char]| {
        // SAFETY: utsname fields are NUL-terminated.
        unsafe { std::ffi::CStr::from_ptr(f.as_ptr()) }
            .to_string_lossy()
            .into_owned()
    };
    let header = Header {
        command: o.command.to_vec(),
        host_kernel: field(&uts.release),
        arch: field(&uts.machine),
        page_size: 4096,
        thp: thp_knobs(thp_dir),
        no_aslr: o.no_aslr,
    };
    let out = Writer::new(file, &header).map_err(|e| RecordError::Io(o.output.display().to_string(), e))?;
    // Ctrl-C is for the program (as under perf record or time): it ends it, and the
    // trace still gets its end record, with status 130. The disposition is put back.
    let _sigint = IgnoreSigint::new();
    let child = spawn_stopped(o.command, o.no_aslr)?;
    let kill = |e: RecordError| {
        // SAFETY: the child is ours and has not been reaped.
        unsafe {
            libc::kill(child.pid, libc::SIGKILL);
            libc::waitpid(child.pid, std::ptr::null_mut(), 0);
        }
        e
    };
    let rings = open_rings(&tp, child.pid).map_err(kill)?;
    // The program, once reaped, is not ours to signal: its pid may be reused.
    let abort = |e: RecordError, reaped: bool| if reaped { e } else { kill(e) };
    let start = std::time::Instant::now();
    // SAFETY: go/exec_err are our pipe ends.
    let exec_errno = unsafe {
        libc::write(child.go, [1u8].as_ptr().cast(), 1);
        libc::close(child.go);
        let mut e = 0i32;
        let n = libc::read(child.exec_err, (&mut e as *mut i32).cast(), 4);
        libc::close(child.exec_err);
        (n == 4).then_some(e)
    };
    if let Some(e) = exec_errno {
        // SAFETY: reaping our child.
        unsafe { libc::waitpid(child.pid, std::ptr::null_mut(), 0) };
        return Err(RecordError::Setup(format!(
            "{}: {}",
            o.command[0],
            io::Error::from_raw_os_error(e)
        )));
    }
    let mut dec = Decoder {
        tp,
        lost: 0,
        throttled: 0,
    };
    let mut t = Tracker {
        out,
        procs: HashMap::new(),
        next_proc: 0,
        inside: HashMap::new(),
        clone_flags: HashMap::new(),
        pending_fork: HashMap::new(),
    };
    let io_err = |e: io::Error| RecordError::Io(o.output.display().to_string(), e);
    let mut held: Vec<(u64, u32, u64, Rec)> = Vec::new();
    let mut seq = 0u64;
    let mut prev_round_max = 0u64;
    let mut buf = Vec::new();
    let mut status = None;
    // SAFETY: an all-zero rusage is a valid value to be overwritten.
    let mut ru: libc::rusage = unsafe { std::mem::zeroed() };
    let self_cpu = cpu_ns(libc::RUSAGE_SELF);
    loop {
        let done = status.is_some();
        let mut round_max = 0u64;
        for (cpu, r) in rings.iter().enumerate() {
            let head = r.ring.head();
            let mut tail = r.ring.tail();
            while tail < head {
                let hdr = r.ring.read_u64(tail);
                let size = (hdr >> 48) as usize;
                r.ring.read(tail, size, &mut buf);
                let decoded = dec.decode(&buf).map_err(|e| abort(e, done))?;
                if let Some((_, Rec::Ia32 { pid, file })) = &decoded {
                    if !done {
                        // SAFETY: signalling a process of the recording, still running.
                        unsafe { libc::kill(*pid as i32, libc::SIGKILL) };
                    }
                    return Err(abort(
                        RecordError::Setup(format!(
                            "{file} (pid {pid}) is a 32-bit (ia32) program: its syscalls are numbered \
                             differently and are not decoded, so it cannot be recorded (it was killed)"
                        )),
                        done,
                    ));
                }
                if let Some((time, rec)) = decoded {
                    round_max = round_max.max(time);
                    held.push((time, cpu as u32, seq, rec));
                    seq += 1;
                }
                tail += size.max(8) as u64;
            }
            r.ring.set_tail(tail);
        }
        // Everything older than the previous round's newest record has been written by
        // now on every CPU; the rest waits for the next round.
        let limit = if done { u64::MAX } else { prev_round_max };
        held.sort_unstable_by_key(|h| (h.0, h.1, h.2));
        let cut = held.partition_point(|h| h.0 <= limit);
        for (_, _, _, rec) in held.drain(..cut) {
            t.feed(rec).map_err(io_err)?;
        }
        prev_round_max = prev_round_max.max(round_max);
        if done {
            break;
        }
        let mut st = 0;
        // SAFETY: polling our own child; ru is a valid rusage to fill.
        if unsafe { libc::wait4(child.pid, &mut st, libc::WNOHANG, &mut ru) } == child.pid {
            status = Some(if libc::WIFSIGNALED(st) {
                128 + libc::WTERMSIG(st)
            } else {
                libc::WEXITSTATUS(st)
            });
            continue;
        }
        let mut fds: Vec<libc::pollfd> = rings
            .iter()
            .map(|r| libc::pollfd {
                fd: r.ring.fd.as_raw_fd(),
                events: libc::POLLIN,
                revents: 0,
            })
            .collect();
        // SAFETY: fds is a live array of pollfd.
        unsafe { libc::poll(fds.as_mut_ptr(), fds.len() as libc::nfds_t, 20) };
    }
    let wall_ns = start.elapsed().as_nanos() as u64;
    if dec.lost > 0 || dec.throttled > 0 {
        return Err(RecordError::Setup(format!(
            "the kernel dropped {} records ({} throttles): the trace would have holes, so it is not kept",
            dec.lost, dec.throttled
        )));
    }
    let trailer = Trailer {
        events: t.out.events(),
        wall_ns,
        status: status.unwrap_or(0),
        cpu_ns: rusage_ns(&ru),
        recorder_cpu_ns: cpu_ns(libc::RUSAGE_SELF) - self_cpu,
        still_running: t.procs.len() as u64,
    };
    let file = t.out.finish(&trailer).map_err(io_err)?;
    let bytes = file.metadata().map(|m| m.len()).unwrap_or(0);
    Ok(Recorded { trailer, bytes })
}
