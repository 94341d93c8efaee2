//! mm/mremap.c: moving a mapping (move_vma, move_page_tables) and the stack growing
//! down (mm/mmap.c's expand_downwards).

use super::huge_memory::{move_huge_pmd, split_huge_pmd_address};
use super::memory::Fpb;
use super::mm_types::MmId;
use super::mmap::VmaError;
use super::Kernel;
use crate::arch::arm64::pgtable::{pmd_trans_huge, Pte, PtePtr};
use crate::arch::arm64::tlbflush::flush_tlb_range;
use crate::hw::{Desc, Pfn};
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

    /// mremap(2) of the whole VMA at `addr` from `old_len` to `new_len` bytes, in place
    /// or (MREMAP_MAYMOVE | MREMAP_FIXED) to `new_addr`, in the kernel's order:
    /// mremap_to unmaps the target and shrinks first (so only what is kept moves);
    /// in place, a shrink unmaps the tail and a growth extends the VMA.
    pub fn do_mremap(
        &mut self,
        mm: MmId,
        addr: u64,
        old_len: u64,
        new_len: u64,
        new_addr: u64,
    ) -> Result<(), VmaError> {
        if new_addr != addr {
            self.do_munmap(mm, new_addr, new_addr + new_len);
            if new_len < old_len {
                self.do_munmap(mm, addr + new_len, addr + old_len);
            }
            let kept = old_len.min(new_len);
            return self.move_vma(mm, addr, addr + kept, new_addr, new_addr + kept, new_addr + new_len);
        }
        if new_len < old_len {
            self.do_munmap(mm, addr + new_len, addr + old_len);
        } else if new_len > old_len {
            self.vma_expand(mm, addr + old_len, addr + new_len)?;
        }
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
        if self.pud_move_would_happen(mm, old, new, moved_end - new) {
            return Err(VmaError::Invalid(
                "mremap moving a whole PUD-sized, PUD-aligned extent (move_normal_pud) is not modeled",
            ));
        }
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

    /// try_realign_addr: where a move reaches a pmd boundary from a start that is not
    /// on one, and old and new are alike in their pmd, both start down at the pmd
    /// boundary when nothing is mapped between it and them, so that the first pmd's
    /// pte table moves whole.
    fn try_realign_addr(&mut self, mm: MmId, old: u64, new: u64, len: u64) -> (u64, u64) {
        let mask = self.arch.granule().pmd_size() - 1;
        let align = old & mask;
        let free = |k: &mut Self, a: u64| k.mm(mm).vmas_in(a & !mask, a).is_empty();
        if align != 0 && len >= mask + 1 - align && align == new & mask && free(self, old) && free(self, new) {
            (old & !mask, new & !mask)
        } else {
            (old, new)
        }
    }

    /// Whether move_page_tables would move a pud entry whole (HAVE_MOVE_PUD: an
    /// extent of PUD_SIZE with a pmd table under the old pud), which the model lacks.
    fn pud_move_would_happen(&mut self, mm: MmId, old: u64, new: u64, len: u64) -> bool {
        let pud_size = 1u64 << self.arch.granule().pud_shift();
        let (mut a, mut na) = self.try_realign_addr(mm, old, new, len);
        while a < old + len {
            let extent = get_extent(pud_size, a, old + len, na);
            if extent == pud_size && self.pmd_offset(mm, a).is_some() {
                return true;
            }
            a += extent;
            na += extent;
        }
        false
    }

    /// move_page_tables, one extent at a time (get_extent): a huge pmd over a whole
    /// extent moves whole (move_huge_pmd), else it is split; a pte table over a whole
    /// pmd extent moves whole (move_normal_pmd, arm64 and x86 having HAVE_MOVE_PMD);
    /// the rest pte by pte (move_ptes). The moved pages' index follows them, as the
    /// kernel's vm_pgoff arithmetic has it. Extents of a whole pud are refused before
    /// (`pud_move_would_happen`).
    fn move_page_tables(&mut self, mm: MmId, old: u64, new: u64, len: u64) {
        let g = self.arch.granule();
        let pmd_size = g.pmd_size();
        let pud_size = 1u64 << g.pud_shift();
        let old_end = old + len;
        let (mut addr, mut na) = self.try_realign_addr(mm, old, new, len);
        while addr < old_end {
            let mut extent = get_extent(pud_size, addr, old_end, na);
            let Some(pmd) = self.pmd_offset(mm, addr) else {
                addr += extent;
                na += extent;
                continue;
            };
            extent = get_extent(pmd_size, addr, old_end, na);
            let d = self.pxd_get(2, pmd);
            if d.is_none() {
                addr += extent;
                na += extent;
                continue;
            }
            let npmd = self.pmd_alloc(mm, na).expect("the model's page-table memory");
            if pmd_trans_huge(d) {
                if extent == pmd_size && move_huge_pmd(self, mm, addr, na, pmd, npmd) {
                    addr += extent;
                    na += extent;
                    continue;
                }
                let vma = self.mm(mm).find_vma(addr).expect("a mapped pmd has a VMA");
                split_huge_pmd_address(self, mm, &vma, addr & !(pmd_size - 1));
            } else if extent == pmd_size && self.move_normal_pmd(mm, addr, na, pmd, npmd) {
                addr += extent;
                na += extent;
                continue;
            }
            if self.pxd_get(2, pmd).is_none() {
                addr += extent;
                na += extent;
                continue;
            }
            assert!(self.pte_alloc(mm, npmd, na), "the model's page-table memory");
            self.move_ptes(mm, addr, addr + extent, na, npmd);
            addr += extent;
            na += extent;
        }
    }

    /// move_normal_pmd: the pte table under `pmd` moves whole to the empty `npmd`,
    /// and the old pmd's range is flushed.
    fn move_normal_pmd(&mut self, mm: MmId, addr: u64, new: u64, pmd: PtePtr, npmd: PtePtr) -> bool {
        let g = self.arch.granule();
        if !self.pxd_get(2, npmd).is_none() {
            return false;
        }
        let d = self.pxd_get(2, pmd);
        if !d.is_table(2) {
            return false;
        }
        self.pxd_set(2, addr, pmd, Desc::ZERO);
        self.pxd_set(2, new, npmd, d);
        let asid = self.mm(mm).asid;
        flush_tlb_range(&mut self.arch.hw, asid, addr, addr + g.pmd_size());
        // The software index of every page the table maps follows it (no event: the
        // kernel touches none of them).
        let table = self.table_of(2, d);
        for i in 0..g.entries_at(3) {
            let pte = Pte(self.arch.hw.mem.read(table, i));
            if pte.pte_present() {
                let pfn = pte.pte_pfn(g);
                if !self.is_zero_pfn(pfn) {
                    self.memmap.set_page_index(pfn, 1, (new >> g.page_shift()) + i as u64);
                }
            }
        }
        true
    }

    /// move_ptes: the ptes of [addr, end) (one pte table) to `new` on, under `npmd`;
    /// the range is flushed if one was present (force_flush). Since f822a9a81a31 (6.17) a present pte starts a batch
    /// of its folio's ptes (mremap_folio_pte_batch), cleared with get_and_clear_ptes
    /// and set with set_ptes, so a contpte block moves without being unfolded; before
    /// it, ptep_get_and_clear unfolds the block and set_pte_at folds it again at its
    /// last pte. `mremap-batch` says which, and where the folio is looked up.
    fn move_ptes(&mut self, mm: MmId, addr: u64, end: u64, new: u64, npmd: PtePtr) {
        let g = self.arch.granule();
        let ps = g.page_size();
        let amm = self.arch_mm(mm);
        let Some(mut ptep) = self.pmd_offset(mm, addr).and_then(|p| self.pte_offset_map(p, addr)) else {
            return;
        };
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
                self.memmap.set_page_index(pfn, nr as u64, na >> g.page_shift());
            }
            ptep = ptep.add(nr);
            nptep = nptep.add(nr);
            a += nr as u64 * ps;
            na += nr as u64 * ps;
        }
        if force_flush {
            let asid = self.mm(mm).asid;
            flush_tlb_range(&mut self.arch.hw, asid, addr, end);
        }
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

/// get_extent: from `old` to the next `size` boundary of either side, within `old_end`.
fn get_extent(size: u64, old: u64, old_end: u64, new: u64) -> u64 {
    let to_next = |a: u64| ((a + size) & !(size - 1)).wrapping_sub(a);
    to_next(old).min(old_end - old).min(to_next(new))
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
    use crate::mm::vmstat::VmEvent;
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

    /// Writes every page of [start, start + len) and moves it to `to` (the whole VMA);
    /// returns the thp_split_pmd and pte-table allocations the move made, after
    /// checking that no moved page faults again.
    fn move_whole(knobs: &[(&str, &str)], start: u64, len: u64, to: u64) -> (i64, u64) {
        let (mut k, mm) = boot_with(MachineConfig::default(), knobs);
        k.do_mmap(mm, start, len, VmFlags::READ | VmFlags::WRITE).unwrap();
        for a in (start..start + len).step_by(K4 as usize) {
            user_access(&mut k, mm, 0, a, true).unwrap();
        }
        let (split, tables) = (
            k.stat.event(VmEvent::ThpSplitPmd),
            k.arch.hw.ev.get(Event::TableAllocL3),
        );
        k.do_mremap(mm, start, len, len, to).unwrap();
        assert_clean(&k);
        let got = (
            k.stat.event(VmEvent::ThpSplitPmd) - split,
            k.arch.hw.ev.get(Event::TableAllocL3) - tables,
        );
        let flt = k.mm(mm).min_flt;
        for a in (to..to + len).step_by(K4 as usize) {
            user_access(&mut k, mm, 0, a, true).unwrap();
        }
        assert_eq!(k.mm(mm).min_flt, flt, "the moved pages fault");
        got
    }

    /// PMD-aligned on both sides, a huge pmd moves whole (move_huge_pmd) with its
    /// deposited table, and an order-0 pmd's pte table moves whole (move_normal_pmd):
    /// no split, no new pte table. Half a pmd moves pte by pte into a new table.
    #[test]
    fn whole_pmds_move_as_entries_and_part_of_one_pte_by_pte() {
        assert_eq!(move_whole(&[("enabled", "always")], BASE, 4 << 20, NEW), (0, 0));
        assert_eq!(move_whole(&[], BASE, 2 << 20, NEW), (0, 0));
        assert_eq!(move_whole(&[], BASE, 1 << 20, NEW), (0, 1));
    }

    /// A start 1M into a pmd reaching the next boundary, alike on both sides: the
    /// first pmd's table is realigned down and moved whole (try_realign_addr); where
    /// something is mapped below the start, it is not, and the first 1M moves into a
    /// new table.
    #[test]
    fn a_move_realigns_down_to_the_pmd_only_over_free_space() {
        let skew = 1 << 20;
        assert_eq!(move_whole(&[], BASE + skew, 3 << 20, NEW + skew), (0, 0));
        let (mut k, mm) = boot_with(MachineConfig::default(), &[]);
        k.do_mmap(mm, BASE, K4, VmFlags::READ).unwrap();
        k.do_mmap(mm, BASE + skew, 3 << 20, VmFlags::READ | VmFlags::WRITE)
            .unwrap();
        for a in (BASE + skew..BASE + (4 << 20)).step_by(K4 as usize) {
            user_access(&mut k, mm, 0, a, true).unwrap();
        }
        let tables = k.arch.hw.ev.get(Event::TableAllocL3);
        k.do_mremap(mm, BASE + skew, 3 << 20, 3 << 20, NEW + skew).unwrap();
        assert_clean(&k);
        assert_eq!(k.arch.hw.ev.get(Event::TableAllocL3) - tables, 1);
    }

    /// A 1G move that is PUD-aligned on both sides would move a pud entry
    /// (move_normal_pud), which the model lacks: refused, nothing done.
    #[test]
    fn a_whole_pud_move_is_refused_as_not_modeled() {
        let (mut k, mm) = boot_with(MachineConfig::default(), &[]);
        k.do_mmap(mm, BASE, 1 << 30, VmFlags::READ | VmFlags::WRITE).unwrap();
        user_access(&mut k, mm, 0, BASE, true).unwrap();
        let e = k.do_mremap(mm, BASE, 1 << 30, 1 << 30, NEW + (1 << 30)).unwrap_err();
        assert!(e.to_string().contains("not modeled"), "{e}");
        assert!(k.mm(mm).find_vma(BASE).is_some());
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
