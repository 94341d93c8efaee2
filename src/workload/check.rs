//! Static validation of a parsed workload: each op runs on an abstract state (live
//! processes, their regions and which pages of each are mapped with what protection), so
//! that nothing an executor does can fault on an unmapped or protected page, or map over
//! a live region. `repeat` bodies run on that state until it repeats (or N times), which
//! covers every iteration an executor will run: the abstract step is deterministic.

use super::ast::*;
use super::parse::{fmt_size, Echo, MAIN};
use std::collections::BTreeMap;

/// A statement with the source positions of its operands, for messages.
pub(crate) struct Node {
    pub stmt: Stmt,
    pub at: Spans,
    /// The body of a `repeat` (its `stmt` has an empty one until `into_stmt`).
    pub body: Vec<Node>,
}

impl Node {
    pub fn into_stmt(self) -> Stmt {
        let mut stmt = self.stmt;
        if let Op::Repeat { body, .. } = &mut stmt.op {
            *body = self.body.into_iter().map(Node::into_stmt).collect();
        }
        stmt
    }
}

/// Where an op's operands are.
#[derive(Clone, Copy, Default)]
pub(crate) struct Spans {
    /// The `@proc` token.
    pub proc: Option<Pos>,
    /// The region (or child process) name.
    pub name: Pos,
    /// The offset of `OFF LEN`.
    pub range: Option<Pos>,
    /// The new size of an `mremap`.
    pub size: Option<Pos>,
}

#[derive(Clone, PartialEq, Eq)]
struct Region {
    size: u64,
    /// Line of the mmap, for messages.
    line: u32,
    /// Mapped byte intervals `[start, end)` with their protection: sorted, disjoint, and
    /// adjacent intervals differ in protection.
    maps: Vec<(u64, u64, Prot)>,
    /// A shared (shmem) mapping: only the ops the model has for it are allowed.
    shared: bool,
    /// A memfd_secret mapping: touch, munmap and exit only.
    secret: bool,
    /// Where the region starts in its 64G placement slot (its skew, until a move).
    slot_off: u64,
    /// The op and line that may have split the region's VMA by flags the maps above
    /// do not track (VM_LOCKED, VM_(NO)HUGEPAGE on a part): mremap moves one VMA.
    vma_split: Option<(&'static str, u32)>,
}

impl Region {
    /// Why `op` on this region is refused: a secret region takes no op but touch,
    /// munmap and exit, a shared one only those shmem has (`shmem_has_it`).
    fn not_modeled(&self, op: &Op, region: &str, shmem_has_it: bool) -> Option<String> {
        if self.secret {
            Some(secret_not_modeled(op, region))
        } else if self.shared && !shmem_has_it {
            Some(shared_not_modeled(op, region))
        } else {
            None
        }
    }

    /// Sets `r` to `prot`, or unmaps it.
    fn set(&mut self, r: Range, prot: Option<Prot>) {
        let (s, e) = (r.off, r.off + r.len);
        let mut out = Vec::with_capacity(self.maps.len() + 2);
        for &(a, b, p) in &self.maps {
            if a < s {
                out.push((a, b.min(s), p));
            }
            if b > e {
                out.push((a.max(e), b, p));
            }
        }
        if let Some(p) = prot {
            out.push((s, e, p));
        }
        out.sort_unstable_by_key(|m| m.0);
        self.maps.clear();
        for m in out {
            match self.maps.last_mut() {
                Some(last) if last.1 == m.0 && last.2 == m.2 => last.1 = m.1,
                _ => self.maps.push(m),
            }
        }
    }

    /// The first byte of `r` that is unmapped (None) or mapped without an allowed
    /// protection (Some of it).
    fn first_bad(&self, r: Range, allowed: impl Fn(Prot) -> bool) -> Option<(u64, Option<Prot>)> {
        let mut at = r.off;
        for &(a, b, p) in &self.maps {
            if b <= at {
                continue;
            }
            if a > at {
                return Some((at, None));
            }
            if !allowed(p) {
                return Some((at, Some(p)));
            }
            at = b;
            if at >= r.off + r.len {
                return None;
            }
        }
        Some((at, None))
    }
}

#[derive(Clone, PartialEq, Eq, Default)]
struct Proc {
    regions: BTreeMap<String, Region>,
    /// Regions fully unmapped, with the line, for messages.
    unmapped: BTreeMap<String, u32>,
    /// The line of its `exit`.
    exited: Option<u32>,
}

/// A named thread: its process, and the line of its `exit`.
#[derive(Clone, PartialEq, Eq)]
struct Thread {
    owner: String,
    exited: Option<u32>,
}

#[derive(Clone, PartialEq, Eq)]
struct State {
    procs: BTreeMap<String, Proc>,
    threads: BTreeMap<String, Thread>,
    /// The line of the `swapon`, once one has run.
    swapon: Option<u32>,
    /// The line of the `memlimit`, once one has run.
    memlimit: Option<u32>,
    /// The line of the first `mmap` or `fork`, after which no `memlimit` may come.
    first_memory: Option<u32>,
}

/// The most ops a workload runs, repeats multiplied out: a billion model ops take an
/// hour or more, so a larger count is a mistake (or a fuzzer), refused before it runs.
pub const MAX_OPS: u64 = 1 << 30;
/// The most phases (`mark`s run): each keeps a copy of every counter, 33 KiB of host
/// memory (hostmem::cost::PHASE), so 16384 of them take about half a gigabyte.
pub const MAX_PHASES: u64 = 1 << 14;
/// The most processes that may live at once (fork names): PID_MAX_DEFAULT, the
/// kernel's default pid_max.
pub const MAX_PROCS: usize = 1 << 15;

/// Bounds the work `stmts` asks for: ops and phases run, repeats multiplied out in
/// checked arithmetic, and the processes that may live at once.
pub(crate) fn bounds(path: &str, stmts: &[Stmt]) -> Result<(), WorkloadError> {
    let err = |pos, msg: String| WorkloadError {
        path: path.to_string(),
        pos,
        msg,
    };
    executed(stmts, &|_| true, MAX_OPS).map_err(|pos| {
        err(
            pos,
            format!(
                "the workload would run more than {MAX_OPS} ops here (repeats multiplied out); lower the repeat counts"
            ),
        )
    })?;
    executed(stmts, &|op| matches!(op, Op::Mark { .. }), MAX_PHASES).map_err(|pos| {
        err(
            pos,
            format!("the workload would start more than {MAX_PHASES} phases here (marks, repeats multiplied out)"),
        )
    })?;
    fn forks<'s>(stmts: &'s [Stmt], names: &mut std::collections::BTreeSet<&'s str>) -> Option<Pos> {
        stmts.iter().find_map(|s| match &s.op {
            Op::Fork { child } => {
                names.insert(child);
                (names.len() > MAX_PROCS).then_some(s.pos)
            }
            Op::Repeat { body, .. } => forks(body, names),
            _ => None,
        })
    }
    match forks(stmts, &mut Default::default()) {
        Some(pos) => Err(err(
            pos,
            format!(
                "more than {MAX_PROCS} process names (the kernel's default pid_max): reuse names of exited processes"
            ),
        )),
        None => Ok(()),
    }
}

pub(crate) fn check(path: &str, nodes: &[Node]) -> Result<(), WorkloadError> {
    let mut st = State {
        procs: BTreeMap::from([(MAIN.to_string(), Proc::default())]),
        threads: BTreeMap::new(),
        swapon: None,
        memlimit: None,
        first_memory: None,
    };
    Checker { path }.run(&mut st, nodes)
}

struct Checker<'p> {
    path: &'p str,
}

impl Checker<'_> {
    fn err(&self, pos: Pos, msg: impl Into<String>) -> WorkloadError {
        WorkloadError {
            path: self.path.to_string(),
            pos,
            msg: msg.into(),
        }
    }

    fn run(&self, st: &mut State, nodes: &[Node]) -> Result<(), WorkloadError> {
        nodes.iter().try_for_each(|n| self.step(st, n))
    }

    fn step(&self, st: &mut State, node: &Node) -> Result<(), WorkloadError> {
        let (stmt, at) = (&node.stmt, node.at);
        if let Op::Repeat { n, .. } = stmt.op {
            let mut seen = vec![st.clone()];
            for i in 0..n {
                self.run(st, &node.body).map_err(|mut e| {
                    if i > 0 {
                        e.msg += &format!(" (in iteration {} of the repeat at line {})", i + 1, stmt.pos.line);
                    }
                    e
                })?;
                if seen.contains(st) {
                    break;
                }
                seen.push(st.clone());
            }
            return Ok(());
        }
        if let Op::Swapon { size } = stmt.op {
            if let Some(line) = st.swapon {
                return Err(self.err(stmt.pos, format!("a swap device is already on (swapon at line {line})")));
            }
            if size < 2 * 4096 {
                return Err(self.err(stmt.pos, "a swap device needs a header page and a slot (8K at least)"));
            }
            if size / UNIT > crate::mm::swapfile::MAX_SWAP_PAGES {
                return Err(self.err(
                    stmt.pos,
                    "a swap device has at most 2^32 pages (the swap header's last_page is 32 bits): 16T of 4K pages",
                ));
            }
            st.swapon = Some(stmt.pos.line);
        }
        if let Op::Memlimit { size } = stmt.op {
            if let Some(line) = st.memlimit {
                return Err(self.err(
                    stmt.pos,
                    format!("a memory limit is already set (memlimit at line {line})"),
                ));
            }
            if let Some(line) = st.first_memory {
                return Err(self.err(
                    stmt.pos,
                    format!("memlimit must come before any mmap or fork (line {line}), so all the workload's memory is charged"),
                ));
            }
            if size < 4096 || size % 4096 != 0 {
                return Err(self.err(stmt.pos, "a memory limit must be a nonzero multiple of 4K"));
            }
            st.memlimit = Some(stmt.pos.line);
        }
        if matches!(stmt.op, Op::Mmap { .. } | Op::Fork { .. }) && st.first_memory.is_none() {
            st.first_memory = Some(stmt.pos.line);
        }
        let proc_pos = at.proc.unwrap_or(stmt.pos);
        // A thread's ops act on its process's address space.
        let (name, thread) = match st.threads.get(&stmt.proc_name) {
            Some(Thread { exited: Some(line), .. }) => {
                return Err(self.err(
                    proc_pos,
                    format!("thread '{}' exited at line {line}", Echo(&stmt.proc_name)),
                ))
            }
            Some(t) => (t.owner.clone(), Some(stmt.proc_name.clone())),
            None => (stmt.proc_name.clone(), None),
        };
        if let Op::Fork { child: new } | Op::Thread { name: new } = &stmt.op {
            let live_thread = st.threads.get(new).is_some_and(|t| t.exited.is_none());
            let live_proc = st.procs.get(new).is_some_and(|p| p.exited.is_none());
            if live_thread || live_proc {
                let what = if live_thread { "thread" } else { "process" };
                return Err(self.err(at.name, format!("{what} '{}' already exists", Echo(new))));
            }
        }
        let name = &name;
        let proc = match st.procs.get_mut(name) {
            None => {
                return Err(self.err(
                    proc_pos,
                    format!("unknown process '{name}' (no 'fork {name}' before)", name = Echo(name)),
                ))
            }
            Some(Proc { exited: Some(line), .. }) => {
                return Err(self.err(
                    proc_pos,
                    format!("process '{name}' exited at line {line}", name = Echo(name)),
                ))
            }
            Some(p) => p,
        };
        match &stmt.op {
            Op::Set { .. }
            | Op::Mark { .. }
            | Op::Shrink
            | Op::Khugepaged
            | Op::Swapon { .. }
            | Op::Memlimit { .. }
            | Op::ThreadsAll
            | Op::Cpu { .. } => {}
            Op::Thread { name: t } => {
                st.threads.insert(
                    t.clone(),
                    Thread {
                        owner: name.clone(),
                        exited: None,
                    },
                );
            }
            Op::Mmap {
                region,
                size,
                ro,
                shared,
                secret,
                skew,
                ..
            } => {
                if let Some(r) = proc.regions.get(region) {
                    return Err(self.err(
                        at.name,
                        format!(
                            "region '{region}' is already mapped in process '{name}' (line {})",
                            r.line,
                            region = Echo(region),
                            name = Echo(name),
                        ),
                    ));
                }
                let prot = if *ro { Prot::R } else { Prot::Rw };
                proc.unmapped.remove(region);
                proc.regions.insert(
                    region.clone(),
                    Region {
                        size: *size,
                        line: stmt.pos.line,
                        maps: vec![(0, *size, prot)],
                        shared: *shared,
                        secret: *secret,
                        slot_off: *skew,
                        vma_split: None,
                    },
                );
            }
            Op::Touch {
                region, range, write, ..
            } => {
                let (reg, r) = self.region(proc, name, region, *range, at)?;
                let allowed = |p| if *write { p == Prot::Rw } else { p != Prot::None };
                if let Some((bad, prot)) = reg.first_bad(r, allowed) {
                    let what = match prot {
                        None => "not mapped",
                        Some(Prot::R) => "mapped read-only",
                        Some(_) => "mapped PROT_NONE",
                    };
                    return Err(self.err(
                        at.range.unwrap_or(at.name),
                        format!(
                            "touch reaches {} of region '{}', which is {what}",
                            fmt_size(bad),
                            Echo(region)
                        ),
                    ));
                }
            }
            Op::Madvise { region, range, .. }
            | Op::Mprotect { region, range, .. }
            | Op::Mlock {
                region,
                range: Some(range),
            }
            | Op::Munlock {
                region,
                range: Some(range),
            } => {
                let (reg, r) = self.region(proc, name, region, Some(*range), at)?;
                let modeled = matches!(
                    stmt.op,
                    Op::Madvise {
                        advice: Advice::DontNeed | Advice::PageOut,
                        ..
                    }
                );
                if let Some(why) = reg.not_modeled(&stmt.op, region, modeled) {
                    return Err(self.err(at.name, why));
                }
                if let Some((bad, _)) = reg.first_bad(r, |_| true) {
                    return Err(self.err(
                        at.range.unwrap_or(at.name),
                        format!("{} of region '{}' is not mapped", fmt_size(bad), Echo(region)),
                    ));
                }
                if let Op::Mprotect { prot, .. } = stmt.op {
                    reg.set(r, Some(prot));
                }
                let partial = r.len != reg.size;
                match stmt.op {
                    Op::Mlock { .. } => reg.vma_split = Some(("mlock", stmt.pos.line)),
                    Op::Madvise {
                        advice: Advice::HugePage | Advice::NoHugePage,
                        ..
                    } if partial => reg.vma_split = Some(("madvise", stmt.pos.line)),
                    _ => {}
                }
            }
            Op::Mlock { region, range: None } | Op::Munlock { region, range: None } => {
                let reg = self.region(proc, name, region, None, at)?.0;
                if let Some(why) = reg.not_modeled(&stmt.op, region, false) {
                    return Err(self.err(at.name, why));
                }
                if matches!(stmt.op, Op::Mlock { .. }) {
                    reg.vma_split = Some(("mlock", stmt.pos.line));
                }
            }
            Op::Mremap { region, size, moves } => {
                let reg = self.region(proc, name, region, None, at)?.0;
                if let Some(why) = reg.not_modeled(&stmt.op, region, false) {
                    return Err(self.err(at.name, why));
                }
                let whole = |m: &[(u64, u64, Prot)]| match m {
                    [(0, end, p)] if *end == reg.size => Some(*p),
                    _ => None,
                };
                let Some(prot) = whole(&reg.maps) else {
                    return Err(self.err(
                        at.name,
                        format!(
                            "mremap of region '{}' needs all of it mapped with one protection (one VMA)",
                            Echo(region)
                        ),
                    ));
                };
                if let Some((what, line)) = reg.vma_split {
                    return Err(self.err(
                        at.name,
                        format!(
                            "mremap of region '{}' after the {what} at line {line}, which may have split its VMA: not supported (mremap moves one VMA)",
                            Echo(region)
                        ),
                    ));
                }
                let half = PLACEMENT_STRIDE / 2;
                let off = match (*moves, reg.slot_off < half) {
                    (false, _) => reg.slot_off,
                    (true, true) => reg.slot_off + half,
                    (true, false) => reg.slot_off - half,
                };
                if off + size > PLACEMENT_STRIDE {
                    return Err(self.err(
                        at.size.unwrap_or(at.name),
                        format!(
                            "region '{}' of {} at {} in its placement slot would leave the slot's 64G",
                            Echo(region),
                            fmt_size(*size),
                            fmt_size(off)
                        ),
                    ));
                }
                reg.size = *size;
                reg.maps = vec![(0, *size, prot)];
                reg.slot_off = off;
            }
            // move_pages(2) gives pages with nothing mapped a status, not an error.
            Op::Migrate { region, range, .. } => {
                if let Some(why) = self
                    .region(proc, name, region, *range, at)?
                    .0
                    .not_modeled(&stmt.op, region, false)
                {
                    return Err(self.err(at.name, why));
                }
            }
            Op::Munmap { region, range } => {
                let (reg, r) = self.region(proc, name, region, *range, at)?;
                reg.set(r, None);
                if reg.maps.is_empty() {
                    proc.regions.remove(region);
                    proc.unmapped.insert(region.clone(), stmt.pos.line);
                }
            }
            Op::Fork { child } => {
                if let Some((region, _)) = proc.regions.iter().find(|(_, r)| r.secret) {
                    return Err(self.err(stmt.pos, secret_not_modeled(&stmt.op, region)));
                }
                let copy = Proc {
                    exited: None,
                    ..proc.clone()
                };
                st.procs.insert(child.clone(), copy);
            }
            Op::Exit => {
                let line = Some(stmt.pos.line);
                if let Some(t) = thread {
                    st.threads.get_mut(&t).expect("a live thread").exited = line;
                } else {
                    *proc = Proc {
                        exited: line,
                        ..Proc::default()
                    };
                    for t in st
                        .threads
                        .values_mut()
                        .filter(|t| &t.owner == name && t.exited.is_none())
                    {
                        t.exited = line;
                    }
                }
            }
            Op::Repeat { .. } => unreachable!("handled above"),
        }
        Ok(())
    }

    /// The live region `region` of `proc` and the range an op addresses (whole region if
    /// `range` is None), checked to lie inside it.
    fn region<'s>(
        &self,
        proc: &'s mut Proc,
        name: &str,
        region: &str,
        range: Option<Range>,
        at: Spans,
    ) -> Result<(&'s mut Region, Range), WorkloadError> {
        let Some(reg) = proc.regions.get_mut(region) else {
            let msg = match proc.unmapped.get(region) {
                Some(line) => format!("region '{region}' was unmapped at line {line}", region = Echo(region)),
                None => format!(
                    "region '{region}' is not mapped in process '{name}'",
                    region = Echo(region),
                    name = Echo(name)
                ),
            };
            return Err(self.err(at.name, msg));
        };
        let r = range.unwrap_or(Range { off: 0, len: reg.size });
        if r.off.checked_add(r.len).is_none_or(|end| end > reg.size) {
            return Err(self.err(
                at.range.unwrap_or(at.name),
                format!(
                    "range {}+{} is outside region '{region}' (size {})",
                    fmt_size(r.off),
                    fmt_size(r.len),
                    fmt_size(reg.size),
                    region = Echo(region),
                ),
            ));
        }
        Ok((reg, r))
    }
}

/// The refusal of an op the model does not have for shared (shmem) mappings.
fn shared_not_modeled(op: &Op, region: &str) -> String {
    not_modeled_on(
        op,
        region,
        "of the shared",
        "touch, madvise dontneed and pageout, munmap, fork and exit",
    )
}

/// The refusal of an op the model does not have for memfd_secret mappings.
fn secret_not_modeled(op: &Op, region: &str) -> String {
    not_modeled_on(op, region, "the secret", "touch, munmap and exit")
}

/// "`op` `kind` region 'R' is not modeled (... mappings have `has`)".
fn not_modeled_on(op: &Op, region: &str, kind: &str, has: &str) -> String {
    let what = match op {
        Op::Madvise { advice, .. } => format!("madvise {}", advice.name()),
        Op::Fork { .. } => "fork of a process with".to_string(),
        op => op.keyword().to_string(),
    };
    let mappings = kind.rsplit(' ').next().unwrap_or(kind);
    format!(
        "{what} {kind} region '{}' is not modeled ({mappings} mappings have {has})",
        Echo(region)
    )
}

#[cfg(test)]
mod tests {
    use crate::workload::parse_str;

    #[track_caller]
    fn fails(src: &str, line: u32, col: u32, msg: &str) {
        let e = parse_str("t.wl", src).expect_err("should fail");
        assert_eq!((e.pos.line, e.pos.col), (line, col), "{e}");
        assert!(e.msg.contains(msg), "'{e}' lacks '{msg}'");
    }

    #[track_caller]
    fn ok(src: &str) {
        parse_str("t.wl", src).unwrap_or_else(|e| panic!("{e}"));
    }

    #[test]
    fn mremap_follows_the_region_and_refuses_what_it_cannot_move() {
        ok("mmap a 64K\nmremap a 128K move\ntouch a 64K 64K\nmremap a 4K\nrepeat 3\n  mremap a 4K move\nend\ntouch a");
        fails(
            "mmap a 64K\nmremap a 4K\ntouch a 4K 4K",
            3,
            9,
            "outside region 'a' (size 4K)",
        );
        fails("mremap a 4K", 1, 8, "region 'a' is not mapped");
        fails("mmap a 64K\nmunmap a\nmremap a 4K", 3, 8, "unmapped at line 2");
        fails("mmap a 64K\nmremap a 0", 2, 10, "not a non-zero multiple of 4K");
        fails("mmap a 64K\nmremap a 6K", 2, 10, "not a non-zero multiple of 4K");
        fails("mmap a 64K\nmremap a 64K moving", 2, 14, "expected move");
        fails(
            "mmap a 64K\nmunmap a 0 4K\nmremap a 64K",
            3,
            8,
            "one protection (one VMA)",
        );
        fails(
            "mmap a 64K\nmprotect a 0 4K r\nmremap a 64K move",
            3,
            8,
            "one protection",
        );
        fails(
            "mmap a 64K\nmadvise a 0 4K hugepage\nmremap a 64K",
            3,
            8,
            "madvise at line 2",
        );
        fails("mmap a 64K\nmlock a\nmunlock a\nmremap a 64K", 4, 8, "mlock at line 2");
        fails("mmap a 64K shared\nmremap a 64K", 2, 8, "not modeled");
        // A move to the upper half leaves 32G there; in place the slot's 64G bound.
        fails(
            "mmap a 64K skew=1G\nmremap a 32G move",
            2,
            10,
            "would leave the slot's 64G",
        );
        ok("mmap a 64K skew=1G\nmremap a 31G move\nmremap a 31G move\nmremap a 32G");
    }

    #[test]
    fn regions_must_be_live() {
        fails("touch a", 1, 7, "region 'a' is not mapped in process 'main'");
        fails(
            "mmap a 8K\nmunmap a\ntouch a",
            3,
            7,
            "region 'a' was unmapped at line 2",
        );
        fails(
            "mmap a 8K\nmunmap a 0 4K\nmunmap a 4K 4K\nmadvise a 0 4K cold",
            4,
            9,
            "unmapped at line 3",
        );
        fails(
            "mmap a 8K\nmmap a 8K",
            2,
            6,
            "already mapped in process 'main' (line 1)",
        );
        ok("mmap a 8K\nmunmap a\nmmap a 8K\ntouch a");
    }

    #[test]
    fn ranges_must_be_inside_and_mapped() {
        fails(
            "mmap a 64K\ntouch a 60K 8K",
            2,
            9,
            "range 60K+8K is outside region 'a' (size 64K)",
        );
        fails("mmap a 64K\nmadvise a 64K 4K dontneed", 2, 11, "outside");
        fails("mmap a 64K\nmunmap a 0x10000 0x1000", 2, 10, "outside");
        fails(
            "mmap a 64K\nmunmap a 16K 4K\ntouch a",
            3,
            7,
            "touch reaches 16K of region 'a', which is not mapped",
        );
        fails(
            "mmap a 64K\nmunmap a 16K 4K\nmprotect a 12K 8K r",
            3,
            12,
            "16K of region 'a' is not mapped",
        );
        fails(
            "mmap a 64K\nmunmap a 16K 4K\nmlock a 0 64K",
            3,
            9,
            "16K of region 'a' is not mapped",
        );
        ok("mmap a 64K\nmunmap a 16K 4K\ntouch a 0 16K\ntouch a 20K 44K\nmunmap a 0 32K\nmunmap a\n");
    }

    #[test]
    fn protections_are_tracked() {
        fails(
            "mmap a 8K ro\ntouch a",
            2,
            7,
            "touch reaches 0 of region 'a', which is mapped read-only",
        );
        ok("mmap a 8K ro\ntouch a read");
        fails(
            "mmap a 8K\nmprotect a 4K 4K none\ntouch a 0 8K read",
            3,
            9,
            "touch reaches 4K of region 'a', which is mapped PROT_NONE",
        );
        ok("mmap a 8K\nmprotect a 4K 4K r\nmprotect a 4K 4K rw\ntouch a");
        ok("mmap a 8K ro\nmprotect a 0 8K rw\ntouch a");
    }

    #[test]
    fn processes() {
        fails("@c touch a", 1, 1, "unknown process 'c'");
        fails("fork c\nfork c", 2, 6, "process 'c' already exists");
        fails("exit\ntouch a", 2, 1, "process 'main' exited at line 1");
        fails("fork c\n@c exit\n@c mark x", 3, 1, "exited at line 2");
        // The child gets the parent's regions as they were at the fork.
        ok("mmap a 8K\nfork c\n@c touch a\nmunmap a\n@c touch a\n@c munmap a\n");
        fails(
            "mmap a 8K\nfork c\n@c munmap a\n@c touch a",
            4,
            10,
            "unmapped at line 3",
        );
        fails("fork c\nmmap a 8K\n@c touch a", 3, 10, "not mapped in process 'c'");
        fails(
            "mmap a 8K\nmprotect a 0 4K r\nfork c\n@c touch a",
            4,
            10,
            "mapped read-only",
        );
        // A name can be reused once its process exited.
        ok("fork c\n@c exit\nfork c\n@c exit");
    }

    #[test]
    fn repeat_bodies_are_checked_as_executed() {
        fails(
            "repeat 2\n  mmap a 8K\nend",
            2,
            8,
            "already mapped in process 'main' (line 2) (in iteration 2 of the repeat at line 1)",
        );
        ok("repeat 1\n  mmap a 8K\nend\ntouch a");
        ok("repeat 100\n  mmap a 8K\n  touch a\n  munmap a\nend");
        fails(
            "mmap a 8K\nrepeat 3\n  touch a\n  munmap a\nend",
            3,
            9,
            "unmapped at line 4 (in iteration 2",
        );
        fails("repeat 2\n  fork c\nend", 2, 8, "already exists (in iteration 2");
        ok("mmap a 8K\nrepeat 100000000\n  fork c\n  @c touch a\n  @c exit\nend");
        fails(
            "mmap a 8K\nrepeat 5\n  touch a\n  mprotect a 0 4K r\nend",
            3,
            9,
            "mapped read-only (in iteration 2",
        );
        // A state reached only in iteration 4: a chain of copies through forks.
        let chain = "mmap a 8K\nfork p\nfork q\nfork r\nmunmap a\nrepeat N\n  @r touch a\n  @r exit\n  @q fork r\n  \
                     @q exit\n  @p fork q\n  @p exit\n  fork p\nend";
        ok(&chain.replace('N', "3"));
        fails(
            &chain.replace('N', "4"),
            7,
            12,
            "unmapped at line 5 (in iteration 4 of the repeat at line 6)",
        );
        fails(
            "mmap a 8K\nrepeat 2\n  repeat 2\n    munmap a\n  end\nend",
            4,
            12,
            "(in iteration 2 of the repeat at line 3)",
        );
    }

    #[test]
    fn work_is_bounded_before_it_runs() {
        fails(
            "mmap a 8K\nrepeat 1000000000000\n  touch a\nend",
            2,
            1,
            "more than 1073741824 ops here (repeats multiplied out)",
        );
        // Nested counts that would overflow u64 are refused, not wrapped: at the
        // repeat whose count passes the bound.
        let deep = "repeat 4000\n".repeat(6) + "touch a\n" + &"end\n".repeat(6);
        fails(&format!("mmap a 4K\n{deep}"), 5, 1, "more than 1073741824 ops");
        fails("repeat 100000\n  mark a\nend", 1, 1, "more than 16384 phases");
        ok("repeat 16384\n  mark a\nend");
        let forks: String = (0..=super::MAX_PROCS).map(|i| format!("fork c{i}\n")).collect();
        fails(&forks, super::MAX_PROCS as u32 + 1, 1, "more than 32768 process names");
    }

    #[test]
    fn swap_devices_are_bounded_by_the_header() {
        ok("swapon 16T");
        fails("swapon 128T", 1, 1, "at most 2^32 pages");
    }

    #[test]
    fn an_empty_repeat_runs_nothing() {
        for src in [
            "repeat 18446744073709551615\nend",
            "repeat 18446744073709551615\n  repeat 5\n  end\nend",
        ] {
            let w = parse_str("t.wl", src).unwrap();
            assert!(w.stmts.is_empty(), "{src}");
        }
        let w = parse_str("t.wl", "repeat 3\n  repeat 5\n  end\n  mark x\nend").unwrap();
        assert_eq!(crate::workload::executed(&w.stmts, &|_| true, u64::MAX), Ok(3));
    }

    #[test]
    fn a_secret_region_takes_touch_munmap_and_exit_only() {
        ok("mmap s 16K secret\ntouch s\ntouch s 0 4K read\nmunmap s 0 4K\nexit");
        fails(
            "mmap s 16K secret\nmadvise s 0 4K dontneed",
            2,
            9,
            "madvise dontneed the secret region 's' is not modeled",
        );
        fails(
            "mmap s 16K secret\nfork c",
            2,
            1,
            "fork of a process with the secret region 's'",
        );
        fails(
            "mmap s 16K secret\nmprotect s 0 4K r",
            2,
            10,
            "mprotect the secret region",
        );
        fails("mmap s 16K shared secret", 1, 19, "'secret' and 'shared' conflict");
        fails("mmap s 16K secret ro", 1, 19, "'secret' and 'ro' conflict");
    }

    #[test]
    fn a_shared_region_takes_only_the_ops_modeled_for_shmem() {
        ok("mmap a 8K shared\ntouch a\nmadvise a 0 8K pageout\nmadvise a 0 4K dontneed\nfork c\n@c munmap a 0 4K\nexit");
        fails(
            "mmap a 8K shared\nmadvise a 0 8K free",
            2,
            9,
            "madvise free of the shared region 'a' is not modeled",
        );
        fails(
            "mmap a 8K shared\nmlock a",
            2,
            7,
            "mlock of the shared region 'a' is not modeled",
        );
        fails(
            "mmap a 8K shared\nmprotect a 0 4K r",
            2,
            10,
            "mprotect of the shared region 'a' is not modeled",
        );
    }

    #[test]
    fn interval_map_merges_and_splits() {
        use super::Region;
        use crate::workload::{Prot, Range};
        let mut r = Region {
            size: 64,
            line: 1,
            maps: vec![(0, 64, Prot::Rw)],
            shared: false,
            secret: false,
            slot_off: 0,
            vma_split: None,
        };
        r.set(Range { off: 16, len: 16 }, Some(Prot::R));
        assert_eq!(r.maps, [(0, 16, Prot::Rw), (16, 32, Prot::R), (32, 64, Prot::Rw)]);
        r.set(Range { off: 16, len: 16 }, Some(Prot::Rw));
        assert_eq!(r.maps, [(0, 64, Prot::Rw)]);
        r.set(Range { off: 8, len: 48 }, None);
        assert_eq!(r.maps, [(0, 8, Prot::Rw), (56, 64, Prot::Rw)]);
        assert_eq!(r.first_bad(Range { off: 0, len: 8 }, |_| true), None);
        assert_eq!(r.first_bad(Range { off: 0, len: 16 }, |_| true), Some((8, None)));
        assert_eq!(
            r.first_bad(Range { off: 56, len: 8 }, |p| p == Prot::R),
            Some((56, Some(Prot::Rw)))
        );
        r.set(Range { off: 0, len: 64 }, None);
        assert!(r.maps.is_empty());
    }
}
