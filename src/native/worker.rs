//! A forked worker: one per workload process. It executes the ops the orchestrator sends
//! over its socket, measuring each with getrusage, and forks further workers on `fork`.
//! Between ops it keeps its own memory (stack, heap, text) faulted in, so a measurement
//! window sees only the faults the op takes on the workload's regions.

use super::layout::region_layout;
use super::perf::{Sampler, Tally};
use super::proto::{recv, send, Cmd, Enc};
use super::runner_pages::{Fate, RunnerPages};
use crate::workload::{mremap_target, Advice, Op, Prot, Stmt};
use std::collections::BTreeMap;
use std::os::unix::net::UnixStream;

/// What a worker inherits: the ops by id and every process's worker-side socket.
pub struct Ctx<'w> {
    pub leaves: Vec<&'w Stmt>,
    pub sockets: BTreeMap<String, UnixStream>,
}

/// Runs as worker `name` until the orchestrator goes away or says `exit`; never returns.
pub fn worker_main<'w>(ctx: &Ctx<'w>, name: &'w str) -> ! {
    super::knobs::reset_signals_in_child();
    let r = std::panic::catch_unwind(std::panic::AssertUnwindSafe(|| serve(ctx, name)));
    // SAFETY: _exit ends this forked process without running the orchestrator's
    // destructors or atexit handlers, which belong to the parent.
    unsafe { libc::_exit(if r.is_ok() { 0 } else { 101 }) }
}

fn serve<'w>(ctx: &Ctx<'w>, mut name: &'w str) {
    // Region name -> (address, size) of this process's live regions.
    let mut regions: BTreeMap<String, (u64, u64)> = BTreeMap::new();
    // Every worker (its children inherit it) runs on CPU 0, as the model's do: the
    // per-CPU LRU add batch, charge stock and swap cluster are then the one that the
    // op's own lru_add_drain and allocations see. Unpinned, a worker that moved
    // between faulting pages in and MADV_PAGEOUT left them in the other CPU's batch,
    // unreclaimable (seen once in CI on swap_fork_descending).
    let mut sampler = pin_to_cpu0().and_then(|()| Sampler::open().map_err(|e| e.to_string()));
    let mut tally = Tally::default();
    let mut own = RunnerPages::default();
    // No warm-up here: the orchestrator asks for one (Cmd::Warm) and waits for it
    // before the first op's window opens, so the warm-up's faults stay outside it.
    loop {
        let mut sock = &ctx.sockets[name];
        let Some(msg) = recv(&mut sock) else { return };
        let reply = match Cmd::decode(&msg) {
            Some(Cmd::Op(id)) => {
                let stmt = ctx.leaves[id as usize];
                match (&stmt.op, &sampler) {
                    (_, Err(e)) => Enc::err(e),
                    (Op::Fork { child }, Ok(_)) => {
                        // fork takes no faults in the caller: its minflt is 0 by
                        // definition. What follows it in both processes is this runner's
                        // own copy-on-write, which the global pgfault counts; the
                        // orchestrator reads it from /proc once both sides are blocked.
                        // Timed on this process's CPU clock: fork() wakes the child on this
                        // CPU, and a wall clock would hold the child's first run (its
                        // sampler's setup, the runner's) whenever it preempts the parent,
                        // and any other process's turn.
                        let t = cpu_now();
                        // SAFETY: the worker is single-threaded, so the child may go on
                        // running Rust code.
                        let pid = unsafe { libc::fork() };
                        if pid == 0 {
                            name = child;
                            if let Ok(s) = std::mem::replace(&mut sampler, Err(String::new())) {
                                s.forget_in_child();
                            }
                            sampler = Sampler::open().map_err(|e| e.to_string());
                            let ready = match &sampler {
                                Ok(_) => Enc::ok_op(0, 0, 0, 0, &[], &[]),
                                Err(e) => Enc::err(e),
                            };
                            if send(&mut &ctx.sockets[name], &ready).is_err() {
                                return;
                            }
                            continue;
                        }
                        let ns = cpu_now() - t;
                        match pid {
                            -1 => Enc::err(&format!("fork: {}", std::io::Error::last_os_error())),
                            _ => Enc::ok_op(0, 0, pid, ns, &[], &[]),
                        }
                    }
                    // The process ends on the orchestrator's Cmd::Exit (see `oncpu`).
                    (Op::Exit, Ok(_)) => Enc::ok_op(0, 0, 0, 0, &[], &[]),
                    (op, Ok(sampler)) => {
                        let addr = |r: &str| regions.get(r).copied().unwrap_or((0, 0));
                        let spans = live_spans(op, &regions);
                        let inside = |a: u64| spans.iter().any(|&(s, e)| (s..e).contains(&a));
                        tally.clear();
                        sampler.discard();
                        let (before, from) = sampler.settled(faults);
                        tally.open(from);
                        let start = std::time::Instant::now();
                        let res = exec(op, addr, || sampler.drain(&mut tally, inside));
                        let ns = start.elapsed().as_nanos() as u64;
                        let (after, until) = sampler.settled(faults);
                        tally.close(until);
                        sampler.drain(&mut tally, inside);
                        match res {
                            Ok(()) => {
                                track(op, &mut regions);
                                let a = attribute(after.0 - before.0, &tally, &mut own);
                                Enc::ok_op(a.count, after.1 - before.1, 0, ns, &a.diagnostics, &a.notes)
                            }
                            // A feature this host's kernel lacks: the workload does not apply.
                            Err(e) if e.to_string().starts_with(super::qemu::NOT_APPLICABLE) => {
                                Enc::err(&e.to_string())
                            }
                            Err(e) => Enc::err(&format!("{} failed: {e}", op.keyword())),
                        }
                    }
                }
            }
            Some(Cmd::Exit) => return,
            Some(Cmd::Layout) => layout(&regions),
            Some(Cmd::Warm) => {
                // The frames the warm-up left the runner's pages in, to tell a migrated
                // page by (only a worker measures ops; the orchestrator's warm-up needs none).
                own = RunnerPages::read(warm_up(&regions).into_iter());
                Enc::ok().0
            }
            None => Enc::err("bad command"),
        };
        if send(&mut sock, &reply).is_err() {
            return;
        }
    }
}

/// The address ranges an op's faults may fall in: the live regions, and the one an
/// `mmap` is creating.
fn live_spans(op: &Op, regions: &BTreeMap<String, (u64, u64)>) -> Vec<(u64, u64)> {
    let mut spans: Vec<(u64, u64)> = regions.values().map(|&(a, size)| (a, a + size)).collect();
    if let Op::Mmap { addr, size, .. } = *op {
        spans.push((addr, addr + size));
    }
    spans
}

/// An op's fault count and what the runner saw of its own measurement.
struct Attribution {
    count: i64,
    /// Defects of the runner's measurement: the run is not sound.
    diagnostics: Vec<String>,
    /// Runner faults the kernel's migration of its pages explains, with the proof.
    notes: Vec<String>,
}

/// An op's fault count from getrusage's delta and the samples: the faults on the
/// workload's regions plus those the kernel took without a perf event (GUP). A fault on
/// the runner's own memory is explained when its page moved to another frame since the
/// warm-up (another process's compaction migrated it); any other is this runner's
/// defect, reported line by line.
fn attribute(rusage: i64, t: &Tally, own: &mut RunnerPages) -> Attribution {
    let vmas = if t.strays.is_empty() { Vec::new() } else { maps() };
    let place = |a: u64| {
        vmas.iter()
            .find(|v| (v.start..v.end).contains(&a))
            .map_or("no mapping".to_string(), |v| {
                let path = if v.path.is_empty() { "anonymous" } else { &v.path };
                format!("{path} {:#x}-{:#x}", v.start, v.end)
            })
    };
    let (mut diagnostics, mut notes) = (Vec::new(), Vec::new());
    for &(a, ip) in &t.strays {
        let at = format!("runner fault outside the workload's regions at {a:#x} ({})", place(a));
        match own.fate(a) {
            Fate::Moved { from, to } => notes.push(format!(
                "{at}: its page moved from pfn {from:#x} to {to:#x} since the warm-up: the kernel \
                 migrated it (another process's compaction) and an access met its migration entry; \
                 not the workload's fault and not in its counts (global counters include it)"
            )),
            Fate::Unexplained(why) => diagnostics.push(format!("{at}, code at {ip:#x} ({}): {why}", place(ip))),
        }
    }
    if t.stray_count > t.strays.len() as u64 {
        diagnostics.push(format!(
            "{} more runner faults outside the regions",
            t.stray_count - t.strays.len() as u64
        ));
    }
    if t.lost > 0 {
        diagnostics.push(format!("the perf ring dropped {} fault samples", t.lost));
    }
    let unsampled = rusage - t.total as i64;
    if unsampled < 0 {
        diagnostics.push(format!(
            "perf sampled {} faults but getrusage counted {rusage}",
            t.total
        ));
    }
    Attribution {
        count: t.inside as i64 + unsampled.max(0),
        diagnostics,
        notes,
    }
}

/// sched_setaffinity of this process to CPU 0.
fn pin_to_cpu0() -> Result<(), String> {
    // SAFETY: a zeroed cpu_set_t is a valid empty set; CPU_SET writes inside it, and
    // sched_setaffinity(0) reads it for this process only.
    let rc = unsafe {
        let mut set: libc::cpu_set_t = std::mem::zeroed();
        libc::CPU_SET(0, &mut set);
        libc::sched_setaffinity(0, std::mem::size_of::<libc::cpu_set_t>(), &set)
    };
    if rc != 0 {
        return Err(format!(
            "pinning the worker to CPU 0: {}",
            std::io::Error::last_os_error()
        ));
    }
    Ok(())
}

/// This worker's CPU time in ns (its one thread's): the time it ran, not the time it
/// waited for a CPU.
fn cpu_now() -> u64 {
    let mut ts = libc::timespec { tv_sec: 0, tv_nsec: 0 };
    // SAFETY: ts is a valid timespec; this clock exists on every Linux.
    unsafe { libc::clock_gettime(libc::CLOCK_THREAD_CPUTIME_ID, &mut ts) };
    ts.tv_sec as u64 * 1_000_000_000 + ts.tv_nsec as u64
}

/// getrusage's minor and major fault counts of this process.
fn faults() -> (i64, i64) {
    let mut ru = std::mem::MaybeUninit::<libc::rusage>::zeroed();
    // SAFETY: ru is a valid rusage buffer; RUSAGE_SELF cannot fail.
    let ru = unsafe {
        libc::getrusage(libc::RUSAGE_SELF, ru.as_mut_ptr());
        ru.assume_init()
    };
    (ru.ru_minflt, ru.ru_majflt)
}

/// `mmap R SIZE secret`: memfd_secret(2), ftruncate to SIZE, mmap(MAP_SHARED |
/// MAP_FIXED_NOREPLACE) at `addr`, close (the mapping keeps the file). A kernel
/// without secretmem (CONFIG_SECRETMEM off, `secretmem.enable=0`, or no control of
/// its direct map) refuses the call: the workload does not apply on this host.
fn memfd_secret_mmap(addr: u64, size: u64) -> std::io::Result<()> {
    // SAFETY: memfd_secret takes a flags word and returns a new descriptor or -1.
    let fd = unsafe { libc::syscall(libc::SYS_memfd_secret, 0) } as libc::c_int;
    if fd < 0 {
        let e = std::io::Error::last_os_error();
        return Err(std::io::Error::other(format!(
            "{}host: memfd_secret(2) refused: {e} (no secretmem in this kernel: CONFIG_SECRETMEM, secretmem.enable, or a direct map it cannot change)",
            super::qemu::NOT_APPLICABLE
        )));
    }
    // SAFETY: fd is ours; the address lies in the workload's own placement slot,
    // which holds nothing of this program (MAP_FIXED_NOREPLACE refuses otherwise).
    unsafe {
        let r = check(libc::ftruncate(fd, size as libc::off_t)).and_then(|()| {
            let prot = libc::PROT_READ | libc::PROT_WRITE;
            let flags = libc::MAP_SHARED | libc::MAP_FIXED_NOREPLACE;
            mmap_at(addr, size, prot, flags, fd)
        });
        libc::close(fd);
        r
    }
}

/// mmap(2) at exactly `addr` (MAP_FIXED_NOREPLACE in `flags`), undone if the kernel
/// put it anywhere else.
///
/// # Safety
/// `addr..addr + size` must be the workload's own placement slot, holding nothing of
/// this program.
unsafe fn mmap_at(addr: u64, size: u64, prot: libc::c_int, flags: libc::c_int, fd: libc::c_int) -> std::io::Result<()> {
    // SAFETY: the caller vouches for the range; MAP_FIXED_NOREPLACE refuses to replace.
    let p = unsafe { libc::mmap(addr as *mut _, size as usize, prot, flags, fd, 0) };
    if p == libc::MAP_FAILED {
        return Err(std::io::Error::last_os_error());
    }
    if p as u64 != addr {
        // SAFETY: p..p+size is the mapping just made.
        unsafe { libc::munmap(p, size as usize) };
        return Err(std::io::Error::other(format!(
            "kernel placed it at {p:?}, not {addr:#x}"
        )));
    }
    Ok(())
}

fn check(rc: libc::c_int) -> std::io::Result<()> {
    if rc == 0 {
        Ok(())
    } else {
        Err(std::io::Error::last_os_error())
    }
}

/// The most pages one `migrate` moves (64 MiB of 4K pages).
const MAX_MOVE_PAGES: usize = 16384;

/// move_pages(2)'s arrays, in the program's data, which the warm-up faults in: a
/// migrate allocates nothing inside its window.
struct MovePagesBufs {
    pages: [u64; MAX_MOVE_PAGES],
    nodes: [libc::c_int; MAX_MOVE_PAGES],
    status: [libc::c_int; MAX_MOVE_PAGES],
}

static MOVE_PAGES: std::sync::Mutex<MovePagesBufs> = std::sync::Mutex::new(MovePagesBufs {
    pages: [0; MAX_MOVE_PAGES],
    nodes: [0; MAX_MOVE_PAGES],
    status: [0; MAX_MOVE_PAGES],
});

/// Performs one op. `region` gives a region's (address, size); the static checks
/// guarantee every range lies in a live, suitably protected part of it. A touch calls
/// `chunk_done` every `Sampler::CHUNK` accesses, so the fault samples are drained
/// before they could fill the ring.
fn exec(op: &Op, region: impl Fn(&str) -> (u64, u64), mut chunk_done: impl FnMut()) -> std::io::Result<()> {
    let span = |r: &str, range: Option<crate::workload::Range>| {
        let (a, size) = region(r);
        range.map_or((a, size), |r| (a + r.off, r.len))
    };
    // SAFETY (for every call below): the addresses are inside the workload's own
    // placement slots, which hold nothing but its regions, so these calls and accesses
    // touch no memory of this program.
    unsafe {
        match *op {
            Op::Mmap {
                size,
                hugepage,
                nohugepage,
                populate,
                ro,
                shared,
                secret,
                addr,
                ..
            } => {
                if secret {
                    return memfd_secret_mmap(addr, size);
                }
                let prot = if ro {
                    libc::PROT_READ
                } else {
                    libc::PROT_READ | libc::PROT_WRITE
                };
                let private = if shared { libc::MAP_SHARED } else { libc::MAP_PRIVATE };
                let mut flags = private | libc::MAP_ANONYMOUS | libc::MAP_FIXED_NOREPLACE;
                if populate {
                    flags |= libc::MAP_POPULATE;
                }
                mmap_at(addr, size, prot, flags, -1)?;
                let p = addr as *mut libc::c_void;
                match (hugepage, nohugepage) {
                    (true, _) => check(libc::madvise(p, size as usize, libc::MADV_HUGEPAGE)),
                    (_, true) => check(libc::madvise(p, size as usize, libc::MADV_NOHUGEPAGE)),
                    _ => Ok(()),
                }
            }
            Op::Touch {
                ref region,
                range,
                write,
                stride,
            } => {
                let (a, len) = span(region, range);
                let mut p = a;
                let mut n = 0;
                while p < a + len {
                    if write {
                        std::ptr::write_volatile(p as *mut u8, 1);
                    } else {
                        std::ptr::read_volatile(p as *const u8);
                    }
                    p += stride;
                    n += 1;
                    if n % Sampler::CHUNK == 0 {
                        chunk_done();
                    }
                }
                Ok(())
            }
            Op::Madvise {
                ref region,
                range,
                advice,
                step,
            } => {
                let (a, len) = span(region, Some(range));
                let step = step.unwrap_or(len);
                let adv = match advice {
                    Advice::DontNeed => libc::MADV_DONTNEED,
                    Advice::Free => libc::MADV_FREE,
                    Advice::PageOut => libc::MADV_PAGEOUT,
                    Advice::Cold => libc::MADV_COLD,
                    Advice::HugePage => libc::MADV_HUGEPAGE,
                    Advice::NoHugePage => libc::MADV_NOHUGEPAGE,
                    Advice::Collapse => libc::MADV_COLLAPSE,
                };
                let mut r = Ok(());
                for at in (a..a + len).step_by(step as usize) {
                    r = r.and(check(libc::madvise(at as *mut _, step as usize, adv)));
                }
                // A collapse that cannot be done is an outcome (the layout shows it),
                // not a failure of the run.
                if advice == Advice::Collapse {
                    return Ok(());
                }
                r
            }
            Op::Munmap { ref region, range } => {
                let (a, len) = span(region, range);
                check(libc::munmap(a as *mut _, len as usize))
            }
            Op::Mprotect {
                ref region,
                range,
                prot,
            } => {
                let (a, len) = span(region, Some(range));
                let p = match prot {
                    Prot::None => libc::PROT_NONE,
                    Prot::R => libc::PROT_READ,
                    Prot::Rw => libc::PROT_READ | libc::PROT_WRITE,
                };
                check(libc::mprotect(a as *mut _, len as usize, p))
            }
            Op::Mremap {
                region: ref r,
                size,
                moves,
            } => {
                let (a, old) = region(r);
                let to = if moves { mremap_target(a) } else { a };
                let flags = if moves {
                    libc::MREMAP_MAYMOVE | libc::MREMAP_FIXED
                } else {
                    0
                };
                let p = libc::mremap(a as *mut _, old as usize, size as usize, flags, to as *mut libc::c_void);
                if p == libc::MAP_FAILED {
                    return Err(std::io::Error::last_os_error());
                }
                if p as u64 != to {
                    return Err(std::io::Error::other(format!("mremap moved it to {p:?}, not {to:#x}")));
                }
                Ok(())
            }
            Op::Mlock { ref region, range } => {
                let (a, len) = span(region, range);
                check(libc::mlock(a as *const _, len as usize))
            }
            Op::Munlock { ref region, range } => {
                let (a, len) = span(region, range);
                check(libc::munlock(a as *const _, len as usize))
            }
            Op::Migrate {
                ref region,
                range,
                node,
                ..
            } => {
                // move_pages(2) of the calling process, every 4K page to `node`.
                const MPOL_MF_MOVE: libc::c_int = 1 << 1;
                let (a, len) = span(region, range);
                let n = (len / 4096) as usize;
                let mut bufs = MOVE_PAGES.lock().unwrap_or_else(|e| e.into_inner());
                let MovePagesBufs { pages, nodes, status } = &mut *bufs;
                if n > pages.len() {
                    return Err(std::io::Error::from_raw_os_error(libc::E2BIG));
                }
                for i in 0..n {
                    pages[i] = a + i as u64 * 4096;
                    nodes[i] = node as libc::c_int;
                }
                let rc = libc::syscall(
                    libc::SYS_move_pages,
                    0,
                    n as libc::c_ulong,
                    pages.as_ptr(),
                    nodes.as_ptr(),
                    status.as_mut_ptr(),
                    MPOL_MF_MOVE,
                );
                if rc < 0 {
                    Err(std::io::Error::last_os_error())
                } else {
                    Ok(())
                }
            }
            // A scan on the host covers every process registered with khugepaged,
            // whose collapses the global counters would show.
            Op::Khugepaged => Err(std::io::Error::other(
                "host: not yet (a scan here covers every process on the host; the QEMU targets run it)",
            )),
            Op::Set { .. }
            | Op::Mark { .. }
            | Op::Shrink
            | Op::Swapon { .. }
            | Op::Memlimit { .. }
            | Op::Fork { .. }
            | Op::Exit
            | Op::Thread { .. }
            | Op::ThreadsAll
            | Op::Cpu { .. }
            | Op::Repeat { .. } => {
                unreachable!("{} is not a worker op", op.keyword())
            }
        }
    }
}

/// Keeps the region table in step with a successful op.
fn track(op: &Op, regions: &mut BTreeMap<String, (u64, u64)>) {
    match op {
        Op::Mmap { region, size, addr, .. } => {
            regions.insert(region.clone(), (*addr, *size));
        }
        Op::Munmap { region, range: None } => {
            regions.remove(region);
        }
        Op::Mremap { region, size, moves } => {
            if let Some(r) = regions.get_mut(region) {
                *r = (if *moves { mremap_target(r.0) } else { r.0 }, *size);
            }
        }
        _ => {}
    }
}

/// The layout of every region that still has a VMA (a region unmapped piece by piece has
/// none, and is not live).
fn layout(regions: &BTreeMap<String, (u64, u64)>) -> Vec<u8> {
    let vmas = maps();
    let mut out = Enc::ok();
    for (name, &(addr, size)) in regions {
        if !vmas.iter().any(|v| v.start < addr + size && addr < v.end) {
            continue;
        }
        match region_layout(addr, size) {
            Ok(runs) => out.region(name, &runs),
            Err(e) => return Enc::err(&e.to_string()),
        }
    }
    out.0
}

struct Vma {
    start: u64,
    end: u64,
    perms: [u8; 4],
    path: String,
}

fn maps() -> Vec<Vma> {
    let text = std::fs::read_to_string("/proc/self/maps").unwrap_or_default();
    text.lines()
        .filter_map(|l| {
            let mut f = l.split_whitespace();
            let (s, e) = f.next()?.split_once('-')?;
            let perms: [u8; 4] = f.next()?.as_bytes().try_into().ok()?;
            let path = f.nth(3).unwrap_or("").to_string();
            Some(Vma {
                start: u64::from_str_radix(s, 16).ok()?,
                end: u64::from_str_radix(e, 16).ok()?,
                perms,
                path,
            })
        })
        .collect()
}

/// Faults in this process's own memory, everything but the workload's live regions: a
/// deep stack, then every readable mapping (writable private ones for write, so
/// copy-on-write after a fork is broken here and not inside a measured op). The
/// program's text, data and libraries lie among the placement slots on x86_64, so the
/// regions are skipped by their real addresses, never by the slots' range. Returns the
/// `[start, end)` of the mappings it faulted in.
pub fn warm_up(regions: &BTreeMap<String, (u64, u64)>) -> Vec<(u64, u64)> {
    // The heap never shrinks: a page malloc frees keeps its frame, so a frame of the
    // runner's changes only when the kernel migrates it (see `RunnerPages`).
    // SAFETY: mallopt only sets an allocator parameter of this process.
    unsafe { libc::mallopt(libc::M_TRIM_THRESHOLD, libc::c_int::MAX) };
    grow_stack();
    // The vDSO's code and data pages cannot be populated by madvise; they are faulted
    // in by use, and an op is timed with clock_gettime, which runs there.
    std::hint::black_box(std::time::Instant::now());
    let own: Vec<Vma> = maps()
        .into_iter()
        .filter(|v| {
            let in_region = regions.values().any(|&(a, size)| v.start < a + size && a < v.end);
            !in_region && !v.path.starts_with("[v") && v.perms[0] == b'r'
        })
        .collect();
    for v in &own {
        let adv = if v.perms[1] == b'w' && v.perms[3] == b'p' {
            libc::MADV_POPULATE_WRITE
        } else {
            libc::MADV_POPULATE_READ
        };
        let (start, len) = (v.start as *mut libc::c_void, (v.end - v.start) as usize);
        // SAFETY: populating a mapping of this process changes no contents, nor does
        // opting it out of THP; failures (e.g. on special mappings) leave it as it was.
        // Under `enabled always` khugepaged would otherwise collapse the runner's own
        // heap and stacks during a run, moving the global THP counters.
        unsafe {
            libc::madvise(start, len, libc::MADV_NOHUGEPAGE);
            libc::madvise(start, len, adv);
        }
    }
    own.iter().map(|v| (v.start, v.end)).collect()
}

/// Touches enough stack that no op grows it.
#[inline(never)]
fn grow_stack() {
    let mut buf = [0u8; 256 << 10];
    std::hint::black_box(&mut buf);
}
