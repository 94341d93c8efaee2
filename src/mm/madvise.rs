//! mm/madvise.c.

use super::folio::PageFlags;
use super::huge_memory::{madvise_free_huge_pmd, split_folio};
use super::memory::Fpb;
use super::mm_types::{MmId, VmFlags};
use super::mmap::VmaError;
use super::mmu_gather::MmuGather;
use super::pgtable::PmdPtr;
use super::Kernel;
use crate::arch::arm64::pgtable::PtePtr;
use crate::hw::{DescKind, Pfn};

/// The madvise advice values the model implements.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum Madv {
    DontNeed,
    Free,
    HugePage,
    NoHugePage,
    Cold,
    Collapse,
}

impl Kernel {
    /// do_madvise over [start, end).
    pub fn do_madvise(&mut self, mm: MmId, start: u64, end: u64, advice: Madv) -> Result<(), VmaError> {
        match advice {
            Madv::DontNeed => self.madvise_dontneed_free(mm, start, end, false),
            Madv::Free => self.madvise_dontneed_free(mm, start, end, true),
            Madv::HugePage => self.vma_modify_flags(mm, start, end, |f| (f - VmFlags::NOHUGEPAGE) | VmFlags::HUGEPAGE),
            Madv::NoHugePage => {
                self.vma_modify_flags(mm, start, end, |f| (f - VmFlags::HUGEPAGE) | VmFlags::NOHUGEPAGE)
            }
            Madv::Cold => self.madvise_cold(mm, start, end),
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
            return Err(VmaError::Invalid);
        }
        let ps = self.arch.granule().page_size();
        let mut tlb = MmuGather::new(self.mm(mm).asid, false, ps);
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
        let g = self.arch.granule();
        self.walk_pmd_range(mm, start, end, |k, pmd, d, addr, next| {
            let huge = matches!(d.kind(2, g), DescKind::Block(_));
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
        let mut addr = addr;
        while addr < end {
            let mut ptent = self.arch.ptep_get(amm, ptep);
            let pfn = ptent.pte_pfn(g);
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
                        self.memmap.folio_ref_add(folio, 1);
                        let split = split_folio(self, folio, 1);
                        self.folio_put(folio);
                        if split {
                            continue;
                        }
                    }
                    ptep = ptep.add(nr);
                    addr += nr as u64 * ps;
                    continue;
                }
            }
            if self.memmap.folio_test(folio, PageFlags::DIRTY) {
                let large = self.memmap.folio_order(folio) > 0;
                let skip = if large {
                    self.memmap.folio_mapcount(folio) as u64 != self.memmap.folio_nr_pages(folio)
                } else {
                    self.folio_maybe_mapped_shared(folio)
                };
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
            self.memmap.folio_clear(folio, PageFlags::SWAPBACKED);
        }
    }
}

impl Kernel {
    /// MADV_COLD (madvise_cold_or_pageout_pte_range without pageout): age the folios
    /// wholly inside the range: clear young on their ptes (contpte blocks stay folded)
    /// and on whole THP pmds, flushing through one mmu_gather. Large folios only partly
    /// inside are left alone here; the kernel would try to split them first.
    fn madvise_cold(&mut self, mm: MmId, start: u64, end: u64) -> Result<(), VmaError> {
        if !self.range_fully_mapped(mm, start, end) {
            return Err(VmaError::NotMapped);
        }
        let g = self.arch.granule();
        let ps = g.page_size();
        let pmd_size = g.pmd_size();
        let amm = self.arch_mm(mm);
        let mut tlb = MmuGather::new(amm.asid, false, ps);
        self.walk_pmd_range(mm, start, end, |k, pmd, d, addr, next| {
            if let DescKind::Block(_) = d.kind(2, g) {
                if next - addr == pmd_size && d.has(crate::hw::Attr::AF) && k.huge_zero_folio != Some(d.pfn(g)) {
                    let haddr = addr & !(pmd_size - 1);
                    k.pxd_set(2, haddr, pmd, d.without(crate::hw::Attr::AF));
                    tlb.flush_pmd_range(haddr, pmd_size);
                }
            } else if let Some(ptep) = k.pte_offset_map(pmd, addr) {
                k.madvise_cold_pte_range(&mut tlb, mm, ptep, addr, next);
            }
            true
        });
        self.tlb_finish_mmu(tlb);
        Ok(())
    }

    /// madvise_cold_or_pageout_pte_range (cold): clear young per folio batch.
    fn madvise_cold_pte_range(&mut self, tlb: &mut MmuGather, mm: MmId, mut ptep: PtePtr, mut addr: u64, next: u64) {
        let g = self.arch.granule();
        let ps = g.page_size();
        let amm = self.arch_mm(mm);
        while addr < next {
            let ptent = self.arch.ptep_get(amm, ptep);
            let mut young = ptent.pte_young();
            let mut nr = 1;
            let pfn = ptent.pte_pfn(g);
            if ptent.pte_present() && !self.is_zero_pfn(pfn) {
                let folio = self.memmap.folio_of(pfn);
                let mut whole = true;
                if self.memmap.folio_order(folio) > 0 {
                    // madvise_folio_pte_batch merges young/dirty over the batch.
                    let merged;
                    (nr, merged) = self.folio_pte_batch_flags(
                        mm,
                        folio,
                        ptep,
                        ptent,
                        ((next - addr) / ps) as usize,
                        Fpb::MERGE_YOUNG_DIRTY,
                    );
                    young = merged.pte_young();
                    whole = nr as u64 == self.memmap.folio_nr_pages(folio);
                }
                if whole && young {
                    self.arch.clear_young_dirty_ptes(amm, addr, ptep, nr, true, false);
                    tlb.remove_tlb_entries(addr, nr as u64, ps);
                }
            }
            ptep = ptep.add(nr);
            addr += nr as u64 * ps;
        }
    }
}
