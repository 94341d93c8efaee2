//! kernel/fork.c's dup_mmap and mm/memory.c's copy_page_range: a child address
//! space sharing the parent's anonymous memory copy-on-write.

use super::huge_memory::copy_huge_pmd;
use super::memory::Fpb;
use super::mm_types::{MmId, VmFlags, Vma};
use super::pgtable::PmdPtr;
use super::Kernel;
use crate::arch::arm64::pgtable::pmd_trans_huge;
use crate::arch::arm64::pgtable::{Pte, PtePtr};
use crate::arch::arm64::tlbflush::flush_tlb_mm;
use crate::kcount::KernelEvent;

impl Kernel {
    /// dup_mmap: copy the parent's VMAs (mlock is not inherited) and, for those with an
    /// anon_vma, their page tables; then flush the parent's TLB, whose ptes were
    /// write-protected in place. None when out of memory (the child is torn down).
    pub fn dup_mmap(&mut self, parent: MmId) -> Option<MmId> {
        self.arch.kc.inc(KernelEvent::DupMmap);
        let child = self.mm_alloc()?;
        self.khugepaged_fork(child, parent);
        // dup_mm's memcpy of the mm_struct: mm_init does not reset tlb_flush_batched,
        // so a batched flush the parent still owed is owed by the child too (its first
        // flush_tlb_batched_pending flushes the whole mm; measured on the 6.12 guest).
        let (pending, done) = (self.mm(parent).tlb_flush_pending, self.mm(parent).tlb_flush_done);
        let c = self.mm_mut(child);
        (c.tlb_flush_pending, c.tlb_flush_done) = (pending, done);
        let vmas: Vec<Vma> = self.mm(parent).vmas().values().copied().collect();
        let mut ok = true;
        for vma in &vmas {
            let anon_vma = vma.anon_vma.map(|_| self.anon_vma_alloc());
            let tmp = Vma {
                flags: vma.flags - VmFlags::LOCKED,
                anon_vma,
                ..*vma
            };
            self.mm_mut(child).vmas_mut().insert(tmp.start, tmp);
            if vma.anon_vma.is_some() && !self.copy_page_range(child, parent, vma) {
                ok = false;
                break;
            }
        }
        let asid = self.mm(parent).asid;
        flush_tlb_mm(&mut self.arch.hw, asid);
        if !ok {
            self.exit_mmap(child);
            return None;
        }
        Some(child)
    }

    /// copy_page_range: pmd by pmd; false when out of memory.
    fn copy_page_range(&mut self, dst: MmId, src: MmId, vma: &Vma) -> bool {
        self.walk_pmd_range(src, vma.start, vma.end, |k, src_pmd, d, addr, next| {
            if d.is_none() {
                return true;
            }
            let Some(dst_pmd) = k.pmd_alloc(dst, addr) else {
                return false;
            };
            if pmd_trans_huge(d) {
                copy_huge_pmd(k, dst, dst_pmd, src_pmd, addr)
            } else {
                k.copy_pte_range(dst, src, dst_pmd, src_pmd, addr, next)
            }
        })
    }

    /// copy_pte_range: copy the present ptes of [addr, end) under one pmd.
    fn copy_pte_range(&mut self, dst: MmId, src: MmId, dst_pmd: PmdPtr, src_pmd: PmdPtr, addr: u64, end: u64) -> bool {
        let ps = self.arch.granule().page_size();
        if !self.pte_alloc(dst, dst_pmd, addr) {
            return false;
        }
        let (Some(mut src_pte), Some(mut dst_pte)) =
            (self.pte_offset_map(src_pmd, addr), self.pte_offset_map(dst_pmd, addr))
        else {
            return true;
        };
        let amm = self.arch_mm(src);
        let mut addr = addr;
        while addr < end {
            let pte = self.arch.ptep_get(amm, src_pte);
            let nr = if pte.pte_none() {
                1
            } else if pte.is_swap_pte() {
                self.copy_swap_pte(dst, dst_pte, src_pte, pte, addr);
                1
            } else {
                let max_nr = ((end - addr) / ps) as usize;
                self.copy_present_ptes(dst, src, dst_pte, src_pte, pte, addr, max_nr)
            };
            src_pte = src_pte.add(nr);
            dst_pte = dst_pte.add(nr);
            addr += nr as u64 * ps;
        }
        true
    }

    /// copy_nonpresent_pte for a swap entry: one more reference to the slot, and an
    /// exclusive entry becomes shared in the parent too.
    fn copy_swap_pte(&mut self, dst: MmId, dst_pte: PtePtr, src_pte: PtePtr, pte: Pte, addr: u64) {
        self.swap
            .as_mut()
            .expect("a swap pte without a swap device")
            .swap_duplicate(pte.pte_swp_offset());
        let pte = if pte.pte_swp_exclusive() {
            let shared = pte.pte_swp_clear_exclusive();
            self.arch.__set_pte(addr, src_pte, shared);
            shared
        } else {
            pte
        };
        self.arch.__set_pte(addr, dst_pte, pte);
        self.mm_mut(dst).rss_swap += 1;
    }

    /// copy_present_ptes: a large folio is copied in one batch (folio_pte_batch with
    /// FPB_MERGE_WRITE); the child's mappings make every page non-exclusive.
    #[allow(clippy::too_many_arguments)]
    fn copy_present_ptes(
        &mut self,
        dst: MmId,
        src: MmId,
        dst_pte: PtePtr,
        src_pte: PtePtr,
        pte: Pte,
        addr: u64,
        max_nr: usize,
    ) -> usize {
        let g = self.arch.granule();
        let pfn = pte.pte_pfn(g);
        if self.is_zero_pfn(pfn) {
            self.__copy_present_ptes(dst, src, dst_pte, src_pte, pte, addr, 1, None);
            return 1;
        }
        let folio = self.memmap.folio_of(pfn);
        let (nr, pte) = if self.memmap.folio_order(folio) > 0 && max_nr != 1 {
            self.folio_pte_batch_flags(src, folio, src_pte, pte, max_nr, Fpb::MERGE_WRITE)
        } else {
            (1, pte)
        };
        self.folio_ref_add(folio, nr as i32);
        self.folio_try_dup_anon_rmap_ptes(folio, pfn, nr as u64, dst);
        self.mm_mut(dst).rss_anon += nr as i64;
        let size = self.memmap.folio_nr_pages(folio);
        self.__copy_present_ptes(dst, src, dst_pte, src_pte, pte, addr, nr, Some((folio, size)));
        nr
    }

    /// __copy_present_ptes: a CoW mapping is write-protected in both mms; the child's
    /// ptes start old.
    #[allow(clippy::too_many_arguments)]
    fn __copy_present_ptes(
        &mut self,
        dst: MmId,
        src: MmId,
        dst_pte: PtePtr,
        src_pte: PtePtr,
        mut pte: Pte,
        addr: u64,
        nr: usize,
        folio: Option<(crate::hw::Pfn, u64)>,
    ) {
        if pte.pte_write() {
            let amm = self.arch_mm(src);
            self.arch.wrprotect_ptes(amm, addr, src_pte, nr);
            pte = pte.pte_wrprotect();
        }
        let amm = self.arch_mm(dst);
        self.arch.set_ptes(amm, addr, dst_pte, pte.pte_mkold(), nr, folio);
    }
}
