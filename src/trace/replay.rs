//! `foliolab replay`: drive the model with a recorded trace.
//!
//! Each recorded process gets a model mm; each recorded fault becomes an EL0 access
//! to its address, which faults in the model only if the model's page tables do not
//! map it yet. That is the prediction: a trace recorded with large folios off has a
//! fault at every first touch of a page, and under 64K mTHP the model takes a fault
//! only on the first touch of each 64K block it can fill.
//!
//! Only private anonymous memory is modelled. Every mapping is also kept in a shadow
//! of the process's address space, so a fault on a file, shared or kernel mapping is
//! counted by kind rather than dropped, and mmap, munmap, mprotect and mremap split
//! and replace them as the kernel's VMAs would be.

use super::format::{Event, MapCause, MapKind, Reader, TraceError, PROT_WRITE};
use crate::mm::madvise::Madv;
use crate::mm::memory::FaultError;
use crate::mm::mm_types::{MmId, VmFlags};
use crate::mm::thp_sysfs::ThpKnobs;
use crate::mm::Kernel;
use crate::report::{Counters, Report};
use crate::sim::{self, Variants};
use std::collections::{BTreeMap, HashMap};
use std::io::{Read, Seek};

/// One mapping of the shadow address space.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
struct Mapping {
    end: u64,
    kind: MapKind,
    prot: u8,
    /// VM_NOHUGEPAGE (mmap with MAP_STACK).
    nohuge: bool,
}

/// A recorded address space: the model mm (for its anonymous memory), the shadow of
/// every mapping, and the processes using it (CLONE_VM children share it).
struct Space {
    mm: MmId,
    maps: BTreeMap<u64, Mapping>,
    brk: Option<u64>,
    /// Where the heap begins (mm->start_brk): its first brk mapping.
    start_brk: Option<u64>,
    users: u32,
}

impl Space {
    /// Cuts the mappings at `at`, so that one starts there if any covers it.
    fn split(&mut self, at: u64) {
        if let Some((&s, &m)) = self.maps.range(..at).next_back() {
            if m.end > at {
                self.maps.insert(s, Mapping { end: at, ..m });
                self.maps.insert(at, m);
            }
        }
    }

    /// The pieces of [start, end), cut at its edges: (start, mapping).
    fn carve(&mut self, start: u64, end: u64) -> Vec<(u64, Mapping)> {
        self.split(start);
        self.split(end);
        self.maps.range(start..end).map(|(s, m)| (*s, *m)).collect()
    }

    fn find(&self, addr: u64) -> Option<(u64, Mapping)> {
        let (s, m) = self.maps.range(..=addr).next_back()?;
        (m.end > addr).then_some((*s, *m))
    }
}

/// Per recorded process: what the trace says and what the model did.
#[derive(Clone, Debug, Default, serde::Serialize)]
pub struct ProcLine {
    pub proc: u32,
    pub comm: String,
    /// Recorded faults on private anonymous memory.
    pub anon_faults: u64,
    /// Recorded faults on files, shared memory and the kernel's mappings (not modelled).
    pub other_faults: u64,
    /// Recorded faults on addresses the trace never mapped.
    pub unmapped_faults: u64,
    /// Faults the model took.
    pub model_faults: u64,
}

/// The result of a replay: a report as `run` gives, plus the per-process lines.
#[derive(Debug, serde::Serialize)]
pub struct Replayed {
    #[serde(flatten)]
    pub report: Report,
    pub processes: Vec<ProcLine>,
    pub events: u64,
    /// Folio sizes (kB) above a page that the recording's THP knobs let the host
    /// allocate at fault and this replay's do not: its faults are then too few.
    pub recording_hid_faults_kb: Vec<u64>,
}

struct Proc {
    space: usize,
    line: ProcLine,
}

/// The live processes by trace number. A map, not a table indexed by number: a
/// corrupt trace's numbers may jump anywhere, and must not size anything.
#[derive(Default)]
struct Procs(BTreeMap<u32, Proc>);

impl Procs {
    fn get(&self, p: &u32) -> Option<&Proc> {
        self.0.get(p)
    }
    fn get_mut(&mut self, p: &u32) -> Option<&mut Proc> {
        self.0.get_mut(p)
    }
    fn remove(&mut self, p: &u32) -> Option<Proc> {
        self.0.remove(p)
    }
    fn insert(&mut self, p: u32, proc: Proc) {
        self.0.insert(p, proc);
    }
    fn values(&self) -> impl Iterator<Item = &Proc> {
        self.0.values()
    }
}

impl std::ops::Index<&u32> for Procs {
    type Output = Proc;
    fn index(&self, p: &u32) -> &Proc {
        self.get(p).expect("a live process")
    }
}

/// A run of faults by one process (faults come in long runs of one): its space, and
/// the counts of its line those faults made, added to it when another process faults
/// or another record comes, so that neither is looked up a fault.
#[derive(Clone, Copy)]
struct Faulting {
    proc: u32,
    space: usize,
    mm: MmId,
    /// The mm's min_flt when the run began: the model's faults of the run are what it
    /// has gained when the run ends (nothing else faults in the mm before then: any
    /// other record, or a fault of another process sharing it, ends the run first).
    min_flt: u64,
    anon: u64,
    other: u64,
    unmapped: u64,
}

/// Faults of one process replayed back to back, with what each needs kept at hand:
/// the `Faulting` counts, the mapping the last fault found and the CPU the process
/// runs on (nothing else switches it during a run). Put back into the `Replay` when
/// dropped.
struct FaultRun<'a> {
    rp: &'a mut Replay,
    f: Faulting,
    /// The mapping the last fault found in the run's space: (start, mapping).
    hit: Option<(u64, Mapping)>,
    cpu: Option<usize>,
    kernel_faults: u64,
}

impl FaultRun<'_> {
    #[inline(always)]
    fn fault(&mut self, addr: u64, write: bool, kernel: bool) -> Result<(), TraceError> {
        let addr = addr.min(USER_END);
        self.kernel_faults += kernel as u64;
        let m = match self.hit {
            Some((start, m)) if start <= addr && addr < m.end => m,
            _ => match self.find(addr) {
                Some(m) => m,
                None => {
                    self.f.unmapped += 1;
                    return Ok(());
                }
            },
        };
        if !m.kind.is_anon() {
            self.f.other += 1;
            return Ok(());
        }
        let cpu = match self.cpu {
            Some(cpu) => cpu,
            None => *self.cpu.insert(self.rp.cpu_for(self.f.proc, self.f.mm)),
        };
        match sim::user_access(&mut self.rp.k, self.f.mm, cpu, addr, write) {
            Ok(()) => {}
            Err(FaultError::Segv(_)) => self.rp.segv += 1,
            Err(e @ FaultError::Oom(_)) => {
                return Err(self.rp.fail(format!(
                    "the model ran {e} with ram={} (the recorded program used more): raise --set ram",
                    self.rp.ram
                )))
            }
        }
        self.f.anon += 1;
        Ok(())
    }

    /// The mapping at `addr`, remembered for the faults after it; below a stack
    /// mapping, the stack grown down to it (expand_stack).
    #[inline(never)]
    fn find(&mut self, addr: u64) -> Option<Mapping> {
        let sp = self.rp.spaces[self.f.space].as_mut().expect("live");
        if let Some((start, m)) = sp.find(addr) {
            self.hit = Some((start, m));
            return Some(m);
        }
        match sp.maps.range(addr..).next() {
            Some((&start, &m)) if m.kind == MapKind::Stack => {
                self.rp.grow_stack(self.f.proc, start, addr & !(PAGE - 1));
                self.hit = None;
                Some(m)
            }
            _ => None,
        }
    }
}

impl Drop for FaultRun<'_> {
    fn drop(&mut self) {
        let rp = &mut *self.rp;
        rp.faulting = Some(self.f);
        rp.hit = self.hit.map(|(start, m)| (self.f.space, start, m));
        rp.kernel_faults += self.kernel_faults;
    }
}

struct Replay {
    k: Kernel,
    spaces: Vec<Option<Space>>,
    /// The spaces not freed yet.
    live_spaces: u64,
    procs: Procs,
    /// The mapping the last fault found (space, start, mapping): faults run in one
    /// mapping for long stretches. Every event that changes mappings clears it.
    hit: Option<(usize, u64, Mapping)>,
    done: Vec<ProcLine>,
    /// The process of the last faults, while no other record has come.
    faulting: Option<Faulting>,
    /// The mm each CPU last ran (switch_mm on change).
    on_cpu: Vec<Option<MmId>>,
    ignored_advice: BTreeMap<u32, u64>,
    segv: u64,
    /// Records of processes the trace never introduced.
    orphans: u64,
    /// Recorded faults the kernel took on user memory for the program.
    kernel_faults: u64,
    /// The model's RAM, as set, for errors.
    ram: String,
}

/// The madvise advice the model has, by Linux's generic numbers.
fn madv(advice: u32) -> Option<Madv> {
    Some(match advice {
        4 => Madv::DontNeed,
        8 => Madv::Free,
        14 => Madv::HugePage,
        15 => Madv::NoHugePage,
        20 => Madv::Cold,
        21 => Madv::PageOut,
        25 => Madv::Collapse,
        _ => return None,
    })
}

fn vm_flags(prot: u8) -> VmFlags {
    let mut f = VmFlags::empty();
    if prot & super::format::PROT_READ != 0 {
        f |= VmFlags::READ;
    }
    if prot & PROT_WRITE != 0 {
        f |= VmFlags::WRITE;
    }
    f
}

const PAGE: u64 = 4096;
/// setup_arg_pages' stack_expand: what exec adds below the argument pages.
const STACK_EXPAND: u64 = 128 << 10;
/// The end of the user address space the model gives a process (48-bit VA).
const USER_END: u64 = 1 << 47;

fn page_up(a: u64) -> u64 {
    a.next_multiple_of(PAGE)
}

impl Replay {
    fn fail(&self, msg: String) -> TraceError {
        TraceError::Bad {
            path: String::new(),
            msg,
        }
    }

    fn new_space(&mut self) -> Result<usize, TraceError> {
        let mm = self
            .k
            .mm_alloc()
            .ok_or_else(|| self.fail("the model ran out of memory for a new mm".into()))?;
        self.spaces.push(Some(Space {
            mm,
            maps: BTreeMap::new(),
            brk: None,
            start_brk: None,
            users: 1,
        }));
        self.live_spaces += 1;
        Ok(self.spaces.len() - 1)
    }

    fn space(&mut self, proc: u32) -> Option<&mut Space> {
        let s = self.procs.get(&proc)?.space;
        self.spaces[s].as_mut()
    }

    fn put_space(&mut self, s: usize) {
        let sp = self.spaces[s].as_mut().expect("a live space");
        sp.users -= 1;
        if sp.users == 0 {
            let mm = sp.mm;
            self.spaces[s] = None;
            self.live_spaces -= 1;
            for c in self.on_cpu.iter_mut().filter(|c| **c == Some(mm)) {
                *c = None;
            }
            self.k.exit_mmap(mm);
        }
    }

    fn cpu_for(&mut self, proc: u32, mm: MmId) -> usize {
        let cpu = proc as usize % self.on_cpu.len();
        if self.on_cpu[cpu] != Some(mm) {
            self.k.switch_mm(cpu, mm);
            self.on_cpu[cpu] = Some(mm);
        }
        cpu
    }

    /// Removes [start, end) from the process's address space, model and shadow.
    fn unmap(&mut self, proc: u32, start: u64, end: u64) {
        let Some(sp) = self.space(proc) else { return };
        let pieces = sp.carve(start, end);
        let mm = sp.mm;
        for (s, _) in &pieces {
            sp.maps.remove(s);
        }
        if pieces.iter().any(|(_, m)| m.kind.is_anon()) {
            self.k.do_munmap(mm, start, end);
        }
    }

    /// Maps [start, end) as `m`: anonymous pieces in the model too, merged with their
    /// neighbours as mmap_region would, or for the heap, with the heap only.
    fn map(&mut self, proc: u32, start: u64, m: Mapping, heap: bool) -> Result<(), TraceError> {
        let Some(sp) = self.space(proc) else { return Ok(()) };
        let floor = if heap {
            Some(*sp.start_brk.get_or_insert(start))
        } else {
            None
        };
        // The heap is [mm->start_brk, brk): it never grows below where it began.
        if floor.is_some_and(|f| start < f) {
            return Err(self.fail(format!(
                "the heap maps {start:#x}, below its start {:#x} (corrupt trace)",
                floor.unwrap_or(0)
            )));
        }
        sp.maps.insert(start, m);
        let mm = sp.mm;
        if m.kind.is_anon() {
            let nohuge = if m.nohuge {
                VmFlags::NOHUGEPAGE
            } else {
                VmFlags::empty()
            };
            self.k
                .do_mmap(mm, start, m.end - start, vm_flags(m.prot) | nohuge)
                .map_err(|e| self.fail(format!("mmap {start:#x}-{:#x} in the model: {e}", m.end)))?;
            match floor {
                Some(f) => self.k.merge_from(mm, f, m.end),
                None => self.k.merge_around(mm, start, m.end),
            }
        }
        Ok(())
    }

    fn event(&mut self, e: Event) -> Result<(), TraceError> {
        self.flush_faulting();
        // A process the trace never introduced (by a fork or an exec) has nothing to
        // act on: counted, and noted in the report.
        // (A fault's process is looked up once, in `fault`, which counts it so too.)
        if !matches!(e, Event::Exec { .. } | Event::Fault { .. }) && self.procs.get(&e.proc()).is_none() {
            self.orphans += 1;
            return Ok(());
        }
        if !matches!(e, Event::Fault { .. }) {
            self.hit = None;
            let ranges = match e {
                Event::Map { start, len, .. }
                | Event::Munmap { start, len, .. }
                | Event::Mprotect { start, len, .. }
                | Event::Madvise { start, len, .. } => [(start, len), (0, 0)],
                Event::Mremap {
                    old,
                    old_len,
                    new,
                    new_len,
                    ..
                } => [(old, old_len), (new, new_len)],
                Event::Brk { brk, .. } => [(brk, 0), (0, 0)],
                _ => [(0, 0); 2],
            };
            for (start, len) in ranges {
                if start.checked_add(len).is_none_or(|end| end > USER_END) {
                    return Err(self.fail(format!(
                        "range {start:#x}+{len:#x} is beyond the user address space (corrupt trace)"
                    )));
                }
            }
            // The syscalls recorded fail on an unaligned start (EINVAL), and mmap and
            // mremap on an empty result: the recorder keeps only those that succeeded.
            let (start, empty) = match e {
                Event::Map { start, len, .. } => (start, len == 0),
                Event::Munmap { start, .. } | Event::Mprotect { start, .. } | Event::Madvise { start, .. } => {
                    (start, false)
                }
                Event::Mremap { old, new, new_len, .. } => (old | new, new_len == 0),
                _ => (0, false),
            };
            if !start.is_multiple_of(PAGE) || empty {
                return Err(self.fail(format!("{}: not what a successful call records (corrupt trace)", e)));
            }
        }
        match e {
            Event::Fault {
                proc,
                addr,
                write,
                kernel,
            } => self.fault(proc, addr, write, kernel),
            Event::Map {
                proc,
                start,
                len,
                prot,
                kind,
                cause,
                nohuge,
            } => {
                let end = page_up(start + len);
                let m = Mapping {
                    end,
                    kind,
                    prot,
                    nohuge,
                };
                match cause {
                    // The stack grown by a fault below it (expand_downwards reports it).
                    MapCause::Mmap if kind == MapKind::Stack && self.stack_of(proc, end).is_some() => {
                        let low = self.stack_of(proc, end).expect("just found");
                        if start < low {
                            self.grow_stack(proc, low, start);
                        }
                        Ok(())
                    }
                    // exec's stack: the arguments and environment are already in its
                    // top pages, put there by get_user_pages (no fault the trace
                    // records), and setup_arg_pages grew it by 128K below them.
                    MapCause::Mmap if kind == MapKind::Stack && len > STACK_EXPAND => {
                        let Some(mm) = self.space(proc).map(|sp| sp.mm) else {
                            return Ok(());
                        };
                        self.unmap(proc, start, end);
                        let args = start + STACK_EXPAND;
                        self.map(proc, args, m, false)?;
                        self.k
                            .mm_populate(mm, args, end)
                            .map_err(|e| self.fail(format!("exec's argument pages in the model: {e}")))?;
                        self.k.expand_downwards(mm, args, start);
                        let sp = self.space(proc).expect("just mapped");
                        sp.maps.remove(&args);
                        sp.maps.insert(start, m);
                        Ok(())
                    }
                    MapCause::Mmap => {
                        self.unmap(proc, start, end);
                        self.map(proc, start, m, false)
                    }
                    // The heap as it now is: map only what it grew by.
                    MapCause::Brk => {
                        let Some(sp) = self.space(proc) else { return Ok(()) };
                        let mut holes = Vec::new();
                        let mut at = start;
                        let from = sp.maps.range(..=start).next_back().map_or(start, |(s, _)| *s);
                        for (s, x) in sp.maps.range(from..end).filter(|(_, x)| x.end > start) {
                            if *s > at {
                                holes.push((at, *s));
                            }
                            at = at.max(x.end);
                        }
                        if at < end {
                            holes.push((at, end));
                        }
                        for (s, e) in holes {
                            self.map(proc, s, Mapping { end: e, ..m }, true)?;
                        }
                        Ok(())
                    }
                }
            }
            Event::Munmap { proc, start, len } => {
                self.unmap(proc, start, page_up(start + len));
                Ok(())
            }
            Event::Mprotect { proc, start, len, prot } => {
                let end = page_up(start + len);
                let Some(sp) = self.space(proc) else { return Ok(()) };
                let mm = sp.mm;
                let pieces = sp.carve(start, end);
                for (s, m) in &pieces {
                    sp.maps.insert(*s, Mapping { prot, ..*m });
                }
                for (s, m) in pieces.into_iter().filter(|(_, m)| m.kind.is_anon()) {
                    self.k
                        .do_mprotect(mm, s, m.end, vm_flags(prot))
                        .map_err(|e| self.fail(format!("mprotect {s:#x}-{:#x} in the model: {e}", m.end)))?;
                }
                Ok(())
            }
            Event::Madvise {
                proc,
                start,
                len,
                advice,
            } => {
                let Some(a) = madv(advice) else {
                    *self.ignored_advice.entry(advice).or_default() += 1;
                    return Ok(());
                };
                let end = page_up(start + len);
                let Some(sp) = self.space(proc) else { return Ok(()) };
                let mm = sp.mm;
                let from = sp.maps.range(..=start).next_back().map_or(start, |(s, _)| *s);
                let pieces: Vec<(u64, u64)> = sp
                    .maps
                    .range(from..end)
                    .filter(|(_, m)| m.end > start && m.kind.is_anon())
                    .map(|(s, m)| ((*s).max(start), m.end.min(end)))
                    .collect();
                for (s, e) in pieces {
                    // A collapse the model cannot make is an outcome, as on the host.
                    let _ = self.k.do_madvise(mm, s, e, a);
                }
                Ok(())
            }
            Event::Mremap {
                proc,
                old,
                old_len,
                new,
                new_len,
            } => self.mremap(proc, old, page_up(old + old_len), new, page_up(new + new_len)),
            Event::Brk { proc, brk } => {
                let Some(sp) = self.space(proc) else { return Ok(()) };
                let prev = sp.brk.replace(brk);
                if let Some(prev) = prev.filter(|p| page_up(*p) > page_up(brk)) {
                    self.unmap(proc, page_up(brk), page_up(prev));
                }
                Ok(())
            }
            Event::Fork {
                parent,
                child,
                share_mm,
            } => {
                let ps = self.procs[&parent].space;
                // The recorder numbers each new process afresh.
                if self.procs.get(&child).is_some() {
                    return Err(self.fail(format!(
                        "p{parent} forks p{child}, a process already alive (corrupt trace)"
                    )));
                }
                let space = if share_mm {
                    self.spaces[ps].as_mut().expect("live").users += 1;
                    ps
                } else {
                    let src = self.spaces[ps].as_ref().expect("live");
                    let (maps, brk, pmm, start_brk) = (src.maps.clone(), src.brk, src.mm, src.start_brk);
                    let mm = self
                        .k
                        .dup_mmap(pmm)
                        .ok_or_else(|| self.fail("fork: the model ran out of memory".into()))?;
                    self.spaces.push(Some(Space {
                        mm,
                        maps,
                        brk,
                        start_brk,
                        users: 1,
                    }));
                    self.live_spaces += 1;
                    self.spaces.len() - 1
                };
                let comm = self.procs[&parent].line.comm.clone();
                self.procs.insert(
                    child,
                    Proc {
                        space,
                        line: ProcLine {
                            proc: child,
                            comm,
                            ..ProcLine::default()
                        },
                    },
                );
                Ok(())
            }
            Event::Exec { proc, comm } => {
                let space = self.new_space()?;
                match self.procs.get_mut(&proc) {
                    Some(p) => {
                        let old = std::mem::replace(&mut p.space, space);
                        p.line.comm = comm;
                        self.put_space(old);
                    }
                    None => {
                        self.procs.insert(
                            proc,
                            Proc {
                                space,
                                line: ProcLine {
                                    proc,
                                    comm,
                                    ..ProcLine::default()
                                },
                            },
                        );
                    }
                }
                Ok(())
            }
            Event::Exit { proc } => {
                let p = self.procs.remove(&proc).expect("checked live");
                self.done.push(p.line);
                self.put_space(p.space);
                Ok(())
            }
        }
    }

    /// The start of the process's stack mapping that ends at `end`, if it has one.
    fn stack_of(&mut self, proc: u32, end: u64) -> Option<u64> {
        let sp = self.space(proc)?;
        let (s, m) = sp.maps.range(..end).next_back()?;
        (m.kind == MapKind::Stack && m.end == end).then_some(*s)
    }

    /// expand_downwards of the stack mapping starting at `start`, model and shadow.
    fn grow_stack(&mut self, proc: u32, start: u64, low: u64) {
        let Some(sp) = self.space(proc) else { return };
        let Some(m) = sp.maps.remove(&start) else { return };
        sp.maps.insert(low, m);
        let mm = sp.mm;
        self.k.expand_downwards(mm, start, low);
        self.hit = None;
    }

    /// The faulting process's line brought up to date (before any other record, and
    /// before the lines are read).
    fn flush_faulting(&mut self) {
        if let Some(f) = self.faulting.take() {
            let model = self.k.mm(f.mm).min_flt - f.min_flt;
            let line = &mut self.procs.get_mut(&f.proc).expect("a faulting process is live").line;
            line.anon_faults += f.anon;
            line.model_faults += model;
            line.other_faults += f.other;
            line.unmapped_faults += f.unmapped;
        }
    }

    /// The run of faults `proc` continues or begins; None for a process the trace
    /// never introduced, which has nothing to fault in (its faults are orphans).
    #[inline]
    fn faults_of(&mut self, proc: u32) -> Option<FaultRun<'_>> {
        let f = match self.faulting {
            Some(f) if f.proc == proc => f,
            _ => {
                self.flush_faulting();
                let space = self.procs.get(&proc)?.space;
                let mm = self.spaces[space].as_ref().expect("live").mm;
                Faulting {
                    proc,
                    space,
                    mm,
                    min_flt: self.k.mm(mm).min_flt,
                    anon: 0,
                    other: 0,
                    unmapped: 0,
                }
            }
        };
        let hit = self.hit.filter(|(s, ..)| *s == f.space).map(|(_, start, m)| (start, m));
        Some(FaultRun {
            rp: self,
            f,
            hit,
            cpu: None,
            kernel_faults: 0,
        })
    }

    /// One fault: a run of one.
    fn fault(&mut self, proc: u32, addr: u64, write: bool, kernel: bool) -> Result<(), TraceError> {
        let done = self.faults_of(proc).map(|mut run| run.fault(addr, write, kernel));
        done.unwrap_or_else(|| {
            self.orphans += 1;
            Ok(())
        })
    }

    fn mremap(&mut self, proc: u32, old: u64, old_end: u64, new: u64, new_end: u64) -> Result<(), TraceError> {
        let Some(sp) = self.space(proc) else { return Ok(()) };
        let Some((_, m)) = sp.find(old) else { return Ok(()) };
        let mm = sp.mm;
        if new == old {
            if new_end < old_end {
                self.unmap(proc, new_end, old_end);
            } else if new_end > old_end {
                // Grown where it is: the same VMA, extended (expand_vma_in_place).
                self.unmap(proc, old_end, new_end);
                let sp = self.space(proc).expect("live");
                sp.maps.insert(old_end, Mapping { end: new_end, ..m });
                if m.kind.is_anon() {
                    self.k
                        .vma_expand(mm, old_end, new_end)
                        .map_err(|e| self.fail(format!("mremap {old:#x} growing to {new_end:#x} in the model: {e}")))?;
                }
            }
            return Ok(());
        }
        self.unmap(proc, new, new_end);
        let sp = self.space(proc).expect("live");
        let pieces = sp.carve(old, old_end);
        for (s, _) in &pieces {
            sp.maps.remove(s);
        }
        sp.maps.insert(new, Mapping { end: new_end, ..m });
        if m.kind.is_anon() {
            self.k
                .do_mremap(mm, old, old_end - old, new_end - new, new)
                .map_err(|e| self.fail(format!("mremap {old:#x} -> {new:#x} in the model: {e}")))?;
        }
        Ok(())
    }
}

/// Replays the trace `path` on a model configured by `v`.
/// The THP knobs start as the trace's header recorded them on the host (a knob the
/// model's machine lacks, such as a size its granule has not, is left out with a
/// note); `knobs` are then written over them (`enabled`, `hugepages-64kB/enabled`, ...).
pub fn replay<R: Read + Seek>(
    path: &str,
    mut r: R,
    v: &Variants,
    knobs: &[(String, String)],
) -> Result<Replayed, TraceError> {
    let bad = |msg: String| TraceError::Bad {
        path: path.to_string(),
        msg,
    };
    // The whole trace is read once before the model sees any of it: a corrupt one is
    // refused whole (checksum, framing, end), never half replayed.
    let census = Census::of(Reader::new(path, &mut r)?)?;
    r.rewind().map_err(|e| TraceError::Io {
        path: path.to_string(),
        source: e,
    })?;
    let mut rd = Reader::new(path, r)?;
    let mut budget = Budget::new(path, v, &census, crate::hostmem::mem_available()).map_err(bad)?;
    let mut k = sim::boot_kernel(v);
    let mut diagnostics = Vec::new();
    for (knob, value) in &rd.header.thp {
        if let Err(e) = k.knobs.set(knob, value) {
            diagnostics.push(format!("recorded THP knob {knob}={value} not applied: {e}"));
        }
    }
    for (knob, value) in knobs {
        k.knobs
            .set(knob, value)
            .map_err(|e| bad(format!("THP knob {knob}={value}: {e}")))?;
    }
    let hidden = hidden_by_recording(&rd.header.thp, &k.knobs, census.madv_hugepage);
    if !hidden.is_empty() {
        let sizes: Vec<String> = hidden.iter().map(|kb| format!("{kb}kB")).collect();
        diagnostics.push(format!(
            "the recording's THP knobs let the host allocate {} folios at fault, which this replay does not: \
             the trace lacks the faults they absorbed, so the model's faults here are too few \
             (record with every size off, as `foliolab predict` does)",
            sizes.join(", ")
        ));
    }
    let ncpus = k.arch.hw.cpus.len();
    let mut rp = Replay {
        k,
        spaces: Vec::new(),
        live_spaces: 0,
        procs: Procs::default(),
        hit: None,
        done: Vec::new(),
        faulting: None,
        on_cpu: vec![None; ncpus],
        ignored_advice: BTreeMap::new(),
        segv: 0,
        orphans: 0,
        kernel_faults: 0,
        ram: v.get("ram").to_string(),
    };
    let mut initial = Counters::new();
    sim::kernel_counters(&rp.k, &mut initial);
    let mut events = 0u64;
    let mut kinds = [0i64; Event::KINDS.len()];
    let at_record = |events: u64, e: TraceError| match e {
        TraceError::Bad { msg, .. } => TraceError::Bad {
            path: path.to_string(),
            msg: format!("record {events}: {msg}"),
        },
        e => e,
    };
    // The host memory is counted every EVERY records (`recount`), and at a fork or an
    // exec: only then is this called.
    let mut check_budget = |rp: &Replay, events: u64, recount: bool| {
        budget
            .check(rp, recount)
            .map_err(|msg| bad(format!("record {events}: {msg}")))
    };
    loop {
        // A run of faults by one process, most of a trace, decoded and replayed in
        // one loop; it stops before a record the host memory is counted at.
        let run = rd.same_process_next();
        #[cfg(test)]
        let run = run.filter(|_| !tests::FAULTS_ONE_A_RECORD.get());
        if let Some(proc) = run {
            let first = events + 1;
            if first.is_multiple_of(Budget::EVERY) {
                check_budget(&rp, first, true)?;
            }
            let room = Budget::EVERY - first % Budget::EVERY;
            let mut orphans = false;
            let (n, done) = match rp.faults_of(proc) {
                Some(mut run) => rd.same_process_faults(room, |addr, write, kernel| run.fault(addr, write, kernel)),
                None => {
                    orphans = true;
                    rd.same_process_faults(room, |_, _, _| Ok(()))
                }
            };
            if orphans {
                rp.orphans += n;
            }
            #[cfg(test)]
            tests::RUN_FAULTS.set(tests::RUN_FAULTS.get() + n);
            events += n;
            kinds[Event::FAULT_KIND] += n as i64;
            done.map_err(|e| at_record(events, e))?;
            // None read: the page delta runs past the decompressed bytes.
            if n > 0 {
                continue;
            }
        }
        // A fault, most records, goes straight to `fault`, as `event` would send it.
        if let Some(f) = rd.next_fault()? {
            events += 1;
            kinds[Event::FAULT_KIND] += 1;
            if events.is_multiple_of(Budget::EVERY) {
                check_budget(&rp, events, true)?;
            }
            rp.fault(f.proc, f.addr, f.write, f.kernel)
                .map_err(|e| at_record(events, e))?;
            continue;
        }
        let Some(e) = rd.next_event()? else { break };
        events += 1;
        kinds[e.kind_index()] += 1;
        let recount = events.is_multiple_of(Budget::EVERY);
        if recount || matches!(e, Event::Fork { .. } | Event::Exec { .. }) {
            check_budget(&rp, events, recount)?;
        }
        rp.event(e).map_err(|e| at_record(events, e))?;
    }
    rp.flush_faulting();
    let mut lines = std::mem::take(&mut rp.done);
    lines.extend(rp.procs.values().map(|p| p.line.clone()));
    lines.sort_by_key(|l| l.proc);
    let mut fin = Counters::new();
    sim::kernel_counters(&rp.k, &mut fin);
    let mut counters: Counters = fin
        .iter()
        .map(|(k, v)| (k.clone(), v - initial.get(k).copied().unwrap_or(0)))
        .collect();
    let sum = |f: fn(&ProcLine) -> u64| lines.iter().map(f).sum::<u64>() as i64;
    counters.insert("trace.faults.anon".into(), sum(|l| l.anon_faults));
    // Deprecated for unmodeled.faults.{other,unmapped}; removed in the next release.
    counters.insert("trace.faults.other".into(), sum(|l| l.other_faults));
    counters.insert("trace.faults.unmapped".into(), sum(|l| l.unmapped_faults));
    for (kind, n) in Event::KINDS.iter().zip(kinds).filter(|(_, n)| *n != 0) {
        counters.insert(format!("trace.events.{kind}"), n);
    }
    counters.insert("trace.faults.kernel".into(), rp.kernel_faults as i64);
    counters.insert("trace.processes".into(), lines.len() as i64);
    counters.insert("model.faults".into(), sum(|l| l.model_faults));
    counters.insert("model.segv".into(), rp.segv as i64);
    // The keys `run` and `native` use for a process, by comm (processes sharing one
    // summed; `processes` has them one by one), and what the trace holds that the model
    // does not replay under keys of its own, so no script compares it with a model count.
    for l in &lines {
        *counters.entry(format!("proc.{}.minflt", l.comm)).or_default() += l.model_faults as i64;
        *counters.entry(format!("unmodeled.proc.{}.minflt", l.comm)).or_default() +=
            (l.other_faults + l.unmapped_faults) as i64;
    }
    counters.insert("unmodeled.faults.other".into(), sum(|l| l.other_faults));
    counters.insert("unmodeled.faults.unmapped".into(), sum(|l| l.unmapped_faults));
    for (advice, n) in &rp.ignored_advice {
        counters.insert(format!("unmodeled.madvise.{advice}"), *n as i64);
    }
    diagnostics.extend(
        rp.ignored_advice
            .iter()
            .map(|(a, n)| format!("madvise advice {a} ({n} calls): not modelled, ignored")),
    );
    let running = rd.trailer().map_or(0, |t| t.still_running);
    if running > 0 {
        diagnostics.push(format!(
            "{running} processes were still running when the recorded program exited: what they did after is not in the trace"
        ));
    }
    if rp.orphans > 0 {
        diagnostics.push(format!(
            "{} records of processes the trace never introduced (no fork or exec before them): ignored",
            rp.orphans
        ));
    }
    if rp.segv > 0 {
        diagnostics.push(format!(
            "{} recorded faults are access violations in the model (a write to memory it maps read-only)",
            rp.segv
        ));
    }
    Ok(Replayed {
        report: Report {
            source: "model".into(),
            workload: path.to_string(),
            variants: v.all().clone(),
            counters,
            phases: Vec::new(),
            layout: BTreeMap::new(),
            unavailable: BTreeMap::new(),
            diagnostics,
            runner_notes: Vec::new(),
            background: None,
        },
        processes: lines,
        events,
        recording_hid_faults_kb: hidden,
    })
}

/// What a first reading of the whole trace finds, before the model is built.
#[derive(Debug, Default)]
struct Census {
    /// The most processes, and address spaces, alive at once.
    peak_procs: u64,
    peak_spaces: u64,
    /// Whether the program used MADV_HUGEPAGE.
    madv_hugepage: bool,
    /// Address spaces the replay creates (an exec or a fork without CLONE_VM each).
    spaces_created: u64,
}

impl Census {
    /// Reads every record (the reader checks framing, the end record and the
    /// checksum), following which processes and address spaces are alive as the
    /// replay will.
    fn of<R: Read>(mut rd: Reader<R>) -> Result<Census, TraceError> {
        let mut c = Census::default();
        // The replay's address spaces each take an ASID; next_space counts them.
        // Process → its space; space → its users.
        let mut procs: HashMap<u32, u64> = HashMap::new();
        let mut users: HashMap<u64, u32> = HashMap::new();
        let mut next_space = 0u64;
        let drop_user = |users: &mut HashMap<u64, u32>, s: u64| {
            let n = users.get_mut(&s).expect("a live space");
            *n -= 1;
            if *n == 0 {
                users.remove(&s);
            }
        };
        loop {
            // A fault changes nothing counted here.
            if rd.same_process_faults(u64::MAX, |_, _, _| Ok::<(), TraceError>(())).0 > 0 {
                continue;
            }
            if rd.next_fault()?.is_some() {
                continue;
            }
            let Some(e) = rd.next_event()? else { break };
            match e {
                Event::Exec { proc, .. } => {
                    next_space += 1;
                    users.insert(next_space, 1);
                    if let Some(old) = procs.insert(proc, next_space) {
                        drop_user(&mut users, old);
                    }
                }
                Event::Fork {
                    parent,
                    child,
                    share_mm,
                } => {
                    let Some(&ps) = procs.get(&parent) else { continue };
                    if procs.contains_key(&child) {
                        continue;
                    }
                    let s = if share_mm {
                        ps
                    } else {
                        next_space += 1;
                        next_space
                    };
                    *users.entry(s).or_default() += 1;
                    procs.insert(child, s);
                }
                Event::Exit { proc } => {
                    if let Some(s) = procs.remove(&proc) {
                        drop_user(&mut users, s);
                    }
                }
                Event::Madvise { advice: 14, .. } => c.madv_hugepage = true,
                _ => {}
            }
            c.spaces_created = next_space;
            c.peak_procs = c.peak_procs.max(procs.len() as u64);
            c.peak_spaces = c.peak_spaces.max(users.len() as u64);
        }
        Ok(c)
    }
}

/// The replay's host memory: the model machine's own (its memmap and page tables, for
/// all of its RAM), and per address space and per mapping what the replay keeps,
/// checked before the model is built against the most spaces the trace keeps alive,
/// and again as it runs.
struct Budget {
    /// Bytes the host can give (MemAvailable).
    limit: Option<u64>,
    machine: u64,
    what: String,
    /// Mappings of every live space at the last count.
    maps: u64,
}

impl Budget {
    /// Host bytes per live address space: the model mm with its page-table root and
    /// the first tables below it, the shadow map, the process line (`run`'s per-process
    /// cost too). Measured by `measure_host_bytes_per_space` (one page written per space).
    const PER_SPACE: u64 = crate::hostmem::cost::PROCESS;
    /// Host bytes per mapping: the model VMA and the shadow's entry, and each a share
    /// of a page table. Measured by `measure_host_bytes_per_mapping`.
    const PER_MAPPING: u64 = 512;
    /// Records between checks while running (and at every fork).
    const EVERY: u64 = 1 << 16;

    fn new(path: &str, v: &Variants, c: &Census, limit: Option<u64>) -> Result<Budget, String> {
        let cfg = v.machine();
        let b = Budget {
            limit,
            machine: sim::host_bytes_for(&cfg, u64::MAX, 1 << 16),
            what: format!("replaying {path} on a model with ram={}", v.get("ram")),
            maps: 0,
        };
        // ASIDs 1 ..= Asid::MAX - 1, with no rollover in the model.
        let asids = crate::hw::Asid::MAX as u64 - 1;
        if c.spaces_created > asids {
            return Err(format!(
                "the trace creates {} address spaces; the model gives each an ASID of its own and does not model \
                 ASID rollover (arm64's new_context), so a replay takes at most {asids}",
                c.spaces_created
            ));
        }
        b.parts(c.peak_spaces, 0, "alive at once in the trace")
            .check_against(b.limit)?;
        Ok(b)
    }

    /// Whether what the replay holds now still fits; the mappings are counted again
    /// when `recount` (every `EVERY` records: counting is a walk of every space).
    fn check(&mut self, rp: &Replay, recount: bool) -> Result<(), String> {
        if recount {
            self.maps = rp.spaces.iter().flatten().map(|s| s.maps.len() as u64).sum();
        }
        self.parts(rp.live_spaces, self.maps, "alive by now")
            .check_against(self.limit)
    }

    /// The host memory budget (`hostmem::Budget`) of the model machine and `spaces`
    /// address spaces holding `maps` mappings, each part named by what makes it smaller.
    fn parts(&self, spaces: u64, maps: u64, when: &str) -> crate::hostmem::Budget {
        let mut b = crate::hostmem::Budget::new(self.what.clone());
        b.add(
            "the model machine's memmap and page tables (a lower --set ram)",
            self.machine,
        )
        .add(
            format!(
                "{spaces} address spaces {when}, {} each (a trace of fewer processes)",
                crate::hostmem::fmt_bytes(Self::PER_SPACE)
            ),
            spaces.saturating_mul(Self::PER_SPACE),
        );
        if maps > 0 {
            b.add(format!("{maps} mappings"), maps.saturating_mul(Self::PER_MAPPING));
        }
        b
    }
}

/// The folio sizes (kB) the recording's THP knobs let the host allocate at fault
/// that the model's `now` do not: the recorded trace has no fault for the rest of
/// each such folio, which a replay without them would need. With MADV_HUGEPAGE
/// (`madvised`) the madvise settings count too.
fn hidden_by_recording(recorded: &[(String, String)], now: &ThpKnobs, madvised: bool) -> Vec<u64> {
    // The recorder runs on x86_64: 4K pages.
    let mut rec = ThpKnobs::new(crate::hw::Granule::K4);
    for (knob, value) in recorded {
        // A knob the model's kernel lacks still set the host's sizes.
        let _ = rec.set(knob, value);
    }
    let page_kb = now.granule.page_size() >> 10;
    let mut hidden: Vec<u64> = [false, true]
        .into_iter()
        .filter(|h| !h || madvised)
        .flat_map(|h| {
            let allowed = now.fault_sizes_kb(h);
            rec.fault_sizes_kb(h)
                .into_iter()
                .filter(move |kb| *kb > page_kb && !allowed.contains(kb))
        })
        .collect();
    hidden.sort_unstable();
    hidden.dedup();
    hidden
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::trace::format::{Header, Trailer, Writer, PROT_READ};

    const RW: u8 = PROT_READ | PROT_WRITE;
    const A: u64 = 0x7f00_0000_0000;

    fn trace(events: &[Event]) -> Vec<u8> {
        trace_under(&[("enabled", "never")], events)
    }

    /// A trace recorded under the THP knobs `thp`.
    fn trace_under(thp: &[(&str, &str)], events: &[Event]) -> Vec<u8> {
        let h = Header {
            command: vec!["t".into()],
            host_kernel: "test".into(),
            arch: "x86_64".into(),
            page_size: 4096,
            thp: thp.iter().map(|(k, v)| (k.to_string(), v.to_string())).collect(),
            no_aslr: true,
        };
        let mut w = Writer::new(Vec::new(), &h).unwrap();
        for e in events {
            w.write(e).unwrap();
        }
        let t = Trailer {
            events: w.events(),
            ..Trailer::default()
        };
        w.finish(&t).unwrap()
    }

    fn map(proc: u32, start: u64, len: u64, kind: MapKind) -> Event {
        Event::Map {
            proc,
            start,
            len,
            prot: RW,
            kind,
            cause: MapCause::Mmap,
            nohuge: false,
        }
    }

    fn write(proc: u32, addr: u64) -> Event {
        Event::Fault {
            proc,
            addr,
            write: true,
            kernel: false,
        }
    }

    fn writes(proc: u32, start: u64, pages: u64) -> impl Iterator<Item = Event> {
        (0..pages).map(move |i| write(proc, start + i * PAGE))
    }

    fn exec(proc: u32) -> Event {
        Event::Exec {
            proc,
            comm: format!("p{proc}"),
        }
    }

    fn run(events: &[Event], knobs: &[(&str, &str)]) -> Replayed {
        let v = Variants::from_sets(&[]).unwrap();
        let knobs: Vec<(String, String)> = knobs.iter().map(|(k, v)| (k.to_string(), v.to_string())).collect();
        replay("t", std::io::Cursor::new(trace(events)), &v, &knobs).unwrap()
    }

    const K64: &[(&str, &str)] = &[("hugepages-64kB/enabled", "always")];

    thread_local! {
        /// Set: every fault is replayed as a record of its own (`next_fault` or
        /// `next_event`), the reference for runs of faults.
        pub(super) static FAULTS_ONE_A_RECORD: std::cell::Cell<bool> = const { std::cell::Cell::new(false) };
        /// Faults replayed in runs on this thread.
        pub(super) static RUN_FAULTS: std::cell::Cell<u64> = const { std::cell::Cell::new(0) };
    }

    /// Runs of faults (`same_process_faults` into a `FaultRun`) against every fault a
    /// record of its own: the whole replay's JSON, or the error, must be the same.
    mod runs {
        use super::*;

        /// The replay of `t` under `knobs` as JSON (or its error), and the faults
        /// replayed in runs.
        fn replayed(t: &[u8], knobs: &[(&str, &str)], one_a_record: bool) -> (Result<String, String>, u64) {
            let v = Variants::from_sets(&["ram=256M".to_string()]).unwrap();
            let knobs: Vec<(String, String)> = knobs.iter().map(|(k, v)| (k.to_string(), v.to_string())).collect();
            FAULTS_ONE_A_RECORD.set(one_a_record);
            RUN_FAULTS.set(0);
            let r = replay("t", std::io::Cursor::new(t), &v, &knobs);
            FAULTS_ONE_A_RECORD.set(false);
            let r = r.map(|r| serde_json::to_string(&r).unwrap()).map_err(|e| e.to_string());
            (r, RUN_FAULTS.get())
        }

        /// Both ways under order-0 folios and 64K; the faults replayed in runs.
        fn both_ways(t: &[u8]) -> u64 {
            let mut in_runs = 0;
            for knobs in [&[][..], K64] {
                let (runs, n) = replayed(t, knobs, false);
                let (one, none) = replayed(t, knobs, true);
                assert_eq!(none, 0);
                assert_eq!(runs, one, "knobs {knobs:?}");
                in_runs += n;
            }
            in_runs
        }

        /// A program from steps (operation, process, page, count, bits): runs of
        /// faults on anonymous, file, stack and unmapped pages with strides of one
        /// page and of many (page deltas of one byte and of several), forks with and
        /// without CLONE_VM, exits, munmap and mmap, and processes never introduced.
        fn program(steps: &[(u8, u32, u64, u64, u8)]) -> Vec<Event> {
            let stack = A + 256 * PAGE;
            let mut e = vec![
                exec(0),
                map(0, A, 64 * PAGE, MapKind::Anon),
                map(0, A + 64 * PAGE, 16 * PAGE, MapKind::File),
                map(0, stack, 32 * PAGE, MapKind::Stack),
            ];
            let mut next = 1;
            for &(op, proc, page, n, bits) in steps {
                match op {
                    0..=4 => {
                        let stride: i64 = [1, -1, 37, 300][(bits & 3) as usize];
                        e.extend((0..n as i64).map(|i| Event::Fault {
                            proc,
                            addr: (A as i64 + (page as i64 + i * stride).rem_euclid(300) * PAGE as i64) as u64,
                            write: bits & 4 != 0,
                            kernel: bits & 8 != 0,
                        }));
                    }
                    5 => {
                        e.push(Event::Fork {
                            parent: proc,
                            child: next,
                            share_mm: bits & 1 != 0,
                        });
                        next += 1;
                    }
                    6 => e.push(Event::Exit { proc }),
                    7 => e.push(Event::Munmap {
                        proc,
                        start: A + page % 64 * PAGE,
                        len: n * PAGE,
                    }),
                    _ => e.push(map(proc, A + page % 64 * PAGE, n * PAGE, MapKind::Anon)),
                }
            }
            e
        }

        proptest::proptest! {
            #![proptest_config(proptest::test_runner::Config { cases: 48, ..Default::default() })]
            #[test]
            fn faults_replayed_in_runs_leave_what_one_a_record_does(
                steps in proptest::collection::vec((0..9u8, 0..4u32, 0..300u64, 1..40u64, 0..16u8), 1..24)
            ) {
                both_ways(&trace(&program(&steps)));
            }
        }

        /// Runs long enough to be cut where the host memory is counted (every 65,536
        /// records) and where the reader's buffer is refilled (256 KiB of records),
        /// with processes taking turns.
        #[test]
        fn long_runs_cut_by_the_budget_and_the_buffer_leave_what_one_a_record_does() {
            let mut steps = vec![(5, 0, 0, 1, 0), (5, 0, 0, 1, 1)];
            for i in 0..60u64 {
                steps.push(((i % 5) as u8, (i % 4) as u32, i * 7, 3000, (i % 16) as u8));
            }
            let t = trace(&program(&steps));
            let in_runs = both_ways(&t);
            assert!(in_runs > 2 * 170_000, "{in_runs}");
        }
    }

    mod faults {
        use super::*;

        #[test]
        fn every_recorded_first_touch_faults_with_order_0_folios() {
            let mut e = vec![exec(0), map(0, A, 64 * PAGE, MapKind::Anon)];
            e.extend(writes(0, A, 64));
            let r = run(&e, &[]);
            assert_eq!(r.processes[0].model_faults, 64);
            assert_eq!(r.processes[0].anon_faults, 64);
        }

        #[test]
        fn a_64k_folio_absorbs_the_next_15_first_touches() {
            let mut e = vec![exec(0), map(0, A, 64 * PAGE, MapKind::Anon)];
            e.extend(writes(0, A, 64));
            let r = run(&e, K64);
            assert_eq!(r.processes[0].model_faults, 4);
            assert_eq!(r.report.counters["mthp.64kB.anon_fault_alloc"], 4);
        }

        #[test]
        fn faults_on_files_and_unmapped_addresses_are_counted_not_modelled() {
            let e = [
                exec(0),
                map(0, A, 4 * PAGE, MapKind::File),
                write(0, A),
                write(0, A + 100 * PAGE),
            ];
            let r = run(&e, &[]);
            let p = &r.processes[0];
            assert_eq!(
                (p.anon_faults, p.other_faults, p.unmapped_faults, p.model_faults),
                (0, 1, 1, 0)
            );
        }

        #[test]
        fn a_fault_of_a_process_never_introduced_is_an_orphan_not_a_kernel_fault() {
            let orphan = Event::Fault {
                proc: 7,
                addr: A,
                write: true,
                kernel: true,
            };
            let e = [exec(0), map(0, A, 4 * PAGE, MapKind::Anon), orphan, write(0, A)];
            let r = run(&e, &[]);
            assert_eq!(r.report.counters["trace.faults.kernel"], 0);
            assert_eq!(r.report.counters["model.faults"], 1);
            assert!(r
                .report
                .diagnostics
                .iter()
                .any(|d| d.starts_with("1 records of processes the trace never introduced")));
        }

        #[test]
        fn exec_stack_argument_pages_are_present_and_growth_keeps_the_stack() {
            let top = A + 1024 * PAGE;
            let stack = |len| map(0, top - len, len, MapKind::Stack);
            // 128K below two pages of arguments; then grown by 4 pages.
            let mut e = vec![exec(0), stack(STACK_EXPAND + 2 * PAGE)];
            e.extend(writes(0, top - 4 * PAGE, 4));
            e.push(stack(STACK_EXPAND + 6 * PAGE));
            e.extend(writes(0, top - 4 * PAGE, 4));
            let r = run(&e, &[]);
            // The argument pages never fault; the two below them fault once each.
            assert_eq!(r.processes[0].model_faults, 2);
            assert_eq!(r.processes[0].anon_faults, 8);
        }

        #[test]
        fn the_stack_grows_down_to_a_fault_below_it() {
            let top = A + 64 * PAGE;
            let mut e = vec![exec(0), map(0, top - 4 * PAGE, 4 * PAGE, MapKind::Stack)];
            e.extend(writes(0, top - 16 * PAGE, 16));
            let r = run(&e, &[]);
            assert_eq!((r.processes[0].unmapped_faults, r.processes[0].model_faults), (0, 16));
        }
    }

    mod mappings {
        use super::*;

        #[test]
        fn an_mmap_over_a_mapping_replaces_its_pages() {
            let mut e = vec![exec(0), map(0, A, 16 * PAGE, MapKind::Anon)];
            e.extend(writes(0, A, 16));
            e.push(map(0, A, 16 * PAGE, MapKind::Anon));
            e.extend(writes(0, A, 16));
            assert_eq!(run(&e, &[]).processes[0].model_faults, 32);
        }

        #[test]
        fn mremap_moves_the_pages_so_the_new_place_does_not_fault() {
            let mut e = vec![exec(0), map(0, A, 16 * PAGE, MapKind::Anon)];
            e.extend(writes(0, A, 16));
            let new = A + 0x10_0000;
            e.push(Event::Mremap {
                proc: 0,
                old: A,
                old_len: 16 * PAGE,
                new,
                new_len: 32 * PAGE,
            });
            e.extend(writes(0, new, 32));
            let r = run(&e, &[]);
            // Only the 16 pages it grew by fault; nothing is left at the old place.
            assert_eq!(r.processes[0].model_faults, 32);
            e.push(write(0, A));
            assert_eq!(run(&e, &[]).processes[0].unmapped_faults, 1);
        }

        #[test]
        fn the_heap_does_not_merge_with_the_mapping_below_it() {
            // bss [A, A+8p) then the heap from A+8p: a 64K block across the edge is not
            // within one VMA, so its first touch takes an order-0 folio (sys_brk's
            // vma_prev_limit, mm->start_brk).
            let heap = |len| Event::Map {
                proc: 0,
                start: A + 8 * PAGE,
                len,
                prot: RW,
                kind: MapKind::Anon,
                cause: MapCause::Brk,
                nohuge: false,
            };
            let mut e = vec![
                exec(0),
                map(0, A, 8 * PAGE, MapKind::Anon),
                heap(8 * PAGE),
                heap(24 * PAGE),
            ];
            e.extend(writes(0, A, 16));
            let r = run(&e, K64);
            assert_eq!(r.processes[0].model_faults, 16);
        }

        #[test]
        fn brk_shrinking_unmaps_the_heap_top() {
            let e = [
                exec(0),
                Event::Brk { proc: 0, brk: A },
                Event::Map {
                    proc: 0,
                    start: A,
                    len: 16 * PAGE,
                    prot: RW,
                    kind: MapKind::Anon,
                    cause: MapCause::Brk,
                    nohuge: false,
                },
                Event::Brk {
                    proc: 0,
                    brk: A + 16 * PAGE,
                },
                Event::Brk {
                    proc: 0,
                    brk: A + 8 * PAGE,
                },
                write(0, A + 12 * PAGE),
            ];
            assert_eq!(run(&e, &[]).processes[0].unmapped_faults, 1);
        }

        #[test]
        fn madvise_dontneed_empties_the_range() {
            let mut e = vec![exec(0), map(0, A, 16 * PAGE, MapKind::Anon)];
            e.extend(writes(0, A, 16));
            e.push(Event::Madvise {
                proc: 0,
                start: A,
                len: 8 * PAGE,
                advice: 4,
            });
            e.extend(writes(0, A, 16));
            assert_eq!(run(&e, &[]).processes[0].model_faults, 24);
        }
    }

    mod processes {
        use super::*;

        #[test]
        fn a_forked_child_copies_on_write_and_a_clone_vm_child_shares() {
            let mut e = vec![exec(0), map(0, A, 4 * PAGE, MapKind::Anon)];
            e.extend(writes(0, A, 4));
            e.push(Event::Fork {
                parent: 0,
                child: 1,
                share_mm: true,
            });
            e.extend(writes(1, A, 4));
            e.push(Event::Fork {
                parent: 0,
                child: 2,
                share_mm: false,
            });
            e.extend(writes(2, A, 4));
            let r = run(&e, &[]);
            let faults: Vec<u64> = r.processes.iter().map(|p| p.model_faults).collect();
            // The CLONE_VM child's writes hit the parent's pages; the fork child's copy.
            assert_eq!(faults, [4, 0, 4]);
        }

        #[test]
        fn exec_gives_a_fresh_address_space_and_exit_frees_it() {
            let mut e = vec![exec(0), map(0, A, 4 * PAGE, MapKind::Anon)];
            e.extend(writes(0, A, 4));
            e.push(exec(0));
            e.push(write(0, A));
            e.push(Event::Exit { proc: 0 });
            let r = run(&e, &[]);
            assert_eq!(r.processes[0].unmapped_faults, 1);
            assert_eq!(r.processes[0].comm, "p0");
            assert_eq!(r.report.counters["kernel.folio_free"], 4);
        }

        #[test]
        fn each_process_line_counts_its_own_faults_when_processes_interleave() {
            // Runs of faults by p0 and its fork child p1, broken by each other, by an
            // orphan's fault and by p1's exit: each line gets its own (the faults of a
            // run are added to the line when the run ends).
            let mut e = vec![
                exec(0),
                map(0, A, 8 * PAGE, MapKind::Anon),
                map(0, A + 32 * PAGE, 4 * PAGE, MapKind::File),
                Event::Fork {
                    parent: 0,
                    child: 1,
                    share_mm: false,
                },
            ];
            e.extend(writes(0, A, 2));
            e.extend(writes(1, A, 3));
            e.push(write(0, A + 32 * PAGE));
            e.push(write(9, A));
            e.push(write(1, A + 64 * PAGE));
            e.push(Event::Exit { proc: 1 });
            e.extend(writes(0, A + 2 * PAGE, 2));
            e.push(write(0, A + 100 * PAGE));
            let r = run(&e, &[]);
            let line = |p: u32| {
                let l = r.processes.iter().find(|l| l.proc == p).unwrap();
                (l.anon_faults, l.model_faults, l.other_faults, l.unmapped_faults)
            };
            assert_eq!(line(0), (4, 4, 1, 1));
            assert_eq!(line(1), (3, 3, 0, 1));
            assert_eq!(r.processes.len(), 2);
            assert!(r
                .report
                .diagnostics
                .iter()
                .any(|d| d.starts_with("1 records of processes")));
        }

        #[test]
        fn processes_report_run_s_keys_by_comm_and_unreplayed_faults_apart() {
            // p0 and its fork child (also "p0") write 4 and 2 pages; p0 faults once
            // where nothing is mapped.
            let mut e = vec![exec(0), map(0, A, 4 * PAGE, MapKind::Anon)];
            e.extend(writes(0, A, 4));
            e.push(Event::Fork {
                parent: 0,
                child: 1,
                share_mm: false,
            });
            e.extend(writes(1, A, 2));
            e.push(write(0, A + 64 * PAGE));
            let c = run(&e, &[]).report.counters;
            assert_eq!(c["proc.p0.minflt"], 6);
            assert_eq!(c["unmodeled.proc.p0.minflt"], 1);
            assert_eq!(c["unmodeled.faults.unmapped"], 1);
            assert_eq!(c["unmodeled.faults.other"], 0);
        }

        /// Numbers jumping by 65,536 a record (what a corrupt trace may hold) cost
        /// nothing: processes are kept by number, not in a table the number sizes.
        #[test]
        fn process_numbers_far_apart_size_nothing() {
            let mut e = vec![exec(0)];
            for i in 0..64u32 {
                e.push(Event::Fork {
                    parent: i * 65_536,
                    child: (i + 1) * 65_536,
                    share_mm: true,
                });
            }
            e.push(exec(4_000_000_000));
            let r = run(&e, &[]);
            assert_eq!(r.processes.len(), 66);
        }

        fn forks(n: u32) -> Vec<u8> {
            let mut e = vec![exec(0), map(0, A, PAGE, MapKind::Anon), write(0, A)];
            for i in 0..n {
                e.push(Event::Fork {
                    parent: i,
                    child: i + 1,
                    share_mm: false,
                });
                e.push(write(i + 1, A));
            }
            trace(&e)
        }

        /// Peak resident bytes of this process, from /proc/self/status.
        fn hwm() -> u64 {
            let s = std::fs::read_to_string("/proc/self/status").unwrap();
            let kb = s.lines().find_map(|l| l.strip_prefix("VmHWM:")).unwrap();
            kb.trim().trim_end_matches("kB").trim().parse::<u64>().unwrap() << 10
        }

        /// The measurement behind `Budget::PER_SPACE`: host bytes per fork child
        /// alive, one page written. Alone, since it reads the process's peak RSS:
        /// `cargo test --lib -- --ignored --exact trace::replay::tests::processes::measure_host_bytes_per_space`.
        #[test]
        #[ignore]
        fn measure_host_bytes_per_space() {
            let v = Variants::from_sets(&[]).unwrap();
            let n = 20_000u32;
            let t = forks(n);
            let base = hwm();
            replay("t", std::io::Cursor::new(&t), &v, &[]).unwrap();
            let per_space = (hwm() - base) / n as u64;
            println!("host bytes per address space {per_space}");
            assert!(per_space <= Budget::PER_SPACE);
        }

        /// The measurement behind `Budget::PER_MAPPING`, alone as the one above:
        /// `... --exact trace::replay::tests::processes::measure_host_bytes_per_mapping`.
        #[test]
        #[ignore]
        fn measure_host_bytes_per_mapping() {
            let v = Variants::from_sets(&[]).unwrap();
            let m = 100_000u64;
            let mut e = vec![exec(0)];
            e.extend((0..m).map(|i| Event::Map {
                proc: 0,
                start: A + 2 * i * PAGE,
                len: PAGE,
                prot: if i % 2 == 0 { RW } else { PROT_READ },
                kind: MapKind::Anon,
                cause: MapCause::Mmap,
                nohuge: false,
            }));
            let t = trace(&e);
            let base = hwm();
            replay("t", std::io::Cursor::new(&t), &v, &[]).unwrap();
            let per_map = (hwm() - base) / m;
            println!("host bytes per mapping {per_map}");
            assert!(per_map <= Budget::PER_MAPPING);
        }

        /// 200k sequential forks: the model's ASIDs run out (it panicked on the
        /// overflow at 65,535 address spaces, or wrapped silently in a release build).
        #[test]
        fn a_trace_creating_more_address_spaces_than_asids_is_refused_before_replay() {
            let v = Variants::from_sets(&[]).unwrap();
            let census = Census::of(Reader::new("t", &forks(70_000)[..]).unwrap()).unwrap();
            let err = Budget::new("t", &v, &census, None).err().unwrap();
            assert!(err.contains("creates 70001 address spaces"), "{err}");
        }

        #[test]
        fn a_trace_keeping_more_address_spaces_alive_than_the_host_can_hold_is_refused_before_replay() {
            let v = Variants::from_sets(&[]).unwrap();
            let census = Census::of(Reader::new("t", &forks(1000)[..]).unwrap()).unwrap();
            assert_eq!((census.peak_procs, census.peak_spaces), (1001, 1001));
            // What the host must have for the machine and `n` spaces: the budget's own
            // parts (the program itself) and margin besides.
            let machine = sim::host_bytes_for(&v.machine(), u64::MAX, 1 << 16);
            let avail = |n: u64| {
                let need = crate::hostmem::cost::BASE + machine + n * Budget::PER_SPACE;
                // MemAvailable less max(an eighth, 256 MiB) must cover `need`.
                (need + (256 << 20)).max(need * 8 / 7 + 1)
            };
            let err = Budget::new("t", &v, &census, Some(avail(500))).err().unwrap();
            assert!(err.contains("1001 address spaces alive at once"), "{err}");
            assert!(Budget::new("t", &v, &census, Some(avail(1001))).is_ok());
        }
    }

    /// Issue 33's records that reached a panic, and the recording's knobs.
    mod hostile {
        use super::*;
        use crate::trace::format::PROT_READ;

        fn with_prot(prot: u8) -> Event {
            Event::Map {
                proc: 0,
                start: A,
                len: 4 * PAGE,
                prot,
                kind: MapKind::Anon,
                cause: MapCause::Mmap,
                nohuge: false,
            }
        }

        /// mmap(PROT_WRITE) and p[0] = 1: arm64 maps write-only as read-write, so the
        /// write faults once, and so does a read then a write of another page.
        #[test]
        fn a_write_to_a_write_only_mapping_faults_once() {
            let mut e = vec![exec(0), with_prot(PROT_WRITE), write(0, A)];
            e.push(Event::Fault {
                proc: 0,
                addr: A + PAGE,
                write: false,
                kernel: false,
            });
            e.push(write(0, A + PAGE));
            // mprotect(PROT_WRITE) of a read-only mapping, then a write.
            e.push(Event::Mprotect {
                proc: 0,
                start: A + 2 * PAGE,
                len: PAGE,
                prot: PROT_READ,
            });
            e.push(Event::Mprotect {
                proc: 0,
                start: A + 2 * PAGE,
                len: PAGE,
                prot: PROT_WRITE,
            });
            e.push(write(0, A + 2 * PAGE));
            let r = run(&e, &[]);
            assert_eq!(r.processes[0].model_faults, 4);
            assert_eq!(r.report.counters["model.segv"], 0);
        }

        /// A stack mmap as the first record of a process (no exec or fork before it).
        #[test]
        fn records_of_a_process_never_introduced_are_counted_and_noted() {
            let top = A + 1024 * PAGE;
            let e = [
                map(
                    3,
                    top - STACK_EXPAND - 2 * PAGE,
                    STACK_EXPAND + 2 * PAGE,
                    MapKind::Stack,
                ),
                write(3, top - PAGE),
                exec(0),
            ];
            let r = run(&e, &[]);
            assert!(
                r.report
                    .diagnostics
                    .iter()
                    .any(|d| d.starts_with("2 records of processes the trace never introduced")),
                "{:?}",
                r.report.diagnostics
            );
        }

        /// Found by tests/trace_fuzz.rs: a heap mapping below the heap's first one
        /// (mm->start_brk) reached the VMA merge with its range reversed.
        #[test]
        fn a_heap_mapping_below_the_heap_start_is_an_error() {
            let heap = |start| Event::Map {
                proc: 0,
                start,
                len: PAGE,
                prot: 0,
                kind: MapKind::Anon,
                cause: MapCause::Brk,
                nohuge: false,
            };
            let v = Variants::from_sets(&[]).unwrap();
            let t = trace(&[exec(0), heap(A + 32 * PAGE), heap(A)]);
            let err = replay("t", std::io::Cursor::new(t), &v, &[]).unwrap_err().to_string();
            assert!(
                err.contains("record 3: the heap maps 0x7f0000000000, below its start"),
                "{err}"
            );
        }

        /// A realloc: a block moved (mremap to a new place), then grown where it is.
        /// Under 64K the block straddling its old end is one folio, one fault, as on
        /// the host: the kernel extended the moved VMA, page offset and all.
        #[test]
        fn mremap_growth_in_place_after_a_move_extends_the_same_vma() {
            let b = A + 0x100_0000;
            let mut e = vec![exec(0), map(0, A, 16 * PAGE, MapKind::Anon)];
            e.extend(writes(0, A, 16));
            e.push(Event::Mremap {
                proc: 0,
                old: A,
                old_len: 16 * PAGE,
                new: b,
                new_len: 40 * PAGE,
            });
            e.push(Event::Mremap {
                proc: 0,
                old: b,
                old_len: 40 * PAGE,
                new: b,
                new_len: 64 * PAGE,
            });
            e.extend(writes(0, b + 32 * PAGE, 16));
            let r = run(&e, K64);
            // One 64K folio before the move, one after (16 faults when the grown part
            // was a VMA of its own).
            assert_eq!(r.processes[0].model_faults, 2);
        }

        /// Recorded with 64K mTHP on, replayed with it off: the recorded faults lack
        /// the 15 of each 64K folio the host never took.
        #[test]
        fn a_replay_at_a_smaller_setting_than_the_recording_says_its_faults_are_too_few() {
            let mut e = vec![exec(0), map(0, A, 16 * PAGE, MapKind::Anon)];
            e.push(write(0, A));
            let rec = [("enabled", "never"), ("hugepages-64kB/enabled", "always")];
            let v = Variants::from_sets(&[]).unwrap();
            let off = [("hugepages-64kB/enabled".to_string(), "never".to_string())];
            let r = replay("t", std::io::Cursor::new(trace_under(&rec, &e)), &v, &off).unwrap();
            assert_eq!(r.recording_hid_faults_kb, [64]);
            assert!(r.report.diagnostics.iter().any(|d| d.contains("64kB folios at fault")));
            let same = replay("t", std::io::Cursor::new(trace_under(&rec, &e)), &v, &[]).unwrap();
            assert!(same.recording_hid_faults_kb.is_empty());
            // The host default, enabled=always with 2M inherit: 2M THP hidden at off.
            let host = [("enabled", "always"), ("hugepages-2048kB/enabled", "inherit")];
            let r = replay(
                "t",
                std::io::Cursor::new(trace_under(&host, &e)),
                &v,
                &[("enabled".into(), "never".into())],
            )
            .unwrap();
            assert_eq!(r.recording_hid_faults_kb, [2048]);
        }
    }
}
