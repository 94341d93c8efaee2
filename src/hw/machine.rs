//! The machine: physical memory, CPUs with TLBs, and the instructions the kernel
//! model may use to maintain them (TLBI, DSB, ISB) plus EL0 accesses that walk and
//! fill TLBs. Kernel code reaches hardware state only through these operations.

use super::addr::{Asid, Granule, Pfn, PhysAddr, VirtAddr};
use super::check::Violation;
use super::descriptor::{Attr, Desc, DescKind};
use super::events::{Event, Events};
use super::memory::{PhysMem, TableId};
use super::residency::Residency;
use super::tlb::{Tlb, TlbConfig, TlbEntry, TlbHit, TlbiScope};
use super::walk::{walk, Translation, WalkFault};

/// Optional architecture features of a machine.
#[derive(Clone, Copy, Debug, PartialEq, Eq, serde::Serialize)]
pub struct Features {
    /// FEAT_TLBIRANGE: TLBI RVAE1IS and friends.
    pub tlbi_range: bool,
    /// BBML2_NOABORT: changing the contiguous bit of live entries is allowed.
    pub bbml2: bool,
    /// KPTI: every user-ASID TLBI is issued twice (kernel and user ASID).
    pub kpti: bool,
    /// FEAT_HAFDBS: hardware sets AF and clears RDONLY on DBM pages.
    pub hafdbs: bool,
}

impl Default for Features {
    fn default() -> Self {
        Features {
            tlbi_range: false,
            bbml2: false,
            kpti: false,
            hafdbs: true,
        }
    }
}

#[derive(Clone, Copy, Debug, PartialEq, Eq, serde::Serialize)]
pub struct MachineConfig {
    pub granule: Granule,
    pub ram_bytes: u64,
    pub ncpus: usize,
    pub features: Features,
    pub tlb: TlbConfig,
}

impl Default for MachineConfig {
    fn default() -> Self {
        MachineConfig {
            granule: Granule::K4,
            ram_bytes: 16 << 30,
            ncpus: 8,
            features: Features::default(),
            tlb: TlbConfig::default(),
        }
    }
}

/// A TLB maintenance instruction with its decoded operand.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum Tlbi {
    /// By VA and ASID, all levels.
    Vae1is {
        asid: Asid,
        va: VirtAddr,
    },
    /// By VA and ASID, last level only.
    Vale1is {
        asid: Asid,
        va: VirtAddr,
    },
    /// By VA, any ASID, all levels.
    Vaae1is {
        va: VirtAddr,
    },
    /// By VA, any ASID, last level only.
    Vaale1is {
        va: VirtAddr,
    },
    /// Every non-global entry of an ASID.
    Aside1is {
        asid: Asid,
    },
    /// Everything.
    Vmalle1is,
    /// FEAT_TLBIRANGE by ASID: (num+1) * 2^(5*scale+1) pages from `base`.
    Rvae1is {
        asid: Asid,
        base: VirtAddr,
        scale: u8,
        num: u8,
    },
    Rvale1is {
        asid: Asid,
        base: VirtAddr,
        scale: u8,
        num: u8,
    },
    Rvaae1is {
        base: VirtAddr,
        scale: u8,
        num: u8,
    },
    Rvaale1is {
        base: VirtAddr,
        scale: u8,
        num: u8,
    },
}

/// Pages covered by a range TLBI operand.
pub const fn tlbi_range_pages(scale: u8, num: u8) -> u64 {
    (num as u64 + 1) << (5 * scale as u32 + 1)
}

/// Why an EL0 access did not complete.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum AccessFault {
    /// No valid translation (level of the invalid descriptor).
    Translation { level: u8 },
    /// Valid, but the access is not permitted (write to a read-only page).
    Permission { level: u8 },
    /// Valid but the access flag is clear and hardware AF update is off.
    AccessFlag { level: u8 },
}

pub struct Cpu {
    pub tlb: Tlb,
    /// TTBR0_EL1: user table root and ASID.
    pub ttbr0: Option<(PhysAddr, Asid)>,
}

pub struct Machine {
    pub cfg: MachineConfig,
    pub mem: PhysMem,
    pub ev: Events,
    pub cpus: Vec<Cpu>,
    /// TTBR1_EL1: the kernel's table root.
    pub ttbr1: Option<PhysAddr>,
    /// Whether the architectural checkers run (see `set_checks`).
    pub checks: bool,
    /// Violations detected so far, in order.
    pub violations: Vec<Violation>,
    /// Reverse index over every CPU's TLB, kept while `checks` is on.
    res: Residency,
}

impl Machine {
    pub fn new(cfg: MachineConfig) -> Machine {
        Machine {
            mem: PhysMem::new(cfg.granule, cfg.ram_bytes),
            ev: Events::default(),
            cpus: (0..cfg.ncpus)
                .map(|_| Cpu {
                    tlb: Tlb::new(cfg.tlb, cfg.granule),
                    ttbr0: None,
                })
                .collect(),
            ttbr1: None,
            checks: false,
            violations: Vec::new(),
            res: Residency::new(cfg.granule),
            cfg,
        }
    }

    #[inline]
    pub fn granule(&self) -> Granule {
        self.cfg.granule
    }

    /// Turn the architectural checkers on or off. Setting the `checks` field directly
    /// works too; the reverse index catches up at the next TLB operation.
    pub fn set_checks(&mut self, on: bool) {
        self.checks = on;
        self.sync_checks();
    }

    /// The violations recorded so far, leaving none behind.
    pub fn take_violations(&mut self) -> Vec<Violation> {
        std::mem::take(&mut self.violations)
    }

    /// Bring the reverse index in step with `checks`.
    #[inline]
    fn sync_checks(&mut self) {
        if self.checks != self.res.enabled() {
            if self.checks {
                self.res.enable(self.cpus.iter().flat_map(|c| c.tlb.iter()));
            } else {
                self.res.disable();
            }
        }
    }

    /// Write a descriptor at `level` that maps `va`, checking break-before-make.
    #[inline]
    pub fn write_desc(&mut self, table: TableId, index: usize, level: u8, va: VirtAddr, new: Desc) {
        if self.checks {
            self.check_bbm(table, index, level, va, new);
        }
        self.mem.write(table, index, new);
    }

    /// Break-before-make: a live descriptor may not change what it translates to, and
    /// an invalid one may not be made to translate differently from what a TLB still
    /// holds for it (pending or not: only a completed TLBI removes the old translation).
    fn check_bbm(&mut self, table: TableId, index: usize, level: u8, va: VirtAddr, new: Desc) {
        let old = self.mem.read(table, index);
        let bbml2 = self.cfg.features.bbml2;
        let broken = if old.is_valid() {
            needs_bbm(old, new, bbml2)
        } else if new.is_valid() {
            self.sync_checks();
            self.res.may_hold_from(table, index, level) && self.stale_entry_differs(table, index, level, va, new)
        } else {
            false
        };
        if broken {
            self.violations.push(Violation::BreakBeforeMake { va, level, old, new });
        }
    }

    /// Whether some CPU holds an entry filled from this descriptor that translates `va`
    /// differently from `new`: another output address, or (without BBML2) another span.
    fn stale_entry_differs(&self, table: TableId, index: usize, level: u8, va: VirtAddr, new: Desc) -> bool {
        let (g, bbml2) = (self.cfg.granule, self.cfg.features.bbml2);
        let leaf_shift = g.level_shift(level);
        let leaf_va = va.0 & !((1u64 << leaf_shift) - 1);
        // A table descriptor has no span of its own: it splits whatever was cached.
        let new_span = match new.kind(level, g) {
            DescKind::Page(_) | DescKind::Block(_) => Some(
                leaf_shift
                    + if new.has(Attr::CONT) {
                        g.cont_entries_at(level).trailing_zeros()
                    } else {
                        0
                    },
            ),
            _ => None,
        };
        self.cpus.iter().flat_map(|c| c.tlb.covering(leaf_va)).any(|e| {
            e.filled_from(table, index, leaf_shift)
                && match new_span {
                    Some(span) => e.translate(leaf_va) != new.oa().0 || (!bbml2 && span != e.span_shift),
                    None => !bbml2,
                }
        })
    }

    /// Point `cpu`'s TTBR0 at a user table root.
    pub fn switch_mm(&mut self, cpu: usize, root: PhysAddr, asid: Asid) {
        self.cpus[cpu].ttbr0 = Some((root, asid));
    }

    // ---- barriers ----------------------------------------------------------

    /// DSB ISH: completes every TLBI issued so far on every CPU.
    pub fn dsb_ish(&mut self) {
        self.ev.inc(Event::DsbIsh);
        self.sync_checks();
        for c in &mut self.cpus {
            c.tlb.complete_pending(&mut self.res);
        }
    }
    /// DSB ISHST: orders prior table writes before later TLBIs and walks.
    pub fn dsb_ishst(&mut self) {
        self.ev.inc(Event::DsbIshst);
    }
    pub fn isb(&mut self) {
        self.ev.inc(Event::Isb);
    }

    // ---- TLB maintenance ---------------------------------------------------

    /// Issue one TLBI, broadcast to every CPU's TLB (the IS forms). The entries it
    /// matches stay usable until the next DSB ISH.
    pub fn tlbi(&mut self, op: Tlbi) {
        let ps = self.cfg.granule.page_shift();
        let va = |asid: Option<Asid>, va: VirtAddr| TlbiScope::Va {
            asid,
            first: va.0,
            last: va.0,
        };
        let range = |asid: Option<Asid>, base: VirtAddr, scale: u8, num: u8| {
            let first = base.0 & !((1u64 << ps) - 1);
            let last = first.saturating_add((tlbi_range_pages(scale, num) << ps) - 1);
            TlbiScope::Va { asid, first, last }
        };
        let (ev, scope) = match op {
            Tlbi::Vae1is { asid, va: v } => (Event::TlbiVae1is, va(Some(asid), v)),
            Tlbi::Vale1is { asid, va: v } => (Event::TlbiVale1is, va(Some(asid), v)),
            Tlbi::Vaae1is { va: v } => (Event::TlbiVaae1is, va(None, v)),
            Tlbi::Vaale1is { va: v } => (Event::TlbiVaale1is, va(None, v)),
            Tlbi::Aside1is { asid } => (Event::TlbiAside1is, TlbiScope::Asid(asid)),
            Tlbi::Vmalle1is => (Event::TlbiVmalle1is, TlbiScope::All),
            Tlbi::Rvae1is { asid, base, scale, num } => (Event::TlbiRvae1is, range(Some(asid), base, scale, num)),
            Tlbi::Rvale1is { asid, base, scale, num } => (Event::TlbiRvale1is, range(Some(asid), base, scale, num)),
            Tlbi::Rvaae1is { base, scale, num } => (Event::TlbiRvaae1is, range(None, base, scale, num)),
            Tlbi::Rvaale1is { base, scale, num } => (Event::TlbiRvaale1is, range(None, base, scale, num)),
        };
        self.ev.inc(ev);
        self.ev.inc(Event::TlbiTotal);
        let n: u64 = self.cpus.iter_mut().map(|c| c.tlb.invalidate(&scope)).sum();
        self.ev.add(Event::TlbInvalidated, n);
    }

    // ---- EL0 accesses ------------------------------------------------------

    /// An EL0 load or store by `cpu` through its TTBR0: TLB lookup, else a walk with
    /// hardware AF/dirty update, then a TLB fill. Faults go to the kernel.
    pub fn access(&mut self, cpu: usize, va: VirtAddr, write: bool) -> Result<PhysAddr, AccessFault> {
        let (root, asid) = self.cpus[cpu].ttbr0.expect("no user address space on this cpu");
        self.sync_checks();
        if let Some((e, hit)) = self.cpus[cpu].tlb.lookup(asid, va.0, &mut self.res) {
            if !write || e.writable {
                self.ev.inc(Event::TlbHit);
                self.ev.inc(if hit == TlbHit::L1 {
                    Event::TlbHitL1
                } else {
                    Event::TlbHitL2
                });
                return Ok(PhysAddr(e.translate(va.0)));
            }
            // A write through a read-only entry re-walks: hardware dirty update or a fault.
            self.cpus[cpu].tlb.drop_entry(asid, va.0, &mut self.res);
        }
        self.ev.inc(Event::TlbMiss);
        let t = walk(&self.mem, &mut self.ev, root, va)
            .map_err(|WalkFault { level }| AccessFault::Translation { level })?;
        // Permission faults take priority: hardware updates AF and dirty state only for
        // an access that completes.
        if !t.desc.has(Attr::USER) {
            return Err(AccessFault::Permission { level: t.level });
        }
        let d = self.hw_update(&t, write)?;
        let span_mask = (1u64 << t.span_shift) - 1;
        let descs_per_span = 1usize << (t.span_shift - self.cfg.granule.level_shift(t.level));
        let entry = TlbEntry {
            asid: if d.has(Attr::NG) { Some(asid) } else { None },
            va: va.0 & !span_mask,
            span_shift: t.span_shift,
            pa: t.pa.0 - (va.0 & span_mask),
            level: t.level,
            writable: !d.has(Attr::RDONLY),
            pending: false,
            table: t.table,
            index: (t.index & !(descs_per_span - 1)) as u32,
        };
        self.fill(cpu, entry);
        Ok(t.pa)
    }

    /// Hardware access-flag and dirty-state management on a walk (FEAT_HAFDBS).
    fn hw_update(&mut self, t: &Translation, write: bool) -> Result<Desc, AccessFault> {
        let mut d = t.desc;
        if write && d.has(Attr::RDONLY) {
            if !(self.cfg.features.hafdbs && d.has(Attr::DBM)) {
                return Err(AccessFault::Permission { level: t.level });
            }
            d = d.without(Attr::RDONLY);
        }
        if !d.has(Attr::AF) {
            if !self.cfg.features.hafdbs {
                return Err(AccessFault::AccessFlag { level: t.level });
            }
            d = d.with(Attr::AF);
        }
        if d != t.desc {
            self.mem.write(t.table, t.index, d);
        }
        Ok(d)
    }

    fn fill(&mut self, cpu: usize, e: TlbEntry) {
        self.ev.inc(Event::TlbFill);
        if e.span_shift > self.cfg.granule.page_shift() && e.level == 3 {
            self.ev.inc(Event::TlbFillCont);
        }
        if self.checks {
            // BBML2_NOABORT: overlapping entries that agree on the output address do not abort.
            let bbml2 = self.cfg.features.bbml2;
            let tlb = &self.cpus[cpu].tlb;
            if tlb
                .overlapping(&e)
                .any(|o| !(bbml2 && o.translate(e.va.max(o.va)) == e.translate(e.va.max(o.va))))
            {
                self.violations.push(Violation::TlbConflict {
                    cpu,
                    va: VirtAddr(e.va),
                    asid: e.asid,
                });
            }
        }
        if self.cpus[cpu].tlb.fill(e, &mut self.res) {
            self.ev.inc(Event::TlbEvict);
        }
    }

    /// Hook: the kernel freed `nr` frames from `pfn`. Any TLB entry, pending or not,
    /// that still maps them is a stale translation.
    pub fn frames_freed(&mut self, pfn: Pfn, nr: u64) {
        if !self.checks || nr == 0 {
            return;
        }
        self.sync_checks();
        let ps = self.cfg.granule.page_shift();
        let (pa, len) = (pfn.0 << ps, nr << ps);
        if !self.res.maps_frames(pa, len) {
            return;
        }
        for (i, c) in self.cpus.iter().enumerate() {
            if let Some(e) = c.tlb.iter().find(|e| e.maps_pa(pa, len)) {
                let off = pa.max(e.pa) - e.pa;
                self.violations.push(Violation::StaleTranslation {
                    cpu: i,
                    va: VirtAddr(e.va + off),
                    asid: e.asid,
                    pfn: Pfn((e.pa + off) >> ps),
                });
            }
        }
    }
}

/// Whether changing a live descriptor from `old` to `new` requires break-before-make.
/// Permission, AF, DBM and software bits may change in place; the output address,
/// the contiguous bit (unless BBML2), memory type, shareability and nG may not.
/// With BBML2 a block may also be split into a table in place (6.18 splits the linear
/// map that way); that the table maps the same memory is the writer's business.
pub fn needs_bbm(old: Desc, new: Desc, bbml2: bool) -> bool {
    if !old.is_valid() || !new.is_valid() {
        return false;
    }
    if bbml2 && !old.has(Attr::TABLE_OR_PAGE) && new.has(Attr::TABLE_OR_PAGE) {
        return false;
    }
    let mut strict =
        Attr::ATTRINDX0 | Attr::ATTRINDX1 | Attr::ATTRINDX2 | Attr::SH0 | Attr::SH1 | Attr::NG | Attr::TABLE_OR_PAGE;
    if !bbml2 {
        strict |= Attr::CONT;
    }
    old.oa() != new.oa() || (old.attrs() & strict) != (new.attrs() & strict)
}
