//! mm/rmap.c + include/linux/rmap.h: anon rmap accounting of folios (mapcounts, the
//! per-mm slots that tell "mapped exclusively" from "maybe shared"), the
//! partially-mapped detection that feeds the deferred split queue, and reclaim's
//! try_to_unmap with the batched, deferred TLB flush of seed 001.

use super::folio::PageFlags;
use super::huge_memory::{
    __split_huge_pmd, deferred_split_folio, pmdp_clear_flush_young, set_pmd_migration_entry,
    split_huge_pmd_locked_freeze, unmap_huge_pmd_locked,
};
use super::mm_types::{MmId, VmFlags, Vma};
use super::pgtable::PmdPtr;
use super::vmstat::MthpStat;
use super::Kernel;
use crate::arch::arm64::pgtable::pmd_trans_huge;
use crate::arch::arm64::pgtable::{MigrationKind, Pte, PtePtr};
use crate::hw::Pfn;
use crate::kcount::KernelEvent;

/// The mm id a folio slot records (MM_ID_DUMMY is 0).
fn mm_id(mm: MmId) -> u32 {
    mm as u32 + 1
}

impl Kernel {
    /// folio_add_return_large_mapcount: `diff` more mappings by `mm`; a second mm (or
    /// an mm finding both slots taken) makes the folio "maybe mapped shared".
    fn folio_add_large_mapcount(&mut self, folio: Pfn, diff: i32, mm: MmId) {
        self.arch.kc.inc(KernelEvent::FolioMapcountAtomic);
        let id = mm_id(mm);
        let h = self.memmap.large_mut(folio);
        h.large_mapcount += diff;
        let shared = if h.mm_id[0] == id {
            h.mm_id_mapcount[0] += diff;
            false
        } else if h.mm_id[1] == id {
            h.mm_id_mapcount[1] += diff;
            false
        } else if h.mm_id[0] == 0 {
            h.mm_id[0] = id;
            h.mm_id_mapcount[0] = diff;
            h.large_mapcount != diff
        } else if h.mm_id[1] == 0 {
            h.mm_id[1] = id;
            h.mm_id_mapcount[1] = diff;
            true
        } else {
            false
        };
        if shared {
            self.memmap.folio_set(folio, PageFlags::MAYBE_SHARED);
        }
    }

    /// folio_sub_return_large_mapcount: when one slot again owns every mapping, the
    /// folio is exclusive once more.
    fn folio_sub_large_mapcount(&mut self, folio: Pfn, diff: i32, mm: MmId) {
        self.arch.kc.inc(KernelEvent::FolioMapcountAtomic);
        let id = mm_id(mm);
        let h = self.memmap.large_mut(folio);
        h.large_mapcount -= diff;
        for s in 0..2 {
            if h.mm_id[s] == id {
                h.mm_id_mapcount[s] -= diff;
                if h.mm_id_mapcount[s] > 0 {
                    return;
                }
                h.mm_id_mapcount[s] = 0;
                h.mm_id[s] = 0;
                break;
            }
        }
        if h.mm_id_mapcount[0] == h.large_mapcount || h.mm_id_mapcount[1] == h.large_mapcount {
            self.memmap.folio_clear(folio, PageFlags::MAYBE_SHARED);
        }
    }

    /// folio_maybe_mapped_shared: a small folio by its mapcount, a large one by the
    /// per-mm slots (a single mapping is never shared).
    pub fn folio_maybe_mapped_shared(&self, folio: Pfn) -> bool {
        let mapcount = self.memmap.folio_mapcount(folio);
        if self.memmap.folio_order(folio) == 0 || mapcount <= 1 {
            return mapcount > 1;
        }
        self.memmap.folio_test(folio, PageFlags::MAYBE_SHARED)
    }

    /// folio_add_new_anon_rmap: map a new exclusive anon folio at `addr` in `mm`, by
    /// ptes or (pmd) as a whole.
    #[inline(always)]
    pub fn folio_add_new_anon_rmap(&mut self, folio: Pfn, mm: MmId, addr: u64, pmd: bool) {
        let order = self.memmap.folio_order(folio);
        let nr = 1u64 << order;
        let index = addr >> self.arch.granule().page_shift();
        self.memmap.folio_set(folio, PageFlags::ANON | PageFlags::SWAPBACKED);
        if pmd {
            self.memmap.large_mut(folio).entire_mapcount = 1;
        } else if order > 0 {
            self.memmap.large_mut(folio).nr_pages_mapped = nr as i32;
        }
        for p in self.memmap.pages_mut(folio, nr) {
            p.flags.insert(PageFlags::ANON_EXCLUSIVE);
            if !pmd {
                p.mapcount = 1;
            }
        }
        self.memmap.set_page_index(folio, nr, index);
        if order > 0 {
            self.folio_add_large_mapcount(folio, if pmd { 1 } else { nr as i32 }, mm);
        }
        self.stat.mod_mthp_stat(order, MthpStat::NrAnon, 1);
    }

    /// folio_add_anon_rmap_ptes: add pte mappings of `nr` pages from `page` to an
    /// existing anon folio (split_huge_pmd).
    pub fn folio_add_anon_rmap_ptes(&mut self, folio: Pfn, page: Pfn, nr: u64, mm: MmId, exclusive: bool) {
        self.__folio_add_rmap_ptes(folio, page, nr, mm, exclusive);
    }

    /// __folio_add_rmap for `nr` ptes from `page`, anon (marking the pages exclusive
    /// when they are) or file.
    fn __folio_add_rmap_ptes(&mut self, folio: Pfn, page: Pfn, nr: u64, mm: MmId, exclusive: bool) {
        let mut first = 0;
        for i in 0..nr {
            let p = self.memmap.page_mut(Pfn(page.0 + i));
            p.mapcount += 1;
            if p.mapcount == 1 {
                first += 1;
            }
            if exclusive {
                p.flags.insert(PageFlags::ANON_EXCLUSIVE);
            }
        }
        // One atomic per page's _mapcount, one for _nr_pages_mapped (if any page
        // became mapped), one for the large mapcount.
        self.arch.kc.add(KernelEvent::FolioMapcountAtomic, nr);
        if self.memmap.folio_order(folio) > 0 {
            if first > 0 {
                self.arch.kc.inc(KernelEvent::FolioMapcountAtomic);
            }
            self.memmap.large_mut(folio).nr_pages_mapped += first;
            self.folio_add_large_mapcount(folio, nr as i32, mm);
        }
    }

    /// folio_add_file_rmap_ptes: `nr` more pte mappings of a page-cache folio's pages
    /// from `page`.
    pub fn folio_add_file_rmap_ptes(&mut self, folio: Pfn, page: Pfn, nr: u64, mm: MmId) {
        self.arch.kc.inc(KernelEvent::FolioAddFileRmapPtes);
        self.__folio_add_rmap_ptes(folio, page, nr, mm, false);
    }

    /// folio_add_file_rmap_pmd: map a PMD-order page-cache folio by a pmd in `mm`.
    pub fn folio_add_file_rmap_pmd(&mut self, folio: Pfn, mm: MmId) {
        self.arch.kc.inc(KernelEvent::FolioMapcountAtomic);
        self.memmap.large_mut(folio).entire_mapcount += 1;
        self.folio_add_large_mapcount(folio, 1, mm);
    }

    /// folio_try_dup_anon_rmap_ptes (fork): the child maps the same `nr` pages, which
    /// stop being exclusive to either mm. The caller took the references.
    pub fn folio_try_dup_anon_rmap_ptes(&mut self, folio: Pfn, page: Pfn, nr: u64, dst: MmId) {
        for i in 0..nr {
            let p = self.memmap.page_mut(Pfn(page.0 + i));
            p.flags.remove(PageFlags::ANON_EXCLUSIVE);
            p.mapcount += 1;
        }
        self.arch.kc.add(KernelEvent::FolioMapcountAtomic, nr);
        if self.memmap.folio_order(folio) > 0 {
            self.folio_add_large_mapcount(folio, nr as i32, dst);
        }
    }

    /// folio_add_anon_rmap_pmd: map an existing anon THP by a pmd in `mm` again
    /// (remove_migration_pmd), its pages exclusive to `mm` if `exclusive`.
    pub fn folio_add_anon_rmap_pmd(&mut self, folio: Pfn, mm: MmId, exclusive: bool) {
        let nr = self.memmap.folio_nr_pages(folio);
        if exclusive {
            for i in 0..nr {
                let p = self.memmap.page_mut(Pfn(folio.0 + i));
                p.flags.insert(PageFlags::ANON_EXCLUSIVE);
            }
        }
        self.arch.kc.inc(KernelEvent::FolioMapcountAtomic);
        self.memmap.large_mut(folio).entire_mapcount += 1;
        self.folio_add_large_mapcount(folio, 1, mm);
    }

    /// folio_try_dup_anon_rmap_pmd (fork of a PMD-mapped THP).
    pub fn folio_try_dup_anon_rmap_pmd(&mut self, folio: Pfn, dst: MmId) {
        let nr = self.memmap.folio_nr_pages(folio);
        for i in 0..nr {
            self.memmap
                .page_mut(Pfn(folio.0 + i))
                .flags
                .remove(PageFlags::ANON_EXCLUSIVE);
        }
        self.arch.kc.inc(KernelEvent::FolioMapcountAtomic);
        self.memmap.large_mut(folio).entire_mapcount += 1;
        self.folio_add_large_mapcount(folio, 1, dst);
    }

    /// folio_remove_rmap_ptes: drop `nr` pte mappings from `page` in `mm`. A large anon
    /// folio left with some pages mapped and some not is queued for deferred split.
    /// Before the folio rmap API (`rmap-api=page`), a call per page: page_remove_rmap.
    /// Inline to the order-0 case, which every order-0 zap takes; a large folio's
    /// bookkeeping goes out of line.
    #[inline]
    pub fn folio_remove_rmap_ptes(&mut self, folio: Pfn, page: Pfn, nr: u64, mm: MmId) {
        if self.rmap_page_api {
            self.arch.kc.add(KernelEvent::PageRemoveRmap, nr);
        } else {
            self.arch.kc.inc(KernelEvent::FolioRemoveRmapPtes);
            self.arch.kc.add(KernelEvent::FolioRemoveRmapPtesPages, nr);
        }
        // One atomic per page's _mapcount; for a large folio also the large mapcount
        // and, if some page became unmapped, _nr_pages_mapped.
        self.arch.kc.add(KernelEvent::FolioMapcountAtomic, nr);
        if self.memmap.folio_order(folio) == 0 {
            self.memmap.page_mut(folio).mapcount -= 1;
            return;
        }
        self.folio_remove_rmap_ptes_large(folio, page, nr, mm);
    }

    /// `folio_remove_rmap_ptes`' part for a large folio: the pages' mapcounts, the
    /// large mapcount, `_nr_pages_mapped`, and the deferred split.
    #[inline(never)]
    fn folio_remove_rmap_ptes_large(&mut self, folio: Pfn, page: Pfn, nr: u64, mm: MmId) {
        let mut last = 0;
        for p in self.memmap.pages_mut(page, nr) {
            p.mapcount -= 1;
            debug_assert!(p.mapcount >= 0, "page mapcount underflow in {page:?} + {nr}");
            if p.mapcount == 0 {
                last += 1;
            }
        }
        self.folio_sub_large_mapcount(folio, nr as i32, mm);
        if last > 0 {
            self.arch.kc.inc(KernelEvent::FolioMapcountAtomic);
        }
        let h = self.memmap.large_mut(folio);
        h.nr_pages_mapped -= last;
        // Pages that became unmapped count only while the folio is not also pmd-mapped.
        let entirely = h.entire_mapcount > 0;
        let partially_mapped = last > 0 && !entirely && h.nr_pages_mapped > 0;
        let f = self.memmap.page(folio).flags;
        if partially_mapped && f.contains(PageFlags::ANON) && !f.contains(PageFlags::PARTIALLY_MAPPED) {
            deferred_split_folio(self, folio, true);
        }
    }

    /// folio_remove_rmap_pmd: drop the pmd mapping of a PMD-sized folio in `mm`.
    pub fn folio_remove_rmap_pmd(&mut self, folio: Pfn, mm: MmId) {
        self.arch.kc.inc(KernelEvent::FolioMapcountAtomic);
        self.memmap.large_mut(folio).entire_mapcount -= 1;
        self.folio_sub_large_mapcount(folio, 1, mm);
        let h = *self.memmap.large(folio);
        let nr = self.memmap.folio_nr_pages(folio);
        let partially_mapped = h.entire_mapcount == 0 && h.nr_pages_mapped > 0 && (h.nr_pages_mapped as u64) < nr;
        let f = self.memmap.page(folio).flags;
        if partially_mapped && f.contains(PageFlags::ANON) && !f.contains(PageFlags::PARTIALLY_MAPPED) {
            deferred_split_folio(self, folio, true);
        }
    }
}

bitflags::bitflags! {
    /// enum ttu_flags: how try_to_unmap goes about it.
    #[derive(Clone, Copy, Debug, PartialEq, Eq)]
    pub struct TtuFlags: u8 {
        /// Split a pmd mapping into ptes first.
        const SPLIT_HUGE_PMD = 1 << 0;
        /// Defer the TLB flush to try_to_unmap_flush (reclaim).
        const BATCH_FLUSH = 1 << 1;
        /// The rmap walk takes each page table's lock before reading a pte
        /// (PVMW_SYNC): no lockless first read in map_pte.
        const SYNC = 1 << 2;
    }
}

/// Where try_to_migrate wrote a migration entry: the ptes remove_migration_ptes'
/// rmap walk finds again (the entry itself, in the pte, says what to map back).
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub struct MigrationEntry {
    pub mm: MmId,
    /// The pte, or with `pmd` the pmd, holding the entry.
    pub ptep: PtePtr,
    pub addr: u64,
    /// A pmd migration entry of a whole THP (set_pmd_migration_entry).
    pub pmd: bool,
}

/// How try_to_unmap_one flushes the TLB of a pte it cleared (seed 001).
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum TlbBatchVariant {
    /// Before seed 001 (arm64 without ARCH_WANT_BATCHED_UNMAP_TLB_FLUSH, which also
    /// predates folio_unmap_pte_batch): ptep_clear_flush one pte at a time, each with
    /// its TLBI and a DSB ISH.
    Sync,
    /// After: get_and_clear_ptes, the TLBIs issued at once without waiting
    /// (arch_tlbbatch_add_pending), one DSB ISH in try_to_unmap_flush.
    Deferred,
}

/// struct tlbflush_unmap_batch (current->tlb_ubc): the reclaimer's pending flush.
#[derive(Clone, Copy, Debug, Default, PartialEq, Eq)]
pub struct TlbUbc {
    /// TLBIs were issued that no DSB has waited for yet.
    pub flush_required: bool,
    /// One of the cleared ptes was dirty (try_to_unmap_flush_dirty would flush).
    pub writable: bool,
}

impl Kernel {
    /// should_defer_flush: reclaim asked for it and the architecture batches
    /// (arch_tlbbatch_should_defer is false only with the REPEAT_TLBI erratum).
    fn should_defer_flush(&self, flags: TtuFlags) -> bool {
        flags.contains(TtuFlags::BATCH_FLUSH) && self.tlb_batch == TlbBatchVariant::Deferred
    }

    /// set_tlb_ubc_flush_pending: a pte the hardware may have cached was cleared; issue
    /// its TLBIs now and remember that a DSB is owed, also in the mm, so that a page
    /// table walker of that mm (flush_tlb_batched_pending) waits for them first.
    fn set_tlb_ubc_flush_pending(&mut self, mm: MmId, pteval: Pte, start: u64, end: u64) {
        if !pteval.pte_valid() {
            return;
        }
        let asid = self.mm(mm).asid;
        self.arch.kc.inc(KernelEvent::ArchTlbbatchAddPending);
        self.arch.arch_tlbbatch_add_pending(asid, start, end);
        self.tlb_ubc.flush_required = true;
        self.mm_mut(mm).tlb_flush_pending += 1;
        if pteval.pte_dirty() {
            self.tlb_ubc.writable = true;
        }
    }

    /// try_to_unmap_flush_dirty: before a folio is written out, wait for the TLBIs of
    /// the ptes cleared so far if one was dirty (a CPU could still write through it).
    pub fn try_to_unmap_flush_dirty(&mut self) {
        if self.tlb_ubc.writable {
            self.try_to_unmap_flush();
        }
    }

    /// try_to_unmap_flush: wait for every TLBI reclaim issued (before the folios go).
    pub fn try_to_unmap_flush(&mut self) {
        if !self.tlb_ubc.flush_required {
            return;
        }
        if self.inject_drop_flush {
            self.tlb_ubc = TlbUbc::default();
            return;
        }
        self.arch.kc.inc(KernelEvent::ArchTlbbatchFlush);
        self.arch.arch_tlbbatch_flush();
        self.tlb_ubc = TlbUbc::default();
    }

    /// flush_tlb_batched_pending (under the PTL, before changing ptes of `mm`): if
    /// reclaim left TLBIs for this mm that may not have completed, wait for them.
    pub fn flush_tlb_batched_pending(&mut self, mm: MmId) {
        self.arch.kc.inc(KernelEvent::FlushTlbBatchedPending);
        let m = self.mm(mm);
        if m.tlb_flush_pending != m.tlb_flush_done {
            self.arch.kc.inc(KernelEvent::ArchFlushTlbBatchedPending);
            let asid = self.mm(mm).asid;
            self.arch.arch_flush_tlb_batched_pending(asid);
            let m = self.mm_mut(mm);
            m.tlb_flush_done = m.tlb_flush_pending;
        }
    }

    /// try_to_unmap: unmap `folio` from every mm (the model's rmap walk: an anon page is
    /// mapped only at its page->index). Without swap only lazyfree folios get here.
    pub fn try_to_unmap(&mut self, folio: Pfn, flags: TtuFlags) {
        for mm in 0..self.mms.len() {
            if self.mms[mm].is_some() && !self.try_to_unmap_one(folio, mm, flags) {
                return;
            }
        }
    }

    /// try_to_unmap of a swap-backed anon folio whose slots start at `slot`: every
    /// pte of it, in every mm, becomes a swap entry.
    pub fn try_to_unmap_swap(&mut self, folio: Pfn, flags: TtuFlags, slot: u64) {
        for mm in 0..self.mms.len() {
            if self.mms[mm].is_some() && !self.try_to_unmap_one_swap(folio, mm, flags, slot) {
                return;
            }
        }
    }

    /// try_to_unmap of a shmem folio (rmap_walk_file over the VMAs that map its inode):
    /// each pte cleared (or, with `file_unmap_batched`, 7.0+, each run of a large
    /// folio's ptes: folio_unmap_pte_batch), its TLBI deferred or flushed, its dirt
    /// moved to the folio, and left none (the page cache keeps the page, or its slot
    /// once written out).
    pub fn try_to_unmap_file(&mut self, folio: Pfn, flags: TtuFlags) {
        let g = self.arch.granule();
        if flags.contains(TtuFlags::SPLIT_HUGE_PMD) {
            // A file pmd "split" is its zap (thp_split_pmd): the pages are unmapped.
            for (mm, pmd, haddr) in self.file_pmd_mappings(folio) {
                let vma = self.mm(mm).find_vma(haddr).expect("a pmd outside any VMA");
                __split_huge_pmd(self, mm, &vma, pmd, haddr);
            }
        }
        let mappings = self.folio_mappings(folio);
        let mut skip = 0;
        for (mm, ptep, addr) in mappings {
            // The rest of a batch: cleared with its first pte.
            if skip > 0 {
                skip -= 1;
                continue;
            }
            let amm = self.arch_mm(mm);
            // Two reads before the clear, as for anon (try_to_unmap_one_swap): the 6.12
            // guest counts three contpte_ptep_get per 64K shmem folio paged out, one of
            // them madvise's (measured: 48 for 16 folios).
            self.arch.ptep_get(amm, ptep);
            let pte = self.arch.ptep_get(amm, ptep);
            let defer = self.should_defer_flush(flags);
            let nr = if defer && self.file_unmap_batched {
                let vma = self.mm(mm).find_vma(addr).expect("a pte outside any VMA");
                self.folio_unmap_pte_batch(mm, &vma, folio, ptep, pte, addr)
            } else {
                1
            };
            skip = nr - 1;
            let pteval = if defer {
                let v = self.arch.get_and_clear_full_ptes(amm, addr, ptep, nr, false);
                self.set_tlb_ubc_flush_pending(mm, v, addr, addr + nr as u64 * g.page_size());
                v
            } else {
                self.arch.ptep_clear_flush(amm, addr, ptep)
            };
            if pteval.pte_dirty() {
                self.memmap.folio_set(folio, PageFlags::DIRTY);
            }
            self.mm_mut(mm).rss_shmem -= nr as i64;
            self.folio_remove_rmap_ptes(folio, pteval.pte_pfn(g), nr as u64, mm);
            self.folio_put_refs(folio, nr as i32);
        }
    }

    /// TTU_SPLIT_HUGE_PMD: split `mm`'s pmd mapping of `folio`, if it has one.
    fn split_folio_pmd(&mut self, folio: Pfn, mm: MmId) {
        if let Some((pmd, haddr)) = self.folio_pmd(folio, mm) {
            let vma = self.mm(mm).find_vma(haddr).expect("a pmd outside any VMA");
            __split_huge_pmd(self, mm, &vma, pmd, haddr);
        }
    }

    /// `mm`'s pmd mapping `folio` whole and its address, if it has one (what
    /// page_vma_mapped_walk finds with `pvmw.pte` NULL).
    fn folio_pmd(&mut self, folio: Pfn, mm: MmId) -> Option<(PmdPtr, u64)> {
        let g = self.arch.granule();
        let haddr = self.memmap.page_index(folio) << g.page_shift();
        let pmd = self.pmd_offset(mm, haddr)?;
        let d = self.pxd_get(2, pmd);
        (pmd_trans_huge(d) && d.pfn(g) == folio).then_some((pmd, haddr))
    }

    /// try_to_unmap_one for a swap-backed anon folio: pte by pte (folio_unmap_pte_batch
    /// batches only lazyfree folios), each cleared with its TLBI deferred or flushed,
    /// its dirt moved to the folio, and replaced by the entry of its slot
    /// (swap_duplicate), exclusive if the page was (which it then no longer is).
    fn try_to_unmap_one_swap(&mut self, folio: Pfn, mm: MmId, flags: TtuFlags, slot: u64) -> bool {
        let g = self.arch.granule();
        let ps = g.page_size();
        let amm = self.arch_mm(mm);
        if flags.contains(TtuFlags::SPLIT_HUGE_PMD) {
            self.split_folio_pmd(folio, mm);
        }
        for i in 0..self.memmap.folio_nr_pages(folio) {
            let page = Pfn(folio.0 + i);
            let addr = self.memmap.page_index(page) << g.page_shift();
            let pte = self.pte_offset(mm, addr).map(|p| (p, self.arch.ptep_get(amm, p)));
            let Some((ptep, _)) = pte.filter(|(_, v)| v.pte_present() && v.pte_pfn(g) == page) else {
                continue;
            };
            // A second read of each pte before it is cleared (page_vma_mapped_walk's
            // map_pte for the first, its next_pte loop for the rest): the 6.12 guest
            // counts three contpte_ptep_get per 64K folio paged out to swap, one of
            // them madvise's (measured: 48 for 16 folios; the source shows a third
            // read here too, try_to_unmap_one's, that the guest does not count).
            self.arch.ptep_get(amm, ptep);
            let vma = self.mm(mm).find_vma(addr).expect("a pte outside any VMA");
            if vma.flags.contains(VmFlags::LOCKED) {
                return false;
            }
            let pteval = if self.should_defer_flush(flags) {
                let v = self.arch.get_and_clear_full_ptes(amm, addr, ptep, 1, false);
                self.set_tlb_ubc_flush_pending(mm, v, addr, addr + ps);
                v
            } else {
                self.arch.ptep_clear_flush(amm, addr, ptep)
            };
            if pteval.pte_dirty() {
                self.memmap.folio_set(folio, PageFlags::DIRTY);
            }
            let offset = slot + i;
            self.swap
                .as_mut()
                .expect("swap-out without a device")
                .swap_duplicate(offset);
            let p = self.memmap.page_mut(page);
            let exclusive = p.flags.contains(PageFlags::ANON_EXCLUSIVE);
            p.flags.remove(PageFlags::ANON_EXCLUSIVE);
            self.arch
                .__set_pte(addr, ptep, Pte::swp_entry_to_pte(offset, exclusive));
            let m = self.mm_mut(mm);
            m.rss_anon -= 1;
            m.rss_swap += 1;
            self.folio_remove_rmap_ptes(folio, page, 1, mm);
            self.folio_put_refs(folio, 1);
        }
        true
    }

    /// try_to_migrate (unmap_folio for a split, migrate_folio_unmap): every mapping of
    /// `folio`, in every mm, becomes a migration entry; where they are is returned for
    /// remove_migration_ptes. A pmd mapping is split into pte migration entries with
    /// TTU_SPLIT_HUGE_PMD, else it becomes a pmd migration entry.
    pub fn try_to_migrate(&mut self, folio: Pfn, flags: TtuFlags) -> Vec<MigrationEntry> {
        let mut out = Vec::new();
        if self.memmap.folio_order(folio) == self.arch.granule().pmd_order() {
            let g = self.arch.granule();
            let haddr = self.memmap.page_index(folio) << g.page_shift();
            for mm in 0..self.mms.len() {
                if self.mms[mm].is_none() {
                    continue;
                }
                let Some(pmd) = self.pmd_offset(mm, haddr) else {
                    continue;
                };
                let d = self.pxd_get(2, pmd);
                if pmd_trans_huge(d) && d.pfn(g) == folio {
                    let vma = self.mm(mm).find_vma(haddr).expect("a pmd outside any VMA");
                    if !flags.contains(TtuFlags::SPLIT_HUGE_PMD) {
                        set_pmd_migration_entry(self, mm, pmd, haddr);
                        out.push(MigrationEntry {
                            mm,
                            ptep: pmd,
                            addr: haddr,
                            pmd: true,
                        });
                        continue;
                    }
                    split_huge_pmd_locked_freeze(self, mm, &vma, pmd, haddr, &mut out);
                    if self.pmd_freeze_rmap_per_page {
                        // 6.1: page_remove_rmap of each page; the first to lose its
                        // last mapping queues the THP (deferred_split_huge_page).
                        if self.rmap_page_api {
                            let nr = self.memmap.folio_nr_pages(folio);
                            self.arch.kc.add(KernelEvent::PageRemoveRmap, nr);
                        }
                        deferred_split_folio(self, folio, true);
                    }
                }
            }
        }
        let first = self.memmap.page_index(folio) << self.arch.granule().page_shift();
        let mut prev: Option<MmId> = None;
        for (mm, ptep, addr) in self.folio_mappings(folio) {
            // page_vma_mapped_walk starts at the folio's first page (or the VMA's, if
            // later) and reads each pte it steps to past that one (next_pte, over
            // holes too), then check_pte reads it again; once the first pte of a
            // contpte block has unfolded it, the rest read as plain ptes. Without
            // TTU_SYNC map_pte reads the first pte locklessly too (when that is a
            // hole, the read of a none pte is left out, as are next_pte's of holes).
            let amm = self.arch_mm(mm);
            let start = self.mm(mm).find_vma(addr).map_or(first, |v| first.max(v.start));
            if prev == Some(mm) || addr != start || !flags.contains(TtuFlags::SYNC) {
                self.arch.ptep_get(amm, ptep);
            }
            prev = Some(mm);
            self.arch.ptep_get(amm, ptep);
            let entry = self.try_to_migrate_one(folio, mm, ptep, addr, flags);
            out.push(entry);
        }
        out
    }

    /// folio_referenced: clear the accessed bit of every pte (ptep_clear_flush_young:
    /// on arm64 a contpte block's whole, contpte_ptep_clear_flush_young) or pmd that
    /// maps `folio`, and count the VMAs where one was set (one per mm: the model maps
    /// an anon page at one address per mm). A mapping in a locked VMA ends the walk:
    /// the second value is then true (VM_LOCKED).
    pub fn folio_referenced(&mut self, folio: Pfn) -> (u32, bool) {
        if self.memmap.folio_mapcount(folio) == 0 {
            return (0, false);
        }
        let g = self.arch.granule();
        let mut young: Vec<MmId> = Vec::new();
        if self.memmap.folio_order(folio) == g.pmd_order() {
            for (mm, pmd, haddr) in self.pmd_mappings(folio) {
                if self
                    .mm(mm)
                    .find_vma(haddr)
                    .is_some_and(|v| v.flags.contains(VmFlags::LOCKED))
                {
                    return (young.len() as u32, true);
                }
                if pmdp_clear_flush_young(self, mm, pmd, haddr) {
                    young.push(mm);
                }
            }
        }
        for (mm, ptep, addr) in self.folio_mappings(folio) {
            if self
                .mm(mm)
                .find_vma(addr)
                .is_some_and(|v| v.flags.contains(VmFlags::LOCKED))
            {
                return (young.len() as u32, true);
            }
            let amm = self.arch_mm(mm);
            if self.arch.ptep_clear_flush_young(amm, addr, ptep) && !young.contains(&mm) {
                young.push(mm);
            }
        }
        (young.len() as u32, false)
    }

    /// Every pte that maps a page of `folio`, in every mm: anon pages are mapped only at
    /// their page->index, so the rmap walk needs no reverse map. A host-side search
    /// (raw reads); the kernel's reads are its callers' (page_vma_mapped_walk).
    fn folio_mappings(&mut self, folio: Pfn) -> Vec<(MmId, PtePtr, u64)> {
        if let Some(ino) = self.shmem.folio_inode(folio) {
            return self.rmap_walk_file(folio, ino);
        }
        let g = self.arch.granule();
        let nr = self.memmap.folio_nr_pages(folio);
        let mut out = Vec::new();
        for mm in 0..self.mms.len() {
            if self.mms[mm].is_none() {
                continue;
            }
            for i in 0..nr {
                let page = Pfn(folio.0 + i);
                let addr = self.memmap.page_index(page) << g.page_shift();
                if let Some(ptep) = self.pte_mapping(mm, addr, page) {
                    out.push((mm, ptep, addr));
                }
            }
        }
        out
    }

    /// The pte at `addr` in `mm`, if it maps `page` (a raw read: the rmap walk's search).
    fn pte_mapping(&mut self, mm: MmId, addr: u64, page: Pfn) -> Option<PtePtr> {
        let g = self.arch.granule();
        let ptep = self.pte_offset(mm, addr)?;
        let pte = self.arch.__ptep_get(ptep);
        (pte.pte_present() && pte.pte_pfn(g) == page).then_some(ptep)
    }

    /// The pmds mapping the PMD-order `folio` whole, in mm order: an anon one at its
    /// page->index, a page-cache one through the VMAs mapping its inode.
    fn pmd_mappings(&mut self, folio: Pfn) -> Vec<(MmId, PmdPtr, u64)> {
        if self.shmem.folio_inode(folio).is_some() {
            return self.file_pmd_mappings(folio);
        }
        let g = self.arch.granule();
        let haddr = self.memmap.page_index(folio) << g.page_shift();
        let mut out = Vec::new();
        for mm in 0..self.mms.len() {
            if self.mms[mm].is_none() {
                continue;
            }
            if let Some(pmd) = self.pmd_offset(mm, haddr) {
                let d = self.pxd_get(2, pmd);
                if pmd_trans_huge(d) && d.pfn(g) == folio {
                    out.push((mm, pmd, haddr));
                }
            }
        }
        out
    }

    /// The pmds mapping the PMD-order page-cache `folio` whole, in mm order: its
    /// first index, through each VMA mapping its inode there, at a pmd-aligned address.
    fn file_pmd_mappings(&mut self, folio: Pfn) -> Vec<(MmId, PmdPtr, u64)> {
        let g = self.arch.granule();
        let (shift, pmd_size) = (g.page_shift(), g.pmd_size());
        let Some(ino) = self.shmem.folio_inode(folio) else {
            return Vec::new();
        };
        let first = self.memmap.page_index(folio);
        let mut out = Vec::new();
        for mm in 0..self.mms.len() {
            let Some(m) = &self.mms[mm] else { continue };
            let addrs: Vec<u64> = (m.vmas().values())
                .filter(|v| v.file == Some(ino) && first >= v.pgoff && first < v.pgoff + (v.len() >> shift))
                .map(|v| v.start + ((first - v.pgoff) << shift))
                .filter(|a| a.is_multiple_of(pmd_size))
                .collect();
            for haddr in addrs {
                if let Some(pmd) = self.pmd_offset(mm, haddr) {
                    let d = self.pxd_get(2, pmd);
                    if pmd_trans_huge(d) && d.pfn(g) == folio {
                        out.push((mm, pmd, haddr));
                    }
                }
            }
        }
        out
    }

    /// rmap_walk_file: the ptes mapping a page-cache folio, found through the VMAs of
    /// every mm that map its inode at its index (the i_mmap tree's walk), in mm order.
    fn rmap_walk_file(&mut self, folio: Pfn, ino: u32) -> Vec<(MmId, PtePtr, u64)> {
        let shift = self.arch.granule().page_shift();
        let first = self.memmap.page_index(folio);
        let nr = self.memmap.folio_nr_pages(folio);
        let mut out = Vec::new();
        for mm in 0..self.mms.len() {
            let Some(m) = &self.mms[mm] else { continue };
            let mut addrs: Vec<(u64, Pfn)> = Vec::new();
            for v in m.vmas().values().filter(|v| v.file == Some(ino)) {
                for index in first..first + nr {
                    if index >= v.pgoff && index < v.pgoff + (v.len() >> shift) {
                        addrs.push((v.start + ((index - v.pgoff) << shift), Pfn(folio.0 + index - first)));
                    }
                }
            }
            for (addr, page) in addrs {
                if let Some(ptep) = self.pte_mapping(mm, addr, page) {
                    out.push((mm, ptep, addr));
                }
            }
        }
        out
    }

    /// try_to_migrate_one for one pte: cleared with its TLBI deferred to
    /// try_to_unmap_flush when the flush may be batched (should_defer_flush, as in
    /// reclaim), its dirt moved to the folio, and replaced by a migration entry that
    /// keeps what the pte allowed (writable, else whether the page was exclusive, which
    /// it then no longer is) and its young and dirty bits; then
    /// folio_remove_rmap_pte and the mapping's reference dropped. The first pte whose
    /// page that unmaps while others stay mapped leaves the folio partially mapped: it
    /// is queued for deferred split and counted (split_deferred).
    fn try_to_migrate_one(&mut self, folio: Pfn, mm: MmId, ptep: PtePtr, addr: u64, flags: TtuFlags) -> MigrationEntry {
        let g = self.arch.granule();
        let amm = self.arch_mm(mm);
        // pfn = pte_pfn(ptep_get(pvmw.pte)): a second read before the clear.
        self.arch.ptep_get(amm, ptep);
        let pteval = if self.should_defer_flush(flags) {
            let v = self.arch.ptep_get_and_clear(amm, addr, ptep);
            self.set_tlb_ubc_flush_pending(mm, v, addr, addr + g.page_size());
            v
        } else {
            self.arch.ptep_clear_flush(amm, addr, ptep)
        };
        let page = pteval.pte_pfn(g);
        if pteval.pte_dirty() {
            self.memmap.folio_set(folio, PageFlags::DIRTY);
        }
        let p = self.memmap.page_mut(page);
        let exclusive = p.flags.contains(PageFlags::ANON_EXCLUSIVE);
        p.flags.remove(PageFlags::ANON_EXCLUSIVE);
        let kind = MigrationKind::of(pteval.pte_write(), exclusive);
        let entry = Pte::make_migration_entry(page, kind, pteval.pte_young(), pteval.pte_dirty(), g);
        self.arch.__set_pte(addr, ptep, entry);
        self.folio_remove_rmap_ptes(folio, page, 1, mm);
        self.folio_put_refs(folio, 1);
        MigrationEntry {
            mm,
            ptep,
            addr,
            pmd: false,
        }
    }

    /// try_to_unmap_one for a lazyfree anon folio in one mm: a pmd mapping is split
    /// first (the 6.18 host declines to discard a lazyfree THP at the pmd and splits it:
    /// measured, thp_split_pmd +1, no folio split), or with `lazyfree_pmd_discard`
    /// (7.0 to 7.2) discarded or kept whole by unmap_huge_pmd_locked; then each run of ptes
    /// (folio_unmap_pte_batch; one pte at a time with `lazyfree_unmap_per_pte`, 6.12)
    /// is cleared and, while the folio is clean and nobody else
    /// holds a reference, discarded; a re-dirtied folio is mapped back and becomes
    /// swap-backed again. False stops the rmap walk (the folio stays mapped).
    fn try_to_unmap_one(&mut self, folio: Pfn, mm: MmId, flags: TtuFlags) -> bool {
        let g = self.arch.granule();
        let ps = g.page_size();
        let amm = self.arch_mm(mm);
        let nr_pages = self.memmap.folio_nr_pages(folio);
        debug_assert!(
            !self.memmap.folio_test(folio, PageFlags::SWAPBACKED),
            "a swap-backed folio is unmapped by try_to_unmap_swap"
        );
        if let Some((pmd, haddr)) = self.folio_pmd(folio, mm) {
            let vma = self.mm(mm).find_vma(haddr).expect("a pmd outside any VMA");
            if vma.flags.contains(VmFlags::LOCKED) {
                return false;
            }
            if self.lazyfree_pmd_discard {
                // walk_done on a discard, walk_abort when the folio is kept.
                return unmap_huge_pmd_locked(self, mm, pmd, haddr, folio);
            }
            if flags.contains(TtuFlags::SPLIT_HUGE_PMD) {
                __split_huge_pmd(self, mm, &vma, pmd, haddr);
            }
        }
        let mut i = 0;
        let mut first = true;
        while i < nr_pages {
            let page = Pfn(folio.0 + i);
            let addr = self.memmap.page_index(page) << g.page_shift();
            let pte = self.pte_offset(mm, addr).map(|p| (p, self.arch.ptep_get(amm, p)));
            let Some((ptep, pteval)) = pte.filter(|(_, v)| v.pte_present() && v.pte_pfn(g) == page) else {
                i += 1;
                continue;
            };
            // The reads of a pte before it is cleared, which matter while its contpte
            // block is still folded (contpte_ptep_get): after the first (map_pte's
            // lockless read), page_vma_mapped_walk's next_pte loop reads each pte
            // before check_pte (the read above); then try_to_unmap_one reads it again
            // for its page, batched or not (the 7.3 guest: three contpte_ptep_get per
            // lazyfree 64K folio paged out, madvise's included).
            if self.lazyfree_unmap_per_pte && !first {
                self.arch.ptep_get(amm, ptep);
            }
            self.arch.ptep_get(amm, ptep);
            first = false;
            let vma = self.mm(mm).find_vma(addr).expect("a pte outside any VMA");
            if vma.flags.contains(VmFlags::LOCKED) {
                return false;
            }
            let defer = self.should_defer_flush(flags);
            let nr = if defer && !self.lazyfree_unmap_per_pte {
                self.folio_unmap_pte_batch(mm, &vma, folio, ptep, pteval, addr)
            } else {
                1
            };
            let end = addr + nr as u64 * ps;
            let pteval = if defer {
                let v = self.arch.get_and_clear_full_ptes(amm, addr, ptep, nr, false);
                self.set_tlb_ubc_flush_pending(mm, v, addr, end);
                v
            } else {
                self.arch.ptep_clear_flush(amm, addr, ptep)
            };
            if pteval.pte_dirty() {
                self.memmap.folio_set(folio, PageFlags::DIRTY);
            }
            let (refs, maps) = (self.memmap.folio_ref_count(folio), self.memmap.folio_mapcount(folio));
            let dirty = self.memmap.folio_test(folio, PageFlags::DIRTY);
            if dirty || refs != 1 + maps {
                // Re-dirtied, or another reference: map it back as it was.
                self.arch.set_ptes(amm, addr, ptep, pteval, nr, Some((folio, nr_pages)));
                if dirty {
                    self.memmap.folio_set(folio, PageFlags::SWAPBACKED);
                }
                return false;
            }
            self.mm_mut(mm).rss_anon -= nr as i64;
            self.folio_remove_rmap_ptes(folio, page, nr as u64, mm);
            self.folio_put_refs(folio, nr as i32);
            i += nr as u64;
        }
        true
    }

    /// folio_unmap_pte_batch: the ptes of a lazyfree large folio (6.16+) or a file one
    /// (7.0+) that can go in one batch, within one page table and one VMA; one pte
    /// otherwise. With
    /// `lazyfree_unmap_per_pte` (before 354dffd29575, 6.15) it is not called: each pte
    /// is cleared on its own, unfolding its contpte block, with its own TLBI, and its own
    /// folio_remove_rmap_pte, the first of which leaves the folio partially mapped.
    fn folio_unmap_pte_batch(&mut self, mm: MmId, vma: &Vma, folio: Pfn, ptep: PtePtr, pte: Pte, addr: u64) -> usize {
        let g = self.arch.granule();
        if self.memmap.folio_order(folio) == 0 {
            return 1;
        }
        let end = ((addr + g.pmd_size()) & !(g.pmd_size() - 1)).min(vma.end);
        self.folio_pte_batch(mm, folio, ptep, pte, ((end - addr) / g.page_size()) as usize)
    }
}
