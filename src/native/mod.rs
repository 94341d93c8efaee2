//! `foliolab native`: runs a workload for real on the host kernel and reports what the
//! model reports, from getrusage, /proc/vmstat, the mTHP stats and pagemap/kpageflags.
//!
//! The orchestrator (this process) saves and sets the THP knobs, forks a worker for
//! `main`, and sends each op, in file order, to the worker of its process; workers fork
//! further workers on `fork`. Global counters are snapshotted just around each op, so
//! the runner's own work between ops stays out of them (other processes on the host can
//! still move them).

mod cgroup;
pub mod khugepaged;
pub mod knobs;
mod layout;
mod memcg_flush;
mod oncpu;
pub(crate) mod perf;
mod proto;
pub mod qemu;
mod runner_pages;
mod stats;
pub mod swap;
pub(crate) mod tracefs;
mod worker;

pub use knobs::{current_value, KnobError, KnobGuard, KNOB_LOCK};
pub use stats::VMSTAT_KEYS;

use crate::report::{Background, Counters, Phase, Report};
use crate::workload::{Op, Stmt, Workload};
use proto::{recv, send, Cmd, Dec, OpReply};
use std::collections::BTreeMap;
use std::os::fd::AsRawFd;
use std::os::unix::net::UnixStream;
use std::path::PathBuf;
use std::time::{Duration, Instant};
use worker::Ctx;

/// Where the host's knobs and counters are (tests point these at fake trees).
/// The host's THP knobs.
pub const THP_DIR: &str = "/sys/kernel/mm/transparent_hugepage";

pub struct HostPaths {
    pub thp: PathBuf,
    pub vmstat: PathBuf,
    /// Written with `2` by `shrink`: drop_slab runs every shrinker, the THP deferred
    /// split one included.
    pub drop_caches: PathBuf,
    /// The file every run that writes `thp`'s knobs holds an exclusive flock on.
    pub lock: PathBuf,
    /// /sys/devices/system/node: which NUMA nodes have memory (`migrate`'s targets).
    pub nodes: PathBuf,
}

impl Default for HostPaths {
    fn default() -> HostPaths {
        HostPaths {
            thp: THP_DIR.into(),
            vmstat: "/proc/vmstat".into(),
            drop_caches: "/proc/sys/vm/drop_caches".into(),
            lock: KNOB_LOCK.into(),
            nodes: "/sys/devices/system/node".into(),
        }
    }
}

#[derive(Debug, thiserror::Error)]
pub enum NativeError {
    #[error(transparent)]
    Knob(#[from] KnobError),
    #[error("{path}:{line}:{col}: {msg}")]
    Op {
        path: String,
        line: u32,
        col: u32,
        msg: String,
    },
    #[error("{0}")]
    Host(String),
}

/// A `migrate` to a NUMA node this host does not have (no `nodes/nodeN` with
/// memory) is refused before anything runs, naming the op.
fn refuse_missing_nodes(w: &Workload, nodes: &std::path::Path) -> Result<(), NativeError> {
    let has_memory = std::fs::read_to_string(nodes.join("has_memory")).unwrap_or_default();
    let host_nodes = parse_node_list(has_memory.trim());
    match w.migrates().into_iter().find(|(_, n)| !host_nodes.contains(n)) {
        Some((pos, node)) => Err(NativeError::Op {
            path: w.path.clone(),
            line: pos.line,
            col: pos.col,
            msg: format!(
                "migrate: this host has no NUMA node {node} with memory ({} lists {})",
                nodes.join("has_memory").display(),
                if has_memory.trim().is_empty() {
                    "none"
                } else {
                    has_memory.trim()
                }
            ),
        }),
        None => Ok(()),
    }
}

/// A sysfs node list such as `0` or `0-1,3`.
fn parse_node_list(s: &str) -> Vec<usize> {
    s.split(',')
        .filter_map(|part| match part.split_once('-') {
            Some((a, b)) => Some((a.parse().ok()?..=b.parse().ok()?).collect::<Vec<usize>>()),
            None => part.parse().ok().map(|n| vec![n]),
        })
        .flatten()
        .collect()
}

/// Puts SIGCHLD's disposition back when a host run ends: the orchestrator ignores it
/// (`start_main`), and a process that goes on after the run (a sweep's next point on a
/// QEMU guest, the Python module) must be able to wait for its children again.
struct SigchldRestore(libc::sighandler_t);

impl Drop for SigchldRestore {
    fn drop(&mut self) {
        // SAFETY: restoring a disposition read from `signal` has no preconditions.
        unsafe { libc::signal(libc::SIGCHLD, self.0) };
    }
}

/// Runs `w` on this host with the real knobs and counters.
pub fn run(w: &Workload) -> Result<Report, NativeError> {
    run_with(w, &HostPaths::default())
}

pub fn run_with(w: &Workload, paths: &HostPaths) -> Result<Report, NativeError> {
    if let Some(s) = crate::workload::model_only(&w.stmts) {
        return Err(NativeError::Op {
            path: w.path.clone(),
            line: s.pos.line,
            col: s.pos.col,
            msg: format!(
                "'{}' runs only in the model: the host runner's workers are single-threaded processes",
                s.op.keyword()
            ),
        });
    }
    refuse_missing_nodes(w, &paths.nodes)?;
    // SAFETY: reading back a disposition by setting the default has no preconditions.
    let _sigchld = SigchldRestore(unsafe { libc::signal(libc::SIGCHLD, libc::SIG_DFL) });
    let guard = KnobGuard::arm(&paths.thp, &paths.lock)?;
    let collapsed_before = khugepaged::pages_collapsed(&paths.thp);
    let by_writes_before = guard.collapsed_by_writes();
    let mut unavailable = BTreeMap::new();
    for (knob, why) in &guard.missing {
        unavailable.insert(format!("knob.{knob}"), why.clone());
    }
    let sources = stats::Sources::open(&paths.vmstat, &paths.thp, &mut unavailable);
    let mut leaves = Vec::new();
    collect_leaves(&w.stmts, &mut leaves);
    let mut names = vec![crate::workload::parse::MAIN.to_string()];
    names.extend(leaves.iter().filter_map(|s| match &s.op {
        Op::Fork { child } => Some(child.clone()),
        _ => None,
    }));
    names.sort();
    names.dedup();
    let mut ours = BTreeMap::new();
    let mut theirs = BTreeMap::new();
    for n in &names {
        let (a, b) = UnixStream::pair().map_err(|e| NativeError::Host(format!("socketpair: {e}")))?;
        ours.insert(n.clone(), a);
        theirs.insert(n.clone(), b);
    }
    let flush = if leaves.iter().any(|s| matches!(s.op, Op::Memlimit { .. })) {
        memcg_flush::FlushWatch::open()
            .map_err(|why| unavailable.insert(memcg_flush::KEY.into(), why))
            .ok()
    } else {
        None
    };
    let switch = if leaves.iter().any(|s| matches!(s.op, Op::Exit)) {
        oncpu::Switch::load()
            .map_err(|why| unavailable.insert(oncpu::KEY.into(), why))
            .ok()
    } else {
        None
    };
    let ctx = Ctx {
        leaves,
        sockets: theirs,
    };
    let mut keys: Vec<String> = names
        .iter()
        .flat_map(|n| [format!("proc.{n}.minflt"), format!("proc.{n}.majflt")])
        .collect();
    keys.push(RUNNER_KEY.into());
    keys.extend(sources.keys().iter().cloned());
    let n = sources.keys().len();
    let mut o = Orchestrator {
        w,
        guard: &guard,
        drop_caches: &paths.drop_caches,
        ctx: &ctx,
        ours,
        pids: BTreeMap::new(),
        sources,
        before: vec![0; n],
        after: vec![0; n],
        totals: keys.iter().map(|k| (k.clone(), 0)).collect(),
        phases: vec![Phase {
            label: "start".into(),
            counters: keys.iter().map(|k| (k.clone(), 0)).collect(),
            time_ns: Some(0.0),
        }],
        diagnostics: Vec::new(),
        notes: Vec::new(),
        op_time: Duration::ZERO,
        start_scan: None,
        swap: None,
        memcg: None,
        flush,
        flushes_from: None,
        switch,
    };
    o.start_main()?;
    // Other processes' folios of each size before the workload has any: their splits
    // and frees move that size's counters whenever they happen.
    o.sources.snapshot(&mut o.before).map_err(snap_err)?;
    let held: Counters = o
        .sources
        .keys()
        .iter()
        .zip(&o.before)
        .filter(|(k, n)| k.starts_with("mthp.") && k.ends_with(".nr_anon") && **n > 0)
        .map(|(k, n)| (k.clone(), *n))
        .collect();
    o.stmts(&w.stmts)?;
    o.check_flushes();
    let mut background = o.background()?;
    background.held = held;
    let layout = o.finish(&mut unavailable)?;
    // The proof that khugepaged stayed parked: it counts every collapse it makes. The
    // scan a `set` that starts the thread lets it make is the kernel's own, and said.
    if let (Some(a), Some(b)) = (collapsed_before, khugepaged::pages_collapsed(&paths.thp)) {
        let by_writes = guard.collapsed_by_writes() - by_writes_before;
        if by_writes > 0 {
            o.notes.push(format!(
                "khugepaged's scan on starting (a `set` enabled THP again) collapsed {by_writes} ranges host-wide"
            ));
        }
        if b.wrapping_sub(a) != by_writes {
            o.diagnostics.push(format!(
                "khugepaged collapsed {} ranges while parked (khugepaged/pages_collapsed {a} -> {b}, {by_writes} of them on a knob write)",
                b.wrapping_sub(a).wrapping_sub(by_writes)
            ));
        }
    }
    Ok(Report {
        source: "host".into(),
        workload: w.path.clone(),
        variants: BTreeMap::new(),
        counters: o.totals,
        phases: o.phases,
        layout,
        unavailable,
        diagnostics: o.diagnostics,
        runner_notes: o.notes,
        background: Some(background),
    })
}

/// The non-repeat statements in file order; a worker gets an op as an index into this.
fn collect_leaves<'w>(stmts: &'w [Stmt], out: &mut Vec<&'w Stmt>) {
    for s in stmts {
        match &s.op {
            Op::Repeat { body, .. } => collect_leaves(body, out),
            _ => out.push(s),
        }
    }
}

struct Orchestrator<'a> {
    w: &'a Workload,
    guard: &'a KnobGuard,
    drop_caches: &'a std::path::Path,
    ctx: &'a Ctx<'a>,
    /// Our end of each process's socket.
    ours: BTreeMap<String, UnixStream>,
    /// Live processes.
    pids: BTreeMap<String, libc::pid_t>,
    sources: stats::Sources,
    before: Vec<i64>,
    after: Vec<i64>,
    totals: Counters,
    phases: Vec<Phase>,
    /// Defects of this runner's own measurement, by op.
    diagnostics: Vec<String>,
    /// What the kernel did to the runner's own memory during an op, with its proof.
    notes: Vec<String>,
    /// Time inside the ops' counter windows, when other processes' work is counted too.
    op_time: Duration,
    /// What the windows of `set`s that started khugepaged moved, when its scan on
    /// starting collapsed something.
    start_scan: Option<crate::report::StartScan>,
    /// The workload's memory cgroup (`memlimit`), removed when the run ends (declared
    /// first: it goes before the swap device, see `cgroup::take_down`).
    memcg: Option<cgroup::MemCgroup>,
    /// The workload's swap device (`swapon`), taken down when the run ends.
    swap: Option<swap::ZramSwap>,
    /// The memcg statistics flushes, watched when the workload has a `memlimit`.
    flush: Option<memcg_flush::FlushWatch>,
    /// The flush count and time when the cgroup was made.
    flushes_from: Option<(u64, Instant)>,
    /// sched_switch, to time exits by (`oncpu`); None when the host cannot, and then
    /// a phase with an exit has no time.
    switch: Option<oncpu::Switch>,
}

/// The faults the runner's own processes took inside op windows (the copy-on-write
/// that follows its fork of a worker), which the host's global pgfault includes.
pub const RUNNER_KEY: &str = "runner.minflt";

/// The shortest idle window for measuring the host's background: long enough to see a
/// trickle of faults from other processes when the workload's own windows are short.
const MIN_BACKGROUND_WINDOW: Duration = Duration::from_millis(200);

impl Orchestrator<'_> {
    fn start_main(&mut self) -> Result<(), NativeError> {
        // SAFETY: setting a disposition has no preconditions. Ignoring SIGCHLD makes
        // exited workers vanish at once, so `exit` can wait for the teardown to finish.
        unsafe { libc::signal(libc::SIGCHLD, libc::SIG_IGN) };
        // SAFETY: this program is single-threaded, so the child may keep running Rust.
        let pid = unsafe { libc::fork() };
        match pid {
            -1 => return Err(NativeError::Host(format!("fork: {}", std::io::Error::last_os_error()))),
            0 => {
                for s in self.ours.values() {
                    // SAFETY: closing our copies of the orchestrator's ends, so a worker
                    // sees end-of-file when the orchestrator goes away.
                    unsafe { libc::close(s.as_raw_fd()) };
                }
                worker::worker_main(self.ctx, crate::workload::parse::MAIN)
            }
            _ => {}
        }
        self.pids.insert(crate::workload::parse::MAIN.into(), pid);
        // The fork made our own pages copy-on-write; fault them back in before measuring,
        // and the worker its own, before the first op's window opens.
        worker::warm_up(&BTreeMap::new());
        self.request(crate::workload::parse::MAIN, Cmd::Warm)
            .map_err(NativeError::Host)?;
        Ok(())
    }

    /// A flush after `memlimit` is a defect of this run (see `memcg_flush`).
    fn check_flushes(&mut self) {
        if let (Some(w), Some((from, at))) = (&self.flush, self.flushes_from) {
            let n = w.count() - from;
            if n > 0 {
                self.diagnostics.push(format!(
                    "{}: the kernel's periodic memcg statistics flush (flush_memcg_stats_dwork, every 2 s) ran {n} time(s) in the {:.2} s from `memlimit` to the end of the run: reclaim read flushed list sizes, which the model reads as at the cgroup's creation",
                    self.w.path,
                    at.elapsed().as_secs_f64()
                ));
            }
        }
    }

    fn leaf_id(&self, s: &Stmt) -> u32 {
        self.ctx
            .leaves
            .iter()
            .position(|l| std::ptr::eq(*l, s))
            .expect("a leaf of this workload") as u32
    }

    fn err(&self, s: &Stmt, msg: String) -> NativeError {
        // A feature this host's kernel lacks (memfd_secret): the workload does not
        // apply here, which `validate` reads from the message's start.
        if msg.starts_with(qemu::NOT_APPLICABLE) {
            let at = format!("{}:{}:{}", self.w.path, s.pos.line, s.pos.col);
            return NativeError::Host(format!("{msg} ({at})"));
        }
        NativeError::Op {
            path: self.w.path.clone(),
            line: s.pos.line,
            col: s.pos.col,
            msg,
        }
    }

    fn stmts(&mut self, stmts: &[Stmt]) -> Result<(), NativeError> {
        for s in stmts {
            match &s.op {
                Op::Repeat { n, body } => {
                    for _ in 0..*n {
                        self.stmts(body)?;
                    }
                }
                Op::Mark { label } => {
                    let counters = self.totals.keys().map(|k| (k.clone(), 0)).collect();
                    self.phases.push(Phase {
                        label: label.clone(),
                        counters,
                        time_ns: Some(0.0),
                    });
                }
                _ => self.op(s)?,
            }
        }
        Ok(())
    }

    /// What the global counters do with every worker idle, over at least as long as the
    /// ops' windows took, with the workload's knobs still set (they decide what other
    /// processes' faults allocate).
    fn background(&mut self) -> Result<Background, NativeError> {
        let window = self.op_time.max(MIN_BACKGROUND_WINDOW);
        self.sources.snapshot(&mut self.before).map_err(snap_err)?;
        let start = Instant::now();
        std::thread::sleep(window);
        self.sources.snapshot(&mut self.after).map_err(snap_err)?;
        let elapsed = start.elapsed();
        let counters = self
            .sources
            .keys()
            .iter()
            .zip(self.after.iter().zip(&self.before))
            .filter(|(_, (a, b))| a != b)
            .map(|(k, (a, b))| (k.clone(), a - b))
            .collect();
        Ok(Background {
            op_ms: self.op_time.as_secs_f64() * 1e3,
            window_ms: elapsed.as_secs_f64() * 1e3,
            counters,
            shrink: self.ctx.leaves.iter().any(|s| matches!(s.op, Op::Shrink)),
            start_scan: self.start_scan.clone(),
            held: Counters::new(),
        })
    }

    /// Runs one op inside a window of global-counter snapshots.
    fn op(&mut self, s: &Stmt) -> Result<(), NativeError> {
        // Every window opens on idle workers: nothing of the runner's own runs in it.
        if self.pids.contains_key(&s.proc_name) {
            self.wait_blocked(s, &s.proc_name)?;
        }
        // A new cgroup's statistics stay as at its creation for 2 s from the last flush.
        if let (Op::Memlimit { .. }, Some(w)) = (&s.op, &self.flush) {
            w.wait_for_next().map_err(|e| self.err(s, e))?;
            self.flushes_from = Some((w.count(), Instant::now()));
        }
        let start = Instant::now();
        let (mut collapsed, mut untimed) = (0, false);
        self.sources.snapshot(&mut self.before).map_err(snap_err)?;
        let (minflt, majflt, runner, ns) = match &s.op {
            Op::Set { knob, value } => {
                collapsed = self.guard.collapsed_by_writes();
                self.guard.set(knob, value)?;
                collapsed = self.guard.collapsed_by_writes() - collapsed;
                (0, 0, 0, 0)
            }
            Op::Shrink => {
                let t = Instant::now();
                std::fs::write(self.drop_caches, "2")
                    .map_err(|e| self.err(s, format!("shrink: writing {}: {e}", self.drop_caches.display())))?;
                (0, 0, 0, t.elapsed().as_nanos() as u64)
            }
            Op::Swapon { size } => {
                let t = Instant::now();
                self.swap = Some(swap::ZramSwap::on(*size).map_err(|e| self.err(s, e))?);
                (0, 0, 0, t.elapsed().as_nanos() as u64)
            }
            Op::Memlimit { size } => {
                let t = Instant::now();
                let pids: Vec<libc::pid_t> = self.pids.values().copied().collect();
                self.memcg = Some(cgroup::MemCgroup::create(*size, &pids).map_err(|e| self.err(s, e))?);
                (0, 0, 0, t.elapsed().as_nanos() as u64)
            }
            op => {
                let parent_before = match op {
                    Op::Fork { .. } => self.task_minflt(s, &s.proc_name)?,
                    _ => 0,
                };
                let r = self.ask(s, Cmd::Op(self.leaf_id(s)))?;
                let (mut runner, mut ns) = (0, r.ns);
                match op {
                    // The runner's copy-on-write after fork, in both processes, ends when
                    // they block on their sockets: count it there, inside the window (a
                    // new task's min_flt starts at 0).
                    Op::Fork { child } => {
                        self.pids.insert(child.clone(), r.pid as libc::pid_t);
                        self.reply(s, child)?;
                        for p in [&s.proc_name, child] {
                            self.wait_blocked(s, p)?;
                        }
                        runner = self.task_minflt(s, &s.proc_name)? - parent_before + self.task_minflt(s, child)?;
                    }
                    // The teardown happens after the worker's reply: time it here.
                    Op::Exit => untimed = self.exit(s)?.map(|n| ns += n).is_none(),
                    _ => {}
                }
                (r.minflt, r.majflt, runner, ns)
            }
        };
        self.sources.snapshot(&mut self.after).map_err(snap_err)?;
        self.op_time += start.elapsed();
        if let Op::Fork { child } = &s.op {
            for p in [&s.proc_name, child] {
                self.request(p, Cmd::Warm).map_err(|e| self.err(s, e))?;
            }
        }
        let proc_key = format!("proc.{}.minflt", s.proc_name);
        let maj_key = format!("proc.{}.majflt", s.proc_name);
        let deltas = self
            .sources
            .keys()
            .iter()
            .zip(self.after.iter().zip(&self.before))
            .map(|(k, (a, b))| (k, a - b));
        if collapsed > 0 {
            let scan = self.start_scan.get_or_insert_with(Default::default);
            scan.collapsed += collapsed;
            for (k, d) in self.sources.keys().iter().zip(self.after.iter().zip(&self.before)) {
                if d.0 != d.1 {
                    *scan.counters.entry(k.clone()).or_default() += d.0 - d.1;
                }
            }
        }
        let phase = self.phases.last_mut().expect("a phase");
        phase.time_ns = phase.time_ns.filter(|_| !untimed).map(|t| t + ns as f64);
        let phase = &mut phase.counters;
        for (k, d) in deltas.chain([
            (&proc_key, minflt),
            (&maj_key, majflt),
            (&RUNNER_KEY.to_string(), runner),
        ]) {
            *self.totals.get_mut(k).expect("known key") += d;
            *phase.get_mut(k).expect("known key") += d;
        }
        Ok(())
    }

    /// Sends a command to the worker of `s`'s process and reads its op reply.
    fn ask(&mut self, s: &Stmt, cmd: Cmd) -> Result<OpReply, NativeError> {
        self.send(&s.proc_name, cmd).map_err(|e| self.err(s, e))?;
        let proc = s.proc_name.clone();
        self.reply(s, &proc)
    }

    /// Reads an op reply from `proc`'s worker; its diagnostics go to the report, under
    /// the op's position.
    fn reply(&mut self, s: &Stmt, proc: &str) -> Result<OpReply, NativeError> {
        let msg = self.await_reply(proc).map_err(|e| self.err(s, e))?;
        let r = Dec::new(&msg).and_then(|mut d| d.op()).map_err(|e| self.err(s, e))?;
        let at = format!("{}:{}:{}", self.w.path, s.pos.line, s.pos.col);
        self.diagnostics
            .extend(r.diagnostics.iter().map(|why| format!("{at}: {why}")));
        self.notes.extend(r.notes.iter().map(|what| format!("{at}: {what}")));
        Ok(r)
    }

    /// One request/reply with a worker.
    fn request(&mut self, proc: &str, cmd: Cmd) -> Result<Vec<u8>, String> {
        self.send(proc, cmd)?;
        self.await_reply(proc)
    }

    fn send(&mut self, proc: &str, cmd: Cmd) -> Result<(), String> {
        let mut sock = &self.ours[proc];
        send(&mut sock, &cmd.encode()).map_err(|e| format!("worker of process '{proc}': {e}"))
    }

    /// The next message from `proc`'s worker, watching that it stays alive.
    fn await_reply(&mut self, proc: &str) -> Result<Vec<u8>, String> {
        let pid = self.pids[proc];
        let mut sock = &self.ours[proc];
        loop {
            let mut pfd = libc::pollfd {
                fd: sock.as_raw_fd(),
                events: libc::POLLIN,
                revents: 0,
            };
            // SAFETY: pfd is one valid pollfd.
            let ready = unsafe { libc::poll(&mut pfd, 1, 200) };
            if ready > 0 {
                return recv(&mut sock).ok_or_else(|| format!("worker of process '{proc}' hung up"));
            }
            if !alive(pid) {
                return Err(format!("worker of process '{proc}' (pid {pid}) died"));
            }
        }
    }

    /// Waits until `proc`'s worker sleeps reading its socket (it has nothing left to do
    /// and takes no more faults until told).
    fn wait_blocked(&self, s: &Stmt, proc: &str) -> Result<(), NativeError> {
        let pid = self.pids[proc];
        let wchan = format!("/proc/{pid}/wchan");
        let start = Instant::now();
        loop {
            match std::fs::read_to_string(&wchan) {
                Ok(w) if w.starts_with("unix_stream") => return Ok(()),
                Ok(_) => {}
                Err(e) => return Err(self.err(s, format!("{wchan}: {e}"))),
            }
            if start.elapsed() > Duration::from_secs(60) {
                return Err(self.err(s, format!("process '{proc}' (pid {pid}) never waited for its next op")));
            }
            std::thread::yield_now();
        }
    }

    /// The min_flt of `proc`'s worker, from /proc (its 10th stat field).
    fn task_minflt(&self, s: &Stmt, proc: &str) -> Result<i64, NativeError> {
        let path = format!("/proc/{}/stat", self.pids[proc]);
        let stat = std::fs::read_to_string(&path).map_err(|e| self.err(s, format!("{path}: {e}")))?;
        // The command name may hold spaces; the fields after its ')' are plain.
        stat.rsplit_once(')')
            .and_then(|(_, rest)| rest.split_whitespace().nth(7)?.parse().ok())
            .ok_or_else(|| self.err(s, format!("{path}: no minflt field")))
    }

    /// Lets the worker of `s`, an `exit` that it has replied to, exit, and returns
    /// its time on the CPU from there to its end (`oncpu`); None, with the process
    /// gone, when the host cannot time it.
    fn exit(&mut self, s: &Stmt) -> Result<Option<u64>, NativeError> {
        // Blocked waiting for Cmd::Exit: the recording below starts before it runs.
        self.wait_blocked(s, &s.proc_name)?;
        let pid = self.pids[&s.proc_name];
        // Every worker runs on CPU 0 (`worker::serve`).
        let on_cpu = match self.switch.map(|tp| oncpu::OnCpu::open(tp, pid, 0)) {
            Some(Ok(r)) => Some(r),
            Some(Err(why)) => {
                self.switch = None;
                self.diagnostics.push(format!(
                    "{}:{}:{}: this exit and later ones untimed: {why}",
                    self.w.path, s.pos.line, s.pos.col
                ));
                None
            }
            None => None,
        };
        self.send(&s.proc_name, Cmd::Exit).map_err(|e| self.err(s, e))?;
        let ns = on_cpu.map(|r| r.until_dead().map_err(|e| self.err(s, e))).transpose()?;
        self.wait_gone(s)?;
        Ok(ns)
    }

    /// Waits until an exiting process is gone (its address space torn down).
    fn wait_gone(&mut self, s: &Stmt) -> Result<(), NativeError> {
        let pid = self.pids.remove(&s.proc_name).expect("a live process");
        let start = Instant::now();
        while alive(pid) {
            if start.elapsed() > Duration::from_secs(60) {
                return Err(self.err(s, format!("process '{}' (pid {pid}) did not exit", s.proc_name)));
            }
            std::thread::sleep(Duration::from_micros(200));
        }
        Ok(())
    }

    /// Collects every live process's layout, then ends the workers.
    fn finish(
        &mut self,
        unavailable: &mut BTreeMap<String, String>,
    ) -> Result<BTreeMap<String, Vec<crate::report::Run>>, NativeError> {
        let mut layout = BTreeMap::new();
        let procs: Vec<String> = self.pids.keys().cloned().collect();
        for p in &procs {
            let reply = self.request(p, Cmd::Layout).map_err(NativeError::Host)?;
            match Dec::new(&reply) {
                Ok(mut d) => {
                    while !d.is_empty() {
                        let (region, runs) = d.region().map_err(NativeError::Host)?;
                        layout.insert(format!("{p}/{region}"), runs);
                    }
                }
                Err(why) => {
                    unavailable.insert("layout".into(), why);
                    layout.clear();
                    break;
                }
            }
        }
        // Closing our ends makes every worker see end-of-file and exit; the swap device
        // and the cgroup go only once they are gone.
        self.ours.clear();
        let start = Instant::now();
        while self.pids.values().any(|&pid| alive(pid)) {
            if start.elapsed() > Duration::from_secs(60) {
                return Err(NativeError::Host("the workers did not exit".into()));
            }
            std::thread::sleep(Duration::from_micros(200));
        }
        Ok(layout)
    }
}

fn snap_err(e: std::io::Error) -> NativeError {
    NativeError::Host(format!("reading counters: {e}"))
}

/// Whether `pid` still exists (SIGCHLD is ignored, so exited workers leave no zombie).
fn alive(pid: libc::pid_t) -> bool {
    // SAFETY: signal 0 only checks for existence.
    let rc = unsafe { libc::kill(pid, 0) };
    rc == 0 || std::io::Error::last_os_error().raw_os_error() != Some(libc::ESRCH)
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn node_lists_read_as_sysfs_writes_them() {
        assert_eq!(parse_node_list("0"), [0]);
        assert_eq!(parse_node_list("0-2,5"), [0, 1, 2, 5]);
        assert_eq!(parse_node_list(""), Vec::<usize>::new());
    }

    #[test]
    fn a_migrate_to_a_node_without_memory_is_refused_at_its_node() {
        let dir = std::env::temp_dir().join(format!("foliolab-nodes-{}", std::process::id()));
        std::fs::create_dir_all(&dir).unwrap();
        std::fs::write(dir.join("has_memory"), "0-1\n").unwrap();
        let text = "mmap a 64K\nmigrate a node=1\nmigrate a node=2\n";
        let w = crate::workload::parse_str("w.wl", text).unwrap();
        let e = refuse_missing_nodes(&w, &dir).unwrap_err().to_string();
        assert_eq!(
            e,
            format!(
                "w.wl:3:11: migrate: this host has no NUMA node 2 with memory ({} lists 0-1)",
                dir.join("has_memory").display()
            )
        );
        std::fs::write(dir.join("has_memory"), "0-2\n").unwrap();
        assert!(refuse_missing_nodes(&w, &dir).is_ok());
        std::fs::remove_dir_all(&dir).unwrap();
    }
}
