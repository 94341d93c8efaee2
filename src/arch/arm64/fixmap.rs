//! arch/arm64/include/asm/fixmap.h and the fixmap part of arch/arm64/mm/fixmap.c.
//!
//! While the linear map is being built, the kernel cannot reach a new table frame
//! through it, so it maps the frame at a fixed virtual slot: one pte in the
//! statically allocated `bm_pte` table, set to the frame, used, then cleared with a
//! TLBI of that one page. There is one slot per table level, so a walker can hold a
//! pud, a pmd and a pte table mapped at once.
//!
//! ```text
//!   FIXADDR_TOP = -8 MiB (0xffff_ffff_ff80_0000)
//!   ...  | FIX_PUD | FIX_PMD | FIX_PTE | FIX_HOLE |<- FIXADDR_TOP
//!        slot va = FIXADDR_TOP - (idx << PAGE_SHIFT), all in one bm_pte
//! ```
//! The kernel's slot numbers depend on the config (FDT size, early-ioremap slots);
//! only their being distinct pages under one bm_pte matters here. FIX_PGD is not
//! modelled: while the linear map is built swapper_pg_dir is still writable through
//! the kernel image, so the kernel writes it directly (set_swapper_pgd only goes
//! through FIX_PGD once rodata is read-only). FIXADDR_TOP is the 6.9+ layout
//! (fixmap above vmemmap); not verified against every version.

use super::mmu::page_kernel;
use super::tlbflush::flush_tlb_kernel_range;
use crate::hw::{Desc, Event, Machine, PhysAddr, TableId, VirtAddr};

/// The top of the fixmap region: -SZ_8M.
pub const FIXADDR_TOP: u64 = 0u64.wrapping_sub(8 << 20);

/// A fixmap slot used for page-table access (enum fixed_addresses).
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum FixSlot {
    /// FIX_PTE: pte tables, and before seed 003 any table while it is being zeroed.
    Pte = 1,
    /// FIX_PMD.
    Pmd = 2,
    /// FIX_PUD.
    Pud = 3,
    /// FIX_P4D: the fifth level's table, with 52-bit VAs on an LPA2 CPU.
    P4d = 4,
}

impl FixSlot {
    /// The slot a walker maps a table of hardware `level` in (1 pud, 2 pmd, 3 pte).
    pub fn for_level(level: u8) -> FixSlot {
        match level {
            1 => FixSlot::Pud,
            2 => FixSlot::Pmd,
            3 => FixSlot::Pte,
            _ => unreachable!("no fixmap slot for level {level} tables"),
        }
    }
}

/// __fix_to_virt.
pub fn fix_to_virt(m: &Machine, slot: FixSlot) -> VirtAddr {
    VirtAddr(FIXADDR_TOP - ((slot as u64) << m.granule().page_shift()))
}

/// The fixmap's pte table (bm_pte), hooked under the kernel root by `early_fixmap_init`.
#[derive(Clone, Copy, Debug)]
pub struct Fixmap {
    bm_pte: TableId,
}

impl Fixmap {
    /// early_fixmap_init: link the static tables `bm` (the image's bm_pud, bm_pmd and
    /// bm_pte, one per level below the root) under `root` on the path to FIXADDR_TOP.
    pub fn early_fixmap_init(m: &mut Machine, root: TableId, bm: &[PhysAddr]) -> Fixmap {
        let g = m.granule();
        let va = VirtAddr(FIXADDR_TOP - g.page_size());
        assert_eq!(
            bm.len(),
            (3 - g.start_level()) as usize,
            "one static table per level below the root"
        );
        let mut table = root;
        for (level, &pa) in (g.start_level()..3).zip(bm) {
            let next = m.mem.materialize_table(pa.to_pfn(g));
            m.write_desc(table, g.index(va.0, level), level, va, Desc::table(pa));
            table = next;
        }
        Fixmap { bm_pte: table }
    }

    /// __set_fixmap(slot, pa, FIXMAP_PAGE_NORMAL = PAGE_KERNEL): map the frame at `pa` in `slot`. The
    /// pte write of a valid kernel mapping is followed by DSB ISHST + ISB. Returns the
    /// table the slot now reaches: the kernel reaches the frame only through the slot's pte.
    pub fn set(&self, m: &mut Machine, slot: FixSlot, pa: PhysAddr) -> TableId {
        assert_eq!(self.mapped(m, slot), None, "fixmap slot {slot:?} already in use");
        let (idx, va) = self.pte_of(m, slot);
        let prot = page_kernel(m);
        m.write_desc(self.bm_pte, idx, 3, va, Desc::page(pa, prot));
        m.ev.inc(Event::PteWrite);
        m.dsb_ishst();
        m.isb();
        m.ev.inc(Event::FixmapMap);
        let mapped = m.mem.read(self.bm_pte, idx).oa();
        m.mem.table_id_of(mapped).expect("fixmapped frame holds no table")
    }

    /// __set_fixmap(slot, 0, 0), i.e. pXX_clear_fixmap: clear the pte, then
    /// flush_tlb_kernel_range of the one page (DSB ISHST; TLBI VAALE1IS; DSB ISH; ISB).
    /// Those barriers also publish every table write made through the slot.
    pub fn clear(&self, m: &mut Machine, slot: FixSlot) {
        let (idx, va) = self.pte_of(m, slot);
        m.write_desc(self.bm_pte, idx, 3, va, Desc::ZERO);
        m.ev.inc(Event::PteWrite);
        let ps = m.granule().page_size();
        flush_tlb_kernel_range(m, va.0, va.0 + ps);
        m.ev.inc(Event::FixmapUnmap);
    }

    /// The frame `slot` maps now, if any.
    pub fn mapped(&self, m: &Machine, slot: FixSlot) -> Option<PhysAddr> {
        let d = m.mem.read(self.bm_pte, self.pte_of(m, slot).0);
        d.is_valid().then(|| d.oa())
    }

    fn pte_of(&self, m: &Machine, slot: FixSlot) -> (usize, VirtAddr) {
        let va = fix_to_virt(m, slot);
        (m.granule().index(va.0, 3), va)
    }
}
