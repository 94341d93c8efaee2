//! mm/mremap.c: moving a mapping (move_vma, move_page_tables) and the stack growing
//! down (mm/mmap.c's expand_downwards).

use super::huge_memory::split_huge_pmd_address;
use super::memory::Fpb;
use super::mm_types::MmId;
use super::mmap::VmaError;
use super::Kernel;
use crate::arch::arm64::pgtable::{pmd_trans_huge, Pte, PtePtr};
use crate::arch::arm64::tlbflush::flush_tlb_range;
use crate::hw::Pfn;
use crate::kcount::KernelEvent;

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

    /// move_page_tables at pte level (move_ptes), one extent at a time: the old range
    /// up to the next pmd boundary of either side (get_extent). Each present pte run
    /// is cleared at its old address and set at the new one, and an extent that had a
    /// present pte is flushed. A huge pmd is split first, and a whole pte table is
    /// moved pte by pte too (the kernel moves an aligned one whole with move_pmd,
    /// arm64 having HAVE_MOVE_PMD: not modeled; anonymous replays rarely have one to
    /// move). The moved pages' index follows them, as the kernel's vm_pgoff
    /// arithmetic has it.
    fn move_page_tables(&mut self, mm: MmId, old: u64, new: u64, len: u64) {
        let g = self.arch.granule();
        let pmd_size = g.pmd_size();
        let asid = self.mm(mm).asid;
        let mut addr = old;
        while addr < old + len {
            let na = addr - old + new;
            let boundary = |a: u64| (a + pmd_size) & !(pmd_size - 1);
            let next = boundary(addr).min(addr + (boundary(na) - na)).min(old + len);
            let Some(pmd) = self.pmd_offset(mm, addr) else {
                addr = next;
                continue;
            };
            if pmd_trans_huge(self.pxd_get(2, pmd)) {
                let vma = self.mm(mm).find_vma(addr).expect("a mapped pmd has a VMA");
                split_huge_pmd_address(self, mm, &vma, addr & !(pmd_size - 1));
            }
            if self.move_ptes(mm, addr, next, na) {
                flush_tlb_range(&mut self.arch.hw, asid, addr, next);
            }
            addr = next;
        }
    }

    /// move_ptes: the ptes of [addr, end) (one pte table) to `new` on; whether one was
    /// present (force_flush). Since f822a9a81a31 (6.17) a present pte starts a batch
    /// of its folio's ptes (mremap_folio_pte_batch), cleared with get_and_clear_ptes
    /// and set with set_ptes, so a contpte block moves without being unfolded; before
    /// it, ptep_get_and_clear unfolds the block and set_pte_at folds it again at its
    /// last pte. `mremap-batch` says which, and where the folio is looked up.
    fn move_ptes(&mut self, mm: MmId, addr: u64, end: u64, new: u64) -> bool {
        let g = self.arch.granule();
        let ps = g.page_size();
        let amm = self.arch_mm(mm);
        let Some(mut ptep) = self.pmd_offset(mm, addr).and_then(|p| self.pte_offset_map(p, addr)) else {
            return false;
        };
        let npmd = self.pmd_alloc(mm, new).expect("the model's page-table memory");
        assert!(self.pte_alloc(mm, npmd, new), "the model's page-table memory");
        let mut nptep = self.pte_offset_map(npmd, new).expect("just allocated");
        let (mut a, mut na) = (addr, new);
        let mut force_flush = false;
        while a < end {
            let old_pte = self.arch.ptep_get(amm, ptep);
            let mut nr = 1;
            if old_pte.pte_none() {
                ptep = ptep.add(1);
                nptep = nptep.add(1);
                a += ps;
                na += ps;
                continue;
            }
            let pfn = old_pte.pte_pfn(g);
            let normal = old_pte.pte_present() && !self.is_zero_pfn(pfn);
            let folio = normal.then(|| self.memmap.folio_of(pfn));
            if old_pte.pte_present() {
                force_flush = true;
                if self.mremap_batch != MremapBatch::PerPte {
                    nr = self.mremap_folio_pte_batch(mm, ptep, old_pte, folio, ((end - a) / ps) as usize);
                }
            }
            if self.mremap_batch == MremapBatch::PerPte {
                let pte = self.arch.ptep_get_and_clear(amm, a, ptep);
                let folio = folio.map(|f| (f, self.memmap.folio_nr_pages(f)));
                self.arch.set_ptes(amm, na, nptep, pte, 1, folio);
            } else {
                let pte = self.arch.get_and_clear_full_ptes(amm, a, ptep, nr, false);
                self.arch.set_ptes(amm, na, nptep, pte, nr, None);
            }
            if normal {
                for i in 0..nr as u64 {
                    self.memmap.page_mut(Pfn(pfn.0 + i)).index = (na >> g.page_shift()) + i;
                }
            }
            ptep = ptep.add(nr);
            nptep = nptep.add(nr);
            a += nr as u64 * ps;
            na += nr as u64 * ps;
        }
        force_flush
    }

    /// mremap_folio_pte_batch: how many ptes from `ptep` map `folio` alike (write bit
    /// respected). The folio lookup reads its struct page: since 0b5be138ce00 only
    /// when pte_batch_hint says the pte is in a contpte block, in 6.17-rc1 for every
    /// present pte with more than one left to move (`lookup-all`).
    fn mremap_folio_pte_batch(&mut self, mm: MmId, ptep: PtePtr, pte: Pte, folio: Option<Pfn>, max_nr: usize) -> usize {
        if max_nr == 1 {
            return 1;
        }
        if self.mremap_batch == MremapBatch::Hinted && self.arch.pte_batch_hint(ptep, pte) == 1 {
            return 1;
        }
        let Some(folio) = folio else { return 1 };
        self.arch.kc.inc(KernelEvent::MovePtesFolioLookups);
        if self.memmap.folio_order(folio) == 0 {
            return 1;
        }
        self.folio_pte_batch_flags(mm, folio, ptep, pte, max_nr, Fpb::RESPECT_WRITE)
            .0
    }
}

/// How move_ptes moves a large folio's ptes (`mremap-batch`).
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum MremapBatch {
    /// Pte by pte, no folio lookup (up to 6.16).
    PerPte,
    /// A batch per folio, the folio looked up for every present pte (6.17-rc1,
    /// f822a9a81a31 alone).
    LookupAll,
    /// A batch per folio, looked up only for a contpte pte (6.17+, 0b5be138ce00).
    Hinted,
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::hw::{Event, MachineConfig};
    use crate::mm::mm_types::VmFlags;
    use crate::sim::tests::{assert_clean, boot_with};
    use crate::sim::user_access;

    const BASE: u64 = 0x1000_0000_0000;
    const NEW: u64 = 0x1000_4000_0000;
    const K4: u64 = 4096;
    const LEN: u64 = 256 << 10;

    /// What one move of 256K of written memory (64K folios, or order-0 without mTHP)
    /// cost: contpte_converts, TLBIs, folio lookups; the pages are all there after it,
    /// written again without a fault, and (64K) every block at the new address is
    /// contiguous again.
    fn move_256k(batch: MremapBatch, mthp: bool) -> (u64, u64, u64) {
        let mut cfg = MachineConfig::default();
        cfg.features.tlbi_range = true;
        let knobs: &[(&str, &str)] = if mthp {
            &[("hugepages-64kB/enabled", "always")]
        } else {
            &[]
        };
        let (mut k, mm) = boot_with(cfg, knobs);
        k.mremap_batch = batch;
        k.do_mmap(mm, BASE, LEN, VmFlags::READ | VmFlags::WRITE).unwrap();
        for a in (BASE..BASE + LEN).step_by(K4 as usize) {
            user_access(&mut k, mm, 0, a, true).unwrap();
        }
        let (ev, kc) = (k.arch.hw.ev.clone(), k.arch.kc.clone());
        k.move_vma(mm, BASE, BASE + LEN, NEW, NEW + LEN, NEW + LEN).unwrap();
        assert_clean(&k);
        let got = (
            k.arch.hw.ev.get(Event::ContpteConvert) - ev.get(Event::ContpteConvert),
            k.arch.hw.ev.get(Event::TlbiTotal) - ev.get(Event::TlbiTotal),
            k.arch.kc.get(KernelEvent::MovePtesFolioLookups) - kc.get(KernelEvent::MovePtesFolioLookups),
        );
        let flt = k.mm(mm).min_flt;
        for a in (NEW..NEW + LEN).step_by(K4 as usize) {
            user_access(&mut k, mm, 0, a, true).unwrap();
        }
        assert_eq!(k.mm(mm).min_flt, flt, "{batch:?}: the moved pages fault");
        let ptep = k.pmd_offset(mm, NEW).and_then(|p| k.pte_offset_map(p, NEW)).unwrap();
        assert!((0..64).all(|i| k.arch.__ptep_get(ptep.add(i)).pte_valid_cont() == mthp));
        got
    }

    /// Batched (6.17): the four 64K blocks move whole, one folio lookup each, no
    /// unfold; pte by pte (6.16) each block is unfolded at the old address (a TLBI
    /// each) and folded again at the new one (a TLBI each). Besides: the old extent's
    /// range flush, and the unmap of the old range flushing its freed pte table.
    #[test]
    fn batched_mremap_moves_contpte_blocks_whole_with_one_lookup_each() {
        assert_eq!(move_256k(MremapBatch::Hinted, true), (0, 2, 4));
        assert_eq!(move_256k(MremapBatch::LookupAll, true), (0, 2, 4));
        assert_eq!(move_256k(MremapBatch::PerPte, true), (4 + 4, 4 + 4 + 2, 0));
    }

    /// Order-0 pages: 6.17-rc1 read every page's struct page for nothing (a batch of
    /// one), all but the last pte of the extent (max_nr 1); 0b5be138ce00 asks
    /// pte_batch_hint first and reads none. The ptes and TLBIs are the same.
    #[test]
    fn order0_mremap_looks_up_every_folio_only_in_6_17_rc1() {
        assert_eq!(move_256k(MremapBatch::LookupAll, false), (0, 2, 63));
        assert_eq!(move_256k(MremapBatch::Hinted, false), (0, 2, 0));
        assert_eq!(move_256k(MremapBatch::PerPte, false), (0, 2, 0));
    }
}
