//! mm/vmscan.c: page reclaim of the folios madvise(MADV_PAGEOUT) hands it
//! (reclaim_pages -> shrink_folio_list), direct reclaim over the LRU lists when an
//! allocation fails or a cgroup charge would go over its limit (do_try_to_free_pages
//! -> shrink_lruvec), and the shrinkers on demand (drop_slab).
//!
//! Without a swap device (the validation host's default) a swap-backed anon folio
//! cannot be written out, so reclaim only splits large ones (swpout_fallback) and
//! activates every piece, which stays mapped; with one (`swapon`) it is swapped out.
//! Lazyfree (MADV_FREE) folios that are still clean are discarded.

use super::folio::{LruFlags, PageFlags};
use super::huge_memory::{can_split_folio, deferred_split_scan, split_folio_to_list};
use super::rmap::TtuFlags;
use super::swap::{LruList, PAGEVEC_SIZE};
use super::vmstat::{MthpStat, VmEvent};
use super::Kernel;
use crate::hw::Pfn;

/// SWAP_CLUSTER_MAX: the folios one isolation takes, and the least reclaim aims at.
const SWAP_CLUSTER_MAX: u64 = 32;
/// DEF_PRIORITY: the first pass scans each list's size >> 12.
const DEF_PRIORITY: u32 = 12;
/// MAX_SWAPPINESS.
const MAX_SWAPPINESS: u64 = 200;
/// vm_swappiness at its default, which a v1 cgroup inherits (memory.swappiness).
const SWAPPINESS: u64 = 60;

/// What shrink_folio_list does with one folio.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
enum Verdict {
    /// Only the isolation reference is left: free it.
    Free,
    /// activate_locked: back to the LRU, active (pgactivate, unless mlocked).
    Activate,
    /// keep: back to the LRU as it was.
    Keep,
}

/// folio_check_references' answer.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
enum FolioReferences {
    Reclaim,
    Keep,
    Activate,
}

/// struct reclaim_stat, the part the model's callers use.
#[derive(Default)]
struct ReclaimStat {
    nr_reclaimed: u64,
    /// Pages written out (pageout returned PAGE_SUCCESS; zero-filled ones too).
    nr_pageout: u64,
    nr_activate: u64,
}

/// Who reclaims: the node's kswapd, a direct reclaimer for the node
/// (try_to_free_pages), or one for the workload's cgroup (cgroup_reclaim).
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
enum Reclaimer {
    Kswapd,
    Direct,
    Cgroup,
}

/// struct scan_control.
struct ScanControl {
    reclaimer: Reclaimer,
    /// cgroup_reclaim: the workload's cgroup is the target, not the node.
    cgroup: bool,
    nr_to_reclaim: u64,
    /// Pages isolated from the inactive lists so far (kswapd's progress test).
    nr_scanned: u64,
    nr_reclaimed: u64,
    priority: u32,
    /// DEACTIVATE_ANON / DEACTIVATE_FILE.
    may_deactivate: [bool; 2],
    skipped_deactivate: bool,
    force_deactivate: bool,
    memcg_full_walk: bool,
    cache_trim_mode: bool,
}

impl ScanControl {
    /// A scan_control starting at DEF_PRIORITY.
    fn new(reclaimer: Reclaimer, nr_to_reclaim: u64) -> ScanControl {
        ScanControl {
            reclaimer,
            cgroup: reclaimer == Reclaimer::Cgroup,
            nr_to_reclaim,
            nr_scanned: 0,
            nr_reclaimed: 0,
            priority: DEF_PRIORITY,
            may_deactivate: [false; 2],
            skipped_deactivate: false,
            force_deactivate: false,
            memcg_full_walk: false,
            cache_trim_mode: false,
        }
    }
}

impl Kernel {
    /// reclaim_pages (reclaim_folio_list with references ignored, as for
    /// MADV_PAGEOUT): shrink the isolated folios, in the order given, PG_active
    /// cleared, and put back what stays. Each folio carries the reference its
    /// isolation took. Returns the pages reclaimed.
    pub fn reclaim_pages(&mut self, folios: Vec<Pfn>) -> u64 {
        for &folio in &folios {
            self.memmap.lru_mut(folio).remove(LruFlags::ACTIVE);
        }
        let (stat, kept) = self.shrink_folio_list(folios, true);
        for folio in kept {
            self.folio_putback_lru(folio);
        }
        stat.nr_reclaimed
    }

    /// shrink_folio_list: each isolated folio, in the order given, is checked for
    /// references (unless `ignore_references`), then written out, discarded or
    /// kept. Returns the counts and the folios to put back, in order, each still
    /// holding its isolation reference; freed ones are freed here.
    fn shrink_folio_list(&mut self, folios: Vec<Pfn>, ignore_references: bool) -> (ReclaimStat, Vec<Pfn>) {
        // The list is consumed from its tail, where split pages go too.
        let mut list: Vec<Pfn> = folios.into_iter().rev().collect();
        let mut stat = ReclaimStat::default();
        let mut free = Vec::new();
        let mut kept = Vec::new();
        while let Some(folio) = list.pop() {
            let verdict = if ignore_references {
                self.shrink_folio(folio, &mut list, &mut stat)
            } else {
                match self.folio_check_references(folio) {
                    FolioReferences::Activate => Verdict::Activate,
                    FolioReferences::Keep => Verdict::Keep,
                    FolioReferences::Reclaim => self.shrink_folio(folio, &mut list, &mut stat),
                }
            };
            match verdict {
                Verdict::Free => {
                    stat.nr_reclaimed += self.memmap.folio_nr_pages(folio);
                    free.push(folio);
                    // free_folios is a folio_batch: when it fills, the TLBIs pending
                    // so far complete (try_to_unmap_flush) and it is freed.
                    if free.len() == PAGEVEC_SIZE {
                        self.try_to_unmap_flush();
                        for folio in free.drain(..) {
                            self.folio_put(folio);
                        }
                    }
                }
                Verdict::Activate => {
                    if !self.memmap.folio_test(folio, PageFlags::MLOCKED) {
                        self.memmap.lru_mut(folio).insert(LruFlags::ACTIVE);
                        stat.nr_activate += self.memmap.folio_nr_pages(folio);
                    }
                    kept.push(folio);
                }
                Verdict::Keep => kept.push(folio),
            }
        }
        // The TLBIs of every pte cleared above complete before any folio is freed.
        self.try_to_unmap_flush();
        for folio in free {
            self.folio_put(folio);
        }
        self.stat.count_vm_events(VmEvent::PgActivate, stat.nr_activate as i64);
        (stat, kept)
    }

    /// One folio of shrink_folio_list, past the reference check.
    fn shrink_folio(&mut self, folio: Pfn, list: &mut Vec<Pfn>, stat: &mut ReclaimStat) -> Verdict {
        let f = self.memmap.page(folio).flags;
        if f.contains(PageFlags::MLOCKED) {
            return Verdict::Activate;
        }
        if self.shmem.folio_inode(folio).is_some() {
            return self.pageout_shmem(folio, list, stat);
        }
        if f.contains(PageFlags::ANON | PageFlags::SWAPBACKED) {
            if self.swap.is_none() {
                self.pageout_without_swap(folio, list);
                return Verdict::Activate;
            }
            return self.pageout_to_swap(folio, list, stat);
        }
        if self.memmap.folio_mapcount(folio) > 0 {
            let mut flags = TtuFlags::BATCH_FLUSH;
            if self.memmap.folio_order(folio) == self.arch.granule().pmd_order() {
                flags |= TtuFlags::SPLIT_HUGE_PMD;
            }
            self.try_to_unmap(folio, flags);
            if self.memmap.folio_mapcount(folio) > 0 {
                return Verdict::Activate;
            }
        }
        if self.memmap.folio_ref_count(folio) != 1 {
            return Verdict::Keep;
        }
        let nr = self.memmap.folio_nr_pages(folio);
        self.stat.count_vm_events(VmEvent::PgLazyFreed, nr as i64);
        Verdict::Free
    }

    /// folio_check_references: the ptes' accessed bits (folio_referenced clears
    /// them) and PG_referenced decide. A folio found referenced for the first time
    /// is marked and kept for another trip round the inactive list; referenced
    /// again (or by more than one VMA), it is activated; unreferenced, reclaimed.
    /// A folio in a locked VMA is activated.
    fn folio_check_references(&mut self, folio: Pfn) -> FolioReferences {
        let (referenced_ptes, locked) = self.folio_referenced(folio);
        if locked {
            return FolioReferences::Activate;
        }
        let s = self.memmap.lru_mut(folio);
        let referenced_folio = s.contains(LruFlags::REFERENCED);
        s.set(LruFlags::REFERENCED, referenced_ptes > 0);
        if referenced_ptes > 0 {
            if referenced_folio || referenced_ptes > 1 {
                return FolioReferences::Activate;
            }
            return FolioReferences::Keep;
        }
        FolioReferences::Reclaim
    }

    /// try_to_free_mem_cgroup_pages: reclaim at least `nr_pages` (SWAP_CLUSTER_MAX at
    /// the least) from the workload's cgroup. Returns the pages reclaimed.
    pub fn try_to_free_mem_cgroup_pages(&mut self, nr_pages: u64) -> u64 {
        let mut sc = ScanControl::new(Reclaimer::Cgroup, nr_pages.max(SWAP_CLUSTER_MAX));
        self.do_try_to_free_pages(&mut sc)
    }

    /// do_try_to_free_pages: shrink the node at falling priority until enough is
    /// reclaimed; with nothing reclaimed, once more walking every cgroup, then once
    /// more forcing deactivation if a pass skipped it.
    fn do_try_to_free_pages(&mut self, sc: &mut ScanControl) -> u64 {
        loop {
            loop {
                self.shrink_node(sc);
                if sc.nr_reclaimed >= sc.nr_to_reclaim || sc.priority == 0 {
                    break;
                }
                sc.priority -= 1;
            }
            if sc.nr_reclaimed > 0 {
                return sc.nr_reclaimed;
            }
            if !sc.memcg_full_walk {
                sc.memcg_full_walk = true;
            } else if sc.skipped_deactivate {
                sc.force_deactivate = true;
                sc.skipped_deactivate = false;
            } else {
                return 0;
            }
            sc.priority = DEF_PRIORITY;
        }
    }

    /// shrink_node over the one lruvec: prepare_scan_control, then shrink_lruvec (the
    /// shrinkers run in try_to_free_pages; a cgroup's have no objects the model keeps
    /// per cgroup).
    fn shrink_node(&mut self, sc: &mut ScanControl) {
        // prepare_scan_control; the model tracks no refaults (workingset), so only
        // the ratio decides.
        if sc.force_deactivate {
            sc.may_deactivate = [true, true];
        } else {
            sc.may_deactivate = [
                self.inactive_is_low(sc, LruList::InactiveAnon),
                self.inactive_is_low(sc, LruList::InactiveFile),
            ];
        }
        let file = self.lruvec.size(LruList::InactiveFile);
        sc.cache_trim_mode = (file >> sc.priority) > 0 && !sc.may_deactivate[1];
        self.shrink_lruvec(sc);
    }

    /// lruvec_page_state(NR_LRU_BASE + lru): a cgroup's list sizes as its statistics
    /// were last flushed. The kernel flushes them every 2 s (flush_memcg_stats_dwork;
    /// reclaim's own flush is rate-limited to the same period), so through a run
    /// shorter than that a new cgroup's read as at its creation: empty. The node's are
    /// taken as current (the kernel reads the root cgroup's, flushed as rarely: an
    /// approximation no host run checks).
    fn lruvec_page_state(&self, sc: &ScanControl, lru: LruList) -> u64 {
        if sc.cgroup {
            0
        } else {
            self.lruvec.size(lru)
        }
    }

    /// inactive_is_low: the inactive list is smaller than the active one over the
    /// target ratio (1 below 1 GiB of the type, int_sqrt(10 * GiB) above).
    fn inactive_is_low(&self, sc: &ScanControl, inactive_lru: LruList) -> bool {
        let inactive = self.lruvec_page_state(sc, inactive_lru);
        let active = self.lruvec_page_state(sc, inactive_lru.active());
        let gb = (inactive + active) >> (30 - self.arch.granule().page_shift());
        let ratio = if gb > 0 { (10 * gb).isqrt() } else { 1 };
        inactive * ratio < active
    }

    /// get_scan_count: how much of each list this priority scans. Anon only with
    /// free swap; the cgroup's swappiness and the lists' recent reclaim cost share
    /// the pressure (SCAN_FRACT), evenly at priority 0 (SCAN_EQUAL).
    fn get_scan_count(&self, sc: &ScanControl) -> [u64; 4] {
        #[derive(PartialEq)]
        enum Balance {
            Equal,
            Fract,
            File,
        }
        let swap_free = self.swap.as_ref().is_some_and(|si| si.free_pages() > 0);
        let balance = if !swap_free {
            Balance::File
        } else if sc.priority == 0 {
            Balance::Equal
        } else if sc.cache_trim_mode {
            Balance::File
        } else {
            Balance::Fract
        };
        // calculate_pressure_balance
        let (anon_cost, file_cost) = (self.lruvec.anon_cost, self.lruvec.file_cost);
        let total = anon_cost + file_cost;
        let (anon_cost, file_cost) = (total + anon_cost, total + file_cost);
        let total = anon_cost + file_cost;
        let ap = SWAPPINESS * (total + 1) / (anon_cost + 1);
        let fp = (MAX_SWAPPINESS - SWAPPINESS) * (total + 1) / (file_cost + 1);
        let mut nr = [0; 4];
        for lru in LruList::EVICTABLE {
            let scan = self.lruvec.size(lru) >> sc.priority;
            nr[lru as usize] = match balance {
                Balance::Equal => scan,
                Balance::Fract => scan * if lru.is_file() { fp } else { ap } / (ap + fp),
                Balance::File => {
                    if lru.is_file() {
                        scan
                    } else {
                        0
                    }
                }
            };
        }
        nr
    }

    /// shrink_lruvec: SWAP_CLUSTER_MAX at a time from each list with scanning left,
    /// until the targets are scanned or (cgroup reclaim) enough is reclaimed, with
    /// one proportional nudge when both types still have targets; then age the
    /// active anon list if the inactive one is low.
    fn shrink_lruvec(&mut self, sc: &mut ScanControl) {
        let mut nr = self.get_scan_count(sc);
        let targets = nr;
        let (ia, aa, inf, af) = (0, 1, 2, 3);
        let mut nr_reclaimed = 0;
        while nr[ia] > 0 || nr[af] > 0 || nr[inf] > 0 {
            for lru in LruList::EVICTABLE {
                let l = lru as usize;
                if nr[l] > 0 {
                    let nr_to_scan = nr[l].min(SWAP_CLUSTER_MAX);
                    nr[l] -= nr_to_scan;
                    nr_reclaimed += self.shrink_list(lru, nr_to_scan, sc);
                }
            }
            // Root direct reclaim at DEF_PRIORITY scans all its targets.
            let proportional = sc.reclaimer == Reclaimer::Direct && sc.priority == DEF_PRIORITY;
            if nr_reclaimed < sc.nr_to_reclaim || proportional {
                continue;
            }
            let nr_file = nr[inf] + nr[af];
            let nr_anon = nr[ia] + nr[aa];
            if nr_file == 0 || nr_anon == 0 {
                break;
            }
            let (stop, other, percentage) = if nr_file > nr_anon {
                (ia, inf, nr_anon * 100 / (targets[ia] + targets[aa] + 1))
            } else {
                (inf, ia, nr_file * 100 / (targets[inf] + targets[af] + 1))
            };
            nr[stop] = 0;
            nr[stop + 1] = 0;
            for l in [other, other + 1] {
                let scanned = targets[l] - nr[l];
                nr[l] = targets[l] * (100 - percentage) / 100;
                nr[l] -= nr[l].min(scanned);
            }
        }
        sc.nr_reclaimed += nr_reclaimed;
        if self.swap.is_some() && self.inactive_is_low(sc, LruList::InactiveAnon) {
            self.shrink_active_list(SWAP_CLUSTER_MAX, LruList::ActiveAnon, sc);
        }
    }

    /// shrink_list: an active list is only aged, and only when deactivation is on.
    fn shrink_list(&mut self, lru: LruList, nr_to_scan: u64, sc: &mut ScanControl) -> u64 {
        if lru.is_active() {
            if sc.may_deactivate[lru.is_file() as usize] {
                self.shrink_active_list(nr_to_scan, lru, sc);
            } else {
                sc.skipped_deactivate = true;
            }
            return 0;
        }
        self.shrink_inactive_list(nr_to_scan, lru, sc)
    }

    /// isolate_lru_folios: up to `nr_to_scan` pages' worth of folios from the tail of
    /// `lru`, each with a reference. Returns them, oldest first, and the pages scanned.
    fn isolate_lru_folios(&mut self, nr_to_scan: u64, lru: LruList) -> (Vec<Pfn>, u64) {
        let mut scan = 0;
        let mut taken = Vec::new();
        while scan < nr_to_scan {
            let Some(folio) = self.lruvec.lru_to_folio(lru) else {
                break;
            };
            scan += self.memmap.folio_nr_pages(folio);
            self.lruvec_del_folio(folio);
            self.folio_ref_add(folio, 1);
            taken.push(folio);
        }
        (taken, scan)
    }

    /// shrink_inactive_list: isolate, shrink_folio_list with references, put back
    /// what stays (move_folios_to_lru), count the scan and the steal (pgscan_kswapd /
    /// pgscan_direct and the steals only for the node's own reclaim, not a cgroup's),
    /// and note the cost: pages written out, and pages scanned but not reclaimed.
    fn shrink_inactive_list(&mut self, nr_to_scan: u64, lru: LruList, sc: &mut ScanControl) -> u64 {
        self.lru_add_drain();
        let (folios, nr_scanned) = self.isolate_lru_folios(nr_to_scan, lru);
        sc.nr_scanned += nr_scanned;
        let (scan_node, steal_node) = match sc.reclaimer {
            Reclaimer::Kswapd => (Some(VmEvent::PgScanKswapd), Some(VmEvent::PgStealKswapd)),
            Reclaimer::Direct => (Some(VmEvent::PgScanDirect), Some(VmEvent::PgStealDirect)),
            Reclaimer::Cgroup => (None, None),
        };
        let file = lru.is_file();
        let (scan, steal) = if file {
            (VmEvent::PgScanFile, VmEvent::PgStealFile)
        } else {
            (VmEvent::PgScanAnon, VmEvent::PgStealAnon)
        };
        self.stat.count_vm_events(scan, nr_scanned as i64);
        if let Some(e) = scan_node {
            self.stat.count_vm_events(e, nr_scanned as i64);
        }
        if folios.is_empty() {
            return 0;
        }
        let (stat, kept) = self.shrink_folio_list(folios, false);
        self.move_folios_to_lru(kept);
        self.stat.count_vm_events(steal, stat.nr_reclaimed as i64);
        if let Some(e) = steal_node {
            self.stat.count_vm_events(e, stat.nr_reclaimed as i64);
        }
        self.lru_note_cost(sc, file, stat.nr_pageout, nr_scanned - stat.nr_reclaimed);
        stat.nr_reclaimed
    }

    /// move_folios_to_lru: each onto its list's head, in order, its isolation
    /// reference dropped (the last one frees it). Returns the pages moved.
    fn move_folios_to_lru(&mut self, folios: Vec<Pfn>) -> u64 {
        let mut moved = 0;
        for folio in folios {
            let nr = self.memmap.folio_nr_pages(folio);
            self.lruvec_add_folio(folio);
            moved += nr;
            self.folio_put(folio);
        }
        moved
    }

    /// shrink_active_list: folios from the active list's tail all go to the inactive
    /// one (PG_workingset set): referenced anon folios are not spared; their accessed
    /// bits are cleared all the same (folio_referenced). Counts pgdeactivate, and
    /// pgrefill for the node's own reclaim.
    fn shrink_active_list(&mut self, nr_to_scan: u64, lru: LruList, sc: &ScanControl) {
        self.lru_add_drain();
        let (folios, nr_scanned) = self.isolate_lru_folios(nr_to_scan, lru);
        if !sc.cgroup {
            self.stat.count_vm_events(VmEvent::PgRefill, nr_scanned as i64);
        }
        let mut inactive = Vec::new();
        for folio in folios {
            self.folio_referenced(folio);
            let s = self.memmap.lru_mut(folio);
            s.remove(LruFlags::ACTIVE);
            s.insert(LruFlags::WORKINGSET);
            inactive.push(folio);
        }
        let nr_deactivate = self.move_folios_to_lru(inactive);
        self.stat.count_vm_events(VmEvent::PgDeactivate, nr_deactivate as i64);
    }

    /// lru_note_cost: reclaim cost of a type (I/O weighs SWAP_CLUSTER_MAX per page,
    /// rotations one), both halved when they add up to over a quarter of the lists.
    fn lru_note_cost(&mut self, sc: &ScanControl, file: bool, nr_io: u64, nr_rotated: u64) {
        let cost = nr_io * SWAP_CLUSTER_MAX + nr_rotated;
        if cost == 0 {
            return;
        }
        let size: u64 = LruList::EVICTABLE.iter().map(|&l| self.lruvec_page_state(sc, l)).sum();
        let v = &mut self.lruvec;
        if file {
            v.file_cost += cost;
        } else {
            v.anon_cost += cost;
        }
        if v.file_cost + v.anon_cost > size / 4 {
            v.file_cost /= 2;
            v.anon_cost /= 2;
        }
    }

    /// shrink_folio_list for a swap-backed anon folio with a swap device: unless it is
    /// in the swap cache already (read back for a forked mm), slots for the whole
    /// folio, or (none free in a run that large, or no THP_SWAP) split it and go on
    /// with the head at order 0 (swpout_fallback), and the folio joins the swap cache
    /// dirty; unmap it to swap entries; write it out if dirty, unless all zeroes (the
    /// zeromap: swpout_zero, no I/O); then, zram being synchronous, it leaves the swap
    /// cache and is freed in the same pass (__remove_mapping) unless someone else
    /// holds it. A folio that cannot go out is activated.
    fn pageout_to_swap(&mut self, folio: Pfn, list: &mut Vec<Pfn>, stat: &mut ReclaimStat) -> Verdict {
        let pmd_order = self.arch.granule().pmd_order();
        let mut order = self.memmap.folio_order(folio);
        let cached = self.swap.as_ref().expect("checked by the caller").cache.swap_of(folio);
        let slot = match cached {
            Some(slot) => slot,
            None => {
                if order > 0 && !can_split_folio(self, folio, 1) {
                    return Verdict::Activate;
                }
                let f = self.memmap.page(folio).flags;
                if order > 0 && f.contains(PageFlags::DEFERRED | PageFlags::PARTIALLY_MAPPED) {
                    if !split_folio_to_list(self, folio, list) {
                        return Verdict::Activate;
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
                            return Verdict::Activate;
                        }
                        if order == pmd_order {
                            self.stat.count_vm_event(VmEvent::ThpSwpoutFallback);
                        }
                        self.stat.count_mthp_stat(order, MthpStat::SwpoutFallback);
                        order = 0;
                        match self.swap.as_mut().expect("checked").folio_alloc_swap(0, 0) {
                            Some(s) => s,
                            None => return Verdict::Activate,
                        }
                    }
                    None => return Verdict::Activate,
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
            return Verdict::Activate;
        }
        if self.memmap.folio_test(folio, PageFlags::DIRTY) {
            self.try_to_unmap_flush_dirty();
            self.swap_writeout(folio, slot);
            stat.nr_pageout += nr;
        }
        // __remove_mapping: only the isolation's and the swap cache's references left.
        if self.memmap.folio_ref_count(folio) != 1 + nr as i32 {
            return Verdict::Keep;
        }
        self.swap_cache_del_folio(folio);
        Verdict::Free
    }

    /// shrink_folio_list for a shmem folio: try_to_unmap through the file rmap (each
    /// pte cleared, its dirt moved to the folio); a clean folio is then dropped from
    /// the page cache (__remove_mapping: its page reads back as a hole, zeroes), a dirty
    /// one goes to pageout -> shmem_writeout and, written synchronously, leaves the swap
    /// cache and is freed in the same pass. No slot: activated, still in the cache. A
    /// pmd mapping is zapped whole (TTU_SPLIT_HUGE_PMD on a file pmd); a folio that
    /// shmem_writeout splits leaves its tail pages on `list`.
    fn pageout_shmem(&mut self, folio: Pfn, list: &mut Vec<Pfn>, stat: &mut ReclaimStat) -> Verdict {
        if self.memmap.folio_mapcount(folio) > 0 {
            let mut flags = TtuFlags::BATCH_FLUSH;
            if self.memmap.folio_order(folio) == self.arch.granule().pmd_order() {
                flags |= TtuFlags::SPLIT_HUGE_PMD;
            }
            self.try_to_unmap_file(folio, flags);
            if self.memmap.folio_mapcount(folio) > 0 {
                return Verdict::Activate;
            }
        }
        // The isolation's reference and the page cache's (one per page).
        let refs = 1 + self.memmap.folio_nr_pages(folio) as i32;
        if !self.memmap.folio_test(folio, PageFlags::DIRTY) {
            // __remove_mapping: only the isolation's and the page cache's references.
            if self.memmap.folio_ref_count(folio) != refs {
                return Verdict::Keep;
            }
            self.shmem_delete_from_page_cache(folio, None);
            return Verdict::Free;
        }
        self.try_to_unmap_flush_dirty();
        // pageout: is_page_cache_freeable, then folio_clear_dirty_for_io.
        if self.memmap.folio_ref_count(folio) != refs {
            return Verdict::Keep;
        }
        self.memmap.folio_clear(folio, PageFlags::DIRTY);
        if self.shmem_writeout(folio, list).is_none() {
            self.memmap.folio_set(folio, PageFlags::DIRTY);
            return Verdict::Activate;
        }
        // Split or not, the folio written: the isolation's and the swap cache's.
        let refs = 1 + self.memmap.folio_nr_pages(folio) as i32;
        stat.nr_pageout += refs as u64 - 1;
        if self.memmap.folio_ref_count(folio) != refs {
            return Verdict::Keep;
        }
        self.swap_cache_del_folio(folio);
        Verdict::Free
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

    /// kswapd of node `nid` (balance_pgdat, order 0), run where the model's allocator finds free
    /// memory under the low watermark after an allocation: the model is sequential,
    /// so the background reclaimer runs at that point, to completion. At falling
    /// priority: age the active anon list if the inactive one is low, shrink the node
    /// for the high watermark's worth (kswapd_shrink_node), until free memory is over
    /// the high watermark. The priority holds while a pass scans its target and
    /// reclaims something. Its shrink_slab is not run (the model's one shrinker runs
    /// in direct reclaim).
    pub fn kswapd(&mut self, nid: usize) {
        self.stat.count_vm_event(VmEvent::PageOutRun);
        let high = self.node_zones[nid].wmark.high;
        let mut sc = ScanControl::new(Reclaimer::Kswapd, high.max(SWAP_CLUSTER_MAX));
        while sc.priority >= 1 && self.node_zones[nid].free_pages <= high {
            if self.swap.is_some() && self.inactive_is_low(&sc, LruList::InactiveAnon) {
                self.shrink_active_list(SWAP_CLUSTER_MAX, LruList::ActiveAnon, &sc);
            }
            sc.nr_scanned = 0;
            let before = sc.nr_reclaimed;
            self.shrink_node(&mut sc);
            let progress = sc.nr_scanned.max(sc.nr_reclaimed - before) >= sc.nr_to_reclaim;
            if !progress || sc.nr_reclaimed == before {
                sc.priority -= 1;
            }
        }
    }

    /// try_to_free_pages (direct reclaim, when an allocation that may reclaim fails):
    /// the shrinkers, then do_try_to_free_pages over the node's LRU lists for
    /// SWAP_CLUSTER_MAX pages (lazyfree folios on the file lists; anon ones too with
    /// free swap). The model runs every shrinker in full first (drop_slab) where the
    /// kernel's shrink_slab scans a share at each priority. Returns whether anything
    /// was freed.
    pub fn try_to_free_pages(&mut self) -> bool {
        self.nr_direct_reclaim += 1;
        let split = self.drop_slab();
        let mut sc = ScanControl::new(Reclaimer::Direct, SWAP_CLUSTER_MAX);
        let reclaimed = self.do_try_to_free_pages(&mut sc);
        split > 0 || reclaimed > 0
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

    mod lru {
        use super::*;
        use crate::mm::memcontrol::MemCgroup;

        const MB: u64 = 1 << 20;

        /// A kernel with swap and a cgroup of `limit` bytes.
        fn limited(limit: u64) -> (Kernel, MmId) {
            let (mut k, mm) = boot(MachineConfig::default(), &[]);
            k.sys_swapon(64 * MB).unwrap();
            k.memcg = Some(MemCgroup::new(limit / K4));
            (k, mm)
        }

        #[test]
        fn writing_past_the_cgroup_limit_swaps_the_oldest_pages_out() {
            let (mut k, mm) = limited(2 * MB);
            written(&mut k, mm, 4 * MB, VmFlags::NOHUGEPAGE);
            assert_clean(&k);
            let cg = k.memcg.as_ref().unwrap();
            assert!(cg.usage <= cg.limit, "{cg:?}");
            let out = k.stat.event(VmEvent::Pswpout);
            assert!(out >= 512, "{out}");
            assert_eq!(k.stat.event(VmEvent::PgStealAnon), out);
            // Every page is young on the first trip round the list: each goes out on
            // its second, so reclaim scans at least twice what it steals.
            assert!(k.stat.event(VmEvent::PgScanAnon) >= 2 * out);
            assert_eq!(k.page_kind(mm, BASE), Some(PageKind::Swap));
            assert_eq!(k.page_kind(mm, BASE + 4 * MB - K4), Some(PageKind::Order(0)));
            assert_eq!(k.mm(mm).rss_swap, out);
        }

        #[test]
        fn a_young_folio_is_kept_once_then_activated_and_an_old_one_reclaimed() {
            let (mut k, mm) = limited(64 * MB);
            written(&mut k, mm, 2 * K4, VmFlags::NOHUGEPAGE);
            let a = k.memmap.folio_of(k.page_table_pfn(mm, BASE).unwrap());
            let b = k.memmap.folio_of(k.page_table_pfn(mm, BASE + K4).unwrap());
            assert_eq!(k.folio_check_references(a), FolioReferences::Keep);
            assert!(k.memmap.lru(a).contains(LruFlags::REFERENCED));
            assert_eq!(k.folio_check_references(b), FolioReferences::Keep);
            // ptep_clear_flush_young's TLBIs complete at the next DSB (here the one a
            // batch flush issues); then a read walks again and sets the young bit, and
            // PG_referenced remains from the first look.
            crate::arch::arm64::tlbflush::arch_tlbbatch_flush(&mut k.arch.hw);
            user_access(&mut k, mm, 0, BASE, false).unwrap();
            assert_eq!(k.folio_check_references(a), FolioReferences::Activate);
            // Not touched since the first look: its young bit is clear.
            assert_eq!(k.folio_check_references(b), FolioReferences::Reclaim);
        }

        #[test]
        fn folio_referenced_clears_a_whole_contpte_block_and_counts_the_mm_once() {
            let (mut k, mm) = boot(MachineConfig::default(), &[("hugepages-64kB/enabled", "always")]);
            written(&mut k, mm, 64 << 10, VmFlags::empty());
            let folio = k.memmap.folio_of(k.page_table_pfn(mm, BASE).unwrap());
            assert_eq!(k.memmap.folio_order(folio), 4);
            assert_eq!(k.folio_referenced(folio), (1, false));
            let amm = k.arch_mm(mm);
            for i in 0..16 {
                let ptep = k.pte_offset(mm, BASE + i * K4).unwrap();
                let p = k.arch.__ptep_get(ptep);
                assert!(p.pte_cont() && !p.pte_young(), "entry {i}");
            }
            let ptep = k.pte_offset(mm, BASE).unwrap();
            assert!(!k.arch.ptep_get(amm, ptep).pte_young());
            assert_eq!(k.folio_referenced(folio), (0, false));
        }

        #[test]
        fn a_folio_in_a_locked_vma_is_activated() {
            let (mut k, mm) = limited(64 * MB);
            written(&mut k, mm, K4, VmFlags::NOHUGEPAGE | VmFlags::LOCKED);
            let a = k.memmap.folio_of(k.page_table_pfn(mm, BASE).unwrap());
            assert_eq!(k.folio_check_references(a), FolioReferences::Activate);
        }

        #[test]
        fn without_swap_cgroup_reclaim_frees_nothing_and_the_fault_fails() {
            let (mut k, mm) = boot(MachineConfig::default(), &[]);
            k.memcg = Some(MemCgroup::new(256));
            k.do_mmap(mm, BASE, MB, VmFlags::READ | VmFlags::WRITE | VmFlags::NOHUGEPAGE)
                .unwrap();
            let oom = (BASE..BASE + MB)
                .step_by(K4 as usize)
                .find_map(|a| user_access(&mut k, mm, 0, a, true).err());
            assert!(matches!(oom, Some(crate::mm::memory::FaultError::Oom(_))), "{oom:?}");
            assert_eq!(k.stat.event(VmEvent::PgScanAnon), 0);
            assert_clean(&k);
        }

        #[test]
        fn a_deactivated_folio_goes_to_the_inactive_head_with_workingset_set() {
            let (mut k, mm) = limited(64 * MB);
            written(&mut k, mm, 4 * K4, VmFlags::NOHUGEPAGE);
            k.lru_add_drain();
            let a = k.memmap.folio_of(k.page_table_pfn(mm, BASE).unwrap());
            k.lruvec_del_folio(a);
            k.memmap.lru_mut(a).insert(LruFlags::ACTIVE);
            k.lruvec_add_folio(a);
            assert_eq!(k.lruvec.size(LruList::ActiveAnon), 1);
            k.shrink_active_list(
                SWAP_CLUSTER_MAX,
                LruList::ActiveAnon,
                &ScanControl::new(Reclaimer::Cgroup, 32),
            );
            assert_eq!(k.stat.event(VmEvent::PgDeactivate), 1);
            // A cgroup's reclaim: pgrefill counts only the node's.
            assert_eq!(k.stat.event(VmEvent::PgRefill), 0);
            let s = k.memmap.lru(a);
            assert!(s.contains(LruFlags::LRU | LruFlags::WORKINGSET) && !s.contains(LruFlags::ACTIVE));
            assert_eq!(
                k.lruvec.iter_from_tail(&k.memmap, LruList::InactiveAnon).last(),
                Some(a)
            );
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

    /// Two lazyfree PMD THPs, the first written again since MADV_FREE, paged out
    /// (free_write_pageout_pmd). Split (6.18, 7.3): both pmds are split, the written
    /// folio stays mapped by ptes, the clean one's ptes are discarded in one batch.
    /// Discard (7.0, 7.2: unmap_huge_pmd_locked): no split; the written folio is
    /// marked swap-backed and stays pmd-mapped, the clean one goes with its pmd's one
    /// flush (a TLBI and a DSB ISH, none deferred) and no pte rmap.
    #[test]
    fn lazyfree_pmd_discard_frees_a_clean_thp_at_its_pmd_and_keeps_a_written_one_whole() {
        for discard in [false, true] {
            let (mut k, mm) = boot(MachineConfig::default(), &[]);
            k.lazyfree_pmd_discard = discard;
            written(&mut k, mm, 4 << 20, VmFlags::HUGEPAGE);
            k.do_madvise(mm, BASE, BASE + (4 << 20), Madv::Free).unwrap();
            user_access(&mut k, mm, 0, BASE, true).unwrap();
            let (ev, kc) = (k.arch.hw.ev.clone(), k.arch.kc.clone());
            k.do_madvise(mm, BASE, BASE + (4 << 20), Madv::PageOut).unwrap();
            assert_clean(&k);
            let d = |e| k.arch.hw.ev.get(e) - ev.get(e);
            let got = (
                k.stat.event(VmEvent::ThpSplitPmd),
                k.arch.kc.get(KernelEvent::FolioRemoveRmapPtes) - kc.get(KernelEvent::FolioRemoveRmapPtes),
                d(Event::TlbiTotal),
                d(Event::DsbIsh),
            );
            let want = if discard { (0, 0, 1, 1) } else { (2, 1, 4, 6) };
            assert_eq!(got, want, "discard {discard}");
            assert_eq!(k.stat.event(VmEvent::PgLazyFreed), 512);
            assert_eq!(k.page_kind(mm, BASE + (2 << 20)), None);
            let folio = k.memmap.folio_of(k.page_table_pfn(mm, BASE).unwrap());
            assert!(k.memmap.folio_test(folio, PageFlags::SWAPBACKED));
            assert_eq!(k.memmap.large(folio).entire_mapcount, i32::from(discard));
        }
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
    /// Either way three contpte_ptep_get per folio, as the 7.3 guest counts batched:
    /// madvise_cold_or_pageout_pte_range's, check_pte's and try_to_unmap_one's read.
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
                dk(KernelEvent::ContptePtepGet),
            );
            let want = if per_pte {
                (16, 256, 256, 17, 16, 48)
            } else {
                (0, 16, 16, 1, 0, 48)
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
        // Reclaim frees what each failed allocation needs (SWAP_CLUSTER_MAX at a
        // time, from the oldest), not every lazyfree folio at once.
        let freed = k.stat.event(VmEvent::PgLazyFreed);
        assert!(freed > 0 && freed < 12288, "{freed}");
        let steal = k.stat.event(VmEvent::PgStealDirect) + k.stat.event(VmEvent::PgStealKswapd);
        assert_eq!(steal, freed);
        assert_eq!(k.stat.event(VmEvent::PgStealFile), freed);
        assert_eq!(k.stat.event(VmEvent::PgStealAnon), 0);
        assert_eq!(k.page_kind(mm, BASE), None);
        // The next region takes the rest, then runs out of memory.
        let c = BASE + (2 << 30);
        k.do_mmap(mm, c, 48 << 20, VmFlags::READ | VmFlags::WRITE).unwrap();
        let oom = (c..c + (48 << 20))
            .step_by(K4 as usize)
            .find_map(|a| user_access(&mut k, mm, 0, a, true).err());
        assert!(matches!(oom, Some(crate::mm::memory::FaultError::Oom(_))), "{oom:?}");
        assert_eq!(k.stat.event(VmEvent::PgLazyFreed), 12288);
        assert_clean(&k);
    }

    /// With swap, machine RAM pressure swaps anon memory out: a workload larger than
    /// RAM pages out instead of stopping.
    #[test]
    fn a_workload_larger_than_ram_is_swapped_out_by_kswapd() {
        let cfg = MachineConfig {
            ram_bytes: 64 << 20,
            ..MachineConfig::default()
        };
        let (mut k, mm) = boot(cfg, &[]);
        k.sys_swapon(128 << 20).unwrap();
        written(&mut k, mm, 96 << 20, VmFlags::NOHUGEPAGE);
        assert_clean(&k);
        let out = k.stat.event(VmEvent::Pswpout);
        assert!(out >= 8192, "{out}");
        // kswapd keeps free memory over the low watermark, so it does the work.
        assert_eq!(k.stat.event(VmEvent::PgStealKswapd), out);
        assert!(k.stat.event(VmEvent::PageOutRun) > 0);
        assert_eq!(k.nr_direct_reclaim, 0);
        assert!(k.node_zones[0].free_pages >= k.node_zones[0].wmark.low);
        assert_eq!(k.page_kind(mm, BASE), Some(PageKind::Swap));
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
