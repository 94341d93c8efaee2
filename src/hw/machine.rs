//! The machine: physical memory, CPUs with TLBs, and the instructions the kernel
//! model may use to maintain them (TLBI, DSB, ISB) plus EL0 accesses that walk and
//! fill TLBs. Kernel code reaches hardware state only through these operations.

use super::addr::{Asid, Granule, Pfn, PhysAddr, VirtAddr};
use super::check::Violation;
use super::descriptor::{Attr, Desc};
use super::events::{Event, Events};
use super::memory::{PhysMem, TableId};
use super::tlb::{Tlb, TlbConfig, TlbEntry, TlbHit};
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
    /// Whether the architectural checkers run.
    pub checks: bool,
    /// Violations detected so far, in order.
    pub violations: Vec<Violation>,
}

impl Machine {
    pub fn new(cfg: MachineConfig) -> Machine {
        Machine {
            mem: PhysMem::new(cfg.granule, cfg.ram_bytes),
            ev: Events::default(),
            cpus: (0..cfg.ncpus)
                .map(|_| Cpu {
                    tlb: Tlb::new(cfg.tlb),
                    ttbr0: None,
                })
                .collect(),
            ttbr1: None,
            checks: false,
            violations: Vec::new(),
            cfg,
        }
    }

    #[inline]
    pub fn granule(&self) -> Granule {
        self.cfg.granule
    }

    /// Write a descriptor at `level` that maps `va`, checking break-before-make.
    #[inline]
    pub fn write_desc(&mut self, table: TableId, index: usize, level: u8, va: VirtAddr, new: Desc) {
        if self.checks {
            let old = self.mem.read(table, index);
            if needs_bbm(old, new, self.cfg.features.bbml2) {
                self.violations.push(Violation::BreakBeforeMake { va, level, old, new });
            }
        }
        self.mem.write(table, index, new);
    }

    /// Point `cpu`'s TTBR0 at a user table root.
    pub fn switch_mm(&mut self, cpu: usize, root: PhysAddr, asid: Asid) {
        self.cpus[cpu].ttbr0 = Some((root, asid));
    }

    // ---- barriers ----------------------------------------------------------

    /// DSB ISH: completes every TLBI issued so far on every CPU.
    pub fn dsb_ish(&mut self) {
        self.ev.inc(Event::DsbIsh);
        for c in &mut self.cpus {
            c.tlb.complete_pending();
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

    /// Issue one TLBI, broadcast to every CPU's TLB (the IS forms).
    pub fn tlbi(&mut self, op: Tlbi) {
        let ev = match op {
            Tlbi::Vae1is { .. } => Event::TlbiVae1is,
            Tlbi::Vale1is { .. } => Event::TlbiVale1is,
            Tlbi::Vaae1is { .. } => Event::TlbiVaae1is,
            Tlbi::Vaale1is { .. } => Event::TlbiVaale1is,
            Tlbi::Aside1is { .. } => Event::TlbiAside1is,
            Tlbi::Vmalle1is => Event::TlbiVmalle1is,
            Tlbi::Rvae1is { .. } => Event::TlbiRvae1is,
            Tlbi::Rvale1is { .. } => Event::TlbiRvale1is,
            Tlbi::Rvaae1is { .. } => Event::TlbiRvaae1is,
            Tlbi::Rvaale1is { .. } => Event::TlbiRvaale1is,
        };
        self.ev.inc(ev);
        self.ev.inc(Event::TlbiTotal);
        let ps = self.cfg.granule.page_shift();
        let range = |base: VirtAddr, scale: u8, num: u8| (base.0, base.0 + (tlbi_range_pages(scale, num) << ps));
        let pred: Box<dyn Fn(&TlbEntry) -> bool> = match op {
            // Only leaf entries are cached, so the last-level forms remove the same entries.
            Tlbi::Vae1is { asid, va } | Tlbi::Vale1is { asid, va } => {
                Box::new(move |e| e.asid == Some(asid) && e.covers(va.0))
            }
            Tlbi::Vaae1is { va } | Tlbi::Vaale1is { va } => Box::new(move |e| e.covers(va.0)),
            Tlbi::Aside1is { asid } => Box::new(move |e| e.asid == Some(asid)),
            Tlbi::Vmalle1is => Box::new(|_| true),
            Tlbi::Rvae1is { asid, base, scale, num } | Tlbi::Rvale1is { asid, base, scale, num } => {
                let (s, e) = range(base, scale, num);
                Box::new(move |x| x.asid == Some(asid) && x.overlaps(s, e))
            }
            Tlbi::Rvaae1is { base, scale, num } | Tlbi::Rvaale1is { base, scale, num } => {
                let (s, e) = range(base, scale, num);
                Box::new(move |x| x.overlaps(s, e))
            }
        };
        let mut n = 0;
        for c in &mut self.cpus {
            n += c.tlb.mark_pending(&pred);
        }
        self.ev.add(Event::TlbInvalidated, n);
    }

    // ---- EL0 accesses ------------------------------------------------------

    /// An EL0 load or store by `cpu` through its TTBR0: TLB lookup, else a walk with
    /// hardware AF/dirty update, then a TLB fill. Faults go to the kernel.
    pub fn access(&mut self, cpu: usize, va: VirtAddr, write: bool) -> Result<PhysAddr, AccessFault> {
        let (root, asid) = self.cpus[cpu].ttbr0.expect("no user address space on this cpu");
        if let Some((e, hit)) = self.cpus[cpu].tlb.lookup(asid, va.0) {
            if !write || e.writable {
                self.ev.inc(Event::TlbHit);
                self.ev.inc(if hit == TlbHit::L1 {
                    Event::TlbHitL1
                } else {
                    Event::TlbHitL2
                });
                return Ok(PhysAddr(e.pa + (va.0 & ((1u64 << e.span_shift) - 1))));
            }
            // A write through a read-only entry re-walks: hardware dirty update or a fault.
            self.cpus[cpu].tlb.drop_entry(asid, va.0);
        }
        self.ev.inc(Event::TlbMiss);
        let t = walk(&self.mem, &mut self.ev, root, va)
            .map_err(|WalkFault { level }| AccessFault::Translation { level })?;
        let d = self.hw_update(&t, write)?;
        if !d.has(Attr::USER) {
            return Err(AccessFault::Permission { level: t.level });
        }
        let entry = TlbEntry {
            asid: if d.has(Attr::NG) { Some(asid) } else { None },
            va: va.0 & !((1u64 << t.span_shift) - 1),
            span_shift: t.span_shift,
            pa: (t.pa.0 - (va.0 & ((1u64 << t.span_shift) - 1))),
            level: t.level,
            writable: !d.has(Attr::RDONLY),
            pending: false,
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
        let (conflicts, evicted) = self.cpus[cpu].tlb.fill(e);
        self.ev.add(Event::TlbEvict, evicted as u64);
        if self.checks && !conflicts.is_empty() {
            self.violations.push(Violation::TlbConflict {
                cpu,
                va: VirtAddr(e.va),
                asid: e.asid,
            });
        }
    }

    /// Hook: the kernel freed `nr` frames from `pfn`. Any TLB entry, pending or not,
    /// that still maps them is a stale translation.
    pub fn frames_freed(&mut self, pfn: Pfn, nr: u64) {
        if !self.checks {
            return;
        }
        let ps = self.cfg.granule.page_shift();
        let (pa, len) = (pfn.0 << ps, nr << ps);
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
pub fn needs_bbm(old: Desc, new: Desc, bbml2: bool) -> bool {
    if !old.is_valid() || !new.is_valid() {
        return false;
    }
    let mut strict =
        Attr::ATTRINDX0 | Attr::ATTRINDX1 | Attr::ATTRINDX2 | Attr::SH0 | Attr::SH1 | Attr::NG | Attr::TABLE_OR_PAGE;
    if !bbml2 {
        strict |= Attr::CONT;
    }
    old.oa() != new.oa() || (old.attrs() & strict) != (new.attrs() & strict)
}
