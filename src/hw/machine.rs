//! The machine: physical memory, CPUs with TLBs, and the instructions the kernel
//! model may use to maintain them (TLBI, DSB, ISB) plus EL0 accesses that walk and
//! fill TLBs. Kernel code reaches hardware state only through these operations.

use super::addr::{Asid, Granule, Pfn, PhysAddr, VirtAddr, PTE_LEVEL};
use super::check::Violation;
use super::descriptor::{Attr, Desc, DescKind};
use super::events::{Event, Events};
use super::memory::{PhysMem, TableId};
use super::residency::Residency;
use super::tlb::{Tlb, TlbConfig, TlbEntry, TlbHit, TlbiScope};
use super::walk::{count_known_pte_fault, walk_hinted, walk_to_known_table, Translation, WalkFault, WalkHint};

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
    /// FEAT_LPA2 in use (a 52-bit kernel on a CPU with it): range TLBIs take their
    /// base address in 64K units.
    pub lpa2: bool,
    /// MIDR_EL1 (0: the model's unnamed CPU), which the kernel matches against its
    /// allow-lists and errata lists (`super::cpu`).
    pub midr: u32,
    /// ID_AA64MMFR2_EL1.BBM.
    pub bbm: u8,
}

impl Default for Features {
    fn default() -> Self {
        Features {
            tlbi_range: false,
            bbml2: false,
            kpti: false,
            hafdbs: true,
            lpa2: false,
            midr: 0,
            bbm: 0,
        }
    }
}

#[derive(Clone, Copy, Debug, PartialEq, Eq, serde::Serialize)]
pub struct MachineConfig {
    pub granule: Granule,
    pub ram_bytes: u64,
    pub ncpus: usize,
    /// NUMA nodes: RAM is split evenly between them, CPUs in order (the kernel's
    /// allocator reads it; the hardware model itself is node-blind).
    pub nodes: usize,
    pub features: Features,
    pub tlb: TlbConfig,
}

impl Default for MachineConfig {
    fn default() -> Self {
        MachineConfig {
            granule: Granule::K4,
            ram_bytes: 16 << 30,
            ncpus: 8,
            nodes: 1,
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

/// A TLB maintenance instruction without the IS suffix: it reaches only the TLB of
/// the CPU that issues it, and that CPU's DSB NSH completes it.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum LocalTlbi {
    /// TLBI VALE1: by VA and ASID, last level.
    Vale1 { asid: Asid, va: VirtAddr },
    /// TLBI RVALE1: FEAT_TLBIRANGE by ASID, last level, as `Tlbi::Rvale1is`.
    Rvale1 {
        asid: Asid,
        base: VirtAddr,
        scale: u8,
        num: u8,
    },
    /// TLBI ASIDE1: every non-global entry of an ASID.
    Aside1 { asid: Asid },
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
    /// The tables this CPU's last walk went through (a host-side memo).
    walk_hint: WalkHint,
}

/// What a stream of first-touch accesses, page after page, knows between them
/// (`Machine::first_touch_start`): the next page's pte table and index, and that no TLB
/// entry answers its pages up to `known`. It stands while nothing else uses the CPU's
/// TLB and no table above level 3 changes; each access then skips the lookup and the
/// walk down to the pte table, counted as they would have counted.
#[derive(Clone, Copy, Debug)]
pub struct FirstTouch {
    cpu: usize,
    ttbr0: (PhysAddr, Asid),
    /// The next page, and where its pte lies.
    va: u64,
    table: TableId,
    index: usize,
    /// The stream's first page, the last address no TLB entry is known to answer
    /// (below `first` until its first use), and the last it may reach (0 once ended).
    first: u64,
    known: u64,
    last: u64,
    /// Whether the stream began after a span over a page (a large folio's fill): its
    /// first use learns all it may reach at once, as 16 pages are one 64K folio.
    wide: bool,
    /// The TLB's clock, and the tables' epoch and upper generation, as the stream last
    /// left them.
    clock: u64,
    epoch: u64,
    upper_gen: u64,
}

impl FirstTouch {
    pub fn cpu(&self) -> usize {
        self.cpu
    }

    /// The page the stream takes next.
    pub fn next(&self) -> u64 {
        self.va
    }
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
                    walk_hint: WalkHint::default(),
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
            self.resync_checks();
        }
    }

    #[cold]
    fn resync_checks(&mut self) {
        if self.checks {
            self.res.enable(self.cpus.iter().flat_map(|c| c.tlb.iter()));
        } else {
            self.res.disable();
        }
    }

    /// Write a descriptor at `level` that maps `va`, checking break-before-make.
    #[inline]
    pub fn write_desc(&mut self, table: TableId, index: usize, level: u8, va: VirtAddr, new: Desc) {
        if self.checks {
            self.check_bbm(table, index, level, va, new);
        }
        if level == PTE_LEVEL {
            self.mem.write_leaf(table, index, new);
        } else {
            self.mem.write(table, index, new);
        }
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
                    Some(span) => e.translate(leaf_va) != new.oa().0 || (!bbml2 && span != u32::from(e.span_shift)),
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
    /// DSB NSHST: the same for TLBIs that stay on this CPU.
    pub fn dsb_nshst(&mut self) {
        self.ev.inc(Event::DsbNshst);
    }
    /// DSB NSH: completes the TLBIs `cpu` issued to its own TLB.
    pub fn dsb_nsh(&mut self, cpu: usize) {
        self.ev.inc(Event::DsbNsh);
        self.sync_checks();
        self.cpus[cpu].tlb.complete_pending(&mut self.res);
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

    /// Issue a local TLBI on `cpu` and complete it with a DSB NSH: the way a CPU
    /// invalidates its own TLB when it was told to by an IPI rather than by a
    /// broadcast (the x86 flavour's INVLPG and CR3 write on arm64 hardware).
    pub fn tlbi_local(&mut self, cpu: usize, op: LocalTlbi) {
        self.tlbi_local_nosync(cpu, op);
        self.dsb_nsh(cpu);
    }

    /// Issue a local TLBI on `cpu`, completed by a later `dsb_nsh`.
    pub fn tlbi_local_nosync(&mut self, cpu: usize, op: LocalTlbi) {
        let ps = self.cfg.granule.page_shift();
        let (ev, scope) = match op {
            LocalTlbi::Vale1 { asid, va } => (
                Event::TlbiVale1,
                TlbiScope::Va {
                    asid: Some(asid),
                    first: va.0,
                    last: va.0,
                },
            ),
            LocalTlbi::Rvale1 { asid, base, scale, num } => {
                let first = base.0 & !((1u64 << ps) - 1);
                let last = first.saturating_add((tlbi_range_pages(scale, num) << ps) - 1);
                (
                    Event::TlbiRvale1,
                    TlbiScope::Va {
                        asid: Some(asid),
                        first,
                        last,
                    },
                )
            }
            LocalTlbi::Aside1 { asid } => (Event::TlbiAside1, TlbiScope::Asid(asid)),
        };
        self.ev.inc(ev);
        self.ev.inc(Event::TlbiTotal);
        self.sync_checks();
        let n = self.cpus[cpu].tlb.invalidate(&scope);
        self.ev.add(Event::TlbInvalidated, n);
    }

    /// An inter-processor interrupt from one CPU to another (an SGI through the
    /// GIC); what the target does on taking it is the kernel's business.
    pub fn send_ipi(&mut self, from: usize, to: usize) {
        debug_assert_ne!(from, to, "an IPI to oneself");
        self.ev.inc(Event::Ipi);
    }

    // ---- EL0 accesses ------------------------------------------------------

    /// An EL0 load or store by `cpu` through its TTBR0: TLB lookup, else a walk with
    /// hardware AF/dirty update, then a TLB fill. Faults go to the kernel. Inline into
    /// `sim::user_access`, whose result stays in registers then.
    #[inline(always)]
    pub fn access(&mut self, cpu: usize, va: VirtAddr, write: bool) -> Result<PhysAddr, AccessFault> {
        self.access_from(cpu, va, write, true)
    }

    /// `access` retried after the kernel handled its fault. Its TLB lookup is counted
    /// as the miss it must be, without probing: a faulting access leaves no entry for
    /// its address, and only EL0 accesses fill TLBs. Inline into `sim::user_access`.
    #[inline(always)]
    pub fn access_retry(&mut self, cpu: usize, va: VirtAddr, write: bool) -> Result<PhysAddr, AccessFault> {
        debug_assert!(
            {
                let asid = self.cpus[cpu].ttbr0.map(|(_, a)| a);
                !self.cpus[cpu]
                    .tlb
                    .covering(va.0)
                    .any(|e| e.asid.is_none() || e.asid == asid)
            },
            "a retried access at {va:?} would hit"
        );
        self.access_from(cpu, va, write, false)
    }

    /// `access` of `va`, `va + stride`, … (at most `max` addresses) for as long as each
    /// hits, in L1, the entry the access before it used, counted as those hits: that
    /// entry and how many. None when the first would not hit so (the caller then makes
    /// it an `access`). Inline into the touch loop: it runs after every access there.
    #[inline(always)]
    pub fn access_run(
        &mut self,
        cpu: usize,
        va: VirtAddr,
        stride: u64,
        max: u64,
        write: bool,
    ) -> Option<(TlbEntry, u64)> {
        let (_, asid) = self.cpus[cpu].ttbr0?;
        self.sync_checks();
        let (e, n) = self.cpus[cpu].tlb.lookup_mru_run(asid, va.0, stride, max, write)?;
        self.ev.add(Event::TlbHit, n);
        self.ev.add(Event::TlbHitL1, n);
        Some((e, n))
    }

    #[inline(always)]
    fn access_from(&mut self, cpu: usize, va: VirtAddr, write: bool, probe: bool) -> Result<PhysAddr, AccessFault> {
        self.sync_checks();
        // The CPU indexed once for the lookup and the walk, beside the other fields.
        let c = &mut self.cpus[cpu];
        let (root, asid) = c.ttbr0.expect("no user address space on this cpu");
        let hit = if probe {
            c.tlb.lookup(asid, va.0, &mut self.res)
        } else {
            None
        };
        if let Some((e, hit)) = hit {
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
            c.tlb.drop_entry(asid, va.0, &mut self.res);
        }
        self.ev.inc(Event::TlbMiss);
        let t = walk_hinted(&self.mem, &mut self.ev, &mut c.walk_hint, root, va)
            .map_err(|WalkFault { level }| AccessFault::Translation { level })?;
        self.complete_walk(cpu, asid, va, t, write)
    }

    /// The end of an access whose walk gave `t`: the permission check, hardware AF and
    /// dirty update, and the TLB fill.
    #[inline(always)]
    fn complete_walk(
        &mut self,
        cpu: usize,
        asid: Asid,
        va: VirtAddr,
        t: Translation,
        write: bool,
    ) -> Result<PhysAddr, AccessFault> {
        // Permission faults take priority: hardware updates AF and dirty state only for
        // an access that completes.
        if !t.desc.has(Attr::USER) {
            return Err(AccessFault::Permission { level: t.level });
        }
        let d = self.hw_update(&t, write)?;
        let span_mask = (1u64 << t.span_shift) - 1;
        let entry = TlbEntry {
            asid: if d.has(Attr::NG) { Some(asid) } else { None },
            va: va.0 & !span_mask,
            span_shift: t.span_shift as u8,
            pa: t.pa.0 - (va.0 & span_mask),
            level: t.level,
            writable: !d.has(Attr::RDONLY),
            pending: false,
            table: t.table,
            index: t.span_index as u32,
        };
        self.fill(cpu, entry);
        Ok(t.pa)
    }

    /// Begin a first-touch stream at `va` (below `limit`): right after an access of the
    /// page before it faulted and was filled (or, for a large folio, after the pages
    /// its fill's span covers), L1's most recent entry names the pte table its walk
    /// reached, which `va`'s walk reaches too when it lies in the same table. The stream
    /// may take the pages from `va` up to the table's end or `limit`; what it knows of
    /// them is checked as it comes to them (`first_touch_known`), so a stream its
    /// caller never uses costs a few tests. None where it cannot start: the checkers on
    /// (every fill is checked), that entry's span not ending at `va`, `va` in another
    /// table or its pte valid.
    #[inline]
    pub fn first_touch_start(&self, cpu: usize, va: VirtAddr, limit: u64) -> Option<FirstTouch> {
        // Inline, the test that turns most faults away: a large folio's fill covers the
        // page after its fault with a span over a page.
        let g = self.cfg.granule;
        let va = VirtAddr(va.0 & !(g.page_size() - 1));
        let e = self.cpus[cpu].tlb.mru_entry()?;
        if e.va.wrapping_add(1 << e.span_shift) != va.0 {
            return None;
        }
        self.first_touch_begin(cpu, va, limit, *e)
    }

    /// `first_touch_start` once L1's most recent entry is the page's before `va`.
    #[inline(never)]
    fn first_touch_begin(&self, cpu: usize, va: VirtAddr, limit: u64, e: TlbEntry) -> Option<FirstTouch> {
        if self.checks || self.res.enabled() {
            return None;
        }
        let g = self.cfg.granule;
        let c = &self.cpus[cpu];
        let (root, asid) = c.ttbr0?;
        let index = e.index as usize + (1 << (u32::from(e.span_shift) - g.page_shift()));
        if e.level != PTE_LEVEL
            || e.asid != Some(asid)
            || index >= g.entries_at(PTE_LEVEL)
            || matches!(self.mem.read(e.table, index).kind(PTE_LEVEL, g), DescKind::Page(_))
        {
            return None;
        }
        let table_last = va.0 | ((1u64 << g.level_shift(PTE_LEVEL - 1)) - 1);
        Some(FirstTouch {
            cpu,
            ttbr0: (root, asid),
            va: va.0,
            table: e.table,
            index,
            first: va.0,
            known: va.0 - 1,
            last: table_last.min(limit.checked_sub(1)?),
            wide: u32::from(e.span_shift) > g.page_shift(),
            clock: c.tlb.clock(),
            epoch: self.mem.table_epoch(),
            upper_gen: self.mem.upper_gen(),
        })
    }

    /// Learn what the stream knows of `va` on, the stream standing: at its first use,
    /// that `va`'s walk reaches its table and that no TLB entry answers its next 16
    /// pages (a scan of their 16 L2 sets: a stream that ends soon pays little; a wide
    /// stream's first use goes on to the second's); at its second, that none answers
    /// the rest, to its end or the first page an entry answers (one pass over L2's
    /// tags). False, the stream ended, when `va` is not known so.
    #[inline(never)]
    fn first_touch_known(&self, ft: &mut FirstTouch, va: u64) -> bool {
        let g = self.cfg.granule;
        if ft.known < ft.first && self.pte_table_of(ft.ttbr0.0, va) != Some(ft.table) {
            ft.last = 0;
            return false;
        }
        let to = if ft.known < ft.first && !ft.wide {
            ft.last.min(va.saturating_add((16 << g.page_shift()) - 1))
        } else {
            ft.last
        };
        match self.cpus[ft.cpu].tlb.first_answered(ft.ttbr0.1, va, to) {
            Some(x) if x == va => {
                ft.last = 0;
                false
            }
            Some(x) => {
                (ft.known, ft.last) = (x - 1, x - 1);
                true
            }
            None => {
                ft.known = to;
                true
            }
        }
    }

    /// The level-3 table `va`'s walk from `root` reaches, looked up without a walk (no
    /// fetch counted, as the checkers look).
    fn pte_table_of(&self, root: PhysAddr, va: u64) -> Option<TableId> {
        let g = self.cfg.granule;
        let mut table = self.mem.table_id_of(root)?;
        for level in g.start_level()..PTE_LEVEL {
            match self.mem.read(table, g.index(va, level)).kind(level, g) {
                DescKind::Table(pa) => table = self.mem.table_id_of(pa)?,
                _ => return None,
            }
        }
        Some(table)
    }

    /// Whether `va` is the stream's next page and within its reach (`last`, 0 once the
    /// stream ended).
    #[inline(always)]
    fn first_touch_next(&self, ft: &FirstTouch, va: VirtAddr) -> bool {
        va.0 & !(self.cfg.granule.page_size() - 1) == ft.va && va.0 <= ft.last
    }

    /// Whether `ft` still knows `va`'s access: in its next page, with nothing else having
    /// used the CPU's TLB (its clock), switched its TTBR0 or changed a table above
    /// level 3 since the stream last acted.
    #[inline(always)]
    fn first_touch_stands(&self, ft: &FirstTouch, va: VirtAddr) -> bool {
        let c = &self.cpus[ft.cpu];
        self.first_touch_next(ft, va)
            && !self.checks
            && c.ttbr0 == Some(ft.ttbr0)
            && c.tlb.clock() == ft.clock
            && self.mem.table_epoch() == ft.epoch
            && self.mem.upper_gen() == ft.upper_gen
    }

    /// The first access of the stream's next page `va`, when `va` is in the stream's
    /// reach and its pte is not valid: counted as `access` counts it (its lookup misses,
    /// as no entry answers `va`; its walk faults at level 3), and true. False, having
    /// done nothing, where the caller must make it an `access`. The caller has done
    /// nothing to the machine since the stream began, was retried or resumed (a retry
    /// that finds the stream no longer standing ends it), so the stream stands: only
    /// its reach is tested, not the TLB's clock and the tables' generations again.
    #[inline(always)]
    pub fn first_touch_fault(&mut self, ft: &mut FirstTouch, va: VirtAddr) -> bool {
        debug_assert!(ft.va > ft.last || self.first_touch_stands(ft, VirtAddr(ft.va)));
        if !self.first_touch_next(ft, va)
            || (va.0 > ft.known && !self.first_touch_known(ft, va.0))
            || matches!(
                self.mem.read(ft.table, ft.index).kind(PTE_LEVEL, self.cfg.granule),
                DescKind::Page(_)
            )
        {
            return false;
        }
        let tlb = &mut self.cpus[ft.cpu].tlb;
        tlb.count_miss();
        ft.clock = tlb.clock();
        self.ev.inc(Event::TlbMiss);
        debug_assert!(
            walk_to_known_table(&self.mem, &mut Events::default(), ft.table, va).is_err(),
            "a first touch at {va:?} translated"
        );
        count_known_pte_fault(self.cfg.granule, &mut self.ev);
        true
    }

    /// `access_retry` of the stream's page `va` after the kernel handled its fault, its
    /// walk starting at the known table; the stream moves on to the page after the
    /// fill's span when the fill is of a pte (a page's, or a contiguous block's, whose
    /// other pages the caller then takes as hits and hands back, `first_touch_resume`).
    /// None, having done nothing but end the stream, when it no longer stands (the fault
    /// changed the tables above level 3 or used the TLB): the caller makes it an
    /// `access_retry`.
    #[inline(always)]
    pub fn first_touch_retry(
        &mut self,
        ft: &mut FirstTouch,
        va: VirtAddr,
        write: bool,
    ) -> Option<Result<PhysAddr, AccessFault>> {
        if !self.first_touch_stands(ft, va) {
            ft.last = 0;
            return None;
        }
        self.ev.inc(Event::TlbMiss);
        let done = walk_to_known_table(&self.mem, &mut self.ev, ft.table, va)
            .map_err(|WalkFault { level }| AccessFault::Translation { level })
            .and_then(|t| {
                // The span of a pte's fill, 0 for a block's.
                let span = if t.level == PTE_LEVEL { t.span_shift } else { 0 };
                self.complete_walk(ft.cpu, ft.ttbr0.1, va, t, write)
                    .map(|pa| (pa, span))
            });
        // A pte's fill leaves the pages after its span unanswered (the span is aligned
        // in VA and in its table).
        match done {
            Ok((_, span)) if span != 0 => {
                let mask = (1u64 << span) - 1;
                ft.va = (ft.va | mask) + 1;
                ft.index = (ft.index | (mask >> self.cfg.granule.page_shift()) as usize) + 1;
            }
            _ => ft.last = 0,
        }
        ft.clock = self.cpus[ft.cpu].tlb.clock();
        Some(done.map(|(pa, _)| pa))
    }

    /// The stream `ft` goes on after its caller took the rest of a contiguous fill's
    /// span by `access_run`, which moved the TLB's clock and nothing else.
    #[inline(always)]
    pub fn first_touch_resume(&self, ft: &mut FirstTouch) {
        ft.clock = self.cpus[ft.cpu].tlb.clock();
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
            self.mem.write_leaf(t.table, t.index, d);
        }
        Ok(d)
    }

    /// Inline, as is the TLB's own fill down to its L1 insert: the entry, built field
    /// by field by the walk, then goes straight into its slot instead of being stored
    /// and reloaded whole on each call (a stalled load per fill, out of line).
    #[inline(always)]
    fn fill(&mut self, cpu: usize, e: TlbEntry) {
        self.ev.inc(Event::TlbFill);
        if u32::from(e.span_shift) > self.cfg.granule.page_shift() && e.level == 3 {
            self.ev.inc(Event::TlbFillCont);
        }
        if self.checks {
            self.check_fill(cpu, e);
        }
        if self.cpus[cpu].tlb.fill(e, &mut self.res) {
            self.ev.inc(Event::TlbEvict);
        }
    }

    /// The checker on a fill: an entry overlapping one already cached is a TLB conflict.
    /// By value, so the fill's entry is copied only here and not built in memory.
    #[cold]
    #[inline(never)]
    fn check_fill(&mut self, cpu: usize, e: TlbEntry) {
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

    /// Hook: the kernel freed `nr` frames from `pfn`. Any TLB entry, pending or not,
    /// that still maps them is a stale translation. Inline, so with checks off a
    /// free costs one branch.
    #[inline]
    pub fn frames_freed(&mut self, pfn: Pfn, nr: u64) {
        if self.checks && nr != 0 {
            self.report_stale_frames(pfn, nr);
        }
    }

    fn report_stale_frames(&mut self, pfn: Pfn, nr: u64) {
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

#[cfg(test)]
mod tests {
    use super::*;
    use std::collections::BTreeSet;

    /// A machine with checks on, one table tree shared by every CPU, and a bump
    /// allocator for table frames (data frames need no storage).
    struct Rig {
        m: Machine,
        root: PhysAddr,
        next_pfn: u64,
    }

    const A: u64 = 0x1000_0000;
    const B: u64 = A + 0x1000;
    const G: u64 = A + 0x2000;
    const C: u64 = 0x1001_0000;

    /// A user page descriptor tagged with the ASID.
    fn upage(pa: u64, extra: Attr) -> Desc {
        Desc::page(PhysAddr(pa), Attr::USER | Attr::AF | Attr::NG | extra)
    }

    impl Rig {
        fn new(cfg: MachineConfig) -> Rig {
            let mut m = Machine::new(cfg);
            m.set_checks(true);
            m.mem.materialize_table(Pfn(1));
            let root = Pfn(1).to_phys(cfg.granule);
            for cpu in 0..cfg.ncpus {
                m.switch_mm(cpu, root, 1);
            }
            Rig { m, root, next_pfn: 2 }
        }

        fn with(f: impl FnOnce(&mut MachineConfig)) -> Rig {
            let mut cfg = MachineConfig {
                ncpus: 2,
                ..MachineConfig::default()
            };
            f(&mut cfg);
            Rig::new(cfg)
        }

        /// The level-`level` table on the walk for `va`, creating missing tables.
        fn table(&mut self, va: u64, level: u8) -> TableId {
            let g = self.m.granule();
            let mut t = self.m.mem.table_id_of(self.root).unwrap();
            for l in g.start_level()..level {
                let d = self.m.mem.read(t, g.index(va, l));
                t = match self.m.mem.table_id_of(d.oa()).filter(|_| d.is_valid()) {
                    Some(next) => next,
                    None => {
                        let pfn = Pfn(self.next_pfn);
                        self.next_pfn += 1;
                        let next = self.m.mem.materialize_table(pfn);
                        self.m.mem.write(t, g.index(va, l), Desc::table(pfn.to_phys(g)));
                        next
                    }
                };
            }
            t
        }

        /// Write the level-`level` descriptor for `va` through the BBM-checked path.
        fn set(&mut self, va: u64, level: u8, d: Desc) {
            let t = self.table(va, level);
            let i = self.m.granule().index(va, level);
            self.m.write_desc(t, i, level, VirtAddr(va), d);
        }

        fn get(&mut self, va: u64, level: u8) -> Desc {
            let t = self.table(va, level);
            self.m.mem.read(t, self.m.granule().index(va, level))
        }

        /// Map a contiguous run of ptes from `va` to `pa`.
        fn set_cont(&mut self, va: u64, pa: u64, attrs: Attr) {
            let g = self.m.granule();
            for i in 0..g.cont_ptes() as u64 {
                self.set(
                    va + (i << g.page_shift()),
                    3,
                    upage(pa + (i << g.page_shift()), attrs | Attr::CONT),
                );
            }
        }

        fn read(&mut self, cpu: usize, va: u64) -> Result<PhysAddr, AccessFault> {
            self.m.access(cpu, VirtAddr(va), false)
        }

        /// (ASID, span start) of every entry in `cpu`'s TLB.
        fn entries(&self, cpu: usize) -> BTreeSet<(Option<Asid>, u64)> {
            self.m.cpus[cpu].tlb.iter().map(|e| (e.asid, e.va)).collect()
        }
    }

    // ---- TLBI ------------------------------------------------------------------

    /// Two CPUs, each caching A, B and the contiguous run C for ASIDs 1 and 2, and the
    /// global page G once.
    fn populated() -> Rig {
        let mut r = Rig::with(|_| {});
        r.set(A, 3, upage(0x8000_0000, Attr::empty()));
        r.set(B, 3, upage(0x8000_1000, Attr::empty()));
        r.set(G, 3, upage(0x8000_2000, Attr::empty()).without(Attr::NG));
        r.set_cont(C, 0x9000_0000, Attr::empty());
        for cpu in 0..2 {
            for asid in [1, 2] {
                r.m.switch_mm(cpu, r.root, asid);
                for va in [A, B, G, C + 0x3000] {
                    r.read(cpu, va).unwrap();
                }
            }
        }
        r
    }

    #[test]
    fn each_tlbi_kind_removes_exactly_its_entries_on_every_cpu() {
        let all: BTreeSet<_> = [
            (Some(1), A),
            (Some(1), B),
            (Some(1), C),
            (Some(2), A),
            (Some(2), B),
            (Some(2), C),
            (None, G),
        ]
        .into();
        let (va, base) = (VirtAddr, VirtAddr);
        type Removed = Vec<(Option<Asid>, u64)>;
        let cases: Vec<(Tlbi, Removed)> = vec![
            (Tlbi::Vae1is { asid: 1, va: va(A) }, vec![(Some(1), A)]),
            (
                Tlbi::Vale1is {
                    asid: 2,
                    va: va(B + 0x123),
                },
                vec![(Some(2), B)],
            ),
            // Global entries match a by-ASID TLBI whatever the ASID.
            (Tlbi::Vae1is { asid: 7, va: va(G) }, vec![(None, G)]),
            (Tlbi::Vale1is { asid: 1, va: va(G) }, vec![(None, G)]),
            // Any VA inside a contiguous entry removes the whole entry.
            (
                Tlbi::Vale1is {
                    asid: 1,
                    va: va(C + 0x5000),
                },
                vec![(Some(1), C)],
            ),
            (Tlbi::Vaae1is { va: va(A) }, vec![(Some(1), A), (Some(2), A)]),
            (Tlbi::Vaale1is { va: va(G) }, vec![(None, G)]),
            (Tlbi::Vaale1is { va: va(C + 0xf000) }, vec![(Some(1), C), (Some(2), C)]),
            (
                Tlbi::Aside1is { asid: 1 },
                vec![(Some(1), A), (Some(1), B), (Some(1), C)],
            ),
            (Tlbi::Vmalle1is, all.iter().copied().collect()),
            // (0 + 1) * 2^1 = 2 pages from A: A and B, not G.
            (
                Tlbi::Rvae1is {
                    asid: 1,
                    base: base(A),
                    scale: 0,
                    num: 0,
                },
                vec![(Some(1), A), (Some(1), B)],
            ),
            (
                Tlbi::Rvale1is {
                    asid: 2,
                    base: base(B),
                    scale: 0,
                    num: 0,
                },
                vec![(Some(2), B), (None, G)],
            ),
            (
                Tlbi::Rvaae1is {
                    base: base(A),
                    scale: 0,
                    num: 0,
                },
                vec![(Some(1), A), (Some(2), A), (Some(1), B), (Some(2), B)],
            ),
            // Overlapping the last page of the contiguous run is enough.
            (
                Tlbi::Rvaale1is {
                    base: base(C - 0x1000),
                    scale: 0,
                    num: 0,
                },
                vec![(Some(1), C), (Some(2), C)],
            ),
            // 2 * 2^6 pages from 0: far below A.
            (
                Tlbi::Rvaale1is {
                    base: base(0),
                    scale: 1,
                    num: 1,
                },
                vec![],
            ),
        ];
        for (op, removed) in cases {
            let mut r = populated();
            assert_eq!(r.entries(0), all);
            r.m.tlbi(op);
            r.m.dsb_ish();
            let expect: BTreeSet<_> = all.iter().copied().filter(|e| !removed.contains(e)).collect();
            for cpu in 0..2 {
                assert_eq!(r.entries(cpu), expect, "{op:?} on cpu {cpu}");
            }
            assert_eq!(r.m.ev.get(Event::TlbInvalidated), 2 * removed.len() as u64, "{op:?}");
            assert_eq!(r.m.ev.get(Event::TlbiTotal), 1);
        }
    }

    #[test]
    fn tlbi_entries_keep_translating_until_dsb_ish() {
        let mut r = populated();
        r.set(A, 3, Desc::ZERO);
        r.m.switch_mm(0, r.root, 1);
        r.m.tlbi(Tlbi::Vale1is {
            asid: 1,
            va: VirtAddr(A),
        });
        let walks = r.m.ev.get(Event::Walk);
        assert_eq!(r.read(0, A + 8), Ok(PhysAddr(0x8000_0008)));
        assert_eq!(r.m.ev.get(Event::Walk), walks, "answered by the pending entry");
        r.m.dsb_ishst();
        assert!(r.read(0, A).is_ok(), "DSB ISHST does not complete a TLBI");
        r.m.dsb_ish();
        assert_eq!(r.read(0, A), Err(AccessFault::Translation { level: 3 }));
    }

    #[test]
    fn one_access_to_a_contiguous_run_serves_every_page_from_the_tlb() {
        for g in [Granule::K4, Granule::K16, Granule::K64] {
            let mut r = Rig::with(|c| c.granule = g);
            let va = 1u64 << 40;
            r.set_cont(va, 1 << 33, Attr::empty());
            let n = g.cont_ptes() as u64;
            for i in 0..n {
                let pa = r.read(0, va + (i << g.page_shift()) + 8).unwrap();
                assert_eq!(pa, PhysAddr((1 << 33) + (i << g.page_shift()) + 8));
            }
            assert_eq!(r.m.ev.get(Event::Walk), 1, "{g:?}");
            assert_eq!(r.m.ev.get(Event::TlbFillCont), 1);
            assert_eq!(r.m.ev.get(Event::TlbHit), n - 1, "{g:?}: {} pages", n);
            assert!(r.m.violations.is_empty());
        }
    }

    // ---- FEAT_HAFDBS -------------------------------------------------------------

    #[test]
    fn hardware_sets_the_access_flag() {
        let mut r = Rig::with(|_| {});
        r.set(A, 3, upage(0x8000_0000, Attr::empty()).without(Attr::AF));
        r.read(0, A).unwrap();
        assert!(r.get(A, 3).has(Attr::AF));
    }

    #[test]
    fn without_hafdbs_a_clear_access_flag_faults() {
        let mut r = Rig::with(|c| c.features.hafdbs = false);
        r.set(A, 3, upage(0x8000_0000, Attr::empty()).without(Attr::AF));
        assert_eq!(r.read(0, A), Err(AccessFault::AccessFlag { level: 3 }));
        assert!(!r.get(A, 3).has(Attr::AF));
    }

    #[test]
    fn a_write_to_a_dbm_read_only_page_clears_rdonly() {
        let mut r = Rig::with(|_| {});
        r.set(A, 3, upage(0x8000_0000, Attr::DBM | Attr::RDONLY));
        r.read(0, A).unwrap();
        assert!(r.get(A, 3).has(Attr::RDONLY), "a read leaves it clean");
        // The read-only TLB entry is not used for the write: it re-walks.
        assert_eq!(r.m.access(0, VirtAddr(A + 4), true), Ok(PhysAddr(0x8000_0004)));
        assert!(!r.get(A, 3).has(Attr::RDONLY));
        assert_eq!(r.m.ev.get(Event::Walk), 2);
        r.m.access(0, VirtAddr(A), true).unwrap();
        assert_eq!(r.m.ev.get(Event::Walk), 2, "the new entry is writable");
    }

    #[test]
    fn a_write_to_a_read_only_page_without_dbm_faults() {
        let mut r = Rig::with(|_| {});
        r.set(A, 3, upage(0x8000_0000, Attr::RDONLY).without(Attr::AF));
        assert_eq!(
            r.m.access(0, VirtAddr(A), true),
            Err(AccessFault::Permission { level: 3 })
        );
        assert!(!r.get(A, 3).has(Attr::AF), "no AF update for a faulting access");
    }

    #[test]
    fn el0_cannot_use_a_kernel_page() {
        let mut r = Rig::with(|_| {});
        r.set(A, 3, upage(0x8000_0000, Attr::empty()).without(Attr::USER | Attr::AF));
        assert_eq!(r.read(0, A), Err(AccessFault::Permission { level: 3 }));
        assert!(!r.get(A, 3).has(Attr::AF));
    }

    // ---- break-before-make -------------------------------------------------------

    #[test]
    fn rewriting_a_live_pte_to_another_page_breaks_bbm() {
        let mut r = Rig::with(|_| {});
        r.set(A, 3, upage(0x8000_0000, Attr::empty()));
        r.set(A, 3, upage(0x8000_1000, Attr::empty()));
        assert!(matches!(
            r.m.take_violations()[..],
            [Violation::BreakBeforeMake { level: 3, .. }]
        ));
        assert!(r.m.violations.is_empty(), "taken");
    }

    #[test]
    fn flipping_the_contiguous_bit_of_a_live_pte_needs_bbml2() {
        for bbml2 in [false, true] {
            let mut r = Rig::with(|c| c.features.bbml2 = bbml2);
            r.set(A, 3, upage(0x8000_0000, Attr::empty()));
            r.set(A, 3, upage(0x8000_0000, Attr::CONT));
            assert_eq!(r.m.violations.len(), usize::from(!bbml2), "bbml2={bbml2}");
        }
    }

    #[test]
    fn permission_and_access_bits_change_in_place() {
        let mut r = Rig::with(|_| {});
        r.set(A, 3, upage(0x8000_0000, Attr::DBM));
        r.read(0, A).unwrap();
        r.set(A, 3, upage(0x8000_0000, Attr::DBM | Attr::RDONLY).without(Attr::AF));
        r.set(A, 3, upage(0x8000_0000, Attr::SW_DIRTY | Attr::UXN));
        assert!(r.m.violations.is_empty(), "{:?}", r.m.violations);
    }

    #[test]
    fn splitting_a_live_block_needs_bbml2() {
        for bbml2 in [false, true] {
            let mut r = Rig::with(|c| c.features.bbml2 = bbml2);
            r.set(
                1 << 30,
                2,
                Desc::block(PhysAddr(1 << 33), Attr::USER | Attr::AF | Attr::NG),
            );
            r.set(1 << 30, 2, Desc::table(Pfn(999).to_phys(Granule::K4)));
            assert_eq!(r.m.violations.len(), usize::from(!bbml2), "bbml2={bbml2}");
        }
    }

    #[test]
    fn remapping_a_cleared_pte_elsewhere_while_a_tlb_holds_it_breaks_bbm() {
        let mut r = Rig::with(|_| {});
        r.set(A, 3, upage(0x8000_0000, Attr::empty()));
        r.read(1, A).unwrap();
        r.set(A, 3, Desc::ZERO);
        r.set(A, 3, upage(0x8000_1000, Attr::empty()));
        assert!(
            matches!(r.m.violations[..], [Violation::BreakBeforeMake { .. }]),
            "{:?}",
            r.m.violations
        );
    }

    #[test]
    fn a_tlbi_without_its_dsb_does_not_complete_the_break() {
        let mut r = Rig::with(|_| {});
        r.set(A, 3, upage(0x8000_0000, Attr::empty()));
        r.read(1, A).unwrap();
        r.set(A, 3, Desc::ZERO);
        r.m.tlbi(Tlbi::Vale1is {
            asid: 1,
            va: VirtAddr(A),
        });
        r.set(A, 3, upage(0x8000_1000, Attr::empty()));
        assert_eq!(r.m.violations.len(), 1);
    }

    #[test]
    fn the_break_before_make_sequence_is_clean() {
        let mut r = Rig::with(|_| {});
        r.set(A, 3, upage(0x8000_0000, Attr::empty()));
        r.read(0, A).unwrap();
        r.read(1, A).unwrap();
        r.set(A, 3, Desc::ZERO);
        r.m.dsb_ishst();
        r.m.tlbi(Tlbi::Vale1is {
            asid: 1,
            va: VirtAddr(A),
        });
        r.m.dsb_ish();
        r.set(A, 3, upage(0x8000_1000, Attr::empty()));
        assert_eq!(r.read(1, A), Ok(PhysAddr(0x8000_1000)));
        assert!(r.m.violations.is_empty(), "{:?}", r.m.violations);
    }

    #[test]
    fn folding_over_stale_page_entries_breaks_bbm_unless_bbml2() {
        for bbml2 in [false, true] {
            let mut r = Rig::with(|c| c.features.bbml2 = bbml2);
            for i in 0..16u64 {
                r.set(C + (i << 12), 3, upage(0x9000_0000 + (i << 12), Attr::empty()));
            }
            r.read(0, C + 0x3000).unwrap();
            for i in 0..16u64 {
                r.set(C + (i << 12), 3, Desc::ZERO);
            }
            // No TLBI: the page entry for C + 3 pages is still live when the run is rewritten.
            r.set_cont(C, 0x9000_0000, Attr::empty());
            assert_eq!(
                r.m.violations.len(),
                usize::from(!bbml2),
                "bbml2={bbml2}: {:?}",
                r.m.violations
            );
        }
    }

    #[test]
    fn restoring_the_same_translation_over_a_stale_entry_is_harmless() {
        let mut r = Rig::with(|_| {});
        r.set(A, 3, upage(0x8000_0000, Attr::empty()));
        r.read(0, A).unwrap();
        r.set(A, 3, Desc::ZERO);
        r.set(A, 3, upage(0x8000_0000, Attr::RDONLY));
        assert!(r.m.violations.is_empty(), "{:?}", r.m.violations);
    }

    #[test]
    fn another_address_space_caching_the_same_va_is_no_concern() {
        let mut r = Rig::with(|_| {});
        r.set(A, 3, upage(0x8000_0000, Attr::empty()));
        r.read(0, A).unwrap();
        // A second mm with its own tables maps the same VA elsewhere.
        let root2 = Pfn(500).to_phys(Granule::K4);
        r.m.mem.materialize_table(Pfn(500));
        let saved = std::mem::replace(&mut r.root, root2);
        r.set(A, 3, upage(0x7000_0000, Attr::empty()));
        r.root = saved;
        assert!(r.m.violations.is_empty(), "{:?}", r.m.violations);
    }

    // ---- TLB conflicts -------------------------------------------------------------

    #[test]
    fn a_page_entry_left_behind_when_cont_is_set_conflicts_with_the_cont_fill() {
        for bbml2 in [false, true] {
            let mut r = Rig::with(|c| c.features.bbml2 = bbml2);
            for i in 0..16u64 {
                r.set(C + (i << 12), 3, upage(0x9000_0000 + (i << 12), Attr::empty()));
            }
            r.read(0, C).unwrap();
            // Set CONT in place without any TLB maintenance (memory written directly, so
            // only the conflict checker sees it).
            let t = r.table(C, 3);
            for i in 0..16 {
                let idx = Granule::K4.index(C, 3) + i;
                let d = r.m.mem.read(t, idx);
                r.m.mem.write(t, idx, d.with(Attr::CONT));
            }
            r.read(0, C + 0x5000).unwrap();
            let v = r.m.take_violations();
            if bbml2 {
                assert!(v.is_empty(), "same output address: no abort with BBML2_NOABORT: {v:?}");
            } else {
                assert_eq!(
                    v,
                    [Violation::TlbConflict {
                        cpu: 0,
                        va: VirtAddr(C),
                        asid: Some(1)
                    }]
                );
            }
        }
    }

    #[test]
    fn entries_of_other_asids_do_not_conflict() {
        let mut r = Rig::with(|_| {});
        r.set(A, 3, upage(0x8000_0000, Attr::empty()));
        r.read(0, A).unwrap();
        r.m.switch_mm(0, r.root, 2);
        r.read(0, A).unwrap();
        assert!(r.m.violations.is_empty(), "{:?}", r.m.violations);
    }

    // ---- stale translations ----------------------------------------------------------

    #[test]
    fn freeing_a_frame_a_tlb_still_maps_is_a_stale_translation() {
        let mut r = Rig::with(|_| {});
        r.set(A, 3, upage(0x8000_0000, Attr::empty()));
        r.read(1, A).unwrap();
        r.set(A, 3, Desc::ZERO);
        r.m.frames_freed(Pfn(0x80000), 1);
        let expect = Violation::StaleTranslation {
            cpu: 1,
            va: VirtAddr(A),
            asid: Some(1),
            pfn: Pfn(0x80000),
        };
        assert_eq!(r.m.take_violations(), std::slice::from_ref(&expect));
        // A pending invalidation does not help: only the DSB removes the entry.
        r.m.tlbi(Tlbi::Vale1is {
            asid: 1,
            va: VirtAddr(A),
        });
        r.m.frames_freed(Pfn(0x80000), 1);
        assert_eq!(r.m.take_violations(), [expect]);
        r.m.dsb_ish();
        r.m.frames_freed(Pfn(0x80000), 1);
        assert!(r.m.violations.is_empty());
    }

    #[test]
    fn a_frame_inside_a_contiguous_entry_is_found() {
        let mut r = Rig::with(|_| {});
        r.set_cont(C, 0x9000_0000, Attr::empty());
        r.read(0, C).unwrap();
        r.m.frames_freed(Pfn(0x90000 + 15), 1);
        r.m.frames_freed(Pfn(0x90000 + 16), 100);
        let expect = Violation::StaleTranslation {
            cpu: 0,
            va: VirtAddr(C + 0xf000),
            asid: Some(1),
            pfn: Pfn(0x9000f),
        };
        assert_eq!(r.m.take_violations(), [expect]);
        // A large free is answered by scanning the index rather than probing each frame.
        r.m.frames_freed(Pfn(0), 1 << 22);
        assert_eq!(r.m.violations.len(), 1);
    }

    #[test]
    fn checks_turned_on_late_see_entries_filled_before() {
        let mut r = Rig::with(|_| {});
        r.m.set_checks(false);
        r.set(A, 3, upage(0x8000_0000, Attr::empty()));
        r.read(0, A).unwrap();
        r.m.frames_freed(Pfn(0x80000), 1);
        assert!(r.m.violations.is_empty(), "checks off");
        r.m.checks = true;
        r.m.frames_freed(Pfn(0x80000), 1);
        assert_eq!(r.m.violations.len(), 1);
    }
}
