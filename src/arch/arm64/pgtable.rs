//! arch/arm64/include/asm/pgtable.h: the pte type, Linux's pte helpers, and the pte
//! API. The public functions (`set_ptes`, `ptep_get`, `clear_full_ptes`, ...) are the
//! contpte-aware wrappers core mm calls; the private `__xxx` helpers touch one
//! descriptor each and are what the contpte layer is built from.

use super::contpte;
use super::contpte_insns::{Compiler, Memo};
use super::tlbflush;
use crate::arch::x86::tlb::X86Tlb;
use crate::arch::TlbFlavour;
use crate::hw::descriptor::{Attr, SH_INNER};
use crate::hw::{Asid, Desc, Event, Granule, Machine, Pfn, PhysAddr, TableId};
use crate::kcount::{KernelEvent, KernelEvents};

/// A pte value (`pte_t`).
#[derive(Clone, Copy, PartialEq, Eq, Hash, Default)]
#[repr(transparent)]
pub struct Pte(pub Desc);

impl std::fmt::Debug for Pte {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        write!(f, "Pte({:#018x})", self.0 .0)
    }
}

/// When !VALID, nG marks a present PROT_NONE pte (PTE_PRESENT_INVALID).
const PTE_PRESENT_INVALID: Attr = Attr::NG;
/// Swap ptes (arch/arm64/include/asm/pgtable.h, 6.10+): the offset's position and
/// width, and the software bit that says the swapped page was PageAnonExclusive.
const SWP_OFFSET_SHIFT: u32 = 12;
const SWP_OFFSET_BITS: u32 = 50;
const PTE_SWP_EXCLUSIVE: u64 = 1 << 2;
/// The swap type field (bits 6-10). Types from MAX_SWAPFILES up are not swap devices:
/// with CONFIG_MIGRATION and CONFIG_MEMORY_FAILURE but no CONFIG_DEVICE_PRIVATE (as in
/// Debian's arm64 kernels), 32 - 3 migration - 1 hwpoison - 1 marker = 27 swap types,
/// hwpoison is 27, the migration types 28 (read), 29 (read-exclusive) and 30 (write).
const SWP_TYPE_SHIFT: u32 = 6;
const SWP_TYPE_MASK: u64 = 0x1f;
const SWP_MIGRATION_READ: u64 = 28;
const SWP_MIGRATION_READ_EXCLUSIVE: u64 = 29;
const SWP_MIGRATION_WRITE: u64 = 30;
/// MAX_PHYSMEM_BITS (CONFIG_ARM64_PA_BITS=52, Debian's): a migration entry's pfn takes
/// SWP_PFN_BITS = 52 - PAGE_SHIFT bits of the offset, the young and dirty bits the
/// two above (SWP_MIG_YOUNG_BIT, SWP_MIG_DIRTY_BIT; migration_entry_supports_ad holds,
/// the offset having 50 bits).
const MAX_PHYSMEM_BITS: u32 = 52;
/// Linux's PTE_WRITE is the DBM bit.
const PTE_WRITE: Attr = Attr::DBM;
const PTE_DIRTY: Attr = Attr::SW_DIRTY;

/// The three migration entry types: what the unmapped pte allowed, and whether the
/// page was PageAnonExclusive (a writable one always is).
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum MigrationKind {
    Read,
    ReadExclusive,
    Write,
}

impl MigrationKind {
    /// The entry for a pte that was writable or not, of a page that was
    /// PageAnonExclusive or not (make_writable / make_readable_exclusive /
    /// make_readable_migration_entry).
    pub fn of(writable: bool, exclusive: bool) -> MigrationKind {
        if writable {
            MigrationKind::Write
        } else if exclusive {
            MigrationKind::ReadExclusive
        } else {
            MigrationKind::Read
        }
    }
}

/// Page protections (pgprot_t): the attribute bits of a pte without its address.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub struct PgProt(pub Attr);

impl PgProt {
    /// _PAGE_DEFAULT: page type, AF, inner shareable, normal memory.
    const DEFAULT: Attr = Attr::TABLE_OR_PAGE.union(Attr::AF).union(SH_INNER);
    /// PAGE_NONE.
    pub const NONE: PgProt = PgProt(
        Attr::TABLE_OR_PAGE
            .union(Attr::AF)
            .union(SH_INNER)
            .union(PTE_PRESENT_INVALID)
            .union(Attr::RDONLY)
            .union(Attr::PXN)
            .union(Attr::UXN),
    );
    /// PAGE_READONLY (user, non-exec). Private writable mappings also start here.
    pub const READONLY: PgProt = PgProt(
        Attr::VALID
            .union(Self::DEFAULT)
            .union(Attr::USER)
            .union(Attr::RDONLY)
            .union(Attr::NG)
            .union(Attr::PXN)
            .union(Attr::UXN),
    );
    /// PAGE_SHARED (user, non-exec, writable): a shared writable mapping's, writable
    /// in hardware once dirty (DBM).
    pub const SHARED: PgProt = PgProt(Self::READONLY.0.union(PTE_WRITE));
    /// PAGE_KERNEL without exec (the linear map): global.
    pub const KERNEL_NX: PgProt = PgProt(Attr::VALID.union(Self::DEFAULT).union(Attr::PXN).union(Attr::UXN));
}

impl Pte {
    pub const NONE: Pte = Pte(Desc::ZERO);

    #[inline]
    pub fn pfn_pte(pfn: Pfn, prot: PgProt, g: Granule) -> Pte {
        Pte(Desc(pfn.to_phys(g).0 | prot.0.bits()))
    }
    #[inline]
    pub fn raw(self) -> u64 {
        self.0 .0
    }
    #[inline]
    pub fn has(self, a: Attr) -> bool {
        self.0.has(a)
    }
    #[inline]
    fn set(self, a: Attr) -> Pte {
        Pte(self.0.with(a))
    }
    #[inline]
    fn clear(self, a: Attr) -> Pte {
        Pte(self.0.without(a))
    }
    #[inline]
    pub fn pte_none(self) -> bool {
        self.0.is_none()
    }
    #[inline]
    pub fn pte_valid(self) -> bool {
        self.0.is_valid()
    }
    #[inline]
    pub fn pte_present(self) -> bool {
        self.pte_valid() || self.has(PTE_PRESENT_INVALID)
    }
    /// swp_entry_to_pte for swap type 0 (6.10+ layout): the offset in bits 12-61, the
    /// type in bits 6-10, PTE_SWP_EXCLUSIVE in bit 2; valid (bit 0) and
    /// PTE_PRESENT_INVALID (bit 11) clear, so the pte is neither none nor present.
    pub fn swp_entry_to_pte(offset: u64, exclusive: bool) -> Pte {
        assert!(offset < 1 << SWP_OFFSET_BITS, "swap offset {offset:#x} out of range");
        let mut v = offset << SWP_OFFSET_SHIFT;
        if exclusive {
            v |= PTE_SWP_EXCLUSIVE;
        }
        Pte(Desc(v))
    }
    /// is_swap_pte: a swap entry. Migration entries are one too, but exist only inside
    /// an op (migration, split), whose own code is the only reader of them.
    #[inline]
    pub fn is_swap_pte(self) -> bool {
        !self.pte_none() && !self.pte_present()
    }
    /// make_{readable,readable_exclusive,writable}_migration_entry for the page `pfn`,
    /// with make_migration_entry_young / _dirty as try_to_migrate_one applies them.
    pub fn make_migration_entry(pfn: Pfn, kind: MigrationKind, young: bool, dirty: bool, g: Granule) -> Pte {
        let pfn_bits = MAX_PHYSMEM_BITS - g.page_shift();
        let ty = match kind {
            MigrationKind::Read => SWP_MIGRATION_READ,
            MigrationKind::ReadExclusive => SWP_MIGRATION_READ_EXCLUSIVE,
            MigrationKind::Write => SWP_MIGRATION_WRITE,
        };
        let offset = pfn.0 | (young as u64) << pfn_bits | (dirty as u64) << (pfn_bits + 1);
        Pte(Desc(ty << SWP_TYPE_SHIFT | offset << SWP_OFFSET_SHIFT))
    }
    /// is_migration_entry(pte_to_swp_entry(pte)) of a non-present pte.
    #[inline]
    pub fn is_migration_entry(self) -> bool {
        self.is_swap_pte() && self.migration_kind().is_some()
    }
    /// Which migration entry this is (None for a swap-device entry).
    pub fn migration_kind(self) -> Option<MigrationKind> {
        match (self.raw() >> SWP_TYPE_SHIFT) & SWP_TYPE_MASK {
            SWP_MIGRATION_READ => Some(MigrationKind::Read),
            SWP_MIGRATION_READ_EXCLUSIVE => Some(MigrationKind::ReadExclusive),
            SWP_MIGRATION_WRITE => Some(MigrationKind::Write),
            _ => None,
        }
    }
    /// pfn_swap_entry_to_page of a migration entry.
    pub fn migration_entry_pfn(self, g: Granule) -> Pfn {
        Pfn(self.pte_swp_offset() & ((1 << (MAX_PHYSMEM_BITS - g.page_shift())) - 1))
    }
    /// is_migration_entry_young.
    pub fn is_migration_entry_young(self, g: Granule) -> bool {
        self.pte_swp_offset() >> (MAX_PHYSMEM_BITS - g.page_shift()) & 1 != 0
    }
    /// is_migration_entry_dirty.
    pub fn is_migration_entry_dirty(self, g: Granule) -> bool {
        self.pte_swp_offset() >> (MAX_PHYSMEM_BITS - g.page_shift() + 1) & 1 != 0
    }
    /// swp_offset(pte_to_swp_entry(pte)).
    #[inline]
    pub fn pte_swp_offset(self) -> u64 {
        (self.raw() >> SWP_OFFSET_SHIFT) & ((1 << SWP_OFFSET_BITS) - 1)
    }
    #[inline]
    pub fn pte_swp_exclusive(self) -> bool {
        self.raw() & PTE_SWP_EXCLUSIVE != 0
    }
    #[inline]
    pub fn pte_swp_clear_exclusive(self) -> Pte {
        Pte(Desc(self.raw() & !PTE_SWP_EXCLUSIVE))
    }
    #[inline]
    pub fn pte_pfn(self, g: Granule) -> Pfn {
        self.0.pfn(g)
    }
    #[inline]
    pub fn pte_young(self) -> bool {
        self.has(Attr::AF)
    }
    #[inline]
    pub fn pte_write(self) -> bool {
        self.has(PTE_WRITE)
    }
    #[inline]
    pub fn pte_hw_dirty(self) -> bool {
        self.has(PTE_WRITE) && !self.has(Attr::RDONLY)
    }
    #[inline]
    pub fn pte_sw_dirty(self) -> bool {
        self.has(PTE_DIRTY)
    }
    #[inline]
    pub fn pte_dirty(self) -> bool {
        self.pte_sw_dirty() || self.pte_hw_dirty()
    }
    #[inline]
    pub fn pte_special(self) -> bool {
        self.has(Attr::SW_SPECIAL)
    }
    #[inline]
    pub fn pte_cont(self) -> bool {
        self.has(Attr::CONT)
    }
    #[inline]
    pub fn pte_valid_cont(self) -> bool {
        self.pte_valid() && self.pte_cont()
    }
    #[inline]
    pub fn pte_mkyoung(self) -> Pte {
        self.set(Attr::AF)
    }
    #[inline]
    pub fn pte_mkold(self) -> Pte {
        self.clear(Attr::AF)
    }
    /// pte_mkdirty: software dirty, and writable-dirty in hardware terms if writable.
    #[inline]
    pub fn pte_mkdirty(self) -> Pte {
        let p = self.set(PTE_DIRTY);
        if p.pte_write() {
            p.clear(Attr::RDONLY)
        } else {
            p
        }
    }
    /// pte_mkclean: no software dirty, hardware-clean (RDONLY set).
    #[inline]
    pub fn pte_mkclean(self) -> Pte {
        self.clear(PTE_DIRTY).set(Attr::RDONLY)
    }
    /// pte_mkwrite_novma: DBM set; writable in hardware only if already dirty.
    #[inline]
    pub fn pte_mkwrite(self) -> Pte {
        let p = self.set(PTE_WRITE);
        if p.pte_sw_dirty() {
            p.clear(Attr::RDONLY)
        } else {
            p
        }
    }
    /// pte_wrprotect: a hardware-dirty pte keeps its dirtiness in the software bit.
    #[inline]
    pub fn pte_wrprotect(self) -> Pte {
        let p = if self.pte_hw_dirty() { self.set(PTE_DIRTY) } else { self };
        p.clear(PTE_WRITE).set(Attr::RDONLY)
    }
    #[inline]
    pub fn pte_mkspecial(self) -> Pte {
        self.set(Attr::SW_SPECIAL)
    }
    #[inline]
    pub fn pte_mkcont(self) -> Pte {
        self.set(Attr::CONT)
    }
    #[inline]
    pub fn pte_mknoncont(self) -> Pte {
        self.clear(Attr::CONT)
    }
    /// pte_advance_pfn: the same pte `nr` pages further on.
    #[inline]
    pub fn pte_advance_pfn(self, nr: u64, g: Granule) -> Pte {
        Pte(Desc(self.raw() + (nr << g.page_shift())))
    }
    /// The protection bits (everything but the output address).
    #[inline]
    pub fn pte_pgprot(self) -> PgProt {
        PgProt(self.0.with_oa(PhysAddr(0)).attrs())
    }
    /// pte_modify: new protections, keeping address, young and dirty, and the
    /// contiguous bit, which lies outside the kernel's mask: a batch read from a
    /// contpte block keeps PTE_CONT, so arm64's pte_needs_flush sees no change when
    /// only the protections stay the same (set_ptes drops the bit and refolds).
    pub fn pte_modify(self, prot: PgProt) -> Pte {
        let dirty = self.pte_dirty();
        let young = self.pte_young();
        let mut p = Pte(Desc(self.0.oa().0 | prot.0.bits()));
        p = if young { p.pte_mkyoung() } else { p.pte_mkold() };
        if dirty {
            p = p.pte_mkdirty();
        }
        if self.0.attrs().contains(Attr::CONT) {
            p = p.pte_mkcont();
        }
        p
    }
    /// arm64 pte_same ignores PTE_RDONLY (present ptes), so clean/dirty writable
    /// ptes that differ only in hardware dirtiness compare equal.
    #[inline]
    pub fn pte_same(self, other: Pte) -> bool {
        (self.raw() ^ other.raw()) & !Attr::RDONLY.bits() == 0
    }
}

/// A pointer to a pte (`pte_t *`): a table frame and an index in it.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub struct PtePtr {
    pub table: TableId,
    pub index: usize,
}

impl PtePtr {
    /// `ptep + n`, as the kernel's C writes it: the entry `n` after this one.
    #[allow(clippy::should_implement_trait)]
    #[inline]
    pub fn add(self, n: usize) -> PtePtr {
        PtePtr {
            table: self.table,
            index: self.index + n,
        }
    }
    /// The first entry of the aligned group of `n` (a power of two) holding this one.
    #[inline]
    pub fn align_down(self, n: usize) -> PtePtr {
        PtePtr {
            table: self.table,
            index: self.index & !(n - 1),
        }
    }
}

/// Which contpte_ptep_get implementation runs (seed 004).
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum PtepGetVariant {
    /// Before 6.17: read all CONT_PTES entries, OR young and dirty.
    FullScan,
    /// Upstream since 6.17: stop once both young and dirty are known.
    EarlyExit,
    /// Seed 004's modification 1: one loop, break when both known.
    Mod1,
    /// Seed 004's modification 2: nested loops hunting the missing bit.
    Mod2,
}

/// pmd_trans_huge: a pmd that maps a huge page, valid or PROT_NONE (present-invalid),
/// as opposed to one pointing at a pte table.
pub fn pmd_trans_huge(d: Desc) -> bool {
    Pte(d).pte_present() && !d.has(Attr::TABLE_OR_PAGE)
}

/// The address space a pte operation is for (the parts of mm_struct arm64 needs).
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub struct ArchMm {
    pub asid: Asid,
    /// init_mm and the EFI mm never get contpte mappings.
    pub user: bool,
}

/// The arm64 architecture layer: the machine plus the per-run arch variants.
pub struct Arch {
    pub hw: Machine,
    /// Transparent contiguous-bit mappings for user memory (arm64's default).
    pub contpte: bool,
    pub ptep_get: PtepGetVariant,
    /// A range flush too large for TLBIs falls back to flush_tlb_mm and then still
    /// waits with __flush_tlb_range's own DSB ISH, as since d9d8dc2bd3fb split out
    /// __flush_tlb_range_nosync (6.9); before, it returned after flush_tlb_mm.
    pub flush_range_nosync_split: bool,
    /// contpte_convert skips its TLBI on a BBML2_NOABORT CPU (83bbd6be7d17, 6.17):
    /// the release uses it and the kernel's cpufeature verdict on the CPU
    /// (`cpufeature::supports_bbml2_noabort`) is yes. An older kernel does
    /// break-before-make whatever the CPU.
    pub bbml2_elide: bool,
    /// A write fault's flush of its stale read-only entry stays on the faulting CPU
    /// (TLBI VALE1, cb1fa2e99955, 6.19); before, it was broadcast (VALE1IS).
    pub wp_flush_local: bool,
    /// contpte_ptep_set_access_flags' no-op check compares every entry of the block
    /// raw instead of the gathered ptep_get (7.0: "arm64: contpte: fix
    /// set_access_flags() no-op check for SMMU/ATS faults").
    pub contpte_access_raw: bool,
    /// The kernel's work counters (`crate::kcount`), arch and core mm alike.
    pub kc: KernelEvents,
    /// Whose code contpte_ptep_get's instructions are counted of (`contpte-insns`).
    pub ptep_get_cc: Compiler,
    /// contpte_ptep_get calls' outcomes by the block states they saw (seed 004's counts).
    pub ptep_get_insn_memo: Memo,
    /// Whose TLB shootdown the generic flush hooks use (`tlb-flush`).
    pub tlb_flush: TlbFlavour,
    /// smp_processor_id(): the CPU the kernel runs on (the last switch_mm's).
    pub cpu: usize,
    /// The x86 flavour's state (kept, and unused, under arm64's).
    pub x86: X86Tlb,
    /// The kernel's linear map as set_direct_map_* see it (`pageattr.rs`).
    pub linear: super::pageattr::LinearMap,
}

impl Arch {
    pub fn new(hw: Machine) -> Arch {
        Arch {
            contpte: true,
            ptep_get: PtepGetVariant::EarlyExit,
            flush_range_nosync_split: true,
            bbml2_elide: true,
            wp_flush_local: false,
            contpte_access_raw: false,
            kc: KernelEvents::default(),
            ptep_get_cc: Compiler::Gcc,
            ptep_get_insn_memo: Memo::default(),
            tlb_flush: TlbFlavour::Arm64,
            cpu: 0,
            x86: X86Tlb::new(hw.cpus.len()),
            linear: super::pageattr::LinearMap::default(),
            hw,
        }
    }

    #[inline]
    pub fn granule(&self) -> Granule {
        self.hw.granule()
    }

    // ---- private helpers: one descriptor each --------------------------------

    /// __ptep_get.
    #[inline]
    pub fn __ptep_get(&mut self, ptep: PtePtr) -> Pte {
        self.hw.ev.inc(Event::PteRead);
        Pte(self.hw.mem.read(ptep.table, ptep.index))
    }

    /// How many of the `nr` ptes from `ptep` are none before the first that is not,
    /// each read and counted as `__ptep_get` reads it, in one pass over the table
    /// (the first pte that is not none is left unread, for the caller's `ptep_get`).
    #[inline]
    pub fn ptes_none_prefix(&mut self, ptep: PtePtr, nr: usize) -> usize {
        let ptes = &self.hw.mem.table(ptep.table)[ptep.index..ptep.index + nr];
        // pte_none is an all-zero descriptor; a new folio's range is all none, which
        // one OR over the range tells.
        let none = if ptes.iter().fold(0, |a, &w| a | w) == 0 {
            nr
        } else {
            ptes.iter().position(|&w| w != 0).unwrap_or(nr)
        };
        self.hw.ev.add(Event::PteRead, none as u64);
        none
    }

    /// __set_pte: store, then (for a valid kernel pte) DSB ISHST + ISB; user ptes rely
    /// on the fault path's barriers. The model counts only the store.
    #[inline]
    pub fn __set_pte(&mut self, addr: u64, ptep: PtePtr, pte: Pte) {
        self.hw.ev.inc(Event::PteWrite);
        self.hw
            .write_desc(ptep.table, ptep.index, 3, crate::hw::VirtAddr(addr), pte.0);
    }

    /// __set_ptes: `nr` consecutive ptes mapping consecutive pages. Inline but for the
    /// checked run: a single pte (every order-0 fault) is one store, and a large
    /// folio's run one pass, where a call and its frame cost as much again.
    #[inline(always)]
    pub fn __set_ptes(&mut self, addr: u64, ptep: PtePtr, pte: Pte, nr: usize) {
        if nr == 1 {
            self.__set_pte(addr, ptep, pte);
            return;
        }
        if !self.hw.checks {
            // Nothing to check between the stores: written and counted as `nr` calls
            // of __set_pte would, in one pass.
            self.hw.ev.add(Event::PteWrite, nr as u64);
            // pte_advance_pfn by one page each.
            let step = 1 << self.granule().page_shift();
            self.hw.mem.write_leaf_run(ptep.table, ptep.index, nr, pte.raw(), step);
            return;
        }
        self.__set_ptes_checked(addr, ptep, pte, nr);
    }

    /// __set_ptes one __set_pte at a time, each checked against the table as it is.
    #[inline(never)]
    fn __set_ptes_checked(&mut self, addr: u64, ptep: PtePtr, pte: Pte, nr: usize) {
        let g = self.granule();
        let ps = g.page_size();
        for i in 0..nr {
            self.__set_pte(addr + i as u64 * ps, ptep.add(i), pte.pte_advance_pfn(i as u64, g));
        }
    }

    /// set_pmd / set_pud / set_p4d / set_pgd: store, then, when the entry is a valid
    /// table descriptor (pmd_populate and friends), DSB ISHST + ISB so the walker sees
    /// the new table before the fault returns. A user leaf (set_pmd_at goes through
    /// set_pte_at) and an invalid pmd or pud (pmd_clear, pmdp_invalidate) get no
    /// barrier: the TLB maintenance that follows them has its own. set_p4d barriers
    /// every write (the 6.12 guest: one DSB ISHST + ISB in free_pgd_range per munmap
    /// that frees a pud table).
    #[inline]
    pub fn set_pxd(&mut self, level: u8, addr: u64, p: PtePtr, d: crate::hw::Desc, write: Event) {
        self.hw.ev.inc(write);
        self.hw
            .write_desc(p.table, p.index, level, crate::hw::VirtAddr(addr), d);
        // Level 0 is arm64's p4d (pgd) level: set_p4d has its barriers whatever it
        // writes, so free_pgtables' p4d_clear issues them too.
        if d.is_table(level) || level == 0 {
            self.hw.dsb_ishst();
            self.hw.isb();
        }
    }

    /// __ptep_get_and_clear.
    #[inline]
    pub fn __ptep_get_and_clear(&mut self, addr: u64, ptep: PtePtr) -> Pte {
        let old = self.__ptep_get(ptep);
        self.__set_pte(addr, ptep, Pte::NONE);
        old
    }

    /// Clear `nr` ptes from `ptep`, OR-ing their young and dirty bits into `pte`.
    pub fn __clear_ptes_gathering(&mut self, addr: u64, ptep: PtePtr, nr: usize, mut pte: Pte) -> Pte {
        let ps = self.granule().page_size();
        for i in 0..nr {
            let old = self.__ptep_get_and_clear(addr + i as u64 * ps, ptep.add(i));
            if old.pte_dirty() {
                pte = pte.pte_mkdirty();
            }
            if old.pte_young() {
                pte = pte.pte_mkyoung();
            }
        }
        pte
    }

    /// __ptep_set_wrprotect.
    #[inline]
    pub fn __ptep_set_wrprotect(&mut self, addr: u64, ptep: PtePtr) {
        let old = self.__ptep_get(ptep);
        self.__set_pte(addr, ptep, old.pte_wrprotect());
    }

    /// __ptep_test_and_clear_young.
    #[inline]
    pub fn __ptep_test_and_clear_young(&mut self, addr: u64, ptep: PtePtr) -> bool {
        let old = self.__ptep_get(ptep);
        if old.pte_young() {
            self.__set_pte(addr, ptep, old.pte_mkold());
        }
        old.pte_young()
    }

    // ---- the public API ----------------------------------------------------

    #[inline]
    fn cont_active(&self, mm: ArchMm) -> bool {
        self.contpte && mm.user
    }

    /// ptep_get: with contpte, gathers young/dirty from the whole block.
    #[inline]
    pub fn ptep_get(&mut self, mm: ArchMm, ptep: PtePtr) -> Pte {
        let pte = self.__ptep_get(ptep);
        if !self.cont_active(mm) || !pte.pte_valid_cont() {
            return pte;
        }
        contpte::contpte_ptep_get(self, ptep, pte)
    }

    /// ptep_get_lockless.
    pub fn ptep_get_lockless(&mut self, mm: ArchMm, ptep: PtePtr) -> Pte {
        let pte = self.__ptep_get(ptep);
        if !self.cont_active(mm) || !pte.pte_valid_cont() {
            return pte;
        }
        contpte::contpte_ptep_get_lockless(self, ptep, pte)
    }

    /// set_ptes: map `nr` consecutive pages (all targets none when nr > 1). `folio` is
    /// the head pfn and size of the folio mapped (what pte_page/page_folio give the
    /// kernel), needed to decide whether a single set may fold a block.
    pub fn set_ptes(&mut self, mm: ArchMm, addr: u64, ptep: PtePtr, pte: Pte, nr: usize, folio: Option<(Pfn, u64)>) {
        let pte = pte.pte_mknoncont();
        if !self.cont_active(mm) {
            self.__set_ptes(addr, ptep, pte, nr);
            return;
        }
        if nr == 1 {
            contpte::contpte_try_unfold(self, mm, addr, ptep);
            self.__set_ptes(addr, ptep, pte, 1);
            contpte::contpte_try_fold(self, mm, addr, ptep, pte, folio);
        } else {
            contpte::contpte_set_ptes(self, addr, ptep, pte, nr);
        }
    }

    /// ptep_get_and_clear_full / ptep_get_and_clear: unfolds a contpte block first.
    pub fn ptep_get_and_clear(&mut self, mm: ArchMm, addr: u64, ptep: PtePtr) -> Pte {
        if self.cont_active(mm) {
            contpte::contpte_try_unfold(self, mm, addr, ptep);
        }
        self.__ptep_get_and_clear(addr, ptep)
    }

    /// pte_clear.
    pub fn pte_clear(&mut self, mm: ArchMm, addr: u64, ptep: PtePtr) {
        if self.cont_active(mm) {
            contpte::contpte_try_unfold(self, mm, addr, ptep);
        }
        self.__set_pte(addr, ptep, Pte::NONE);
    }

    /// The unfold every batched setter starts with: a single pte unfolds its block;
    /// a range goes out of line (`entry`: contpte_clear_full_ptes and friends) and
    /// unfolds only the blocks it covers in part. Inline: every order-0 fault and zap
    /// passes here, where a call cost more than the checks.
    #[inline]
    fn contpte_try_unfold_range(&mut self, mm: ArchMm, addr: u64, ptep: PtePtr, nr: usize, entry: KernelEvent) {
        if !self.cont_active(mm) {
            return;
        }
        if nr == 1 {
            contpte::contpte_try_unfold(self, mm, addr, ptep);
        } else {
            self.kc.inc(entry);
            contpte::contpte_try_unfold_partial(self, mm, addr, ptep, nr);
        }
    }

    /// clear_full_ptes: clear `nr` ptes of one folio without gathering their state.
    #[inline(always)]
    pub fn clear_full_ptes(&mut self, mm: ArchMm, addr: u64, ptep: PtePtr, nr: usize, full: bool) {
        self.contpte_try_unfold_range(mm, addr, ptep, nr, KernelEvent::ContpteClearFullPtes);
        let _ = full;
        if nr == 1 {
            self.__ptep_get_and_clear(addr, ptep);
            return;
        }
        if !self.hw.checks {
            self.clear_ptes_unchecked(ptep, nr);
            return;
        }
        let ps = self.granule().page_size();
        for i in 0..nr {
            self.__ptep_get_and_clear(addr + i as u64 * ps, ptep.add(i));
        }
    }

    /// `nr` ptes read and cleared, counted as `nr` calls of __ptep_get_and_clear would,
    /// in one pass (with nothing to check between them). Out of line: the order-0
    /// zap, one pte at a time, keeps its loop inlined.
    #[inline(never)]
    fn clear_ptes_unchecked(&mut self, ptep: PtePtr, nr: usize) {
        self.hw.ev.add(Event::PteRead, nr as u64);
        self.hw.ev.add(Event::PteWrite, nr as u64);
        self.hw
            .mem
            .write_leaf_run(ptep.table, ptep.index, nr, Pte::NONE.0 .0, 0);
    }

    /// get_and_clear_full_ptes: clear `nr` ptes, returning the first with the young and
    /// dirty bits of any of them.
    pub fn get_and_clear_full_ptes(&mut self, mm: ArchMm, addr: u64, ptep: PtePtr, nr: usize, full: bool) -> Pte {
        self.contpte_try_unfold_range(mm, addr, ptep, nr, KernelEvent::ContpteGetAndClearFullPtes);
        let _ = full;
        let ps = self.granule().page_size();
        let first = self.__ptep_get_and_clear(addr, ptep);
        self.__clear_ptes_gathering(addr + ps, ptep.add(1), nr - 1, first)
    }

    /// wrprotect_ptes: write-protect `nr` ptes of one folio in place.
    pub fn wrprotect_ptes(&mut self, mm: ArchMm, addr: u64, ptep: PtePtr, nr: usize) {
        self.contpte_try_unfold_range(mm, addr, ptep, nr, KernelEvent::ContpteWrprotectPtes);
        let ps = self.granule().page_size();
        for i in 0..nr {
            self.__ptep_set_wrprotect(addr + i as u64 * ps, ptep.add(i));
        }
    }

    /// ptep_clear_flush: clear one pte and flush its TLB entry synchronously.
    pub fn ptep_clear_flush(&mut self, mm: ArchMm, addr: u64, ptep: PtePtr) -> Pte {
        self.kc.inc(KernelEvent::PtepClearFlush);
        let old = self.ptep_get_and_clear(mm, addr, ptep);
        if old.pte_valid() {
            self.flush_tlb_page(mm.asid, addr);
        }
        old
    }

    /// __ptep_set_access_flags: only AF, dirty, write and RDONLY may change in place;
    /// a stale read-only TLB entry is flushed when the pte became dirty.
    fn __ptep_set_access_flags(
        &mut self,
        mm: ArchMm,
        addr: u64,
        ptep: PtePtr,
        entry: Pte,
        dirty: bool,
        flush: bool,
    ) -> bool {
        let old = self.__ptep_get(ptep);
        // AF, write and dirty are set from `entry`; RDONLY is cleared if `entry` clears it.
        let mut new = old.raw() | (entry.raw() & (Attr::AF | PTE_WRITE | PTE_DIRTY).bits());
        if !entry.has(Attr::RDONLY) {
            new &= !Attr::RDONLY.bits();
        }
        if new == old.raw() {
            return false;
        }
        self.__set_pte(addr, ptep, Pte(Desc(new)));
        if dirty && flush {
            let ps = self.granule().page_size();
            self.flush_access_flags(mm, addr, addr + ps);
        }
        true
    }

    /// The flush after making [start, end) more permissive in place: the page's (or
    /// the block's) stale read-only entries, broadcast, or on this CPU alone
    /// (`wp_flush_local`).
    fn flush_access_flags(&mut self, mm: ArchMm, start: u64, end: u64) {
        let ps = self.granule().page_size();
        if self.wp_flush_local {
            tlbflush::flush_tlb_range_local(&mut self.hw, self.cpu, mm.asid, start, end, ps);
        } else {
            tlbflush::__flush_tlb_range(&mut self.hw, mm.asid, start, end, ps, true);
        }
    }

    /// flush_tlb_fix_spurious_fault: a write fault found the pte already writable, so
    /// its CPU held a stale read-only entry; a no-op on arm64 while such flushes were
    /// broadcast, a local flush of the page since they are not.
    pub fn flush_tlb_fix_spurious_fault(&mut self, mm: ArchMm, addr: u64) {
        if self.wp_flush_local {
            let ps = self.granule().page_size();
            let start = addr & !(ps - 1);
            tlbflush::flush_tlb_range_local(&mut self.hw, self.cpu, mm.asid, start, start + ps, ps);
        }
    }

    /// ptep_set_access_flags: with contpte, a change of the write bit unfolds the
    /// block; otherwise every entry of the block is updated and the block flushed once.
    pub fn ptep_set_access_flags(&mut self, mm: ArchMm, addr: u64, ptep: PtePtr, entry: Pte, dirty: bool) -> bool {
        let g = self.granule();
        let n = g.cont_ptes();
        let start = ptep.align_down(n);
        let orig = if self.contpte_access_raw {
            // Since the SMMU/ATS fix (7.0): the no-op check reads every entry of the
            // block raw (contpte_all_subptes_match_access_flags), no gathered ptep_get.
            let orig = self.__ptep_get(ptep);
            if !self.cont_active(mm) || !orig.pte_valid_cont() {
                return self.__ptep_set_access_flags(mm, addr, ptep, entry, dirty, true);
            }
            let mask = (Attr::RDONLY | Attr::AF | PTE_WRITE | PTE_DIRTY).bits();
            if (0..n).all(|i| self.__ptep_get(start.add(i)).raw() & mask == entry.raw() & mask) {
                return false;
            }
            orig.pte_mknoncont()
        } else {
            let orig = self.ptep_get(mm, ptep);
            if !self.cont_active(mm) || !orig.pte_valid_cont() {
                return self.__ptep_set_access_flags(mm, addr, ptep, entry, dirty, true);
            }
            if orig.raw() == entry.raw() {
                return false;
            }
            orig
        };
        if orig.pte_write() != entry.pte_write() {
            // contpte_ptep_set_access_flags, in contpte.c.
            contpte::unfold(self, mm, addr, ptep);
            return self.__ptep_set_access_flags(mm, addr, ptep, entry.pte_mknoncont(), dirty, true);
        }
        let start_addr = addr & !(g.cont_pte_size() - 1);
        for i in 0..n {
            let a = start_addr + i as u64 * g.page_size();
            self.__ptep_set_access_flags(mm, a, start.add(i), entry, dirty, false);
        }
        if dirty {
            self.flush_access_flags(mm, start_addr, start_addr + g.cont_pte_size());
        }
        true
    }

    /// clear_young_dirty_ptes (MADV_FREE / MADV_COLD): clear young and/or dirty on `nr`
    /// ptes. With contpte (contpte_clear_young_dirty_ptes) a block at either end is
    /// cleared whole instead of unfolded: A/D are tracked per folio, and a block never
    /// spans two folios.
    pub fn clear_young_dirty_ptes(&mut self, mm: ArchMm, addr: u64, ptep: PtePtr, nr: usize, young: bool, dirty: bool) {
        let g = self.granule();
        let ps = g.page_size();
        let (mut start, mut first, mut end) = (addr, ptep, addr + nr as u64 * ps);
        if self.cont_active(mm) && (nr != 1 || self.__ptep_get(ptep).pte_cont()) {
            if self.__ptep_get(ptep.add(nr - 1)).pte_cont() {
                end = (end + g.cont_pte_size() - 1) & !(g.cont_pte_size() - 1);
            }
            if self.__ptep_get(ptep).pte_cont() {
                start &= !(g.cont_pte_size() - 1);
                first = ptep.align_down(g.cont_ptes());
            }
        }
        for i in 0..((end - start) / ps) as usize {
            let mut p = self.__ptep_get(first.add(i));
            if young {
                p = p.pte_mkold();
            }
            if dirty {
                p = p.pte_mkclean();
            }
            self.__set_pte(start + i as u64 * ps, first.add(i), p);
        }
    }

    /// ptep_test_and_clear_young: with contpte, clears young on the whole block
    /// without unfolding (contpte_ptep_test_and_clear_young); whether any entry was young.
    pub fn ptep_test_and_clear_young(&mut self, mm: ArchMm, addr: u64, ptep: PtePtr) -> bool {
        if !self.cont_active(mm) || !self.__ptep_get(ptep).pte_valid_cont() {
            return self.__ptep_test_and_clear_young(addr, ptep);
        }
        contpte::contpte_ptep_test_and_clear_young(self, addr, ptep)
    }

    /// ptep_clear_flush_young: clear young, then flush the page without waiting for
    /// completion if it was young; a contpte block's whole
    /// (contpte_ptep_clear_flush_young).
    pub fn ptep_clear_flush_young(&mut self, mm: ArchMm, addr: u64, ptep: PtePtr) -> bool {
        if self.cont_active(mm) && self.__ptep_get(ptep).pte_valid_cont() {
            return contpte::contpte_ptep_clear_flush_young(self, mm, addr, ptep);
        }
        let young = self.__ptep_test_and_clear_young(addr, ptep);
        if young {
            let ps = self.granule().page_size();
            let s = addr & !(ps - 1);
            tlbflush::flush_tlb_range_nosync(&mut self.hw, mm.asid, s, s + ps, ps, true);
        }
        young
    }

    /// pte_batch_hint: how many ptes from `ptep` share one contpte block (1 otherwise).
    #[inline]
    pub fn pte_batch_hint(&self, ptep: PtePtr, pte: Pte) -> usize {
        if !self.contpte || !pte.pte_valid_cont() {
            return 1;
        }
        let n = self.granule().cont_ptes();
        n - (ptep.index & (n - 1))
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    const G: Granule = Granule::K4;

    #[test]
    fn a_migration_entry_keeps_its_pfn_type_and_access_bits_and_is_no_swap_slot() {
        for g in [Granule::K4, Granule::K16, Granule::K64] {
            let far = Pfn((1 << (52 - g.page_shift())) - 1);
            for (kind, young, dirty) in [
                (MigrationKind::Read, false, false),
                (MigrationKind::ReadExclusive, true, false),
                (MigrationKind::Write, true, true),
                (MigrationKind::Write, false, true),
            ] {
                let e = Pte::make_migration_entry(far, kind, young, dirty, g);
                assert!(e.is_swap_pte() && e.is_migration_entry() && !e.pte_present() && !e.pte_none());
                assert_eq!(e.migration_kind(), Some(kind));
                assert_eq!(e.migration_entry_pfn(g), far);
                assert_eq!(e.is_migration_entry_young(g), young, "{g:?} {kind:?}");
                assert_eq!(e.is_migration_entry_dirty(g), dirty, "{g:?} {kind:?}");
            }
        }
        // Type 28 sits in bits 6-10.
        let e = Pte::make_migration_entry(Pfn(1), MigrationKind::Read, false, false, G);
        assert_eq!(e.raw(), 28 << 6 | 1 << 12);
        assert!(!Pte::swp_entry_to_pte(5, true).is_migration_entry());
    }

    #[test]
    fn a_swap_pte_is_neither_none_nor_present_and_keeps_its_offset() {
        // Type 0, offset 1, exclusive: 0x1004 in 6.10+'s layout.
        let p = Pte::swp_entry_to_pte(1, true);
        assert_eq!(p.raw(), 0x1004);
        assert!(p.is_swap_pte() && !p.pte_none() && !p.pte_present() && !p.pte_valid());
        assert!(p.pte_swp_exclusive() && !p.pte_swp_clear_exclusive().pte_swp_exclusive());
        let far = Pte::swp_entry_to_pte((1 << 50) - 1, false);
        assert_eq!(far.pte_swp_offset(), (1 << 50) - 1);
        assert!(far.is_swap_pte());
        // A PROT_NONE pte is present, not a swap entry.
        let none = Pte::pfn_pte(Pfn(5), PgProt::READONLY, G).pte_modify(PgProt::NONE);
        assert!(!none.is_swap_pte());
    }

    #[test]
    fn anon_write_fault_pte_is_young_dirty_and_hardware_writable() {
        let p = Pte::pfn_pte(Pfn(5), PgProt::READONLY, G).pte_mkdirty().pte_mkwrite();
        assert!(p.pte_young() && p.pte_dirty() && p.pte_write() && !p.has(Attr::RDONLY));
        assert!(p.has(Attr::NG) && p.has(Attr::USER) && p.pte_valid());
    }

    #[test]
    fn wrprotect_keeps_hardware_dirtiness_in_software() {
        let p = Pte::pfn_pte(Pfn(5), PgProt::READONLY, G).pte_mkwrite();
        assert!(!p.pte_dirty());
        let hw_dirty = Pte(p.0.without(Attr::RDONLY));
        assert!(hw_dirty.pte_dirty() && !hw_dirty.pte_sw_dirty());
        let w = hw_dirty.pte_wrprotect();
        assert!(w.pte_dirty() && !w.pte_write() && w.has(Attr::RDONLY));
    }

    #[test]
    fn mkclean_and_mkold_are_pte_same_with_the_original_modulo_state() {
        let p = Pte::pfn_pte(Pfn(9), PgProt::READONLY, G).pte_mkwrite().pte_mkdirty();
        let q = p.pte_mkold().pte_mkclean();
        assert!(!q.pte_dirty() && !q.pte_young());
        assert!(q.pte_same(Pte::pfn_pte(Pfn(9), PgProt::READONLY, G).pte_mkwrite().pte_mkold()));
    }

    #[test]
    fn prot_none_is_present_but_not_valid() {
        let p = Pte::pfn_pte(Pfn(1), PgProt::NONE, G);
        assert!(p.pte_present() && !p.pte_valid());
    }

    #[test]
    fn advance_pfn_moves_only_the_address() {
        let p = Pte::pfn_pte(Pfn(16), PgProt::READONLY, G).pte_mkcont();
        let q = p.pte_advance_pfn(3, G);
        assert_eq!(q.pte_pfn(G), Pfn(19));
        assert_eq!(q.pte_pgprot(), p.pte_pgprot());
    }
}
