//! mm/madvise.c.

use super::mm_types::{MmId, VmFlags};
use super::mmap::VmaError;
use super::mmu_gather::MmuGather;
use super::Kernel;
use crate::hw::DescKind;

/// The madvise advice values the model implements.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum Madv {
    DontNeed,
    HugePage,
    NoHugePage,
    Cold,
}

impl Kernel {
    /// do_madvise over [start, end).
    pub fn do_madvise(&mut self, mm: MmId, start: u64, end: u64, advice: Madv) -> Result<(), VmaError> {
        match advice {
            Madv::DontNeed => self.madvise_dontneed(mm, start, end),
            Madv::HugePage => self.vma_modify_flags(mm, start, end, |f| (f - VmFlags::NOHUGEPAGE) | VmFlags::HUGEPAGE),
            Madv::NoHugePage => {
                self.vma_modify_flags(mm, start, end, |f| (f - VmFlags::HUGEPAGE) | VmFlags::NOHUGEPAGE)
            }
            Madv::Cold => self.madvise_cold(mm, start, end),
        }
    }

    /// MADV_DONTNEED: zap the range, VMA by VMA, under one mmu_gather (6.16+).
    fn madvise_dontneed(&mut self, mm: MmId, start: u64, end: u64) -> Result<(), VmaError> {
        let vmas = self.mm(mm).vmas_in(start, end);
        if vmas.iter().any(|v| v.flags.contains(VmFlags::LOCKED)) {
            return Err(VmaError::Invalid);
        }
        let ps = self.arch.granule().page_size();
        let mut tlb = MmuGather::new(self.mm(mm).asid, false, ps);
        self.unmap_vmas(&mut tlb, mm, &vmas, start, end);
        self.tlb_finish_mmu(tlb);
        if !self.range_fully_mapped(mm, start, end) {
            return Err(VmaError::NotMapped);
        }
        Ok(())
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
        let mut addr = start;
        while addr < end {
            let (next, entry) = self.pmd_step(mm, addr, end);
            let Some((pmd, d)) = entry else {
                addr = next;
                continue;
            };
            if let DescKind::Block(_) = d.kind(2, g) {
                if next - addr == pmd_size && d.has(crate::hw::Attr::AF) && self.huge_zero_folio != Some(d.pfn(g)) {
                    let haddr = addr & !(pmd_size - 1);
                    self.pxd_set(2, haddr, pmd, d.without(crate::hw::Attr::AF));
                    tlb.flush_pmd_range(haddr, pmd_size);
                }
                addr = next;
                continue;
            }
            let Some(mut ptep) = self.pte_offset_map(pmd, addr) else {
                addr = next;
                continue;
            };
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
                        (nr, merged) = self.folio_pte_batch_flags(mm, folio, ptep, ptent, ((next - addr) / ps) as usize, true);
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
        self.tlb_finish_mmu(tlb);
        Ok(())
    }
}
