//! mm/vmscan.c: page reclaim of the folios madvise(MADV_PAGEOUT) hands it
//! (reclaim_pages -> shrink_folio_list), direct reclaim when an allocation fails, and
//! the shrinkers on demand (drop_slab).
//!
//! Without a swap device (the validation host's default) a swap-backed anon folio
//! cannot be written out, so reclaim only splits large ones (swpout_fallback) and
//! activates every piece, which stays mapped; with one (`swapon`) it is swapped out.
//! Lazyfree (MADV_FREE) folios that are still clean are discarded.

use super::folio::PageFlags;
use super::huge_memory::{can_split_folio, deferred_split_scan, split_folio_to_list};
use super::rmap::TtuFlags;
use super::vmstat::{MthpStat, VmEvent};
use super::Kernel;
use crate::hw::Pfn;

/// PAGEVEC_SIZE: the folios a folio_batch holds.
const PAGEVEC_SIZE: usize = 31;

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
                // shrink_folio_list's free_folios is a folio_batch: when it fills, the
                // TLBIs pending so far complete (try_to_unmap_flush) and it is freed.
                if free.len() == PAGEVEC_SIZE {
                    self.try_to_unmap_flush();
                    for folio in free.drain(..) {
                        self.folio_put(folio);
                    }
                }
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
            if self.swap.is_none() {
                self.pageout_without_swap(folio, list);
                return false;
            }
            return self.pageout_to_swap(folio, list);
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

    /// shrink_folio_list for a swap-backed anon folio with a swap device: unless it is
    /// in the swap cache already (read back for a forked mm), slots for the whole
    /// folio, or (none free in a run that large) split it and go on with the head at
    /// order 0 (swpout_fallback), and the folio joins the swap cache dirty; unmap it
    /// to swap entries; write it out if dirty, unless all zeroes (the zeromap:
    /// swpout_zero, no I/O); then, zram being synchronous, it leaves the swap cache and
    /// is freed in the same pass (__remove_mapping) unless someone else holds it. True
    /// when it can be freed.
    fn pageout_to_swap(&mut self, folio: Pfn, list: &mut Vec<Pfn>) -> bool {
        let pmd_order = self.arch.granule().pmd_order();
        let mut order = self.memmap.folio_order(folio);
        let cached = self.swap.as_ref().expect("checked by the caller").cache.swap_of(folio);
        let slot = match cached {
            Some(slot) => slot,
            None => {
                if order > 0 && !can_split_folio(self, folio, 1) {
                    return false;
                }
                let f = self.memmap.page(folio).flags;
                if order > 0 && f.contains(PageFlags::DEFERRED | PageFlags::PARTIALLY_MAPPED) {
                    if !split_folio_to_list(self, folio, list) {
                        return false;
                    }
                    order = 0;
                }
                // folio_alloc_swap: a large folio's slots only with THP_SWAP.
                let thp_swap = self.thp_swap();
                let si = self.swap.as_mut().expect("checked by the caller");
                let slot = match (order == 0 || thp_swap)
                    .then(|| si.folio_alloc_swap(0, order as u8))
                    .flatten()
                {
                    Some(s) => s,
                    None if order > 0 => {
                        if !split_folio_to_list(self, folio, list) {
                            return false;
                        }
                        if order == pmd_order {
                            self.stat.count_vm_event(VmEvent::ThpSwpoutFallback);
                        }
                        self.stat.count_mthp_stat(order, MthpStat::SwpoutFallback);
                        order = 0;
                        match self.swap.as_mut().expect("checked").folio_alloc_swap(0, 0) {
                            Some(s) => s,
                            None => return false,
                        }
                    }
                    None => return false,
                };
                self.swap_cache_add_folio(folio, slot);
                self.memmap.folio_set(folio, PageFlags::DIRTY);
                slot
            }
        };
        let nr = 1u64 << order;
        let mut flags = TtuFlags::BATCH_FLUSH;
        if order == pmd_order {
            flags |= TtuFlags::SPLIT_HUGE_PMD;
        }
        self.try_to_unmap_swap(folio, flags, slot);
        if self.memmap.folio_mapcount(folio) > 0 {
            // Still mapped (mlocked): activate_locked lets go of the swap cache.
            self.folio_free_swap(folio);
            return false;
        }
        if self.memmap.folio_test(folio, PageFlags::DIRTY) {
            self.try_to_unmap_flush_dirty();
            let zero = (0..nr).all(|i| !self.memmap.page(Pfn(folio.0 + i)).nonzero);
            let si = self.swap.as_mut().expect("checked");
            for i in 0..nr {
                si.set_zero(slot + i, zero);
            }
            if zero {
                self.stat.count_vm_events(VmEvent::SwpoutZero, nr as i64);
            } else {
                self.stat.count_vm_events(VmEvent::Pswpout, nr as i64);
                self.stat.count_mthp_stat(order, MthpStat::Swpout);
                if order == pmd_order {
                    self.stat.count_vm_event(VmEvent::ThpSwpout);
                }
            }
            self.memmap.folio_clear(folio, PageFlags::DIRTY);
        }
        // __remove_mapping: only the isolation's and the swap cache's references left.
        if self.memmap.folio_ref_count(folio) != 1 + nr as i32 {
            return false;
        }
        self.swap_cache_del_folio(folio);
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
        self.nr_direct_reclaim += 1;
        let split = self.drop_slab();
        let mut folios = Vec::new();
        for mm in 0..self.mms.len() {
            if self.mms[mm].is_some() {
                self.isolate_lazyfree_folios(mm, &mut folios);
            }
        }
        let reclaimed = self.reclaim_pages(folios);
        split > 0 || reclaimed > 0
    }

    /// Isolate (take a reference on) each lazyfree folio mapped in `mm`, once.
    fn isolate_lazyfree_folios(&mut self, mm: usize, out: &mut Vec<Pfn>) {
        let ps = self.arch.granule().page_size();
        let vmas: Vec<(u64, u64)> = self.mm(mm).vmas().values().map(|v| (v.start, v.end)).collect();
        let mut seen: std::collections::HashSet<Pfn> = out.iter().copied().collect();
        for (start, end) in vmas {
            for addr in (start..end).step_by(ps as usize) {
                let Some(pfn) = self.page_table_pfn(mm, addr) else {
                    continue;
                };
                let folio = self.memmap.folio_of(pfn);
                let f = self.memmap.page(folio).flags;
                if f.contains(PageFlags::ANON) && !f.contains(PageFlags::SWAPBACKED) && seen.insert(folio) {
                    self.folio_ref_add(folio, 1);
                    out.push(folio);
                }
            }
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::hw::check::Violation;
    use crate::hw::{Event, MachineConfig};
    use crate::kcount::KernelEvent;
    use crate::mm::madvise::Madv;
    use crate::mm::mm_types::{MmId, VmFlags};
    use crate::mm::rmap::TlbBatchVariant;
    use crate::report::PageKind;
    use crate::sim::tests::{assert_clean, boot_with as boot};
    use crate::sim::user_access;

    const BASE: u64 = 0x1000_0000_0000;
    const K4: u64 = 4096;

    /// A mapped, written region of `len` bytes.
    fn written(k: &mut Kernel, mm: MmId, len: u64, flags: VmFlags) {
        k.do_mmap(mm, BASE, len, VmFlags::READ | VmFlags::WRITE | flags)
            .unwrap();
        for a in (BASE..BASE + len).step_by(K4 as usize) {
            user_access(k, mm, 0, a, true).unwrap();
        }
    }

    mod swap {
        use super::*;

        const MB: u64 = 1 << 20;

        #[test]
        fn pageout_writes_order_0_folios_out_and_a_read_fault_brings_each_back_writable() {
            let (mut k, mm) = boot(MachineConfig::default(), &[]);
            k.sys_swapon(16 * MB).unwrap();
            written(&mut k, mm, MB, VmFlags::NOHUGEPAGE);
            let free = k.nr_free_pages();
            k.do_madvise(mm, BASE, BASE + MB, Madv::PageOut).unwrap();
            assert_clean(&k);
            assert_eq!(k.stat.event(VmEvent::Pswpout), 256);
            assert_eq!(k.nr_free_pages(), free + 256);
            assert_eq!((k.mm(mm).rss_anon, k.mm(mm).rss_swap), (0, 256));
            assert_eq!(k.page_kind(mm, BASE), Some(PageKind::Swap));
            for a in (BASE..BASE + MB).step_by(K4 as usize) {
                user_access(&mut k, mm, 0, a, false).unwrap();
            }
            assert_clean(&k);
            assert_eq!(k.stat.event(VmEvent::Pswpin), 256);
            assert_eq!(k.stat.event(VmEvent::PgMajFault), 256);
            assert_eq!((k.mm(mm).maj_flt, k.mm(mm).rss_swap), (256, 0));
            assert_eq!(k.swap.as_ref().unwrap().inuse_pages, 0);
            // Writable on the read fault (6.12+): the writes that follow do not fault.
            let faults = k.stat.event(VmEvent::PgFault);
            for a in (BASE..BASE + MB).step_by(K4 as usize) {
                user_access(&mut k, mm, 0, a, true).unwrap();
            }
            assert_eq!(k.stat.event(VmEvent::PgFault), faults);
        }

        #[test]
        fn a_64k_folio_goes_out_whole_and_munmap_frees_its_slots() {
            let (mut k, mm) = boot(MachineConfig::default(), &[("hugepages-64kB/enabled", "always")]);
            k.sys_swapon(16 * MB).unwrap();
            written(&mut k, mm, MB, VmFlags::empty());
            k.do_madvise(mm, BASE, BASE + MB, Madv::PageOut).unwrap();
            assert_clean(&k);
            assert_eq!(k.stat.mthp(4, MthpStat::Swpout), 16);
            assert_eq!(k.stat.mthp(4, MthpStat::SwpoutFallback), 0);
            assert_eq!(k.stat.event(VmEvent::Pswpout), 256);
            assert_eq!(k.swap.as_ref().unwrap().inuse_pages, 256);
            k.do_munmap(mm, BASE, BASE + MB);
            assert_clean(&k);
            assert_eq!(k.swap.as_ref().unwrap().inuse_pages, 0);
            assert_eq!(k.mm(mm).rss_swap, 0);
        }

        #[test]
        fn a_device_too_small_for_a_64k_run_splits_the_folio() {
            let (mut k, mm) = boot(MachineConfig::default(), &[("hugepages-64kB/enabled", "always")]);
            // 8 slots after the header: no aligned run of 16.
            k.sys_swapon(9 * K4).unwrap();
            written(&mut k, mm, 64 << 10, VmFlags::empty());
            k.do_madvise(mm, BASE, BASE + (64 << 10), Madv::PageOut).unwrap();
            assert_clean(&k);
            assert_eq!(k.stat.mthp(4, MthpStat::SwpoutFallback), 1);
            assert_eq!(k.stat.event(VmEvent::Pswpout), 8);
            assert_eq!((k.mm(mm).rss_anon, k.mm(mm).rss_swap), (8, 8));
        }

        #[test]
        fn madvise_free_of_swapped_out_memory_frees_its_slots() {
            let (mut k, mm) = boot(MachineConfig::default(), &[]);
            k.sys_swapon(16 * MB).unwrap();
            written(&mut k, mm, 64 << 10, VmFlags::NOHUGEPAGE);
            k.do_madvise(mm, BASE, BASE + (64 << 10), Madv::PageOut).unwrap();
            k.do_madvise(mm, BASE, BASE + (32 << 10), Madv::Free).unwrap();
            assert_clean(&k);
            assert_eq!(k.swap.as_ref().unwrap().inuse_pages, 8);
            // The freed half reads back as fresh zero-page mappings, not swap-ins.
            user_access(&mut k, mm, 0, BASE, false).unwrap();
            assert_eq!(k.page_kind(mm, BASE), Some(PageKind::Zero));
            assert_eq!(k.stat.event(VmEvent::Pswpin), 0);
        }

        #[test]
        fn fork_shares_the_slots_until_both_mms_let_go() {
            let (mut k, mm) = boot(MachineConfig::default(), &[]);
            k.sys_swapon(16 * MB).unwrap();
            written(&mut k, mm, 64 << 10, VmFlags::NOHUGEPAGE);
            k.do_madvise(mm, BASE, BASE + (64 << 10), Madv::PageOut).unwrap();
            let child = k.dup_mmap(mm).unwrap();
            assert_clean(&k);
            assert_eq!(k.swap.as_ref().unwrap().swap_count(1), 2);
            assert_eq!(k.mm(child).rss_swap, 16);
            k.switch_mm(1, child);
            user_access(&mut k, child, 1, BASE, false).unwrap();
            assert_eq!(k.swap.as_ref().unwrap().swap_count(1), 1);
            k.exit_mmap(child);
            k.do_munmap(mm, BASE, BASE + (64 << 10));
            assert_clean(&k);
            assert_eq!(k.swap.as_ref().unwrap().inuse_pages, 0);
        }
    }

    #[test]
    fn without_swap_pageout_splits_large_folios_and_keeps_every_page_mapped() {
        let (mut k, mm) = boot(MachineConfig::default(), &[("hugepages-64kB/enabled", "always")]);
        written(&mut k, mm, 1 << 20, VmFlags::empty());
        k.do_madvise(mm, BASE, BASE + (1 << 20), Madv::PageOut).unwrap();
        assert_clean(&k);
        assert_eq!(k.stat.mthp(4, MthpStat::Split), 16);
        assert_eq!(k.stat.mthp(4, MthpStat::SplitDeferred), 16);
        assert_eq!(k.stat.mthp(4, MthpStat::SwpoutFallback), 16);
        assert_eq!(k.stat.mthp(4, MthpStat::NrAnon), 0);
        assert!((0..256).all(|i| k.page_kind(mm, BASE + i * K4) == Some(PageKind::Order(0))));
    }

    #[test]
    fn pageout_of_a_whole_pmd_thp_splits_it_and_counts_thp_swpout_fallback() {
        let (mut k, mm) = boot(MachineConfig::default(), &[]);
        written(&mut k, mm, 2 << 20, VmFlags::HUGEPAGE);
        k.do_madvise(mm, BASE, BASE + (2 << 20), Madv::PageOut).unwrap();
        assert_clean(&k);
        for e in [VmEvent::ThpSplitPmd, VmEvent::ThpSplitPage, VmEvent::ThpSwpoutFallback] {
            assert_eq!(k.stat.event(e), 1, "{}", e.name());
        }
        assert_eq!(k.page_kind(mm, BASE), Some(PageKind::Order(0)));
    }

    #[test]
    fn clean_lazyfree_folios_are_discarded_and_redirtied_ones_kept_swapbacked() {
        let (mut k, mm) = boot(MachineConfig::default(), &[("hugepages-64kB/enabled", "always")]);
        written(&mut k, mm, 256 << 10, VmFlags::empty());
        k.do_madvise(mm, BASE, BASE + (256 << 10), Madv::Free).unwrap();
        user_access(&mut k, mm, 0, BASE, true).unwrap();
        let free = k.nr_free_pages();
        k.do_madvise(mm, BASE, BASE + (256 << 10), Madv::PageOut).unwrap();
        assert_clean(&k);
        assert_eq!(k.stat.event(VmEvent::PgLazyFreed), 48);
        assert_eq!(k.nr_free_pages(), free + 48);
        assert_eq!(k.page_kind(mm, BASE), Some(PageKind::Order(4)));
        assert_eq!(k.page_kind(mm, BASE + (64 << 10)), None);
        let folio = k.memmap.folio_of(k.page_table_pfn(mm, BASE).unwrap());
        assert!(k.memmap.folio_test(folio, PageFlags::SWAPBACKED));
    }

    /// Seed 001's counts: 4 MiB of lazyfree memory, two reclaim_pages batches (one per
    /// pmd). Deferred: one TLBI per page issued without waiting, a DSB ISH each time 31
    /// folios are to be freed and at the batch's end (17 per pmd of order-0 folios, 2 of
    /// 64 KiB ones), plus flush_tlb_batched_pending's flush_tlb_mm (DSB ISHST, TLBI
    /// ASIDE1IS, DSB ISH) when the second pmd's walk starts.
    #[test]
    fn deferred_tlb_flush_waits_once_per_batch_where_sync_waits_per_page() {
        for (knobs, flags, variant, tlbi, ishst, ish) in [
            (&[][..], VmFlags::NOHUGEPAGE, TlbBatchVariant::Sync, 1024, 1024, 1024),
            (&[][..], VmFlags::NOHUGEPAGE, TlbBatchVariant::Deferred, 1024, 1025, 35),
            (
                &[("hugepages-64kB/enabled", "always")][..],
                VmFlags::empty(),
                TlbBatchVariant::Sync,
                2048,
                1088,
                1088,
            ),
            (
                &[("hugepages-64kB/enabled", "always")][..],
                VmFlags::empty(),
                TlbBatchVariant::Deferred,
                1024,
                65,
                5,
            ),
        ] {
            let (mut k, mm) = boot(MachineConfig::default(), knobs);
            k.tlb_batch = variant;
            written(&mut k, mm, 4 << 20, flags);
            k.do_madvise(mm, BASE, BASE + (4 << 20), Madv::Free).unwrap();
            // Reads cache the translations again, so a missing flush would be seen.
            for a in (BASE..BASE + (4 << 20)).step_by(K4 as usize) {
                user_access(&mut k, mm, 0, a, false).unwrap();
            }
            let before = k.arch.hw.ev.clone();
            k.do_madvise(mm, BASE, BASE + (4 << 20), Madv::PageOut).unwrap();
            assert_clean(&k);
            let d = |e| k.arch.hw.ev.get(e) - before.get(e);
            let got = (d(Event::TlbiVale1is), d(Event::DsbIshst), d(Event::DsbIsh));
            assert_eq!(got, (tlbi, ishst, ish), "{variant:?} {knobs:?}");
            assert_eq!(k.stat.event(VmEvent::PgLazyFreed), 1024);
        }
    }

    /// 16 lazyfree 64K folios. Batched (6.15+): each goes in one get_and_clear, with one
    /// rmap removal and no contpte unfold. Per pte (6.12): the first pte of each folio
    /// unfolds its block (a contpte_convert with its DSB ISH), each pte has its own
    /// TLBI and rmap removal, and the first removal queues the folio for deferred split.
    #[test]
    fn lazyfree_unmap_per_pte_unfolds_each_block_and_queues_a_deferred_split() {
        for per_pte in [false, true] {
            let (mut k, mm) = boot(MachineConfig::default(), &[("hugepages-64kB/enabled", "always")]);
            k.lazyfree_unmap_per_pte = per_pte;
            written(&mut k, mm, 1 << 20, VmFlags::empty());
            k.do_madvise(mm, BASE, BASE + (1 << 20), Madv::Free).unwrap();
            let (ev, kc) = (k.arch.hw.ev.clone(), k.arch.kc.clone());
            k.do_madvise(mm, BASE, BASE + (1 << 20), Madv::PageOut).unwrap();
            assert_clean(&k);
            let dk = |e| k.arch.kc.get(e) - kc.get(e);
            let got = (
                dk(KernelEvent::ContpteConvert),
                dk(KernelEvent::FolioRemoveRmapPtes),
                dk(KernelEvent::ArchTlbbatchAddPending),
                k.arch.hw.ev.get(Event::DsbIsh) - ev.get(Event::DsbIsh),
                k.stat.mthp(4, MthpStat::SplitDeferred),
            );
            let want = if per_pte {
                (16, 256, 256, 17, 16)
            } else {
                (0, 16, 16, 1, 0)
            };
            assert_eq!(got, want, "per_pte {per_pte}");
            assert_eq!(k.stat.event(VmEvent::PgLazyFreed), 256);
            assert_eq!(k.page_kind(mm, BASE), None);
        }
    }

    /// 64 lazyfree order-0 folios: the free batch fills at 31 and 62 (a flush and a
    /// free each), and the last two are flushed at the end.
    #[test]
    fn reclaim_flushes_pending_tlbis_each_time_its_free_batch_fills() {
        let (mut k, mm) = boot(MachineConfig::default(), &[]);
        written(&mut k, mm, 64 * K4, VmFlags::NOHUGEPAGE);
        k.do_madvise(mm, BASE, BASE + 64 * K4, Madv::Free).unwrap();
        let ish = k.arch.hw.ev.get(Event::DsbIsh);
        k.do_madvise(mm, BASE, BASE + 64 * K4, Madv::PageOut).unwrap();
        assert_clean(&k);
        assert_eq!(k.stat.event(VmEvent::PgLazyFreed), 64);
        assert_eq!(k.arch.hw.ev.get(Event::DsbIsh) - ish, 3);
    }

    /// Without try_to_unmap_flush the TLBIs are still pending when the folio is freed:
    /// the stale-translation checker catches it.
    #[test]
    fn freeing_before_the_final_flush_leaves_a_stale_translation() {
        let (mut k, mm) = boot(MachineConfig::default(), &[]);
        written(&mut k, mm, 4 * K4, VmFlags::NOHUGEPAGE);
        k.do_madvise(mm, BASE, BASE + 4 * K4, Madv::Free).unwrap();
        // MADV_FREE flushed the TLB; a read caches the (still clean) translation again.
        user_access(&mut k, mm, 0, BASE, false).unwrap();
        let folio = k.page_table_pfn(mm, BASE).unwrap();
        k.folio_ref_add(folio, 1);
        k.try_to_unmap(folio, TtuFlags::BATCH_FLUSH);
        k.folio_put(folio);
        assert!(matches!(
            k.arch.hw.violations[..],
            [Violation::StaleTranslation { pfn, .. }] if pfn == folio
        ));
    }

    #[test]
    fn an_order0_allocation_reclaims_lazyfree_memory_before_failing() {
        let cfg = MachineConfig {
            ram_bytes: 64 << 20,
            ..MachineConfig::default()
        };
        let (mut k, mm) = boot(cfg, &[]);
        written(&mut k, mm, 48 << 20, VmFlags::NOHUGEPAGE);
        k.do_madvise(mm, BASE, BASE + (48 << 20), Madv::Free).unwrap();
        let b = BASE + (1 << 30);
        k.do_mmap(mm, b, 48 << 20, VmFlags::READ | VmFlags::WRITE).unwrap();
        for a in (b..b + (48 << 20)).step_by(K4 as usize) {
            user_access(&mut k, mm, 0, a, true).unwrap();
        }
        assert_clean(&k);
        assert_eq!(k.stat.event(VmEvent::PgLazyFreed), 12288);
        // Nothing reclaimable is left: the next region runs out of memory.
        let c = BASE + (2 << 30);
        k.do_mmap(mm, c, 48 << 20, VmFlags::READ | VmFlags::WRITE).unwrap();
        let oom = (c..c + (48 << 20))
            .step_by(K4 as usize)
            .find_map(|a| user_access(&mut k, mm, 0, a, true).err());
        assert!(matches!(oom, Some(crate::mm::memory::FaultError::Oom(_))), "{oom:?}");
    }

    /// Both halves of direct reclaim in one run: the shrinker splits the partially
    /// mapped folio (freeing its unmapped pages), reclaim discards the lazyfree ones.
    #[test]
    fn direct_reclaim_runs_the_shrinker_and_discards_lazyfree_folios() {
        let (mut k, mm) = boot(MachineConfig::default(), &[("hugepages-64kB/enabled", "always")]);
        written(&mut k, mm, 256 << 10, VmFlags::empty());
        k.do_madvise(mm, BASE, BASE + 8 * K4, Madv::DontNeed).unwrap();
        k.do_madvise(mm, BASE + (64 << 10), BASE + (128 << 10), Madv::Free)
            .unwrap();
        let free = k.nr_free_pages();
        assert!(k.try_to_free_pages());
        assert_clean(&k);
        assert_eq!(k.stat.mthp(4, MthpStat::Split), 1);
        assert_eq!(k.stat.event(VmEvent::PgLazyFreed), 16);
        assert_eq!(k.nr_free_pages(), free + 8 + 16);
    }
}
