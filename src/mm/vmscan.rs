//! mm/vmscan.c: page reclaim of the folios madvise(MADV_PAGEOUT) hands it
//! (reclaim_pages -> shrink_folio_list), direct reclaim when an allocation fails, and
//! the shrinkers on demand (drop_slab).
//!
//! The model has no swap device, like the validation host: a swap-backed anon folio
//! cannot be written out, so reclaim only splits large ones (swpout_fallback) and
//! activates every piece, which stays mapped; lazyfree (MADV_FREE) folios that are
//! still clean are discarded.

use super::folio::PageFlags;
use super::huge_memory::{can_split_folio, deferred_split_scan, split_folio_to_list};
use super::rmap::TtuFlags;
use super::vmstat::{MthpStat, VmEvent};
use super::Kernel;
use crate::hw::Pfn;

impl Kernel {
    /// reclaim_pages (reclaim_folio_list with references ignored, as for
    /// MADV_PAGEOUT): shrink the isolated folios, in the order given, and put back what
    /// stays. Each folio carries the reference its isolation took. Returns the pages
    /// reclaimed.
    pub fn reclaim_pages(&mut self, folios: Vec<Pfn>) -> u64 {
        // shrink_folio_list takes folios from the list's tail, where split pages go too.
        let mut list: Vec<Pfn> = folios.into_iter().rev().collect();
        let mut free = Vec::new();
        let mut keep = Vec::new();
        let mut reclaimed = 0;
        while let Some(folio) = list.pop() {
            if self.shrink_folio(folio, &mut list) {
                reclaimed += self.memmap.folio_nr_pages(folio);
                free.push(folio);
            } else {
                keep.push(folio);
            }
        }
        // The TLBIs of every pte cleared above complete before any folio is freed.
        self.try_to_unmap_flush();
        for folio in free.into_iter().chain(keep) {
            self.folio_put(folio);
        }
        reclaimed
    }

    /// One folio of shrink_folio_list: true when it can be freed (only the isolation
    /// reference is left), false when it goes back to the LRU (activated).
    fn shrink_folio(&mut self, folio: Pfn, list: &mut Vec<Pfn>) -> bool {
        let f = self.memmap.page(folio).flags;
        if f.contains(PageFlags::MLOCKED) {
            return false;
        }
        if f.contains(PageFlags::ANON | PageFlags::SWAPBACKED) {
            self.pageout_without_swap(folio, list);
            return false;
        }
        if self.memmap.folio_mapcount(folio) > 0 {
            let mut flags = TtuFlags::BATCH_FLUSH;
            if self.memmap.folio_order(folio) == self.arch.granule().pmd_order() {
                flags |= TtuFlags::SPLIT_HUGE_PMD;
            }
            self.try_to_unmap(folio, flags);
            if self.memmap.folio_mapcount(folio) > 0 {
                return false;
            }
        }
        if self.memmap.folio_ref_count(folio) != 1 {
            return false;
        }
        let nr = self.memmap.folio_nr_pages(folio);
        self.stat.count_vm_events(VmEvent::PgLazyFreed, nr as i64);
        true
    }

    /// A swap-backed anon folio when folio_alloc_swap fails (there is no swap): a
    /// partially mapped large folio is split right away; a large one is then split to
    /// try its pages one by one (swpout_fallback); every page is activated.
    fn pageout_without_swap(&mut self, folio: Pfn, list: &mut Vec<Pfn>) {
        let order = self.memmap.folio_order(folio);
        if order == 0 || !can_split_folio(self, folio, 1) {
            return;
        }
        let f = self.memmap.page(folio).flags;
        if f.contains(PageFlags::DEFERRED | PageFlags::PARTIALLY_MAPPED) {
            split_folio_to_list(self, folio, list);
            return;
        }
        if !split_folio_to_list(self, folio, list) {
            return;
        }
        if order == self.arch.granule().pmd_order() {
            self.stat.count_vm_event(VmEvent::ThpSwpoutFallback);
        }
        self.stat.count_mthp_stat(order, MthpStat::SwpoutFallback);
    }

    /// drop_slab (`echo 2 > /proc/sys/vm/drop_caches`): shrink_slab at priority 0 asks
    /// every shrinker to scan all it counts; of the model's, only the THP deferred split
    /// shrinker has objects. Returns how many folios it split.
    pub fn drop_slab(&mut self) -> u64 {
        deferred_split_scan(self)
    }

    /// try_to_free_pages (direct reclaim, when an allocation that may reclaim fails):
    /// the shrinkers, then every lazyfree folio. The model keeps no LRU lists; the
    /// lazyfree folios (which the kernel keeps on the inactive file LRU, the only anon
    /// memory reclaim can free without swap) are found by walking every mm's page
    /// tables, in mm and address order. Returns whether anything was freed.
    pub fn try_to_free_pages(&mut self) -> bool {
        let split = self.drop_slab();
        let mut folios = Vec::new();
        for mm in 0..self.mms.len() {
            if self.mms[mm].is_some() {
                self.isolate_lazyfree_folios(mm, &mut folios);
            }
        }
        split > 0 || self.reclaim_pages(folios) > 0
    }

    /// Isolate (take a reference on) each lazyfree folio mapped in `mm`, once.
    fn isolate_lazyfree_folios(&mut self, mm: usize, out: &mut Vec<Pfn>) {
        let ps = self.arch.granule().page_size();
        let vmas: Vec<(u64, u64)> = self.mm(mm).vmas.values().map(|v| (v.start, v.end)).collect();
        let mut seen: std::collections::HashSet<Pfn> = out.iter().copied().collect();
        for (start, end) in vmas {
            for addr in (start..end).step_by(ps as usize) {
                let Some(pfn) = self.page_table_pfn(mm, addr) else {
                    continue;
                };
                let folio = self.memmap.folio_of(pfn);
                let f = self.memmap.page(folio).flags;
                if f.contains(PageFlags::ANON) && !f.contains(PageFlags::SWAPBACKED) && seen.insert(folio) {
                    self.memmap.folio_ref_add(folio, 1);
                    out.push(folio);
                }
            }
        }
    }
}
