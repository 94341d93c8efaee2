//! mm/rmap.c + include/linux/rmap.h: anon rmap accounting of folios (mapcounts, the
//! per-mm slots that tell "mapped exclusively" from "maybe shared"), and the
//! partially-mapped detection that feeds the deferred split queue.

use super::folio::PageFlags;
use super::huge_memory::deferred_split_folio;
use super::mm_types::MmId;
use super::vmstat::MthpStat;
use super::Kernel;
use crate::hw::Pfn;

/// The mm id a folio slot records (MM_ID_DUMMY is 0).
fn mm_id(mm: MmId) -> u32 {
    mm as u32 + 1
}

impl Kernel {
    /// folio_add_return_large_mapcount: `diff` more mappings by `mm`; a second mm (or
    /// an mm finding both slots taken) makes the folio "maybe mapped shared".
    fn folio_add_large_mapcount(&mut self, folio: Pfn, diff: i32, mm: MmId) {
        let id = mm_id(mm);
        let h = self.memmap.page_mut(folio);
        h.large_mapcount += diff;
        if h.mm_id[0] == id {
            h.mm_id_mapcount[0] += diff;
        } else if h.mm_id[1] == id {
            h.mm_id_mapcount[1] += diff;
        } else if h.mm_id[0] == 0 {
            h.mm_id[0] = id;
            h.mm_id_mapcount[0] = diff;
            if h.large_mapcount != diff {
                h.flags.insert(PageFlags::MAYBE_SHARED);
            }
        } else if h.mm_id[1] == 0 {
            h.mm_id[1] = id;
            h.mm_id_mapcount[1] = diff;
            h.flags.insert(PageFlags::MAYBE_SHARED);
        }
    }

    /// folio_sub_return_large_mapcount: when one slot again owns every mapping, the
    /// folio is exclusive once more.
    fn folio_sub_large_mapcount(&mut self, folio: Pfn, diff: i32, mm: MmId) {
        let id = mm_id(mm);
        let h = self.memmap.page_mut(folio);
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
            h.flags.remove(PageFlags::MAYBE_SHARED);
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
    pub fn folio_add_new_anon_rmap(&mut self, folio: Pfn, mm: MmId, addr: u64, pmd: bool) {
        let order = self.memmap.folio_order(folio);
        let nr = 1u64 << order;
        let index = addr >> self.arch.granule().page_shift();
        {
            let h = self.memmap.page_mut(folio);
            h.flags.insert(PageFlags::ANON | PageFlags::SWAPBACKED);
            if pmd {
                h.entire_mapcount = 1;
            } else if order > 0 {
                h.nr_pages_mapped = nr as i32;
            }
        }
        for i in 0..nr {
            let p = self.memmap.page_mut(Pfn(folio.0 + i));
            p.flags.insert(PageFlags::ANON_EXCLUSIVE);
            p.index = index + i;
            if !pmd {
                p.mapcount = 1;
            }
        }
        if order > 0 {
            self.folio_add_large_mapcount(folio, if pmd { 1 } else { nr as i32 }, mm);
        }
        self.stat.mod_mthp_stat(order, MthpStat::NrAnon, 1);
    }

    /// folio_add_anon_rmap_ptes: add pte mappings of `nr` pages from `page` to an
    /// existing anon folio (split_huge_pmd).
    pub fn folio_add_anon_rmap_ptes(&mut self, folio: Pfn, page: Pfn, nr: u64, mm: MmId, exclusive: bool) {
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
            self.memmap.page_mut(folio).nr_pages_mapped += first;
            self.folio_add_large_mapcount(folio, nr as i32, mm);
        }
    }

    /// folio_try_dup_anon_rmap_ptes (fork): the child maps the same `nr` pages, which
    /// stop being exclusive to either mm. The caller took the references.
    pub fn folio_try_dup_anon_rmap_ptes(&mut self, folio: Pfn, page: Pfn, nr: u64, dst: MmId) {
        for i in 0..nr {
            let p = self.memmap.page_mut(Pfn(page.0 + i));
            p.flags.remove(PageFlags::ANON_EXCLUSIVE);
            p.mapcount += 1;
        }
        if self.memmap.folio_order(folio) > 0 {
            self.folio_add_large_mapcount(folio, nr as i32, dst);
        }
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
        self.memmap.page_mut(folio).entire_mapcount += 1;
        self.folio_add_large_mapcount(folio, 1, dst);
    }

    /// folio_remove_rmap_ptes: drop `nr` pte mappings from `page` in `mm`. A large anon
    /// folio left with some pages mapped and some not is queued for deferred split.
    pub fn folio_remove_rmap_ptes(&mut self, folio: Pfn, page: Pfn, nr: u64, mm: MmId) {
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
        self.folio_sub_large_mapcount(folio, nr as i32, mm);
        let h = self.memmap.page_mut(folio);
        h.nr_pages_mapped -= last;
        // Pages that became unmapped count only while the folio is not also pmd-mapped.
        let entirely = h.entire_mapcount > 0;
        let partially_mapped = last > 0 && !entirely && h.nr_pages_mapped > 0;
        if partially_mapped && h.flags.contains(PageFlags::ANON) && !h.flags.contains(PageFlags::PARTIALLY_MAPPED) {
            deferred_split_folio(self, folio, true);
        }
    }

    /// folio_remove_rmap_pmd: drop the pmd mapping of a PMD-sized folio in `mm`.
    pub fn folio_remove_rmap_pmd(&mut self, folio: Pfn, mm: MmId) {
        self.memmap.page_mut(folio).entire_mapcount -= 1;
        self.folio_sub_large_mapcount(folio, 1, mm);
        let h = self.memmap.page(folio);
        let partially_mapped =
            h.entire_mapcount == 0 && h.nr_pages_mapped > 0 && (h.nr_pages_mapped as u64) < (1u64 << h.order);
        if partially_mapped && h.flags.contains(PageFlags::ANON) && !h.flags.contains(PageFlags::PARTIALLY_MAPPED) {
            deferred_split_folio(self, folio, true);
        }
    }
}
