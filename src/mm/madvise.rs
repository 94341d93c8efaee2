//! mm/madvise.c.

use super::mm_types::{MmId, VmFlags};
use super::mmap::VmaError;
use super::mmu_gather::MmuGather;
use super::Kernel;

/// The madvise advice values the model implements.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum Madv {
    DontNeed,
    HugePage,
    NoHugePage,
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
