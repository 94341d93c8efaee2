//! mm/rmap.c: anon rmap accounting of folios (mapcounts), and the partially-mapped
//! detection that feeds the deferred split queue.

use super::folio::PageFlags;
use super::huge_memory::deferred_split_folio;
use super::vmstat::MthpStat;
use super::Kernel;
use crate::hw::Pfn;

impl Kernel {
    /// folio_add_new_anon_rmap: map a new exclusive anon folio, by `nr` ptes from
    /// `page` or (pmd) as a whole.
    pub fn folio_add_new_anon_rmap(&mut self, folio: Pfn, pmd: bool) {
        let order = self.memmap.folio_order(folio);
        let nr = 1u64 << order;
        let large = order > 0;
        {
            let h = self.memmap.page_mut(folio);
            h.flags.insert(PageFlags::ANON | PageFlags::SWAPBACKED);
            if pmd {
                h.entire_mapcount = 1;
                h.large_mapcount = 1;
            } else if large {
                h.large_mapcount = nr as i32;
                h.nr_pages_mapped = nr as i32;
            }
        }
        for i in 0..nr {
            let p = self.memmap.page_mut(Pfn(folio.0 + i));
            p.flags.insert(PageFlags::ANON_EXCLUSIVE);
            if !pmd {
                p.mapcount = 1;
            }
        }
        self.stat.mod_mthp_stat(order, MthpStat::NrAnon, 1);
    }

    /// folio_add_anon_rmap_ptes: add pte mappings of `nr` pages from `page` to an
    /// existing anon folio (split_huge_pmd, fork).
    pub fn folio_add_anon_rmap_ptes(&mut self, folio: Pfn, page: Pfn, nr: u64, exclusive: bool) {
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
        if self.memmap.folio_order(folio) > 0 {
            let h = self.memmap.page_mut(folio);
            h.large_mapcount += nr as i32;
            h.nr_pages_mapped += first;
        }
    }

    /// folio_remove_rmap_ptes: drop `nr` pte mappings from `page`. A large anon folio
    /// left with some pages mapped and some not is queued for deferred split.
    pub fn folio_remove_rmap_ptes(&mut self, folio: Pfn, page: Pfn, nr: u64) {
        if self.memmap.folio_order(folio) == 0 {
            self.memmap.page_mut(folio).mapcount -= 1;
            return;
        }
        let mut last = 0;
        for i in 0..nr {
            let p = self.memmap.page_mut(Pfn(page.0 + i));
            p.mapcount -= 1;
            debug_assert!(p.mapcount >= 0, "page {:?} mapcount underflow", Pfn(page.0 + i));
            if p.mapcount == 0 {
                last += 1;
            }
        }
        let h = self.memmap.page_mut(folio);
        h.large_mapcount -= nr as i32;
        h.nr_pages_mapped -= last;
        // Pages that became unmapped count only while the folio is not also pmd-mapped.
        let entirely = h.entire_mapcount > 0;
        let partially_mapped = last > 0 && !entirely && h.nr_pages_mapped > 0;
        if partially_mapped && h.flags.contains(PageFlags::ANON) && !h.flags.contains(PageFlags::PARTIALLY_MAPPED) {
            deferred_split_folio(self, folio, true);
        }
    }

    /// folio_remove_rmap_pmd: drop the pmd mapping of a PMD-sized folio.
    pub fn folio_remove_rmap_pmd(&mut self, folio: Pfn) {
        let h = self.memmap.page_mut(folio);
        h.entire_mapcount -= 1;
        h.large_mapcount -= 1;
        let partially_mapped =
            h.entire_mapcount == 0 && h.nr_pages_mapped > 0 && (h.nr_pages_mapped as u64) < (1u64 << h.order);
        if partially_mapped && h.flags.contains(PageFlags::ANON) && !h.flags.contains(PageFlags::PARTIALLY_MAPPED) {
            deferred_split_folio(self, folio, true);
        }
    }
}
