//! mm/mremap.c: moving a mapping (move_vma, move_page_tables) and the stack growing
//! down (mm/mmap.c's expand_downwards).

use super::huge_memory::split_huge_pmd_address;
use super::mm_types::MmId;
use super::mmap::VmaError;
use super::Kernel;
use crate::arch::arm64::pgtable::pmd_trans_huge;
use crate::arch::arm64::tlbflush::flush_tlb_range;

impl Kernel {
    /// expand_downwards: the VMA starting at `start` (a stack) now starts at `low`.
    pub fn expand_downwards(&mut self, mm: MmId, start: u64, low: u64) {
        let shift = self.arch.granule().page_shift();
        let vmas = self.mm_mut(mm).vmas_mut();
        if let Some(mut v) = vmas.remove(&start) {
            v.pgoff -= (start - low) >> shift;
            v.start = low;
            vmas.insert(low, v);
        }
    }

    /// mremap growing a mapping where it is (expand_vma_in_place, vma_merge_extend):
    /// the VMA ending at `old_end` now ends at `new_end`, keeping its page offset, so
    /// one that was moved before still grows as one VMA and a large folio may straddle
    /// its old end. Merged with the VMA after it when they are compatible.
    pub fn vma_expand(&mut self, mm: MmId, old_end: u64, new_end: u64) -> Result<(), VmaError> {
        let vma = self
            .mm(mm)
            .find_vma(
                old_end
                    .checked_sub(1)
                    .ok_or(VmaError::Invalid("mremap of a mapping ending at 0"))?,
            )
            .filter(|v| v.end == old_end)
            .ok_or(VmaError::NotMapped)?;
        if !self.mm(mm).vmas_in(old_end, new_end).is_empty() {
            return Err(VmaError::Exists);
        }
        self.mm_mut(mm).vmas_mut().get_mut(&vma.start).expect("found").end = new_end;
        self.merge_around(mm, vma.start, new_end);
        Ok(())
    }

    /// move_vma: mremap(MREMAP_MAYMOVE) of [old, old_end) to [new, new_end), whose
    /// first `moved_end - new` bytes receive the old pages. The new VMA keeps the old
    /// one's flags, anon_vma and page offset (copy_vma); the old range is then unmapped.
    pub fn move_vma(
        &mut self,
        mm: MmId,
        old: u64,
        old_end: u64,
        new: u64,
        moved_end: u64,
        new_end: u64,
    ) -> Result<(), VmaError> {
        let vma = self.mm(mm).find_vma(old).ok_or(VmaError::NotMapped)?;
        self.do_mmap(mm, new, new_end - new, vma.flags)?;
        let pgoff = vma.pgoff + ((old - vma.start) >> self.arch.granule().page_shift());
        let moved = self.mm_mut(mm).vmas_mut().get_mut(&new).expect("just mapped");
        moved.anon_vma = vma.anon_vma;
        moved.pgoff = pgoff;
        self.move_page_tables(mm, old, new, moved_end - new);
        self.do_munmap(mm, old, old_end);
        self.merge_around(mm, new, new_end);
        Ok(())
    }

    /// move_page_tables at pte level (move_ptes): each present pte is cleared at its
    /// old address and set at the new one, and each pmd's worth of old range that had
    /// one is flushed. A huge pmd is split first (the kernel moves an aligned one
    /// whole; anonymous replays rarely have one to move). The moved pages' index
    /// follows them, as the kernel's vm_pgoff arithmetic has it.
    fn move_page_tables(&mut self, mm: MmId, old: u64, new: u64, len: u64) {
        let g = self.arch.granule();
        let (ps, pmd_size) = (g.page_size(), g.pmd_size());
        let amm = self.arch_mm(mm);
        let asid = self.mm(mm).asid;
        let mut addr = old;
        while addr < old + len {
            let next = ((addr + pmd_size) & !(pmd_size - 1)).min(old + len);
            let Some(pmd) = self.pmd_offset(mm, addr) else {
                addr = next;
                continue;
            };
            if pmd_trans_huge(self.pxd_get(2, pmd)) {
                let vma = self.mm(mm).find_vma(addr).expect("a mapped pmd has a VMA");
                split_huge_pmd_address(self, mm, &vma, addr & !(pmd_size - 1));
            }
            let mut moved = false;
            let mut a = addr;
            while a < next {
                let Some(ptep) = self.pmd_offset(mm, a).and_then(|p| self.pte_offset_map(p, a)) else {
                    break;
                };
                if self.arch.ptep_get(amm, ptep).pte_none() {
                    a += ps;
                    continue;
                }
                let pte = self.arch.ptep_get_and_clear(amm, a, ptep);
                let na = a - old + new;
                let npmd = self.pmd_alloc(mm, na).expect("the model's page-table memory");
                assert!(self.pte_alloc(mm, npmd, na), "the model's page-table memory");
                let nptep = self.pte_offset_map(npmd, na).expect("just allocated");
                self.arch.set_ptes(amm, na, nptep, pte, 1, None);
                let pfn = pte.pte_pfn(g);
                if !self.is_zero_pfn(pfn) {
                    self.memmap.page_mut(pfn).index = na >> g.page_shift();
                }
                moved = true;
                a += ps;
            }
            if moved {
                flush_tlb_range(&mut self.arch.hw, asid, addr, next);
            }
            addr = next;
        }
    }
}
