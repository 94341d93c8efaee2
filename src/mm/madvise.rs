//! mm/madvise.c.

use super::folio::PageFlags;
use super::huge_memory::{madvise_free_huge_pmd, split_folio};
use super::memory::Fpb;
use super::mm_types::{MmId, VmFlags};
use super::mmap::VmaError;
use super::mmu_gather::MmuGather;
use super::pgtable::PmdPtr;
use super::Kernel;
use crate::arch::arm64::pgtable::pmd_trans_huge;
use crate::arch::arm64::pgtable::{Pte, PtePtr};
use crate::hw::Pfn;

/// The madvise advice values the model implements.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum Madv {
    DontNeed,
    Free,
    HugePage,
    NoHugePage,
    Cold,
    PageOut,
    Collapse,
}

impl Kernel {
    /// do_madvise over [start, end): EINVAL unless `start` is page aligned; `end` is
    /// rounded up to a page, as madvise_validate and PAGE_ALIGN(len) have it.
    pub fn do_madvise(&mut self, mm: MmId, start: u64, end: u64, advice: Madv) -> Result<(), VmaError> {
        let ps = self.arch.granule().page_size();
        if !start.is_multiple_of(ps) {
            return Err(VmaError::Invalid("start is not page aligned"));
        }
        let end = end.next_multiple_of(ps);
        match advice {
            Madv::DontNeed => self.madvise_dontneed_free(mm, start, end, false),
            Madv::Free => self.madvise_dontneed_free(mm, start, end, true),
            Madv::HugePage => {
                self.vma_modify_flags(mm, start, end, |f| (f - VmFlags::NOHUGEPAGE) | VmFlags::HUGEPAGE)?;
                // hugepage_madvise: khugepaged_enter_vma with each VMA's new flags.
                for vma in self.mm(mm).vmas_in(start, end) {
                    self.khugepaged_enter_vma(mm, &vma);
                }
                Ok(())
            }
            Madv::NoHugePage => {
                self.vma_modify_flags(mm, start, end, |f| (f - VmFlags::HUGEPAGE) | VmFlags::NOHUGEPAGE)
            }
            Madv::Cold => self.madvise_cold_or_pageout(mm, start, end, false),
            Madv::PageOut => self.madvise_cold_or_pageout(mm, start, end, true),
            Madv::Collapse => {
                for vma in self.mm(mm).vmas_in(start, end) {
                    self.madvise_collapse(mm, &vma, start.max(vma.start), end.min(vma.end))?;
                }
                if !self.range_fully_mapped(mm, start, end) {
                    return Err(VmaError::NotMapped);
                }
                Ok(())
            }
        }
    }

    /// MADV_DONTNEED (zap) and MADV_FREE (lazyfree), VMA by VMA, under one mmu_gather
    /// (6.16+); locked VMAs refuse both.
    fn madvise_dontneed_free(&mut self, mm: MmId, start: u64, end: u64, free: bool) -> Result<(), VmaError> {
        let vmas = self.mm(mm).vmas_in(start, end);
        if vmas.iter().any(|v| v.flags.contains(VmFlags::LOCKED)) {
            return Err(VmaError::Invalid(
                "the range is mlocked (madvise_dontneed_free_valid_vma refuses VM_LOCKED)",
            ));
        }
        let mut tlb = self.tlb_gather_mmu(mm, false);
        if free {
            for vma in &vmas {
                self.madvise_free_single_vma(&mut tlb, mm, start.max(vma.start), end.min(vma.end));
            }
        } else {
            self.unmap_vmas(&mut tlb, mm, &vmas, start, end);
        }
        self.tlb_finish_mmu(tlb);
        if !self.range_fully_mapped(mm, start, end) {
            return Err(VmaError::NotMapped);
        }
        Ok(())
    }

    /// madvise_free_single_vma: walk the pmds of [start, end).
    fn madvise_free_single_vma(&mut self, tlb: &mut MmuGather, mm: MmId, start: u64, end: u64) {
        self.walk_pmd_range(mm, start, end, |k, pmd, d, addr, next| {
            let huge = pmd_trans_huge(d);
            if !(huge && madvise_free_huge_pmd(k, tlb, mm, pmd, addr, next)) {
                k.madvise_free_pte_range(tlb, mm, pmd, addr, next);
            }
            true
        });
        self.tlb_end_vma(tlb);
    }

    /// madvise_free_pte_range: a large folio wholly inside the range is made lazyfree
    /// as it is; one only partly covered is split first (unless maybe shared), and its
    /// pages are then handled one by one. The ptes lose young and dirty, so a later
    /// write re-dirties them (by hardware DBM, without a fault).
    fn madvise_free_pte_range(&mut self, tlb: &mut MmuGather, mm: MmId, pmd: PmdPtr, addr: u64, end: u64) {
        let g = self.arch.granule();
        let ps = g.page_size();
        let amm = self.arch_mm(mm);
        let Some(mut ptep) = self.pte_offset_map(pmd, addr) else {
            return;
        };
        self.flush_tlb_batched_pending(mm);
        let mut addr = addr;
        while addr < end {
            let mut ptent = self.arch.ptep_get(amm, ptep);
            let pfn = ptent.pte_pfn(g);
            if ptent.is_swap_pte() {
                // The data is to be discarded: its slot goes now.
                self.free_swap_and_cache_nr(ptent.pte_swp_offset(), 1);
                self.mm_mut(mm).rss_swap -= 1;
                self.arch.__set_pte(addr, ptep, Pte::NONE);
            }
            if !ptent.pte_present() || self.is_zero_pfn(pfn) {
                ptep = ptep.add(1);
                addr += ps;
                continue;
            }
            let folio = self.memmap.folio_of(pfn);
            let mut nr = 1;
            if self.memmap.folio_order(folio) > 0 {
                let max_nr = ((end - addr) / ps) as usize;
                (nr, ptent) = self.folio_pte_batch_flags(mm, folio, ptep, ptent, max_nr, Fpb::MERGE_YOUNG_DIRTY);
                if (nr as u64) < self.memmap.folio_nr_pages(folio) {
                    if !self.folio_maybe_mapped_shared(folio) {
                        self.folio_ref_add(folio, 1);
                        let split = split_folio(self, folio, 1);
                        self.folio_put(folio);
                        // madvise_free_pte_range: the split ran without the PTL and
                        // its unmap left TLBIs pending for this mm; retaking the lock
                        // drains them (flush_tlb_batched_pending).
                        self.flush_tlb_batched_pending(mm);
                        if split {
                            continue;
                        }
                    }
                    ptep = ptep.add(nr);
                    addr += nr as u64 * ps;
                    continue;
                }
            }
            if self
                .memmap
                .page(folio)
                .flags
                .intersects(PageFlags::DIRTY | PageFlags::SWAPCACHE)
            {
                let large = self.memmap.folio_order(folio) > 0;
                let mut skip = if large {
                    self.memmap.folio_mapcount(folio) as u64 != self.memmap.folio_nr_pages(folio)
                } else {
                    self.folio_maybe_mapped_shared(folio)
                };
                // A folio another pte's slot still holds must stay swap-backed.
                if !skip && self.memmap.folio_test(folio, PageFlags::SWAPCACHE) {
                    skip = !self.folio_free_swap(folio);
                }
                if skip {
                    ptep = ptep.add(nr);
                    addr += nr as u64 * ps;
                    continue;
                }
                self.memmap.folio_clear(folio, PageFlags::DIRTY);
            }
            if ptent.pte_young() || ptent.pte_dirty() {
                self.arch.clear_young_dirty_ptes(amm, addr, ptep, nr, true, true);
                tlb.remove_tlb_entries(addr, nr as u64, ps);
            }
            self.folio_mark_lazyfree(folio);
            ptep = ptep.add(nr);
            addr += nr as u64 * ps;
        }
    }

    /// folio_mark_lazyfree: a swap-backed, evictable anon folio stops being swap-backed,
    /// so reclaim may discard it while it stays clean.
    pub fn folio_mark_lazyfree(&mut self, folio: Pfn) {
        let f = self.memmap.page(folio).flags;
        if f.contains(PageFlags::ANON | PageFlags::SWAPBACKED) && !f.contains(PageFlags::MLOCKED) {
            // The kernel batches the move (lru_lazyfree fbatch); the model moves at once.
            self.lru_lazyfree(folio);
        }
    }
}

impl Kernel {
    /// MADV_COLD and MADV_PAGEOUT (madvise_cold / madvise_pageout): walk the range with
    /// madvise_cold_or_pageout_pte_range. Cold clears young on the folios wholly inside
    /// (contpte blocks stay folded; whole THP pmds too), flushing through one
    /// mmu_gather; pageout isolates them and hands them to reclaim (reclaim_pages)
    /// after each pmd. Locked VMAs refuse both (can_madv_lru_vma).
    fn madvise_cold_or_pageout(&mut self, mm: MmId, start: u64, end: u64, pageout: bool) -> Result<(), VmaError> {
        if !self.range_fully_mapped(mm, start, end) {
            return Err(VmaError::NotMapped);
        }
        let vmas = self.mm(mm).vmas_in(start, end);
        if vmas.iter().any(|v| v.flags.contains(VmFlags::LOCKED)) {
            return Err(VmaError::Invalid(
                "the range is mlocked (can_madv_lru_vma refuses VM_LOCKED)",
            ));
        }
        if pageout {
            // madvise_pageout: the lru_add batch first, so every folio can be isolated.
            self.lru_add_drain();
        }
        let mut tlb = self.tlb_gather_mmu(mm, false);
        self.walk_pmd_range(mm, start, end, |k, pmd, d, addr, next| {
            let mut folios = Vec::new();
            let huge = pmd_trans_huge(d);
            if !(huge && k.madvise_cold_or_pageout_huge_pmd(&mut tlb, mm, pmd, d, addr, next, pageout, &mut folios)) {
                if let Some(ptep) = k.pte_offset_map(pmd, addr) {
                    k.madvise_cold_or_pageout_pte_range(&mut tlb, mm, ptep, addr, next, pageout, &mut folios);
                }
            }
            if pageout {
                k.reclaim_pages(folios);
            }
            true
        });
        self.tlb_finish_mmu(tlb);
        Ok(())
    }

    /// The pmd part of madvise_cold_or_pageout_pte_range: a THP mapped only here and
    /// wholly in range is made old (cold) or isolated (pageout); one partly in range is
    /// split and left to the pte walk (false). True: the pmd is done.
    #[allow(clippy::too_many_arguments)]
    fn madvise_cold_or_pageout_huge_pmd(
        &mut self,
        tlb: &mut MmuGather,
        mm: MmId,
        pmd: PmdPtr,
        d: crate::hw::Desc,
        addr: u64,
        next: u64,
        pageout: bool,
        folios: &mut Vec<Pfn>,
    ) -> bool {
        let g = self.arch.granule();
        let pmd_size = g.pmd_size();
        let folio = d.pfn(g);
        if self.huge_zero_folio == Some(folio) || self.folio_maybe_mapped_shared(folio) {
            return true;
        }
        if next - addr != pmd_size {
            self.folio_ref_add(folio, 1);
            let split = split_folio(self, folio, 1);
            self.folio_put(folio);
            return !split;
        }
        if pageout && self.folio_isolate_lru(folio) {
            folios.push(folio);
        }
        if (!pageout || self.pageout_clears_young) && d.has(crate::hw::Attr::AF) {
            // pmdp_invalidate, set_pmd_at(pmd_mkold), tlb_remove_pmd_tlb_entry.
            let haddr = addr & !(pmd_size - 1);
            super::huge_memory::pmdp_invalidate(self, mm, pmd, haddr);
            self.pxd_set(2, haddr, pmd, d.without(crate::hw::Attr::AF));
            tlb.flush_pmd_range(haddr, pmd_size);
        }
        true
    }

    /// madvise_cold_or_pageout_pte_range: per folio batch; a large folio only partly
    /// in range is split unless maybe shared, then its pages are taken one by one;
    /// folios mapped more than once are left alone.
    #[allow(clippy::too_many_arguments)]
    fn madvise_cold_or_pageout_pte_range(
        &mut self,
        tlb: &mut MmuGather,
        mm: MmId,
        ptep: PtePtr,
        addr: u64,
        next: u64,
        pageout: bool,
        folios: &mut Vec<Pfn>,
    ) {
        let g = self.arch.granule();
        let ps = g.page_size();
        let amm = self.arch_mm(mm);
        let (mut ptep, mut addr) = (ptep, addr);
        self.flush_tlb_batched_pending(mm);
        while addr < next {
            let ptent = self.arch.ptep_get(amm, ptep);
            let pfn = ptent.pte_pfn(g);
            let mut nr = 1;
            if ptent.pte_present() && !self.is_zero_pfn(pfn) {
                let folio = self.memmap.folio_of(pfn);
                let nr_pages = self.memmap.folio_nr_pages(folio);
                let mut young = ptent.pte_young();
                if nr_pages > 1 {
                    // madvise_folio_pte_batch merges young/dirty over the batch.
                    let max_nr = ((next - addr) / ps) as usize;
                    let merged;
                    (nr, merged) = self.folio_pte_batch_flags(mm, folio, ptep, ptent, max_nr, Fpb::MERGE_YOUNG_DIRTY);
                    young = merged.pte_young();
                    if (nr as u64) < nr_pages && !self.folio_maybe_mapped_shared(folio) {
                        self.folio_ref_add(folio, 1);
                        let split = split_folio(self, folio, 1);
                        self.folio_put(folio);
                        // madvise_cold_or_pageout_pte_range: as in
                        // madvise_free_pte_range, the pte lock is retaken after the
                        // split, and with it flush_tlb_batched_pending.
                        self.flush_tlb_batched_pending(mm);
                        if split {
                            continue;
                        }
                    }
                }
                if self.memmap.folio_mapcount(folio) as u64 == nr_pages && nr as u64 == nr_pages {
                    if pageout && self.folio_isolate_lru(folio) {
                        folios.push(folio);
                    }
                    if (!pageout || self.pageout_clears_young) && young {
                        self.arch.clear_young_dirty_ptes(amm, addr, ptep, nr, true, false);
                        tlb.remove_tlb_entries(addr, nr as u64, ps);
                    }
                }
            }
            ptep = ptep.add(nr);
            addr += nr as u64 * ps;
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::hw::{Event, MachineConfig};
    use crate::sim::tests::{assert_clean, boot_with as boot};
    use crate::sim::user_access;

    const BASE: u64 = 0x1000_0000_0000;
    const K4: u64 = 4096;

    /// Two written 64 KiB folios, then `advice` over all but the first 32 KiB: the first
    /// folio is split inside the pte walk. Returns the TLBI ASIDE1IS the madvise issued.
    fn partial_advice(advice: Madv) -> u64 {
        let (mut k, mm) = boot(MachineConfig::default(), &[("hugepages-64kB/enabled", "always")]);
        k.do_mmap(mm, BASE, 128 << 10, VmFlags::READ | VmFlags::WRITE).unwrap();
        for a in (BASE..BASE + (128 << 10)).step_by(K4 as usize) {
            user_access(&mut k, mm, 0, a, true).unwrap();
        }
        let before = k.arch.hw.ev.get(Event::TlbiAside1is);
        k.do_madvise(mm, BASE + (32 << 10), BASE + (128 << 10), advice).unwrap();
        assert_clean(&k);
        k.arch.hw.ev.get(Event::TlbiAside1is) - before
    }

    #[test]
    fn pageout_walk_drains_the_split_tlbis_when_it_retakes_the_pte_lock() {
        assert_eq!(partial_advice(Madv::PageOut), 1);
    }

    #[test]
    fn free_walk_drains_the_split_tlbis_when_it_retakes_the_pte_lock() {
        assert_eq!(partial_advice(Madv::Free), 1);
    }
}
