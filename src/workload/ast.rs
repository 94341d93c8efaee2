//! The parsed, validated form of a workload (../shared/spec/workload.md).
//!
//! The parser resolves everything static: each `mmap` knows its placement address,
//! every range is checked against the region it names, and `repeat` bodies are kept
//! as nested statements (executors unroll them).

/// A source position (1-based).
#[derive(Clone, Copy, Debug, PartialEq, Eq, Default)]
pub struct Pos {
    pub line: u32,
    pub col: u32,
}

/// Base address of the k-th mmap: 0x100000000000 + k * 64 GiB.
pub const PLACEMENT_BASE: u64 = 0x1000_0000_0000;
pub const PLACEMENT_STRIDE: u64 = 0x10_0000_0000;
/// The largest region.
pub const MAX_REGION: u64 = 32 << 30;
/// The unit of offsets and lengths (the validation host's base page).
pub const UNIT: u64 = 4096;

#[derive(Clone, Debug, PartialEq, Eq)]
pub struct Workload {
    /// The file name as given (used in error messages).
    pub path: String,
    /// The source text, as recorded with a result.
    pub text: String,
    pub stmts: Vec<Stmt>,
    /// The machine the workload needs (its `machine` line): at least these values of
    /// the `nodes`, `cpus` and `ram` variants.
    pub machine: Vec<MachineNeed>,
}

/// One `KEY=VALUE` of a workload's `machine` line.
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct MachineNeed {
    /// `nodes`, `cpus` or `ram`.
    pub key: &'static str,
    pub value: String,
    pub pos: Pos,
}

#[derive(Clone, Debug, PartialEq, Eq)]
pub struct Stmt {
    pub pos: Pos,
    /// The process the op runs in (resolved: `@proc` or the current process).
    pub proc_name: String,
    pub op: Op,
}

/// A byte range inside a region: `off .. off + len`.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub struct Range {
    pub off: u64,
    pub len: u64,
}

#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum Advice {
    DontNeed,
    Free,
    PageOut,
    Cold,
    HugePage,
    NoHugePage,
    Collapse,
}

impl Advice {
    /// The advice as the workload language spells it.
    pub fn name(self) -> &'static str {
        match self {
            Advice::DontNeed => "dontneed",
            Advice::Free => "free",
            Advice::PageOut => "pageout",
            Advice::Cold => "cold",
            Advice::HugePage => "hugepage",
            Advice::NoHugePage => "nohugepage",
            Advice::Collapse => "collapse",
        }
    }
}

#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum Prot {
    None,
    R,
    Rw,
}

#[derive(Clone, Debug, PartialEq, Eq)]
pub enum Op {
    Set {
        knob: String,
        value: String,
    },
    Mmap {
        region: String,
        size: u64,
        skew: u64,
        hugepage: bool,
        nohugepage: bool,
        populate: bool,
        ro: bool,
        /// MAP_SHARED (shared anonymous memory, shmem) instead of MAP_PRIVATE.
        shared: bool,
        /// memfd_secret(2) memory: a MAP_SHARED mapping of a secretmem file, whose
        /// pages leave the kernel's linear map while they are in it.
        secret: bool,
        index: u32,
        addr: u64,
    },
    /// `range` None means the whole region.
    Touch {
        region: String,
        range: Option<Range>,
        write: bool,
        stride: u64,
    },
    /// `step`: one madvise call per `step` bytes of the range (an extension of the
    /// spec, `step=S` with S dividing LEN); the whole range in one call by default.
    Madvise {
        region: String,
        range: Range,
        advice: Advice,
        step: Option<u64>,
    },
    Munmap {
        region: String,
        range: Option<Range>,
    },
    Mprotect {
        region: String,
        range: Range,
        prot: Prot,
    },
    /// `mremap R SIZE [move]`: mremap(2) of the whole region to SIZE bytes, where it
    /// is, or with `move` (MREMAP_MAYMOVE | MREMAP_FIXED) to the other half of its 64G
    /// placement slot (`mremap_target`), so model and host agree on the address (an
    /// extension of the spec).
    Mremap {
        region: String,
        size: u64,
        moves: bool,
    },
    Mlock {
        region: String,
        range: Option<Range>,
    },
    Munlock {
        region: String,
        range: Option<Range>,
    },
    Fork {
        child: String,
    },
    Exit,
    /// `thread NAME`: a thread of the current process, sharing its address space and
    /// placed on a CPU as a new process is; `@NAME` runs ops in it, `exit` ends it
    /// alone (an extension of the spec).
    Thread {
        name: String,
    },
    /// `threads all`: an unnamed thread of the current process on every CPU none of
    /// its tasks runs on, running (not idle) to the end, so that the mm is live on
    /// every CPU of the machine (an extension of the spec).
    ThreadsAll,
    /// `cpu N`: the current task moves to CPU N (sched_setaffinity), an extension of
    /// the spec.
    Cpu {
        cpu: u32,
    },
    /// `shrink`: run the THP deferred split shrinker over its whole queue, as
    /// /proc/sys/vm/drop_caches (2) does through drop_slab (an extension of the spec).
    Shrink,
    /// `khugepaged`: one full scan of khugepaged's mm list now (khugepaged_do_scan
    /// from the list's head, pages_to_scan past the workload's size), collapsing what
    /// its knobs allow (an extension of the spec).
    Khugepaged,
    /// `swapon SIZE`: a zram swap device of SIZE bytes, on for the rest of the
    /// workload (an extension of the spec); MADV_PAGEOUT then swaps anon memory out.
    Swapon {
        size: u64,
    },
    /// `memlimit SIZE`: the workload's processes run in a memory cgroup limited to
    /// SIZE bytes (an extension of the spec); a charge over it reclaims from the
    /// cgroup's LRU lists (on the host: cgroup v1 memory.limit_in_bytes).
    Memlimit {
        size: u64,
    },
    /// `migrate R [OFF LEN] node=N`: move_pages(2) of every page of the range to NUMA
    /// node N (an extension of the spec; `node_pos` is where `node=` is written).
    Migrate {
        region: String,
        range: Option<Range>,
        node: usize,
        node_pos: Pos,
    },
    Repeat {
        n: u64,
        body: Vec<Stmt>,
    },
    Mark {
        label: String,
    },
}

impl Op {
    /// The op's keyword, for messages.
    pub fn keyword(&self) -> &'static str {
        match self {
            Op::Set { .. } => "set",
            Op::Mmap { .. } => "mmap",
            Op::Touch { .. } => "touch",
            Op::Madvise { .. } => "madvise",
            Op::Munmap { .. } => "munmap",
            Op::Mprotect { .. } => "mprotect",
            Op::Mremap { .. } => "mremap",
            Op::Mlock { .. } => "mlock",
            Op::Munlock { .. } => "munlock",
            Op::Fork { .. } => "fork",
            Op::Exit => "exit",
            Op::Thread { .. } => "thread",
            Op::ThreadsAll => "threads",
            Op::Cpu { .. } => "cpu",
            Op::Shrink => "shrink",
            Op::Khugepaged => "khugepaged",
            Op::Swapon { .. } => "swapon",
            Op::Memlimit { .. } => "memlimit",
            Op::Migrate { .. } => "migrate",
            Op::Repeat { .. } => "repeat",
            Op::Mark { .. } => "mark",
        }
    }
}

/// Where `mremap R SIZE move` puts a region now at `addr`: the same offset in the
/// other 32G half of its 64G placement slot (a region is at most 32G, so the two never
/// overlap, and a region moved twice is back where it was).
pub fn mremap_target(addr: u64) -> u64 {
    let half = PLACEMENT_STRIDE / 2;
    let slot = addr - (addr - PLACEMENT_BASE) % PLACEMENT_STRIDE;
    let off = addr - slot;
    slot + if off < half { off + half } else { off - half }
}

/// How many times ops `pick` selects run in `stmts`, repeats multiplied out: Err with
/// the position of the statement that takes the count past `max`.
pub fn executed(stmts: &[Stmt], pick: &dyn Fn(&Op) -> bool, max: u64) -> Result<u64, Pos> {
    let mut total: u64 = 0;
    for s in stmts {
        let k = match &s.op {
            Op::Repeat { n, body } => n.checked_mul(executed(body, pick, max)?),
            op => Some(pick(op) as u64),
        };
        total = k
            .and_then(|k| total.checked_add(k))
            .filter(|&t| t <= max)
            .ok_or(s.pos)?;
    }
    Ok(total)
}

impl Workload {
    /// Every `migrate`, in file order: where its `node=` is written, and the node.
    pub fn migrates(&self) -> Vec<(Pos, usize)> {
        fn collect(stmts: &[Stmt], out: &mut Vec<(Pos, usize)>) {
            for s in stmts {
                match &s.op {
                    Op::Migrate { node, node_pos, .. } => out.push((*node_pos, *node)),
                    Op::Repeat { body, .. } => collect(body, out),
                    _ => {}
                }
            }
        }
        let mut out = Vec::new();
        collect(&self.stmts, &mut out);
        out
    }

    /// The first `migrate` to a node a machine with `nodes` nodes lacks.
    pub fn migrate_beyond(&self, nodes: usize) -> Option<(Pos, usize)> {
        self.migrates().into_iter().find(|(_, n)| *n >= nodes)
    }
}

/// A workload error, displayed as `file:line:col: message`.
#[derive(Clone, Debug, PartialEq, Eq, thiserror::Error)]
#[error("{path}:{}:{}: {msg}", pos.line, pos.col)]
pub struct WorkloadError {
    pub path: String,
    pub pos: Pos,
    pub msg: String,
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn mremap_target_flips_between_the_halves_of_the_slot() {
        let slot = PLACEMENT_BASE + 3 * PLACEMENT_STRIDE;
        assert_eq!(mremap_target(slot), slot + (32 << 30));
        assert_eq!(mremap_target(slot + (32 << 30) + 4096), slot + 4096);
        assert_eq!(mremap_target(mremap_target(slot + (5 << 30))), slot + (5 << 30));
    }
}
