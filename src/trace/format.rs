//! The trace file: what `foliolab record` writes and `foliolab replay` reads.
//!
//! ```text
//!   | "FOLIOTRC" | version u32 le | header length u32 le | header (JSON) |
//!   | zlib stream of records ... | End record |
//! ```
//! zlib's Adler-32 at the end of the stream catches a corrupt body that still inflates.
//! Records are a tag byte and LEB128 varints. A fault, nearly every record of a real
//! program, is one tag byte (write bit, same-process bit) and the zigzag delta of its
//! page number from the previous fault's: one to three bytes before compression. The
//! stream is read and written front to back, so neither side holds the trace in memory.

use std::io::{self, BufRead, BufWriter, Read, Write};

pub const MAGIC: &[u8; 8] = b"FOLIOTRC";
/// Bumped on any change a reader of the old version would misread.
pub const VERSION: u32 = 1;

/// Mapping protection (PROT_READ, PROT_WRITE, PROT_EXEC).
pub const PROT_READ: u8 = 1;
pub const PROT_WRITE: u8 = 2;
pub const PROT_EXEC: u8 = 4;

/// What backs a mapping, as far as the model is concerned.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum MapKind {
    /// Private anonymous memory (including the brk heap): what the model runs.
    Anon,
    /// The main thread's stack (private anonymous, grows down).
    Stack,
    /// A file, private or shared: out of the model's scope, counted.
    File,
    /// Shared anonymous memory (shmem), System V shm, /dev/zero shared: out of scope.
    Shared,
    /// [vdso], [vvar] and the like.
    Special,
}

impl MapKind {
    fn code(self) -> u64 {
        self as u64
    }
    fn from_code(c: u64) -> Option<MapKind> {
        Some(match c {
            0 => MapKind::Anon,
            1 => MapKind::Stack,
            2 => MapKind::File,
            3 => MapKind::Shared,
            4 => MapKind::Special,
            _ => return None,
        })
    }
    /// Whether the model maps it (private anonymous).
    pub fn is_anon(self) -> bool {
        matches!(self, MapKind::Anon | MapKind::Stack)
    }
    pub fn name(self) -> &'static str {
        match self {
            MapKind::Anon => "anon",
            MapKind::Stack => "stack",
            MapKind::File => "file",
            MapKind::Shared => "shared",
            MapKind::Special => "special",
        }
    }
}

/// Where a new mapping came from.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum MapCause {
    /// mmap(2), or the kernel mapping an executable at exec: replaces what was there.
    Mmap,
    /// brk(2) growing the heap: extends it, keeping its pages.
    Brk,
}

/// One recorded event. `proc` numbers processes in the order they appeared.
#[derive(Clone, Debug, PartialEq, Eq)]
pub enum Event {
    /// A page fault on a user address: taken in user mode (page_fault_user), or by
    /// the kernel touching user memory for the process, e.g. read(2) into a fresh
    /// buffer (page_fault_kernel, `kernel`).
    Fault {
        proc: u32,
        addr: u64,
        write: bool,
        kernel: bool,
    },
    /// `nohuge`: mmap(MAP_STACK), which the kernel maps VM_NOHUGEPAGE (6.7+).
    Map {
        proc: u32,
        start: u64,
        len: u64,
        prot: u8,
        kind: MapKind,
        cause: MapCause,
        nohuge: bool,
    },
    Munmap {
        proc: u32,
        start: u64,
        len: u64,
    },
    Mprotect {
        proc: u32,
        start: u64,
        len: u64,
        prot: u8,
    },
    /// madvise(2) with the advice number of the host's ABI.
    Madvise {
        proc: u32,
        start: u64,
        len: u64,
        advice: u32,
    },
    /// mremap(2) that succeeded, with the address it returned.
    Mremap {
        proc: u32,
        old: u64,
        old_len: u64,
        new: u64,
        new_len: u64,
    },
    /// brk(2) returned `brk`.
    Brk {
        proc: u32,
        brk: u64,
    },
    /// A new process; `share_mm` for CLONE_VM (vfork, posix_spawn) until it execs.
    Fork {
        parent: u32,
        child: u32,
        share_mm: bool,
    },
    /// The process (new to the trace, or not) executed a program: a fresh mm.
    Exec {
        proc: u32,
        comm: String,
    },
    /// The process's last thread exited.
    Exit {
        proc: u32,
    },
}

impl Event {
    /// The records' names in reports (`trace.events.<kind>`), by `kind_index`.
    pub const KINDS: [&'static str; 11] = [
        "fault", "brk-map", "mmap", "munmap", "mprotect", "madvise", "mremap", "brk", "fork", "exec", "exit",
    ];

    /// A fault's `kind_index`.
    pub const FAULT_KIND: usize = 0;

    pub fn kind_index(&self) -> usize {
        match self {
            Event::Fault { .. } => Self::FAULT_KIND,
            Event::Map {
                cause: MapCause::Brk, ..
            } => 1,
            Event::Map { .. } => 2,
            Event::Munmap { .. } => 3,
            Event::Mprotect { .. } => 4,
            Event::Madvise { .. } => 5,
            Event::Mremap { .. } => 6,
            Event::Brk { .. } => 7,
            Event::Fork { .. } => 8,
            Event::Exec { .. } => 9,
            Event::Exit { .. } => 10,
        }
    }

    /// The process acting: the one faulting, mapping, exiting; a fork's parent.
    pub fn proc(&self) -> u32 {
        match *self {
            Event::Fault { proc, .. }
            | Event::Map { proc, .. }
            | Event::Munmap { proc, .. }
            | Event::Mprotect { proc, .. }
            | Event::Madvise { proc, .. }
            | Event::Mremap { proc, .. }
            | Event::Brk { proc, .. }
            | Event::Exec { proc, .. }
            | Event::Exit { proc } => proc,
            Event::Fork { parent, .. } => parent,
        }
    }

    /// The record's name in reports.
    pub fn kind(&self) -> &'static str {
        Self::KINDS[self.kind_index()]
    }
}

/// One line of `replay --print`: the process, the operation, hex addresses.
impl std::fmt::Display for Event {
    fn fmt(&self, f: &mut std::fmt::Formatter) -> std::fmt::Result {
        let prot = |p: u8| {
            let b = |bit, c| if p & bit != 0 { c } else { '-' };
            format!("{}{}{}", b(PROT_READ, 'r'), b(PROT_WRITE, 'w'), b(PROT_EXEC, 'x'))
        };
        match self {
            Event::Fault {
                proc,
                addr,
                write,
                kernel,
            } => write!(
                f,
                "p{proc} fault {addr:#x} {}{}",
                if *write { "write" } else { "read" },
                if *kernel { " kernel" } else { "" }
            ),
            Event::Map {
                proc,
                start,
                len,
                prot: p,
                kind,
                nohuge,
                ..
            } => write!(
                f,
                "p{proc} {} {start:#x}+{len:#x} {} {}{}",
                self.kind(),
                prot(*p),
                kind.name(),
                if *nohuge { " nohugepage" } else { "" }
            ),
            Event::Munmap { proc, start, len } => write!(f, "p{proc} munmap {start:#x}+{len:#x}"),
            Event::Mprotect {
                proc,
                start,
                len,
                prot: p,
            } => write!(f, "p{proc} mprotect {start:#x}+{len:#x} {}", prot(*p)),
            Event::Madvise {
                proc,
                start,
                len,
                advice,
            } => write!(f, "p{proc} madvise {start:#x}+{len:#x} advice={advice}"),
            Event::Mremap {
                proc,
                old,
                old_len,
                new,
                new_len,
            } => write!(f, "p{proc} mremap {old:#x}+{old_len:#x} -> {new:#x}+{new_len:#x}"),
            Event::Brk { proc, brk } => write!(f, "p{proc} brk {brk:#x}"),
            Event::Fork {
                parent,
                child,
                share_mm,
            } => write!(f, "p{parent} fork p{child}{}", if *share_mm { " share-mm" } else { "" }),
            Event::Exec { proc, comm } => write!(f, "p{proc} exec {comm}"),
            Event::Exit { proc } => write!(f, "p{proc} exit"),
        }
    }
}

const T_MAP: u8 = 1;
const T_MUNMAP: u8 = 2;
const T_MPROTECT: u8 = 3;
const T_MADVISE: u8 = 4;
const T_MREMAP: u8 = 5;
const T_BRK: u8 = 6;
const T_FORK: u8 = 7;
const T_EXEC: u8 = 8;
const T_EXIT: u8 = 9;
const T_END: u8 = 10;
/// Fault tags: bit 7 set, bit 6 write, bit 5 same process as the previous fault,
/// bit 4 taken in kernel mode.
const T_FAULT: u8 = 0x80;
const F_WRITE: u8 = 0x40;
const F_SAME: u8 = 0x20;
const F_KERNEL: u8 = 0x10;

/// Written once, before the records.
#[derive(Clone, Debug, PartialEq, serde::Serialize, serde::Deserialize)]
pub struct Header {
    /// The program and its arguments.
    pub command: Vec<String>,
    /// The host's `uname -r` and machine.
    pub host_kernel: String,
    pub arch: String,
    pub page_size: u64,
    /// The host's THP knobs while recording: `enabled` and each `hugepages-*/enabled`.
    pub thp: Vec<(String, String)>,
    /// Whether address-space randomization was off for the program.
    pub no_aslr: bool,
}

impl Header {
    /// What the recorder can have written: it records x86_64 hosts (their syscall
    /// numbers and fault error codes), with 4K pages. Anything else is another
    /// program's file or a corrupt one, and would replay as something it is not.
    fn check(&self) -> Result<(), String> {
        if self.arch != "x86_64" {
            return Err(format!(
                "recorded on arch {:?}; traces are recorded on x86_64 only",
                self.arch
            ));
        }
        if self.page_size != 4096 {
            return Err(format!(
                "page size {}; traces are recorded with 4096-byte pages",
                self.page_size
            ));
        }
        Ok(())
    }
}

/// Written last: a trace without it was cut short.
#[derive(Clone, Debug, Default, PartialEq, Eq, serde::Serialize, serde::Deserialize)]
pub struct Trailer {
    pub events: u64,
    pub wall_ns: u64,
    /// The program's exit status (128 + signal if killed).
    pub status: i32,
    /// CPU time (user + system) of the program and the children it waited for, and
    /// of the recorder itself.
    #[serde(default)]
    pub cpu_ns: u64,
    #[serde(default)]
    pub recorder_cpu_ns: u64,
    /// Processes of the program still running when it exited (its children not
    /// waited for): what they did after is not in the trace.
    #[serde(default)]
    pub still_running: u64,
}

fn put(out: &mut Vec<u8>, mut v: u64) {
    while v >= 0x80 {
        out.push(v as u8 | 0x80);
        v >>= 7;
    }
    out.push(v as u8);
}

/// A varint's value from its bytes as `next` gives them; None past 64 bits (ten bytes).
#[inline(always)]
fn leb128<E>(mut next: impl FnMut() -> Result<u8, E>) -> Result<Option<u64>, E> {
    let mut v = 0u64;
    for shift in (0..64).step_by(7) {
        let b = next()?;
        v |= ((b & 0x7f) as u64) << shift;
        if b & 0x80 == 0 {
            return Ok(Some(v));
        }
    }
    Ok(None)
}

/// The varint at `buf[at..]` and where it ends, if it ends inside `buf` within 64 bits.
#[inline(never)]
fn leb128_in(buf: &[u8], mut at: usize) -> Option<(u64, usize)> {
    let v = leb128(|| {
        let b = buf.get(at).ok_or(())?;
        at += 1;
        Ok::<u8, ()>(*b)
    });
    v.ok().flatten().map(|v| (v, at))
}

fn zigzag(d: i64) -> u64 {
    ((d << 1) ^ (d >> 63)) as u64
}

fn unzigzag(v: u64) -> i64 {
    (v >> 1) as i64 ^ -((v & 1) as i64)
}

/// Streams records into a file through zlib.
pub struct Writer<W: Write> {
    out: flate2::write::ZlibEncoder<BufWriter<W>>,
    buf: Vec<u8>,
    last_proc: u32,
    last_page: u64,
    events: u64,
}

impl<W: Write> Writer<W> {
    pub fn new(mut w: W, h: &Header) -> io::Result<Writer<W>> {
        let json = serde_json::to_vec(h).map_err(io::Error::other)?;
        w.write_all(MAGIC)?;
        w.write_all(&VERSION.to_le_bytes())?;
        w.write_all(&(json.len() as u32).to_le_bytes())?;
        w.write_all(&json)?;
        Ok(Writer {
            // Level 1: recording must keep up with the program; level 6 saves ~10% more.
            out: flate2::write::ZlibEncoder::new(BufWriter::with_capacity(1 << 20, w), flate2::Compression::new(1)),
            buf: Vec::with_capacity(64 << 10),
            last_proc: u32::MAX,
            last_page: 0,
            events: 0,
        })
    }

    pub fn events(&self) -> u64 {
        self.events
    }

    pub fn write(&mut self, e: &Event) -> io::Result<()> {
        let b = &mut self.buf;
        match e {
            Event::Fault {
                proc,
                addr,
                write,
                kernel,
            } => {
                let page = addr >> 12;
                let mut tag = T_FAULT | if *write { F_WRITE } else { 0 } | if *kernel { F_KERNEL } else { 0 };
                if *proc == self.last_proc {
                    b.push(tag | F_SAME);
                } else {
                    tag &= !F_SAME;
                    b.push(tag);
                    put(b, *proc as u64);
                    self.last_proc = *proc;
                }
                put(b, zigzag(page.wrapping_sub(self.last_page) as i64));
                self.last_page = page;
            }
            Event::Map {
                proc,
                start,
                len,
                prot,
                kind,
                cause,
                nohuge,
            } => {
                b.push(T_MAP);
                let bits = (*cause == MapCause::Brk) as u64 | (*nohuge as u64) << 1;
                for v in [*proc as u64, *start, *len, *prot as u64, kind.code(), bits] {
                    put(b, v);
                }
            }
            Event::Munmap { proc, start, len } => {
                b.push(T_MUNMAP);
                for v in [*proc as u64, *start, *len] {
                    put(b, v);
                }
            }
            Event::Mprotect { proc, start, len, prot } => {
                b.push(T_MPROTECT);
                for v in [*proc as u64, *start, *len, *prot as u64] {
                    put(b, v);
                }
            }
            Event::Madvise {
                proc,
                start,
                len,
                advice,
            } => {
                b.push(T_MADVISE);
                for v in [*proc as u64, *start, *len, *advice as u64] {
                    put(b, v);
                }
            }
            Event::Mremap {
                proc,
                old,
                old_len,
                new,
                new_len,
            } => {
                b.push(T_MREMAP);
                for v in [*proc as u64, *old, *old_len, *new, *new_len] {
                    put(b, v);
                }
            }
            Event::Brk { proc, brk } => {
                b.push(T_BRK);
                put(b, *proc as u64);
                put(b, *brk);
            }
            Event::Fork {
                parent,
                child,
                share_mm,
            } => {
                b.push(T_FORK);
                for v in [*parent as u64, *child as u64, *share_mm as u64] {
                    put(b, v);
                }
            }
            Event::Exec { proc, comm } => {
                b.push(T_EXEC);
                put(b, *proc as u64);
                put(b, comm.len() as u64);
                b.extend_from_slice(comm.as_bytes());
            }
            Event::Exit { proc } => {
                b.push(T_EXIT);
                put(b, *proc as u64);
            }
        }
        self.events += 1;
        if self.buf.len() >= 60 << 10 {
            self.out.write_all(&self.buf)?;
            self.buf.clear();
        }
        Ok(())
    }

    /// Writes the trailer and flushes everything to the file.
    pub fn finish(mut self, t: &Trailer) -> io::Result<W> {
        let json = serde_json::to_vec(t).map_err(io::Error::other)?;
        self.buf.push(T_END);
        put(&mut self.buf, json.len() as u64);
        self.buf.extend_from_slice(&json);
        self.out.write_all(&self.buf)?;
        let inner = self.out.finish()?;
        inner.into_inner().map_err(|e| e.into_error())
    }
}

/// A fault record's fields (`Event::Fault`'s), as `Reader::next_fault` returns them.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct Fault {
    pub proc: u32,
    pub addr: u64,
    pub write: bool,
    pub kernel: bool,
}

impl From<Fault> for Event {
    fn from(f: Fault) -> Event {
        Event::Fault {
            proc: f.proc,
            addr: f.addr,
            write: f.write,
            kernel: f.kernel,
        }
    }
}

/// Why a trace could not be read.
#[derive(Debug, thiserror::Error)]
pub enum TraceError {
    #[error("{path}: {msg}")]
    Bad { path: String, msg: String },
    #[error("{path}: {source}")]
    Io { path: String, source: io::Error },
}

/// Reads records back, front to back. After the end record it reads the compressed
/// stream to its end, so that zlib checks its Adler-32, and refuses anything after it:
/// a trace is whole only if it ends exactly where its writer finished it.
pub struct Reader<R: Read> {
    path: String,
    inp: flate2::bufread::ZlibDecoder<io::BufReader<R>>,
    /// Decompressed bytes not yet decoded: buf[pos..len].
    buf: Box<[u8]>,
    pos: usize,
    len: usize,
    last_proc: u32,
    last_page: u64,
    pub header: Header,
    trailer: Option<Trailer>,
    /// Records read so far, for error positions.
    at: u64,
}

impl<R: Read> Reader<R> {
    pub fn new(path: &str, mut r: R) -> Result<Reader<R>, TraceError> {
        let bad = |msg: String| TraceError::Bad {
            path: path.to_string(),
            msg,
        };
        let mut head = [0u8; 16];
        r.read_exact(&mut head)
            .map_err(|_| bad("too short to be a foliolab trace".into()))?;
        if &head[..8] != MAGIC {
            return Err(bad("not a foliolab trace (no FOLIOTRC magic)".into()));
        }
        let version = u32::from_le_bytes(head[8..12].try_into().unwrap());
        if version != VERSION {
            return Err(bad(format!(
                "trace format version {version}; this foliolab reads version {VERSION}"
            )));
        }
        let len = u32::from_le_bytes(head[12..16].try_into().unwrap()) as usize;
        if len > 1 << 20 {
            return Err(bad(format!("header of {len} bytes (corrupt)")));
        }
        let mut json = vec![0; len];
        r.read_exact(&mut json).map_err(|_| bad("header cut short".into()))?;
        let header: Header = serde_json::from_slice(&json).map_err(|e| bad(format!("header: {e}")))?;
        header.check().map_err(|e| bad(format!("header: {e}")))?;
        Ok(Reader {
            path: path.to_string(),
            inp: flate2::bufread::ZlibDecoder::new(io::BufReader::new(r)),
            buf: vec![0; 1 << 18].into_boxed_slice(),
            pos: 0,
            len: 0,
            last_proc: u32::MAX,
            last_page: 0,
            header,
            trailer: None,
            at: 0,
        })
    }

    /// The trailer, once `next` has returned None.
    pub fn trailer(&self) -> Option<&Trailer> {
        self.trailer.as_ref()
    }

    fn bad(&self, msg: &str) -> TraceError {
        TraceError::Bad {
            path: self.path.clone(),
            msg: format!("record {}: {msg}", self.at),
        }
    }

    #[inline]
    fn byte(&mut self) -> Result<u8, TraceError> {
        if self.pos == self.len {
            self.refill()?;
        }
        let b = self.buf[self.pos];
        self.pos += 1;
        Ok(b)
    }

    #[cold]
    fn refill(&mut self) -> Result<(), TraceError> {
        let n = loop {
            match self.inp.read(&mut self.buf) {
                Err(e) if e.kind() == io::ErrorKind::Interrupted => continue,
                r => break r,
            }
        }
        .map_err(|e| self.stream_error(e))?;
        if n == 0 {
            return Err(self.bad("cut short (no end record): the recording did not finish"));
        }
        (self.pos, self.len) = (0, n);
        Ok(())
    }

    /// A varint; one of a single byte (a fault's page delta, mostly) read inline.
    #[inline(always)]
    fn var(&mut self) -> Result<u64, TraceError> {
        match self.buf[..self.len].get(self.pos) {
            Some(&b) if b & 0x80 == 0 => {
                self.pos += 1;
                Ok(u64::from(b))
            }
            _ => self.var_long(),
        }
    }

    #[inline(never)]
    fn var_long(&mut self) -> Result<u64, TraceError> {
        leb128(|| self.byte())?.ok_or_else(|| self.bad("varint longer than 64 bits"))
    }

    /// A protection: PROT_READ, PROT_WRITE, PROT_EXEC and the arch's bits above them,
    /// as the recorder kept them (the low byte of the syscall's argument).
    fn prot(&mut self) -> Result<u8, TraceError> {
        let v = self.var()?;
        u8::try_from(v).map_err(|_| self.bad(&format!("protection {v:#x} out of range")))
    }

    fn var32(&mut self) -> Result<u32, TraceError> {
        let v = self.var()?;
        u32::try_from(v).map_err(|_| self.bad(&format!("{v} out of range")))
    }

    /// The next record if it is a fault and its tag is already decompressed, read as
    /// `next_event` reads it (the same checks, the same record count); None leaves the
    /// reader where it was, for `next_event`. Most records are faults: this path builds
    /// no `Event` for them.
    #[inline(always)]
    pub fn next_fault(&mut self) -> Result<Option<Fault>, TraceError> {
        match self.buf[..self.len].get(self.pos) {
            Some(&tag) if tag & T_FAULT != 0 && self.trailer.is_none() => {
                self.at += 1;
                self.pos += 1;
                self.fault(tag).map(Some)
            }
            _ => Ok(None),
        }
    }

    /// Reads the fault records of the last fault's process (tags with F_SAME) that are
    /// decompressed already, at most `max`, as `next_event` reads them (the same checks,
    /// the same record count), handing each to `each` as (address, write, kernel): a
    /// run of them, most of a trace, decoded in one loop with the reader's state in
    /// registers. Stops before any other record, or one that runs past the decompressed
    /// bytes, leaving it to `next_fault` or `next_event`; and after a record `each`
    /// fails on. Returns the records read (with the one `each` failed on) and `each`'s
    /// error.
    #[inline(always)]
    pub fn same_process_faults<E>(
        &mut self,
        max: u64,
        mut each: impl FnMut(u64, bool, bool) -> Result<(), E>,
    ) -> (u64, Result<(), E>) {
        if self.same_process_next().is_none() {
            return (0, Ok(()));
        }
        let buf = &self.buf[..self.len];
        let (mut pos, mut page, mut n) = (self.pos, self.last_page, 0u64);
        let mut done = Ok(());
        while n < max {
            let Some(&tag) = buf.get(pos) else { break };
            if tag & (T_FAULT | F_SAME) != T_FAULT | F_SAME {
                break;
            }
            // The page delta: one byte, mostly.
            let (delta, end) = match buf.get(pos + 1) {
                Some(&b) if b & 0x80 == 0 => (u64::from(b), pos + 2),
                _ => match leb128_in(buf, pos + 1) {
                    Some(v) => v,
                    None => break,
                },
            };
            page = page.wrapping_add(unzigzag(delta) as u64);
            pos = end;
            n += 1;
            if let Err(e) = each(page << 12, tag & F_WRITE != 0, tag & F_KERNEL != 0) {
                done = Err(e);
                break;
            }
        }
        (self.pos, self.last_page) = (pos, page);
        self.at += n;
        (n, done)
    }

    /// The process of the next record if it is a fault by the last fault's process,
    /// decompressed already: one `same_process_faults` reads, if its page delta is too.
    /// (Before any fault, F_SAME is the error `fault` reports; after the end record,
    /// nothing is read.)
    #[inline]
    pub fn same_process_next(&self) -> Option<u32> {
        match self.buf[..self.len].get(self.pos) {
            Some(&tag)
                if tag & (T_FAULT | F_SAME) == T_FAULT | F_SAME
                    && self.last_proc != u32::MAX
                    && self.trailer.is_none() =>
            {
                Some(self.last_proc)
            }
            _ => None,
        }
    }

    /// A fault record's body, after its tag.
    #[inline(always)]
    fn fault(&mut self, tag: u8) -> Result<Fault, TraceError> {
        let proc = if tag & F_SAME != 0 {
            self.last_proc
        } else {
            let p = self.var32()?;
            self.last_proc = p;
            p
        };
        if proc == u32::MAX {
            return Err(self.bad("fault of the previous process before any fault"));
        }
        let page = self.last_page.wrapping_add(unzigzag(self.var()?) as u64);
        self.last_page = page;
        Ok(Fault {
            proc,
            addr: page << 12,
            write: tag & F_WRITE != 0,
            kernel: tag & F_KERNEL != 0,
        })
    }

    /// The next record, or None after the end record.
    pub fn next_event(&mut self) -> Result<Option<Event>, TraceError> {
        if self.trailer.is_some() {
            return Ok(None);
        }
        self.at += 1;
        let tag = self.byte()?;
        if tag & T_FAULT != 0 {
            return Ok(Some(self.fault(tag)?.into()));
        }
        let e = match tag {
            T_MAP => {
                let (proc, start, len, prot) = (self.var32()?, self.var()?, self.var()?, self.prot()?);
                let kind = MapKind::from_code(self.var()?).ok_or_else(|| self.bad("unknown mapping kind"))?;
                let bits = self.var()?;
                if bits > 3 {
                    return Err(self.bad(&format!("mapping flags {bits:#x} (corrupt)")));
                }
                Event::Map {
                    proc,
                    start,
                    len,
                    prot,
                    kind,
                    cause: if bits & 1 != 0 { MapCause::Brk } else { MapCause::Mmap },
                    nohuge: bits & 2 != 0,
                }
            }
            T_MUNMAP => Event::Munmap {
                proc: self.var32()?,
                start: self.var()?,
                len: self.var()?,
            },
            T_MPROTECT => Event::Mprotect {
                proc: self.var32()?,
                start: self.var()?,
                len: self.var()?,
                prot: self.prot()?,
            },
            T_MADVISE => Event::Madvise {
                proc: self.var32()?,
                start: self.var()?,
                len: self.var()?,
                advice: self.var32()?,
            },
            T_MREMAP => Event::Mremap {
                proc: self.var32()?,
                old: self.var()?,
                old_len: self.var()?,
                new: self.var()?,
                new_len: self.var()?,
            },
            T_BRK => Event::Brk {
                proc: self.var32()?,
                brk: self.var()?,
            },
            T_FORK => Event::Fork {
                parent: self.var32()?,
                child: self.var32()?,
                share_mm: match self.var()? {
                    0 => false,
                    1 => true,
                    v => return Err(self.bad(&format!("fork flag {v} (corrupt)"))),
                },
            },
            T_EXEC => {
                let proc = self.var32()?;
                let comm = self.text()?;
                Event::Exec { proc, comm }
            }
            T_EXIT => Event::Exit { proc: self.var32()? },
            T_END => {
                let json = self.bytes()?;
                let t: Trailer = serde_json::from_slice(&json).map_err(|e| self.bad(&format!("end record: {e}")))?;
                self.finish(&t)?;
                self.trailer = Some(t);
                return Ok(None);
            }
            _ => return Err(self.bad(&format!("unknown record tag {tag:#x}"))),
        };
        Ok(Some(e))
    }

    /// After the end record: nothing more in the records, the compressed stream ends
    /// (its checksum checked), nothing after it in the file, and the record count the
    /// writer kept is the one read.
    fn finish(&mut self, t: &Trailer) -> Result<(), TraceError> {
        if self.pos < self.len {
            return Err(self.bad(&format!(
                "{} bytes of records after the end record",
                self.len - self.pos
            )));
        }
        loop {
            match self.inp.read(&mut self.buf) {
                Ok(0) => break,
                Ok(n) => return Err(self.bad(&format!("{n} bytes of records after the end record"))),
                Err(e) if e.kind() == io::ErrorKind::Interrupted => continue,
                Err(e) => return Err(self.stream_error(e)),
            }
        }
        let rest = match self.inp.get_mut().fill_buf() {
            Ok(rest) => rest.len(),
            Err(e) => return Err(self.stream_error(e)),
        };
        if rest > 0 {
            return Err(self.bad("bytes after the end of the compressed stream"));
        }
        let read = self.at - 1;
        if t.events != read {
            return Err(self.bad(&format!(
                "the end record counts {} records, but {read} were read",
                t.events
            )));
        }
        Ok(())
    }

    fn stream_error(&self, e: io::Error) -> TraceError {
        match e.kind() {
            io::ErrorKind::InvalidInput | io::ErrorKind::InvalidData | io::ErrorKind::UnexpectedEof => {
                self.bad(&format!("the compressed stream is cut short or corrupt ({e})"))
            }
            _ => TraceError::Io {
                path: self.path.clone(),
                source: e,
            },
        }
    }

    fn bytes(&mut self) -> Result<Vec<u8>, TraceError> {
        let n = self.var()?;
        if n > 1 << 16 {
            return Err(self.bad(&format!("string of {n} bytes (corrupt)")));
        }
        (0..n).map(|_| self.byte()).collect()
    }

    fn text(&mut self) -> Result<String, TraceError> {
        let b = self.bytes()?;
        String::from_utf8(b).map_err(|_| self.bad("text is not UTF-8"))
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn header() -> Header {
        Header {
            command: vec!["cc".into(), "-c".into(), "x.c".into()],
            host_kernel: "6.18.0".into(),
            arch: "x86_64".into(),
            page_size: 4096,
            thp: vec![("enabled".into(), "never".into())],
            no_aslr: true,
        }
    }

    fn sample() -> Vec<Event> {
        vec![
            Event::Exec {
                proc: 0,
                comm: "cc".into(),
            },
            Event::Map {
                proc: 0,
                start: 0x7fff_f000_0000,
                len: 0x21000,
                prot: PROT_READ | PROT_WRITE,
                kind: MapKind::Stack,
                cause: MapCause::Mmap,
                nohuge: true,
            },
            Event::Fault {
                proc: 0,
                addr: 0x7fff_f002_0000,
                write: true,
                kernel: false,
            },
            Event::Fault {
                proc: 0,
                addr: 0x5555_5555_9000,
                write: false,
                kernel: false,
            },
            Event::Fork {
                parent: 0,
                child: 1,
                share_mm: true,
            },
            Event::Fault {
                proc: 1,
                addr: 0x5555_5555_a000,
                write: true,
                kernel: false,
            },
            Event::Brk {
                proc: 0,
                brk: 0x5555_5557_a000,
            },
            Event::Mremap {
                proc: 1,
                old: 0x1000_0000,
                old_len: 0x20000,
                new: 0x2000_0000,
                new_len: 0x40000,
            },
            Event::Madvise {
                proc: 1,
                start: 0x2000_0000,
                len: 0x4000,
                advice: 4,
            },
            Event::Mprotect {
                proc: 0,
                start: 0x1000,
                len: 0x1000,
                prot: 0,
            },
            Event::Munmap {
                proc: 0,
                start: 0x1000,
                len: 0x1000,
            },
            Event::Exit { proc: 1 },
        ]
    }

    fn encode(events: &[Event]) -> Vec<u8> {
        let mut w = Writer::new(Vec::new(), &header()).unwrap();
        for e in events {
            w.write(e).unwrap();
        }
        w.finish(&Trailer {
            events: events.len() as u64,
            wall_ns: 5,
            status: 0,
            cpu_ns: 4,
            recorder_cpu_ns: 1,
            still_running: 0,
        })
        .unwrap()
    }

    #[test]
    fn every_record_kind_reads_back_as_written() {
        let bytes = encode(&sample());
        let mut r = Reader::new("t", &bytes[..]).unwrap();
        assert_eq!(r.header, header());
        let mut back = Vec::new();
        while let Some(e) = r.next_event().unwrap() {
            back.push(e);
        }
        assert_eq!(back, sample());
        assert_eq!(r.trailer().unwrap().events, sample().len() as u64);
    }

    #[test]
    fn a_trace_cut_short_is_an_error_naming_the_record() {
        let bytes = encode(&sample());
        // Rewrite the compressed body without its end record.
        let mut w = Writer::new(Vec::new(), &header()).unwrap();
        for e in sample() {
            w.write(&e).unwrap();
        }
        w.out.write_all(&w.buf).unwrap();
        let cut = w.out.finish().unwrap().into_inner().unwrap();
        assert!(cut.len() < bytes.len());
        let mut r = Reader::new("t", &cut[..]).unwrap();
        let err = loop {
            match r.next_event() {
                Ok(Some(_)) => continue,
                Ok(None) => panic!("read an end record that was never written"),
                Err(e) => break e.to_string(),
            }
        };
        assert!(err.contains("record 13: cut short"), "{err}");
    }

    #[test]
    fn another_version_or_file_is_refused() {
        let mut bytes = encode(&sample());
        bytes[8] = 9;
        let err = Reader::new("t", &bytes[..]).err().unwrap().to_string();
        assert!(err.contains("version 9"), "{err}");
        let err = Reader::new("t", &b"#!/bin/sh\necho hello\n"[..])
            .err()
            .unwrap()
            .to_string();
        assert!(err.contains("not a foliolab trace"), "{err}");
    }

    #[test]
    fn a_sequential_fault_costs_two_bytes_before_compression() {
        let mut w = Writer::new(Vec::new(), &header()).unwrap();
        for i in 0..1000u64 {
            w.write(&Event::Fault {
                proc: 3,
                addr: 0x5555_0000_0000 + i * 4096,
                write: true,
                kernel: false,
            })
            .unwrap();
        }
        // The first carries its process and a 6-byte delta; the rest a tag and 1 byte.
        assert_eq!(w.buf.len(), 2 + 6 + 999 * 2);
    }

    fn read_all(bytes: &[u8]) -> Result<Vec<Event>, String> {
        let mut r = Reader::new("t", bytes).map_err(|e| e.to_string())?;
        let mut v = Vec::new();
        while let Some(e) = r.next_event().map_err(|e| e.to_string())? {
            v.push(e);
        }
        Ok(v)
    }

    /// Every record read as replay reads them: runs of faults through
    /// `same_process_faults` (at most `max` a call), then `next_fault` where it answers
    /// and `next_event` otherwise; and how many records the runs read. The records
    /// must be the ones `next_event` reads one at a time, with the same error at the
    /// same record.
    fn read_all_as_replay(bytes: &[u8], max: u64) -> (Result<Vec<Event>, String>, u64) {
        let mut in_runs = 0;
        let mut read = || {
            let mut r = Reader::new("t", bytes).map_err(|e| e.to_string())?;
            let mut v = Vec::new();
            loop {
                if let Some(proc) = r.same_process_next() {
                    let (n, done) = r.same_process_faults(max, |addr, write, kernel| {
                        v.push(Event::Fault {
                            proc,
                            addr,
                            write,
                            kernel,
                        });
                        Ok::<(), String>(())
                    });
                    done?;
                    in_runs += n;
                    if n > 0 {
                        continue;
                    }
                }
                if let Some(f) = r.next_fault().map_err(|e| e.to_string())? {
                    v.push(f.into());
                    continue;
                }
                match r.next_event().map_err(|e| e.to_string())? {
                    Some(e) => v.push(e),
                    None => return Ok(v),
                }
            }
        };
        let v = read();
        (v, in_runs)
    }

    #[test]
    fn faults_read_in_runs_are_the_records_next_event_reads() {
        // Enough faults (two bytes each) to cross the 256 KiB buffer's refills, where
        // a run stops and `next_fault` or `next_event` reads the record; processes
        // switching and pages jumping both ways (deltas of one byte and of several),
        // then the sample's other records.
        let mut events = Vec::new();
        for i in 0..300_000u64 {
            events.push(Event::Fault {
                proc: (i / 1000 % 3) as u32,
                addr: 0x5555_0000_0000 + (i % 7919) * 4096 * if i % 2 == 0 { 1 } else { 3 },
                write: i % 3 == 0,
                kernel: i % 5 == 0,
            });
        }
        events.extend(sample());
        let bytes = encode(&events);
        for max in [u64::MAX, 1 << 16, 7] {
            let (fast, in_runs) = read_all_as_replay(&bytes, max);
            assert_eq!(fast, read_all(&bytes));
            assert_eq!(fast.unwrap(), events);
            // All but the first fault of each process's run, and those cut by the
            // buffer's ends.
            assert!(in_runs > 299_000, "{in_runs}");
        }
        // A corrupt fault record fails the same, at the same record.
        let mut w = Writer::new(Vec::new(), &header()).unwrap();
        w.buf.extend_from_slice(&[T_FAULT | F_SAME, 2]);
        w.out.write_all(&w.buf).unwrap();
        let bad = w.out.finish().unwrap().into_inner().unwrap();
        let err = read_all_as_replay(&bad, u64::MAX).0.unwrap_err();
        assert!(
            err.contains("record 1: fault of the previous process before any fault"),
            "{err}"
        );
        assert_eq!(err, read_all(&bad).unwrap_err());
    }

    #[test]
    fn a_run_stops_after_the_fault_its_caller_fails_on() {
        let events: Vec<Event> = (0..10u64)
            .map(|i| Event::Fault {
                proc: 1,
                addr: i << 12,
                write: true,
                kernel: false,
            })
            .collect();
        let bytes = encode(&events);
        let mut r = Reader::new("t", &bytes[..]).unwrap();
        assert_eq!(r.next_event().unwrap(), Some(events[0].clone()));
        let mut seen = Vec::new();
        let (n, done) = r.same_process_faults(u64::MAX, |addr, _, _| {
            seen.push(addr);
            if seen.len() == 3 {
                return Err("third");
            }
            Ok(())
        });
        assert_eq!((n, done), (3, Err("third")));
        assert_eq!(seen, [1 << 12, 2 << 12, 3 << 12]);
        // The next record is the fifth, counted as such.
        assert_eq!(r.next_event().unwrap(), Some(events[4].clone()));
        assert_eq!(r.at, 5);
    }

    /// Raw record bytes, mostly fault records (any tag bits, processes, one-byte and
    /// long page deltas, varints running past 64 bits), some other records and stray
    /// bytes, and an end record counting what was written or not.
    fn raw_records() -> impl proptest::strategy::Strategy<Value = Vec<u8>> {
        use proptest::prelude::*;
        let varint = prop_oneof![
            4 => (0u64..128).prop_map(|v| vec![v as u8]),
            2 => any::<u64>().prop_map(|v| {
                let mut b = Vec::new();
                put(&mut b, v);
                b
            }),
            1 => Just(vec![0xff; 10]),
            1 => Just(vec![0x80, 0x80]),
        ];
        let record = prop_oneof![
            8 => (0x80u8..=0xff, varint.clone(), varint.clone()).prop_map(|(tag, p, d)| {
                let mut b = vec![tag];
                if tag & F_SAME == 0 {
                    b.extend(p);
                }
                b.extend(d);
                b
            }),
            1 => (0u32..4).prop_map(|p| {
                let mut b = vec![T_EXIT];
                put(&mut b, p.into());
                b
            }),
            1 => prop::collection::vec(any::<u8>(), 1..4),
        ];
        (prop::collection::vec(record, 0..64), any::<bool>()).prop_map(|(records, count_right)| {
            let mut body: Vec<u8> = records.concat();
            let t = serde_json::to_vec(&Trailer {
                events: if count_right { records.len() as u64 } else { 0 },
                ..Trailer::default()
            })
            .unwrap();
            body.push(T_END);
            put(&mut body, t.len() as u64);
            body.extend_from_slice(&t);
            body
        })
    }

    proptest::proptest! {
        #![proptest_config(proptest::test_runner::Config { cases: 512, ..Default::default() })]
        /// Runs of faults read what `next_event` reads one record at a time, corrupt
        /// records included: the same records, or the same error at the same record.
        #[test]
        fn raw_records_read_in_runs_as_one_at_a_time(body in raw_records(), max in 1u64..5) {
            let mut w = Writer::new(Vec::new(), &header()).unwrap();
            w.out.write_all(&body).unwrap();
            let bytes = w.out.finish().unwrap().into_inner().unwrap();
            let one = read_all(&bytes);
            proptest::prop_assert_eq!(read_all_as_replay(&bytes, max).0, one.clone());
            proptest::prop_assert_eq!(read_all_as_replay(&bytes, u64::MAX).0, one);
        }
    }

    /// The Adler-32 is the stream's last 4 bytes: a trace cut anywhere in them, or in
    /// the final deflate block before them, is refused.
    #[test]
    fn a_trace_missing_any_of_its_last_bytes_is_refused() {
        let bytes = encode(&sample());
        assert!(read_all(&bytes).is_ok());
        for cut in 1..=6 {
            let err = read_all(&bytes[..bytes.len() - cut]).unwrap_err();
            assert!(err.contains("cut short or corrupt"), "{cut}: {err}");
        }
    }

    #[test]
    fn bytes_after_the_end_record_or_the_stream_are_refused() {
        let mut bytes = encode(&sample());
        bytes.push(0);
        let err = read_all(&bytes).unwrap_err();
        assert!(
            err.contains("record 13: bytes after the end of the compressed stream"),
            "{err}"
        );
        // A record after the end record, inside the stream.
        let mut w = Writer::new(Vec::new(), &header()).unwrap();
        for e in sample() {
            w.write(&e).unwrap();
        }
        let t = serde_json::to_vec(&Trailer {
            events: sample().len() as u64,
            ..Trailer::default()
        })
        .unwrap();
        w.buf.push(T_END);
        put(&mut w.buf, t.len() as u64);
        w.buf.extend_from_slice(&t);
        w.buf.extend_from_slice(&[T_EXIT, 0]);
        w.out.write_all(&w.buf).unwrap();
        let extra = w.out.finish().unwrap().into_inner().unwrap();
        let err = read_all(&extra).unwrap_err();
        assert!(
            err.contains("record 13: 2 bytes of records after the end record"),
            "{err}"
        );
    }

    #[test]
    fn an_end_record_counting_other_records_is_refused() {
        let mut w = Writer::new(Vec::new(), &header()).unwrap();
        w.write(&sample()[0]).unwrap();
        let bytes = w.finish(&Trailer::default()).unwrap();
        let err = read_all(&bytes).unwrap_err();
        assert!(
            err.contains("the end record counts 0 records, but 1 were read"),
            "{err}"
        );
    }

    #[test]
    fn a_trace_of_another_arch_or_page_size_is_refused() {
        for (h, what) in [
            (
                Header {
                    arch: "riscv64".into(),
                    ..header()
                },
                "arch \"riscv64\"",
            ),
            (
                Header {
                    page_size: 0,
                    ..header()
                },
                "page size 0",
            ),
        ] {
            let bytes = Writer::new(Vec::new(), &h)
                .unwrap()
                .finish(&Trailer::default())
                .unwrap();
            let err = Reader::new("t", &bytes[..]).err().unwrap().to_string();
            assert!(err.contains(what), "{err}");
        }
    }
}
