//! arch/arm64/mm/pageattr.c's set_direct_map_invalid_noflush and
//! set_direct_map_default_noflush, and arch/arm64/mm/mmu.c's run-time split of the
//! linear map (split_kernel_leaf_mapping, 6.18: a166563e7ec3 a660194dd101 e5efd56fa157).
//!
//! Under rodata=full a kernel without BBM Level 3 maps its linear map with ptes
//! (force_pte_mapping), so a page's permissions change in its own pte. With it (and
//! the release's `linmap-split=on-demand`), map_mem keeps blocks and the first change
//! inside one splits it: a pud block to contiguous pmds (split_pud), a contiguous pmd
//! run to pmds (split_contpmd), a pmd block to a table of contiguous ptes (split_pmd),
//! a contiguous pte run to ptes (split_contpte), each only where the page's bounds
//! cut it. No TLBI: BBML3 lets a live block be repainted in place.
//!
//! The model keeps the linear map's shape, not its descriptors: which blocks of the
//! machine's RAM have been split so far, from map_mem's blocks over it. The kernel
//! image sits in the first GiB of DRAM and 7.3's map_mem maps its alias first, so
//! that pud is a table from boot; the image's own pmds are not the page allocator's,
//! so every pmd of the model's RAM starts as a block. Which blocks a workload's pages
//! fall in is the model's allocator's doing: a real kernel's pages lie elsewhere, in
//! blocks earlier work (an earlier workload of the same boot) may have split
//! already. The pte table a split allocates is not taken from the model's allocator.

use super::pgtable::Arch;
use crate::hw::{Event, Granule, Machine, Pfn};
use std::collections::BTreeSet;

/// The linear map's state that a permission change of one page depends on.
#[derive(Clone, Debug, Default)]
pub struct LinearMap {
    /// Blocks kept and split on demand (BBML3 found, and a release with it).
    pub on_demand: bool,
    /// RAM's end, physical: a block wholly below it was mapped as one.
    ram_end: u64,
    split_pud: BTreeSet<u64>,
    split_contpmd: BTreeSet<u64>,
    split_pmd: BTreeSet<u64>,
    split_contpte: BTreeSet<u64>,
    /// TIF_LAZY_MMU_PENDING: a valid kernel entry written in lazy MMU mode, its
    /// barriers owed at the mode's end.
    pending: bool,
}

impl LinearMap {
    pub fn new(on_demand: bool, ram_end: u64) -> LinearMap {
        LinearMap {
            on_demand,
            ram_end,
            ..LinearMap::default()
        }
    }

    /// Whether [start, start + size) was mapped whole by map_mem (inside RAM).
    fn whole(&self, start: u64, size: u64) -> bool {
        start + size <= self.ram_end
    }

    /// A pud block covers `pa` (4K pages: 1G blocks); not the first, the image's.
    fn pud_leaf(&self, g: Granule, pa: u64) -> bool {
        let size = 1u64 << g.pud_shift();
        let first = pa < size;
        g.block_allowed_at(1) && !first && !self.split_pud.contains(&(pa / size)) && self.whole(pa & !(size - 1), size)
    }

    /// A pmd block covers `pa`: from map_mem or a split pud.
    fn pmd_leaf(&self, g: Granule, pa: u64) -> bool {
        let size = 1u64 << g.pmd_shift();
        let from_pud = self.split_pud.contains(&(pa >> g.pud_shift()));
        !self.split_pmd.contains(&(pa / size)) && (from_pud || self.whole(pa & !(size - 1), size))
    }

    /// The pmd covering `pa` has the contiguous bit.
    fn pmd_cont(&self, g: Granule, pa: u64) -> bool {
        let size = (g.cont_entries_at(2) as u64) << g.pmd_shift();
        let from_pud = self.split_pud.contains(&(pa >> g.pud_shift()));
        !self.split_contpmd.contains(&(pa / size)) && (from_pud || self.whole(pa & !(size - 1), size))
    }

    /// The pte mapping `pa` has the contiguous bit: split_pmd's table is contiguous
    /// throughout, map_mem's where a whole run lies in RAM.
    fn pte_cont(&self, g: Granule, pa: u64) -> bool {
        let size = (g.cont_entries_at(3) as u64) << g.page_shift();
        let from_pmd = self.split_pmd.contains(&(pa >> g.pmd_shift()));
        !self.split_contpte.contains(&(pa / size)) && (from_pmd || self.whole(pa & !(size - 1), size))
    }

    /// queue_pte_barriers in lazy MMU mode: a valid kernel entry was written.
    fn queue(&mut self) {
        self.pending = true;
    }

    /// lazy_mmu_mode_disable (arch_leave_lazy_mmu_mode): the owed DSB ISHST + ISB.
    fn leave(&mut self, m: &mut Machine) {
        if std::mem::take(&mut self.pending) {
            m.dsb_ishst();
            m.isb();
        }
    }

    /// split_kernel_leaf_mapping_locked for the linear-map address of `pa`.
    fn split_locked(&mut self, m: &mut Machine, pa: u64) {
        let g = m.granule();
        let aligned = |shift: u32| pa & ((1u64 << shift) - 1) == 0;
        let cont_pmd_shift = g.pmd_shift() + g.cont_entries_at(2).trailing_zeros();
        let cont_pte_shift = g.page_shift() + g.cont_entries_at(3).trailing_zeros();
        if aligned(g.pud_shift()) || pa >= self.ram_end {
            return;
        }
        if self.pud_leaf(g, pa) {
            // split_pud: a pmd table of contiguous blocks, each set_pmd queued, then
            // its own DSB ISHST before __pud_populate hooks it in (queued too).
            self.split_pud.insert(pa >> g.pud_shift());
            m.ev.inc(Event::TableAllocL2);
            m.ev.add(Event::PmdWrite, g.entries_at(2) as u64);
            m.dsb_ishst();
            m.ev.inc(Event::PudWrite);
            self.queue();
        }
        if aligned(cont_pmd_shift) {
            return;
        }
        if self.pmd_leaf(g, pa) {
            if self.pmd_cont(g, pa) {
                // split_contpmd: the run's set_pmd without CONT.
                self.split_contpmd.insert(pa >> cont_pmd_shift);
                m.ev.add(Event::PmdWrite, g.cont_entries_at(2) as u64);
                self.queue();
            }
            if aligned(g.pmd_shift()) {
                return;
            }
            // split_pmd: a table of contiguous ptes, DSB ISHST, then __pmd_populate.
            self.split_pmd.insert(pa >> g.pmd_shift());
            m.ev.inc(Event::TableAllocL3);
            m.ev.add(Event::PteWrite, g.entries_at(3) as u64);
            m.dsb_ishst();
            m.ev.inc(Event::PmdWrite);
            self.queue();
        }
        if aligned(cont_pte_shift) {
            return;
        }
        if self.pte_cont(g, pa) {
            // split_contpte: the run's __set_pte without CONT.
            self.split_contpte.insert(pa >> cont_pte_shift);
            m.ev.add(Event::PteWrite, g.cont_entries_at(3) as u64);
            self.queue();
        }
    }

    /// split_kernel_leaf_mapping of one page's linear alias: nothing unless blocks are
    /// kept; for a single page, split at the less aligned of its two bounds (the
    /// other is then a leaf boundary too).
    fn split_kernel_leaf_mapping(&mut self, m: &mut Machine, pa: u64) {
        if !self.on_demand {
            return;
        }
        let end = pa + m.granule().page_size();
        let at = if pa.trailing_zeros() < end.trailing_zeros() {
            pa
        } else {
            end
        };
        self.split_locked(m, at);
        self.leave(m);
    }

    /// update_range_prot for one page: split, then rewrite its pte in lazy MMU mode;
    /// a now-valid kernel pte owes its barriers at the mode's end (6.12's set_pte
    /// issues the same two at once).
    fn update_range_prot(&mut self, m: &mut Machine, pa: u64, valid: bool) {
        self.split_kernel_leaf_mapping(m, pa);
        m.ev.inc(Event::PteWrite);
        if valid {
            self.queue();
        }
        self.leave(m);
    }

    /// set_direct_map_invalid_noflush: the page leaves the linear map; its stale
    /// translation stays until the caller's flush_tlb_kernel_range.
    pub fn set_direct_map_invalid_noflush(&mut self, m: &mut Machine, pa: u64) {
        self.update_range_prot(m, pa, false);
    }

    /// set_direct_map_default_noflush: the page is mapped again (no TLBI: an invalid
    /// entry is never cached).
    pub fn set_direct_map_default_noflush(&mut self, m: &mut Machine, pa: u64) {
        self.update_range_prot(m, pa, true);
    }
}

/// The arch operations the mm layer calls for a page's linear alias.
impl Arch {
    /// page_address: the page's linear-map address (memstart at the start of RAM).
    pub fn page_address(&self, pfn: Pfn) -> u64 {
        super::mmu::PAGE_OFFSET + (pfn.0 << self.granule().page_shift())
    }
    pub fn set_direct_map_invalid_noflush(&mut self, pfn: Pfn) {
        let pa = pfn.0 << self.granule().page_shift();
        self.linear.set_direct_map_invalid_noflush(&mut self.hw, pa);
    }
    pub fn set_direct_map_default_noflush(&mut self, pfn: Pfn) {
        let pa = pfn.0 << self.granule().page_shift();
        self.linear.set_direct_map_default_noflush(&mut self.hw, pa);
    }
    /// flush_tlb_kernel_range of one page's linear alias.
    pub fn flush_tlb_kernel_page(&mut self, pfn: Pfn) {
        let va = self.page_address(pfn);
        let ps = self.granule().page_size();
        super::tlbflush::flush_tlb_kernel_range(&mut self.hw, va, va + ps);
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::hw::{Events, MachineConfig};

    const G: u64 = 1 << 30;
    const M: u64 = 1 << 20;
    const K: u64 = 1 << 10;

    fn machine() -> Machine {
        Machine::new(MachineConfig {
            ram_bytes: 4 * G,
            ..Default::default()
        })
    }

    /// (DSB ISHST, ISB, TLBIs) of taking out the page at `pa`.
    fn invalidate(lm: &mut LinearMap, m: &mut Machine, pa: u64) -> [u64; 3] {
        let before = m.ev.clone();
        lm.set_direct_map_invalid_noflush(m, pa);
        let ev: Events = m.ev.since(&before);
        [Event::DsbIshst, Event::Isb, Event::TlbiTotal].map(|e| ev.get(e))
    }

    #[test]
    fn pte_mapped_the_linear_map_changes_one_pte_without_barriers_or_tlbis() {
        let mut m = machine();
        let mut lm = LinearMap::new(false, 4 * G);
        assert_eq!(invalidate(&mut lm, &mut m, G + 5 * M + 12 * K), [0, 0, 0]);
        let before = m.ev.clone();
        lm.set_direct_map_default_noflush(&mut m, G + 5 * M + 12 * K);
        let ev = m.ev.since(&before);
        assert_eq!([ev.get(Event::DsbIshst), ev.get(Event::Isb)], [1, 1]);
    }

    #[test]
    fn blocks_split_on_the_first_change_inside_them_and_never_flush() {
        let mut m = machine();
        let mut lm = LinearMap::new(true, 4 * G);
        // A page inside the first pud (a table: the image's) and a contiguous pmd
        // run: split_contpmd and split_pmd queue, split_pmd's own DSB ISHST, then
        // split_contpte; the mode's end owes one DSB ISHST + ISB.
        assert_eq!(invalidate(&mut lm, &mut m, 40 * M + 12 * K), [2, 1, 0]);
        // The same 64K run again: split already.
        assert_eq!(invalidate(&mut lm, &mut m, 40 * M + 8 * K), [0, 0, 0]);
        // Another run of the same pmd: split_contpte only.
        assert_eq!(invalidate(&mut lm, &mut m, 40 * M + 64 * K), [1, 1, 0]);
        // A page in the second G, a pud block: split_pud's DSB ISHST as well.
        assert_eq!(invalidate(&mut lm, &mut m, G + 40 * M + 12 * K), [3, 1, 0]);
        // Restoring a page owes its pte's barriers only.
        let before = m.ev.clone();
        lm.set_direct_map_default_noflush(&mut m, 40 * M + 12 * K);
        let ev = m.ev.since(&before);
        assert_eq!([ev.get(Event::DsbIshst), ev.get(Event::Isb)], [1, 1]);
    }
}
