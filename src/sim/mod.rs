//! The model's workload executor: runs a parsed workload on a booted `Kernel` and
//! produces the report of ../shared/spec/workload.md.

pub mod kernels;
pub mod progress;
pub mod variants;

use crate::hw::{Event, MachineConfig, PhysMem, VirtAddr};
use crate::kcount::KernelEvent;
use crate::mm::madvise::Madv;
use crate::mm::memory::FaultError;
use crate::mm::mm_types::{MmId, VmFlags};
use crate::mm::vmstat::{MthpStat, VmEvent};
use crate::mm::Kernel;
use crate::report::{Counters, PageKind, Phase, Report, RunBuilder};
use crate::workload::{mremap_target, Advice, Op, Pos, Prot, Stmt, Workload};
use std::collections::BTreeMap;
pub use variants::Variants;

/// A run that could not complete, with the workload position it stopped at.
#[derive(Debug, thiserror::Error)]
pub enum SimError {
    #[error("{path}:{}:{}: {msg}", pos.line, pos.col)]
    Failed { path: String, pos: Pos, msg: String },
    #[error("{0}")]
    Setup(String),
}

impl SimError {
    /// The error of one column of `--each KEY=...`, naming the value it ran with.
    pub fn in_column(self, key: &str, value: &str) -> SimError {
        let with = format!(" (with --each {key}={value})");
        match self {
            SimError::Failed { path, pos, msg } => SimError::Failed {
                path,
                pos,
                msg: msg + &with,
            },
            SimError::Setup(msg) => SimError::Setup(msg + &with),
        }
    }
}

#[derive(Clone, Copy)]
struct Region {
    addr: u64,
    size: u64,
}

struct Proc {
    mm: MmId,
    cpu: usize,
    regions: BTreeMap<String, Region>,
}

/// A thread of a process (`thread`, `threads all`): the CPU it runs on.
struct Thread {
    owner: String,
    cpu: usize,
}

struct Sim<'w> {
    k: Kernel,
    w: &'w Workload,
    procs: BTreeMap<String, Proc>,
    /// Named threads (`thread NAME`), by name.
    threads: BTreeMap<String, Thread>,
    /// The unnamed threads of `threads all`.
    spinners: Vec<Thread>,
    /// Processes created so far (a new one runs on cpu `count % ncpus`).
    nr_procs: usize,
    /// Minor and major faults of exited processes, by name (a name may be reused after
    /// exit).
    exited_faults: BTreeMap<String, (u64, u64)>,
    phases: Vec<Phase>,
    phase_label: String,
    /// The kernel's counters' names, in `for_each_kernel_counter`'s order: a snapshot
    /// keeps their values only.
    kernel_names: Vec<String>,
    /// The counters at the run's start, and at the current phase's when a mark began it
    /// (None: the run's start, so a run without marks keeps one snapshot, not a copy).
    initial: Snapshot,
    phase_start: Option<Snapshot>,
    progress: progress::Progress,
    /// Keeps the run inside the host memory its budget was checked against.
    watch: crate::hostmem::Watch,
}

/// The run's counters at one moment. The kernel's (343 with 4K pages) are values in
/// the order of `Sim::kernel_names`, named only in the phases and the report that show
/// them: a named snapshot cost an allocation a counter, and a one-page run took 7 host
/// faults more for them.
struct Snapshot {
    kernel: Vec<i64>,
    /// `proc.<name>.minflt` and `.majflt`: the processes vary from phase to phase.
    procs: Counters,
}

/// Run `w` on a fresh model machine configured by `v`.
pub fn run(w: &Workload, v: &Variants) -> Result<Report, SimError> {
    let v = &v.meeting(&w.machine).map_err(|(pos, msg)| SimError::Failed {
        path: w.path.clone(),
        pos,
        msg,
    })?;
    let cfg = v.machine();
    let page = cfg.granule.page_size();
    let watch = budget(w, &cfg).check().map_err(SimError::Setup)?;
    if let Some((pos, node)) = w.migrate_beyond(cfg.nodes) {
        return Err(SimError::Failed {
            path: w.path.clone(),
            pos,
            msg: format!(
                "node {node}: the machine has {} NUMA node(s) (set more with --set nodes=N)",
                cfg.nodes
            ),
        });
    }
    let mut k = boot_kernel(v);
    check_granule(w, &w.stmts, page)?;
    let mm = k
        .mm_alloc()
        .ok_or_else(|| SimError::Setup("out of memory creating the first mm".into()))?;
    let mut procs = BTreeMap::new();
    procs.insert(
        "main".to_string(),
        Proc {
            mm,
            cpu: 0,
            regions: BTreeMap::new(),
        },
    );
    let mut sim = Sim {
        k,
        w,
        procs,
        threads: BTreeMap::new(),
        spinners: Vec::new(),
        nr_procs: 1,
        exited_faults: BTreeMap::new(),
        phases: Vec::new(),
        phase_label: "start".into(),
        kernel_names: Vec::new(),
        initial: Snapshot {
            kernel: Vec::new(),
            procs: Counters::new(),
        },
        phase_start: None,
        progress: progress::Progress::new(progress::total_ops(&w.stmts)),
        watch,
    };
    for_each_kernel_counter(&sim.k, |name, _| sim.kernel_names.push(name()));
    sim.initial = sim.counters();
    sim.exec_all(&w.stmts)?;
    let fin = sim.counters();
    sim.close_phase(&fin);
    if let Some(v) = sim.k.arch.hw.violations.first() {
        return Err(SimError::Setup(format!("architectural checker fired: {v}")));
    }
    let layout = sim.layout();
    Ok(Report {
        source: "model".into(),
        workload: w.path.clone(),
        variants: v.all().clone(),
        counters: sim
            .named_diff(&fin, &sim.initial)
            .map(|(k, v)| (k.clone(), v))
            .collect(),
        phases: sim.phases,
        layout,
        unavailable: BTreeMap::new(),
        diagnostics: Vec::new(),
        runner_notes: Vec::new(),
        background: None,
    })
}

/// A fresh model kernel on the machine `v` configures, with `v`'s variants in force.
pub fn boot_kernel(v: &Variants) -> Kernel {
    let mut k = Kernel::boot(v.machine());
    k.zap = v.zap();
    k.tlb_batch = v.tlb_batch();
    k.arch.tlb_flush = v.tlb_flush();
    k.arch.contpte = v.contpte();
    k.arch.ptep_get = v.ptep_get();
    k.arch.ptep_get_cc = v.contpte_insns();
    k.arch.flush_range_nosync_split = v.get("flush-range-nosync") == "split";
    // The release uses BBML2_NOABORT, and its cpufeature code finds it on this CPU.
    k.arch.bbml2_elide = v.get("bbml2-elide") == "on"
        && crate::arch::arm64::cpufeature::supports_bbml2_noabort(&k.arch.hw.cfg.features, v.bbml2_detect());
    // rodata=full keeps the linear map in blocks only on such a CPU (force_pte_mapping).
    k.arch.linear.on_demand = v.get("linmap-split") == "on-demand"
        && crate::arch::arm64::cpufeature::supports_bbml2_noabort(&k.arch.hw.cfg.features, v.bbml2_detect());
    k.arch.wp_flush_local = v.get("wp-flush") == "local";
    k.arch.contpte_access_raw = v.get("contpte-access") == "raw";
    k.prot_flush_elide = v.prot_flush_elide();
    k.cow_reuse_order0 = v.cow_reuse_order0();
    k.mprotect_per_pte = v.mprotect_per_pte();
    k.mremap_batch = v.mremap_batch();
    k.huge_zero_wp_split = v.huge_zero_wp_split();
    k.lazyfree_unmap_per_pte = v.lazyfree_unmap_per_pte();
    k.lazyfree_pmd_discard = v.lazyfree_pmd_discard();
    k.collapse_copy_per_pte = v.collapse_copy_per_pte();
    k.mlock_walk_per_pte = v.mlock_walk_per_pte();
    k.collapse_ro_refuse = v.collapse_ro_refuse();
    k.khugepaged_mthp = v.khugepaged_mthp();
    k.split_list_reversed = v.split_list_reversed();
    k.swap_free_first = v.get("swap-alloc") == "free-first";
    k.swapin_write_fault_only = v.get("swapin-write") == "on-write";
    k.shmem_swapin_cluster = v.get("shmem-swapin") == "cluster";
    k.swapin_sync_cache = v.get("sync-swapin") == "cache";
    k.swap_cache_xarray = v.get("swap-cache") == "xarray";
    k.fault_dirty_write_only = v.get("fault-dirty") == "write";
    k.map_whole_folio_faultaround = v.get("faultaround") == "folio";
    k.file_unmap_batched = v.get("file-unmap") == "batched";
    k.shmem_split_counts_fallback = v.get("shmem-split-stat") == "counted";
    k.shmem_swapout_split = v.get("shmem-swapout") == "split";
    k.knobs.set_kernel(v.mthp(), v.shrink_underused());
    k.split_zeropage = v.split_zeropage();
    k.pageout_clears_young = v.get("pageout-young") == "clear";
    k.pmd_freeze_rmap_per_page = v.get("pmd-freeze-rmap") == "per-page";
    k.mprotect_mkwrite_dirty_pte_only = v.get("mprotect-mkwrite") == "dirty-pte";
    k.rmap_page_api = v.get("rmap-api") == "page";
    k.arch.hw.checks = v.checks();
    k.inject_extra_fault = v.inject_extra_fault();
    k.inject_drop_flush = v.inject_drop_flush();
    if v.get("huge-zero") == "allocated" {
        // Before the first phase's counters are read: the run does none of this work.
        crate::mm::huge_memory::get_huge_zero_folio(&mut k);
    }
    k
}

/// The host memory a run of `w` can take, by part. Only frames the run allocates are
/// backed on the host (`host_bytes_for`); a process maps at most every region of the
/// workload, and every process that may live at once (main and each fork child, by
/// name) at most that much. Phases are counted as executed (repeats multiplied out).
pub fn budget(w: &Workload, cfg: &MachineConfig) -> crate::hostmem::Budget {
    use crate::hostmem::cost;
    #[derive(Default)]
    struct Walk<'w> {
        bytes: u64,
        mmaps: u64,
        children: std::collections::BTreeSet<&'w str>,
        swap: u64,
    }
    fn walk<'w>(stmts: &'w [Stmt], acc: &mut Walk<'w>) {
        for s in stmts {
            match &s.op {
                // A region mremap'ed may map up to its new size: counted as a new
                // mapping, an upper bound.
                Op::Mmap { size, .. } | Op::Mremap { size, .. } => {
                    acc.bytes = acc.bytes.saturating_add(*size);
                    acc.mmaps = acc.mmaps.saturating_add(1);
                }
                Op::Fork { child } => {
                    acc.children.insert(child);
                }
                Op::Swapon { size } => acc.swap = acc.swap.max(*size),
                Op::Repeat { body, .. } => walk(body, acc),
                _ => {}
            }
        }
    }
    let mut acc = Walk::default();
    walk(&w.stmts, &mut acc);
    let procs = acc.children.len() as u64 + 1;
    let frames = (acc.bytes >> cfg.granule.page_shift()).saturating_mul(procs);
    let mut b = crate::hostmem::Budget::new(format!("running {}", w.path));
    b.add(
        "the model memory it maps (smaller mmaps, fewer forks, or a lower --set ram)",
        host_bytes_for(cfg, frames, acc.mmaps.saturating_mul(procs)),
    );
    b.add("its processes (fewer fork names)", procs.saturating_mul(cost::PROCESS));
    b.add(
        "its phases (fewer marks; a repeat multiplies them)",
        progress::count_ops(&w.stmts, |op| matches!(op, Op::Mark { .. })).saturating_mul(cost::PHASE),
    );
    if acc.swap > 0 {
        let cached = frames.min(cfg.ram_bytes >> cfg.granule.page_shift());
        b.add(
            "its swap device (a smaller swapon)",
            crate::mm::swapfile::SwapInfo::host_bytes(acc.swap >> cfg.granule.page_shift())
                .saturating_add(cached.saturating_mul(crate::mm::swap_state::SwapCache::HOST_BYTES_PER_FOLIO)),
        );
    }
    b
}

/// The most host memory a model run can take when it maps at most `frames` frames
/// (capped by the machine's RAM) in `mmaps` regions: each frame costs its struct page
/// and its order-0 folio entry (refcount, LRU links and flags) beside the memmap, a
/// mapped one its share of a pte table, and every two frames at most one large
/// folio's record (order 1 is the smallest large folio). Measured (4K pages, peak RSS
/// above a run mapping 4K): 10.6 MiB per GiB touched nohugepage, 10.6 with 16K mTHP;
/// this bound is 22.1 (`tests/hostile_inputs.rs`).
pub fn host_bytes_for(cfg: &MachineConfig, frames: u64, mmaps: u64) -> u64 {
    let g = cfg.granule;
    let frames = frames.min(cfg.ram_bytes >> g.page_shift());
    // A pte table per PTRS_PER_PTE frames, and one per level for each region's ends.
    let tables = frames.div_ceil(g.ptrs_per_table() as u64) + mmaps.saturating_add(1).saturating_mul(2 * 4);
    let per_frame = crate::mm::folio::MemMap::HOST_BYTES_PER_FRAME;
    // At most a record per two frames, and the rest of the 2 MiB page the last is in.
    let large = frames
        .div_ceil(2)
        .saturating_mul(std::mem::size_of::<crate::mm::folio::LargeFolio>() as u64)
        .saturating_add(crate::hostmem::MAX_AHEAD);
    frames
        .saturating_mul(per_frame)
        .saturating_add(large)
        .saturating_add(PhysMem::host_bytes_needed(g, tables))
}

/// Offsets and sizes are 4K multiples; a larger granule needs them aligned to it.
/// Why `w` cannot run with `page`-byte pages (an offset or length not a multiple of
/// it), if it cannot.
pub fn granule_misfit(w: &Workload, page: u64) -> Option<String> {
    check_granule(w, &w.stmts, page).err().map(|e| e.to_string())
}

fn check_granule(w: &Workload, stmts: &[Stmt], page: u64) -> Result<(), SimError> {
    let bad = |pos: Pos, what: &str| SimError::Failed {
        path: w.path.clone(),
        pos,
        msg: format!("{what} is not a multiple of the {}-byte granule", page),
    };
    for s in stmts {
        match &s.op {
            Op::Mmap { size, skew, .. } if size % page != 0 || skew % page != 0 => {
                return Err(bad(s.pos, "region size or skew"))
            }
            Op::Mremap { size, .. } if size % page != 0 => return Err(bad(s.pos, "mremap size")),
            Op::Touch { range: Some(r), .. }
            | Op::Madvise { range: r, .. }
            | Op::Mprotect { range: r, .. }
            | Op::Munmap { range: Some(r), .. }
            | Op::Mlock { range: Some(r), .. }
            | Op::Munlock { range: Some(r), .. }
            | Op::Migrate { range: Some(r), .. }
                if r.off % page != 0 || r.len % page != 0 =>
            {
                return Err(bad(s.pos, "range"))
            }
            // One madvise call per step: each must start on a page, as madvise(2) demands.
            Op::Madvise { step: Some(st), .. } if st % page != 0 => return Err(bad(s.pos, "madvise step")),
            Op::Repeat { body, .. } => check_granule(w, body, page)?,
            _ => {}
        }
    }
    Ok(())
}

/// Each counter of `now` less its value in `then` (0 if absent), in key order. Both
/// maps are sorted by key: one pass over each, not a lookup of every key, and a key is
/// copied only by a caller that keeps it.
fn diff<'a>(now: &'a Counters, then: &'a Counters) -> impl Iterator<Item = (&'a String, i64)> + 'a {
    let mut then = then.iter().peekable();
    now.iter().map(move |(k, v)| {
        while then.next_if(|(t, _)| *t < k).is_some() {}
        let before = then.next_if(|(t, _)| *t == k).map_or(0, |(_, b)| *b);
        (k, v - before)
    })
}

impl Sim<'_> {
    fn fail(&self, pos: Pos, msg: impl std::fmt::Display) -> SimError {
        SimError::Failed {
            path: self.w.path.clone(),
            pos,
            msg: msg.to_string(),
        }
    }

    fn exec_all(&mut self, stmts: &[Stmt]) -> Result<(), SimError> {
        for s in stmts {
            self.exec(s)?;
        }
        Ok(())
    }

    fn exec(&mut self, s: &Stmt) -> Result<(), SimError> {
        if !matches!(s.op, Op::Repeat { .. }) {
            self.progress.op();
            self.watch.tick().map_err(|e| self.fail(s.pos, e))?;
        }
        match &s.op {
            Op::Set { knob, value } => (self.k.knobs.set(knob, value)).map_err(|e| self.fail(s.pos, e)),
            Op::Mark { label } => {
                let now = self.counters();
                self.close_phase(&now);
                self.phase_label = label.clone();
                self.phase_start = Some(now);
                Ok(())
            }
            Op::Repeat { n, body } => {
                for _ in 0..*n {
                    self.exec_all(body)?;
                }
                Ok(())
            }
            Op::Mmap {
                region,
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
                let (mm, cpu) = self.proc(&s.proc_name);
                self.k.switch_mm(cpu, mm);
                let mut flags = VmFlags::READ;
                if !ro {
                    flags |= VmFlags::WRITE;
                }
                if *shared {
                    flags |= VmFlags::SHARED;
                }
                if *secret {
                    // memfd_secret, ftruncate, mmap, close.
                    self.syscall(4);
                    self.k
                        .secretmem_mmap(mm, *addr, *size)
                        .map_err(|e| self.fail(s.pos, e))?;
                } else {
                    self.syscall(1 + (*hugepage || *nohugepage) as u64);
                    self.k
                        .do_mmap(mm, *addr, *size, flags)
                        .map_err(|e| self.fail(s.pos, e))?;
                }
                // MAP_POPULATE faults the mapping in inside mmap(), before the
                // madvise that `hugepage`/`nohugepage` makes right after it.
                if *populate {
                    self.k
                        .mm_populate(mm, *addr, addr + size)
                        .map_err(|e| self.fail(s.pos, e))?;
                }
                if *hugepage {
                    self.k
                        .do_madvise(mm, *addr, addr + size, Madv::HugePage)
                        .map_err(|e| self.fail(s.pos, e))?;
                }
                if *nohugepage {
                    self.k
                        .do_madvise(mm, *addr, addr + size, Madv::NoHugePage)
                        .map_err(|e| self.fail(s.pos, e))?;
                }
                let owner = self.owner(&s.proc_name).to_string();
                self.procs.get_mut(&owner).unwrap().regions.insert(
                    region.clone(),
                    Region {
                        addr: *addr,
                        size: *size,
                    },
                );
                Ok(())
            }
            Op::Touch {
                region,
                range,
                write,
                stride,
            } => {
                let (start, end) = self.range(&s.proc_name, region, range.map(|r| (r.off, r.len)));
                let (mm, cpu) = self.proc(&s.proc_name);
                self.k.switch_mm(cpu, mm);
                // An access that faults, page by page, may start a first-touch stream
                // (`Machine::first_touch_start`) that takes the pages after it.
                let streams = *stride == self.k.arch.granule().page_size() && streams_allowed();
                let mut a = start;
                // Whether `a`'s tick is counted (by the stream that stopped there).
                let mut ticked = false;
                while a < end {
                    if !ticked {
                        self.watch.tick().map_err(|e| self.fail(s.pos, e))?;
                    }
                    ticked = false;
                    let faulted =
                        user_access_faulted(&mut self.k, mm, cpu, a, *write).map_err(|e| self.fail(s.pos, e))?;
                    a += stride;
                    if a < end {
                        // The hits on the entry the access used: a large folio's other
                        // pages (none after a page's fill).
                        a += self.access_run(s.pos, cpu, a, end, *stride, *write)? * stride;
                    }
                    // Where the fill's span ends (the next page, or the page after a
                    // large folio's hits), a fault may start a stream.
                    if streams && faulted && a < end {
                        if let Some(ft) = self.k.arch.hw.first_touch_start(cpu, VirtAddr(a), end) {
                            (a, ticked) = self.first_touch_stream(s.pos, mm, ft, a, end, *write)?;
                        }
                    }
                }
                Ok(())
            }
            Op::Madvise {
                region,
                range,
                advice,
                step,
            } => {
                let (start, end) = self.range(&s.proc_name, region, Some((range.off, range.len)));
                let step = step.unwrap_or(end - start);
                let (mm, cpu) = self.proc(&s.proc_name);
                self.k.switch_mm(cpu, mm);
                let madv = match advice {
                    Advice::DontNeed => Madv::DontNeed,
                    Advice::Free => Madv::Free,
                    Advice::HugePage => Madv::HugePage,
                    Advice::NoHugePage => Madv::NoHugePage,
                    Advice::Cold => Madv::Cold,
                    Advice::PageOut => Madv::PageOut,
                    Advice::Collapse => Madv::Collapse,
                };
                for at in (start..end).step_by(step as usize) {
                    self.syscall(1);
                    let r = self.k.do_madvise(mm, at, at + step, madv);
                    // A collapse that cannot be done is an outcome, as on the host.
                    if *advice != Advice::Collapse {
                        r.map_err(|e| self.fail(s.pos, e))?;
                    }
                }
                Ok(())
            }
            Op::Mlock { region, range } | Op::Munlock { region, range } => {
                let (start, end) = self.range(&s.proc_name, region, range.map(|r| (r.off, r.len)));
                let (mm, cpu) = self.proc(&s.proc_name);
                self.k.switch_mm(cpu, mm);
                self.syscall(1);
                let r = if matches!(s.op, Op::Mlock { .. }) {
                    self.k.do_mlock(mm, start, end)
                } else {
                    self.k.do_munlock(mm, start, end)
                };
                r.map_err(|e| self.fail(s.pos, e))
            }
            Op::Mprotect { region, range, prot } => {
                let (start, end) = self.range(&s.proc_name, region, Some((range.off, range.len)));
                let (mm, cpu) = self.proc(&s.proc_name);
                self.k.switch_mm(cpu, mm);
                let flags = match prot {
                    Prot::None => VmFlags::empty(),
                    Prot::R => VmFlags::READ,
                    Prot::Rw => VmFlags::READ | VmFlags::WRITE,
                };
                self.syscall(1);
                self.k
                    .do_mprotect(mm, start, end, flags)
                    .map_err(|e| self.fail(s.pos, e))
            }
            Op::Mremap { region, size, moves } => {
                let owner = self.owner(&s.proc_name).to_string();
                let r = self.procs[&owner].regions[region];
                let to = if *moves { mremap_target(r.addr) } else { r.addr };
                let (mm, cpu) = self.proc(&s.proc_name);
                self.k.switch_mm(cpu, mm);
                self.syscall(1);
                self.k
                    .do_mremap(mm, r.addr, r.size, *size, to)
                    .map_err(|e| self.fail(s.pos, e))?;
                let moved = Region { addr: to, size: *size };
                self.procs
                    .get_mut(&owner)
                    .unwrap()
                    .regions
                    .insert(region.clone(), moved);
                Ok(())
            }
            Op::Fork { child } => {
                let (mm, cpu) = self.proc(&s.proc_name);
                self.k.switch_mm(cpu, mm);
                self.syscall(1);
                let child_mm = self.k.dup_mmap(mm).ok_or_else(|| {
                    self.fail(
                        s.pos,
                        "fork: out of memory, or of ASIDs (65,534 address spaces a run: ASID rollover is not modeled)",
                    )
                })?;
                let regions = self.procs[self.owner(&s.proc_name)].regions.clone();
                let cpu = self.nr_procs % self.k.arch.hw.cpus.len();
                self.nr_procs += 1;
                self.procs.insert(
                    child.clone(),
                    Proc {
                        mm: child_mm,
                        cpu,
                        regions,
                    },
                );
                Ok(())
            }
            Op::Exit => {
                self.syscall(1);
                if let Some(t) = self.threads.remove(&s.proc_name) {
                    self.leave_cpu(t.cpu);
                    return Ok(());
                }
                let p = self.procs.remove(&s.proc_name).expect("a live process");
                let (mm, f) = (
                    self.k.mm(p.mm),
                    self.exited_faults.entry(s.proc_name.clone()).or_default(),
                );
                *f = (f.0 + mm.min_flt, f.1 + mm.maj_flt);
                self.k.exit_mmap(p.mm);
                // exit_group: its threads go with it.
                let cpus: Vec<usize> = self.tasks_of(&s.proc_name).chain([p.cpu]).collect();
                self.threads.retain(|_, t| t.owner != s.proc_name);
                self.spinners.retain(|t| t.owner != s.proc_name);
                for cpu in cpus {
                    self.leave_cpu(cpu);
                }
                Ok(())
            }
            Op::Thread { name } => {
                let (mm, _) = self.proc(&s.proc_name);
                self.syscall(1);
                let cpu = self.nr_procs % self.k.arch.hw.cpus.len();
                self.nr_procs += 1;
                let owner = self.owner(&s.proc_name).to_string();
                self.threads.insert(name.clone(), Thread { owner, cpu });
                self.k.switch_mm(cpu, mm);
                Ok(())
            }
            Op::ThreadsAll => {
                let (mm, _) = self.proc(&s.proc_name);
                let owner = self.owner(&s.proc_name).to_string();
                for cpu in 0..self.k.arch.hw.cpus.len() {
                    if !self.tasks_of(&owner).any(|c| c == cpu) {
                        self.syscall(1);
                        self.spinners.push(Thread {
                            owner: owner.clone(),
                            cpu,
                        });
                        self.k.switch_mm(cpu, mm);
                    }
                }
                Ok(())
            }
            Op::Cpu { cpu } => {
                let (mm, old) = self.proc(&s.proc_name);
                let (cpu, ncpus) = (*cpu as usize, self.k.arch.hw.cpus.len());
                if cpu >= ncpus {
                    return Err(self.fail(s.pos, format!("cpu {cpu}: the machine has {ncpus} CPUs (set cpus=N)")));
                }
                self.syscall(1);
                match self.threads.get_mut(&s.proc_name) {
                    Some(t) => t.cpu = cpu,
                    None => self.procs.get_mut(&s.proc_name).unwrap().cpu = cpu,
                }
                self.k.switch_mm(cpu, mm);
                self.leave_cpu(old);
                Ok(())
            }
            Op::Shrink => {
                self.k.drop_slab();
                Ok(())
            }
            Op::Khugepaged => self.k.khugepaged_do_scan().map_err(|e| self.fail(s.pos, e)),
            Op::Swapon { size } => {
                self.syscall(1);
                (self.k.sys_swapon(*size)).map_err(|e| self.fail(s.pos, e))
            }
            Op::Memlimit { size } => {
                self.syscall(1);
                let pages = size >> self.k.arch.granule().page_shift();
                self.k.memcg = Some(crate::mm::memcontrol::MemCgroup::new(pages));
                Ok(())
            }
            Op::Migrate {
                region, range, node, ..
            } => {
                let (start, end) = self.range(&s.proc_name, region, range.map(|r| (r.off, r.len)));
                let (mm, cpu) = self.proc(&s.proc_name);
                self.k.switch_mm(cpu, mm);
                self.syscall(1);
                let (_, rc) = self.k.do_pages_move(mm, start, end, *node);
                if rc < 0 {
                    return Err(self.fail(s.pos, format!("move_pages: out of memory on node {node}")));
                }
                Ok(())
            }
            Op::Munmap { region, range } => {
                let (start, end) = self.range(&s.proc_name, region, range.map(|r| (r.off, r.len)));
                let (mm, cpu) = self.proc(&s.proc_name);
                self.k.switch_mm(cpu, mm);
                self.syscall(1);
                self.k.do_munmap(mm, start, end);
                let owner = self.owner(&s.proc_name).to_string();
                let p = self.procs.get_mut(&owner).unwrap();
                let r = &p.regions[region];
                if start == r.addr && end == r.addr + r.size {
                    p.regions.remove(region);
                }
                Ok(())
            }
        }
    }

    /// `n` system calls made by the op being run (its entry and return, which the
    /// kernel.* counters of the work inside do not cover).
    #[inline]
    fn syscall(&mut self, n: u64) {
        self.k.arch.kc.add(KernelEvent::Syscall, n);
    }

    /// The process a task name belongs to (itself, unless it names a thread).
    fn owner<'a>(&'a self, name: &'a str) -> &'a str {
        self.threads.get(name).map_or(name, |t| &t.owner)
    }

    /// The mm a task runs and the CPU it runs on.
    fn proc(&self, name: &str) -> (MmId, usize) {
        let mm = self.procs[self.owner(name)].mm;
        let cpu = self.threads.get(name).map_or_else(|| self.procs[name].cpu, |t| t.cpu);
        (mm, cpu)
    }

    /// The CPUs of a process's tasks: itself and its threads.
    fn tasks_of<'a>(&'a self, owner: &'a str) -> impl Iterator<Item = usize> + 'a {
        let threads = self
            .threads
            .values()
            .chain(&self.spinners)
            .filter(move |t| t.owner == owner);
        self.procs
            .get(owner)
            .map(|p| p.cpu)
            .into_iter()
            .chain(threads.map(|t| t.cpu))
    }

    /// A task left `cpu`: with no other task there, it goes idle.
    fn leave_cpu(&mut self, cpu: usize) {
        let busy = self.procs.values().map(|p| p.cpu).any(|c| c == cpu)
            || self.threads.values().chain(&self.spinners).any(|t| t.cpu == cpu);
        if !busy {
            self.k.arch.cpu_idle(cpu);
        }
    }

    fn range(&self, proc_name: &str, region: &str, r: Option<(u64, u64)>) -> (u64, u64) {
        let reg = &self.procs[self.owner(proc_name)].regions[region];
        match r {
            Some((off, len)) => (reg.addr + off, reg.addr + off + len),
            None => (reg.addr, reg.addr + reg.size),
        }
    }

    /// A touch's pages from `addr` (below `end`) by the first-touch stream `ft`, each
    /// counted by the watch, for as long as the stream takes them: the first page it
    /// did not take, and whether that page's tick is counted. Out of the touch loop,
    /// so the loop carries no stream.
    #[inline(never)]
    fn first_touch_stream(
        &mut self,
        pos: Pos,
        mm: MmId,
        mut ft: crate::hw::FirstTouch,
        mut addr: u64,
        end: u64,
        write: bool,
    ) -> Result<(u64, bool), SimError> {
        let ps = self.k.arch.granule().page_size();
        let mut run = None;
        while addr < end {
            self.watch.tick().map_err(|e| self.fail(pos, e))?;
            if !first_touch_access(&mut self.k, mm, &mut ft, &mut run, addr, write).map_err(|e| self.fail(pos, e))? {
                return Ok((addr, true));
            }
            addr += ps;
            if ft.next() > addr && addr < end {
                // A contiguous block's fill: the pages of its span after `addr` are
                // hits, taken as the touch loop takes them, and the stream goes on
                // after the span only when they all were.
                addr += self.access_run(pos, ft.cpu(), addr, end, ps, write)? * ps;
                if addr != ft.next() {
                    return Ok((addr, false));
                }
                self.k.arch.hw.first_touch_resume(&mut ft);
            }
        }
        Ok((addr, false))
    }

    /// The accesses from `addr` on (by `stride`, below `end`) that hit the TLB entry
    /// the last one used, done at once as `user_access` does each and counted by the
    /// watch as the touch loop counts each: how many. Inline in the touch loop and a
    /// stream, each of which takes a large folio's run this way.
    #[inline(always)]
    fn access_run(
        &mut self,
        pos: Pos,
        cpu: usize,
        addr: u64,
        end: u64,
        stride: u64,
        write: bool,
    ) -> Result<u64, SimError> {
        let max = (end - addr).div_ceil(stride);
        let Some((e, n)) = self.k.arch.hw.access_run(cpu, VirtAddr(addr), stride, max, write) else {
            return Ok(0);
        };
        self.watch.tick_n(n).map_err(|e| self.fail(pos, e))?;
        if write {
            let shift = self.k.arch.granule().page_shift();
            if stride.is_multiple_of(1 << shift) {
                // The run lies in one entry's span, so its pages are every `step`th
                // from the first's: marked in one pass over their struct pages.
                let step = stride >> shift;
                let first = crate::hw::Pfn(e.translate(addr) >> shift);
                let pages = self.k.memmap.pages_mut(first, (n - 1) * step + 1);
                if step == 1 {
                    // Stored whatever it was: a run's struct pages are in the host's
                    // cache, and one pass of plain stores beats a test per page.
                    pages.iter_mut().for_each(|p| p.nonzero = true);
                } else {
                    for p in pages.iter_mut().step_by(step as usize) {
                        p.nonzero = true;
                    }
                }
            } else {
                for i in 0..n {
                    page_written(&mut self.k, e.translate(addr + i * stride));
                }
            }
        }
        Ok(n)
    }

    fn counters(&self) -> Snapshot {
        let mut c = Counters::new();
        // A process's major faults are shown only when it took some, as the output
        // always did before the host measured them.
        let faults = self.exited_faults.iter().map(|(name, &f)| (name, f)).chain(
            self.procs
                .iter()
                .map(|(name, p)| (name, (self.k.mm(p.mm).min_flt, self.k.mm(p.mm).maj_flt))),
        );
        for (name, (min, maj)) in faults {
            *c.entry(format!("proc.{name}.minflt")).or_default() += min as i64;
            if maj != 0 {
                *c.entry(format!("proc.{name}.majflt")).or_default() += maj as i64;
            }
        }
        let mut kernel = Vec::with_capacity(self.kernel_names.len());
        for_each_kernel_counter(&self.k, |_, v| kernel.push(v));
        Snapshot { kernel, procs: c }
    }

    /// Every counter of `now` by name, less its value in `then` (0 where absent).
    fn named_diff<'a>(&'a self, now: &'a Snapshot, then: &'a Snapshot) -> impl Iterator<Item = (&'a String, i64)> + 'a {
        let kernel = now.kernel.iter().zip(&then.kernel).map(|(n, t)| n - t);
        diff(&now.procs, &then.procs).chain(self.kernel_names.iter().zip(kernel))
    }

    fn close_phase(&mut self, now: &Snapshot) {
        let start = self.phase_start.as_ref().unwrap_or(&self.initial);
        let d: Counters = self
            .named_diff(now, start)
            .filter(|(k, v)| *v != 0 || !(k.starts_with("arch.") || k.starts_with("kernel.")))
            .map(|(k, v)| (k.clone(), v))
            .collect();
        self.phases.push(Phase {
            label: self.phase_label.clone(),
            counters: d,
            time_ns: None,
        });
    }

    /// The final state of every live region, page by page.
    fn layout(&mut self) -> BTreeMap<String, Vec<crate::report::Run>> {
        let mut out = BTreeMap::new();
        // Per process: its name, its mm and its regions' names and extents.
        type Regions = Vec<(String, u64, u64)>;
        let names: Vec<(String, MmId, Regions)> = self
            .procs
            .iter()
            .map(|(n, p)| {
                (
                    n.clone(),
                    p.mm,
                    p.regions
                        .iter()
                        .map(|(r, reg)| (r.clone(), reg.addr, reg.size))
                        .collect(),
                )
            })
            .collect();
        let ps = self.k.arch.granule().page_size();
        for (pname, mm, regions) in names {
            for (rname, addr, size) in regions {
                let mut b = RunBuilder::default();
                self.k.layout_pages(mm, addr, size / ps, &mut b);
                out.insert(format!("{pname}/{rname}"), b.finish());
            }
        }
        out
    }
}

/// The kernel-wide counters of a report: vmstat, mthp, hardware and kernel events.
pub fn kernel_counters(k: &Kernel, c: &mut Counters) {
    for_each_kernel_counter(k, |name, v| {
        c.insert(name(), v);
    });
}

/// Each kernel-wide counter, as what makes its name and its value, in one order fixed
/// for a kernel (its granule's sizes): a caller that takes only the values makes no
/// name.
fn for_each_kernel_counter(k: &Kernel, mut f: impl FnMut(&dyn Fn() -> String, i64)) {
    for e in VmEvent::ALL {
        f(&|| ["vmstat.", e.name()].concat(), k.stat.event(*e));
    }
    let mthp = |order: u32, s: MthpStat| format!("mthp.{}kB.{}", k.knobs.size_kb(order), s.name());
    for order in k.knobs.anon_orders() {
        for s in MthpStat::ALL {
            f(&|| mthp(order, *s), k.stat.mthp(order, *s));
        }
    }
    // Order 1 is a file (shmem) size only: its directory has no anon stats.
    for s in MthpStat::ALL.iter().filter(|s| !s.anon_only()) {
        f(&|| mthp(1, *s), k.stat.mthp(1, *s));
    }
    for e in Event::ALL {
        f(&|| e.name().to_string(), k.arch.hw.ev.get(*e) as i64);
    }
    for e in KernelEvent::ALL {
        f(&|| e.name().to_string(), k.arch.kc.get(*e) as i64);
    }
}

/// One EL0 access by `cpu` (running `mm`): hardware first; a fault goes to the kernel
/// and the access retries, as the CPU would, until it succeeds. A handled fault may
/// leave the access faulting: a write fault whose copy's allocation reclaimed (and aged
/// or swapped out) the very page it copies finds its pte changed and returns for the
/// access to retry, as do_wp_page's and do_swap_page's pte_same checks do; under
/// pressure that can repeat (tests/fork_invariants.rs's
/// `a_write_fault_whose_reclaim_changes_its_pte_retries_until_it_maps`: write
/// protected, aged, swapped out, swapped in). More than `MAX_ATTEMPTS` is a kernel that
/// makes no progress, a model defect, never a hang.
pub fn user_access(k: &mut Kernel, mm: MmId, cpu: usize, addr: u64, write: bool) -> Result<(), FaultError> {
    user_access_faulted(k, mm, cpu, addr, write).map(|_| ())
}

/// `user_access`, telling whether the access faulted.
#[inline(always)]
fn user_access_faulted(k: &mut Kernel, mm: MmId, cpu: usize, addr: u64, write: bool) -> Result<bool, FaultError> {
    let done = k.arch.hw.access(cpu, VirtAddr(addr), write);
    finish_access(k, mm, cpu, addr, write, done, 0)
}

/// The rest of an access whose attempt number `attempt` (0 the first) came back `done`:
/// each fault handled and the access retried, up to `MAX_ATTEMPTS`. Whether any fault
/// was handled.
#[inline(always)]
fn finish_access(
    k: &mut Kernel,
    mm: MmId,
    cpu: usize,
    addr: u64,
    write: bool,
    mut done: Result<crate::hw::PhysAddr, crate::hw::machine::AccessFault>,
    mut attempt: usize,
) -> Result<bool, FaultError> {
    const MAX_ATTEMPTS: usize = 8;
    loop {
        if let Ok(pa) = done {
            if write {
                page_written(k, pa.0);
            }
            return Ok(attempt > 0);
        }
        k.handle_mm_fault(mm, addr, write)?;
        attempt += 1;
        if attempt == MAX_ATTEMPTS {
            panic!(
                "access at {addr:#x} still faults after {MAX_ATTEMPTS} faults handled: the kernel makes no progress"
            );
        }
        done = k.arch.hw.access_retry(cpu, VirtAddr(addr), write);
    }
}

/// Whether a touch may take first-touch streams: always, but in the tests that compare
/// them with page-by-page accesses.
#[inline(always)]
fn streams_allowed() -> bool {
    #[cfg(test)]
    return !tests::NO_STREAMS.get();
    #[cfg(not(test))]
    true
}

/// `user_access` of `addr`, the next page of the first-touch stream `ft`
/// (`Machine::first_touch_start`): the same accesses, faults and counts, the lookup
/// and the walks to the pte table taken as the stream knows they end, the fault
/// from what the stream's last one found (`run`, `handle_mm_fault_stream`). Ok(false),
/// having done nothing, when the stream no longer stands for `addr`; the caller then
/// makes it a `user_access`.
#[inline(always)]
fn first_touch_access(
    k: &mut Kernel,
    mm: MmId,
    ft: &mut crate::hw::FirstTouch,
    run: &mut Option<crate::mm::memory::FaultRun>,
    addr: u64,
    write: bool,
) -> Result<bool, FaultError> {
    if !k.arch.hw.first_touch_fault(ft, VirtAddr(addr)) {
        return Ok(false);
    }
    k.handle_mm_fault_stream(run, mm, addr, write)?;
    match k.arch.hw.first_touch_retry(ft, VirtAddr(addr), write) {
        Some(Ok(pa)) => {
            if write {
                page_written(k, pa.0);
            }
        }
        done => {
            retry_after_stream(k, mm, ft.cpu(), addr, write, done)?;
        }
    }
    #[cfg(test)]
    tests::STREAM_PAGES.set(tests::STREAM_PAGES.get() + 1);
    Ok(true)
}

/// A stream's access whose retry faulted again (`done`) or that the stream no longer
/// knew (None): the rest of it as `user_access` goes on. Out of line, as it is rare.
#[cold]
#[inline(never)]
fn retry_after_stream(
    k: &mut Kernel,
    mm: MmId,
    cpu: usize,
    addr: u64,
    write: bool,
    done: Option<Result<crate::hw::PhysAddr, crate::hw::machine::AccessFault>>,
) -> Result<bool, FaultError> {
    let done = done.unwrap_or_else(|| k.arch.hw.access_retry(cpu, VirtAddr(addr), write));
    finish_access(k, mm, cpu, addr, write, done, 1)
}

/// A user write reached physical address `pa`: its page is no longer all zeros.
#[inline(always)]
fn page_written(k: &mut Kernel, pa: u64) {
    let pfn = crate::hw::Pfn(pa >> k.arch.granule().page_shift());
    // Stored only when it changes: most writes are to a page written before.
    let p = k.memmap.page_mut(pfn);
    if !p.nonzero {
        p.nonzero = true;
    }
}

/// Where a walk of the page tables for an address stops (no events counted).
enum WalkEnd {
    /// The entry at `index` of `table`, at `level`, is not a table descriptor: a leaf,
    /// a swap or PROT_NONE pte, a huge pmd, or an empty entry.
    Entry {
        table: crate::hw::TableId,
        index: usize,
        level: u8,
    },
    /// The table descriptor at `level` names no table storage: nothing maps the span
    /// under it.
    Dangling { level: u8 },
}

impl Kernel {
    /// The walk for `addr` down to its first entry that is not a table descriptor.
    fn walk_entry(&self, mm: MmId, addr: u64) -> WalkEnd {
        use crate::hw::DescKind;
        let g = self.arch.granule();
        let mem = &self.arch.hw.mem;
        let mut table = self.mm(mm).pgd_table;
        for level in g.start_level()..3 {
            let index = g.index(addr, level);
            match mem.read(table, index).kind(level, g) {
                DescKind::Table(pa) => match mem.table_id_of(pa) {
                    Some(t) => table = t,
                    None => return WalkEnd::Dangling { level },
                },
                _ => return WalkEnd::Entry { table, index, level },
            }
        }
        WalkEnd::Entry {
            table,
            index: g.index(addr, 3),
            level: 3,
        }
    }

    /// The pfn entry `d` at `level` maps at `addr`: a block or page, a PROT_NONE pte
    /// (present to the kernel and to pagemap, invalid to hardware) or a huge pmd.
    fn entry_pfn(&self, d: crate::hw::Desc, level: u8, addr: u64) -> Option<crate::hw::Pfn> {
        use crate::arch::arm64::pgtable::{pmd_trans_huge, Pte};
        use crate::hw::DescKind;
        let g = self.arch.granule();
        let leaf = match d.kind(level, g) {
            DescKind::Block(_) | DescKind::Page(_) => true,
            DescKind::Table(_) => false,
            _ => (level == 3 && Pte(d).pte_present()) || (level == 2 && pmd_trans_huge(d)),
        };
        leaf.then(|| {
            let off = (addr & ((1u64 << g.level_shift(level)) - 1)) >> g.page_shift();
            crate::hw::Pfn(d.pfn(g).0 + off)
        })
    }

    /// What entry `d` at `level` maps at `addr`, for layouts: a folio of some order, the
    /// zero page, a swap entry (a pte's only), or nothing. `near` is the last frame
    /// span `pfn_kind` named (empty at first): a frame inside it takes its kind without
    /// its struct pages read again.
    fn entry_kind(
        &self,
        d: crate::hw::Desc,
        level: u8,
        addr: u64,
        near: &mut (PageKind, u64, u64),
    ) -> Option<PageKind> {
        match self.entry_pfn(d, level, addr) {
            Some(pfn) => {
                if !(near.1..near.2).contains(&pfn.0) {
                    *near = self.pfn_kind(pfn);
                }
                Some(near.0)
            }
            None => (level == 3 && crate::arch::arm64::pgtable::Pte(d).is_swap_pte()).then_some(PageKind::Swap),
        }
    }

    /// What mapped frame `pfn` is, and the frames [lo, hi) around it that are the same
    /// for the same reason (its folio; the zero page alone).
    fn pfn_kind(&self, pfn: crate::hw::Pfn) -> (PageKind, u64, u64) {
        if self.is_zero_pfn(pfn) {
            return (PageKind::Zero, pfn.0, pfn.0 + 1);
        }
        let folio = self.memmap.folio_of(pfn);
        let order = self.memmap.folio_order(folio);
        let kind = if self.huge_zero_folio == Some(folio) {
            PageKind::Zero
        } else {
            PageKind::Order(order)
        };
        (kind, folio.0, folio.0 + (1 << order))
    }

    /// The pfn a user address translates to in the page tables (no events counted).
    pub fn page_table_pfn(&self, mm: MmId, addr: u64) -> Option<crate::hw::Pfn> {
        match self.walk_entry(mm, addr) {
            WalkEnd::Entry { table, index, level } => self.entry_pfn(self.arch.hw.mem.read(table, index), level, addr),
            WalkEnd::Dangling { .. } => None,
        }
    }

    /// What maps `addr` (for layouts): read without counting events.
    pub fn page_kind(&self, mm: MmId, addr: u64) -> Option<PageKind> {
        match self.walk_entry(mm, addr) {
            WalkEnd::Entry { table, index, level } => self.entry_kind(
                self.arch.hw.mem.read(table, index),
                level,
                addr,
                &mut (PageKind::Zero, 0, 0),
            ),
            WalkEnd::Dangling { .. } => None,
        }
    }

    /// The `n` pages from `addr` page by page, as `page_kind` gives each, into `b`
    /// (page `i` at `addr + i` pages), the tables walked once per entry the walk stops
    /// at, not once per page: a pte table's pages are read from it in turn, and the
    /// span of an upper-level entry that maps nothing is skipped whole (200 regions of
    /// 32G mapped and never touched are 1.6 G pages).
    fn layout_pages(&self, mm: MmId, addr: u64, n: u64, b: &mut RunBuilder) {
        let g = self.arch.granule();
        let ps = g.page_size();
        let mem = &self.arch.hw.mem;
        let mut near = (PageKind::Zero, 0, 0);
        let mut i = 0;
        while i < n {
            let va = addr + i * ps;
            let (level, leaf) = match self.walk_entry(mm, va) {
                WalkEnd::Entry { table, index, level: 3 } => {
                    // This table's ptes from `index`, up to its last or the region's.
                    let left = (g.entries_at(3) - index) as u64;
                    for k in 0..left.min(n - i) {
                        let d = mem.read(table, index + k as usize);
                        if let Some(kind) = self.entry_kind(d, 3, va + k * ps, &mut near) {
                            b.push(i + k, kind);
                        }
                    }
                    i += left;
                    continue;
                }
                WalkEnd::Entry { table, index, level } => {
                    let d = mem.read(table, index);
                    (level, self.entry_pfn(d, level, va).is_some().then_some(d))
                }
                WalkEnd::Dangling { level } => (level, None),
            };
            // An upper-level entry: its pages to the end of its span, one by one where
            // it maps them.
            let span = 1u64 << g.level_shift(level);
            let end = ((va & !(span - 1)) + span - addr).div_ceil(ps).min(n);
            if let Some(d) = leaf {
                for k in i..end {
                    if let Some(kind) = self.entry_kind(d, level, addr + k * ps, &mut near) {
                        b.push(k, kind);
                    }
                }
            }
            i = end;
        }
    }
}

#[cfg(test)]
pub(crate) mod tests;
