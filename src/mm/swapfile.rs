//! mm/swapfile.c: a swap device's slots and its cluster allocator, as 6.18 has them,
//! for a zram-like device: a solid-state block device (so each CPU keeps a cluster per
//! order, and large folios may get slots) that never discards.
//!
//! ```text
//!  slot   0      1 ...  511 | 512 ... 1023 | 1024 ...        (4K pages, THP_SWAP)
//!        [hdr][           ] [             ] [         ]
//!         cluster 0           cluster 1       cluster 2 ...
//!  lists: free (empty clusters), nonfull[order] (freed into), frag[order]
//!         (allocated from, not full), full
//! ```
//! A cluster serves one order at a time, set by its first allocation; an allocation
//! of order o takes a free, naturally aligned run of 2^o slots. folio_alloc_swap tries
//! this CPU's cluster for the order first (swap_alloc_fast), then nonfull[order], one
//! free cluster, one frag[order] cluster and, for order 0, any cluster of a higher
//! order (cluster_alloc_swap_entry). The header slot 0 starts cluster 0 on nonfull[0].

use super::folio::PageFlags;
use super::swap_state::SwapCache;
use crate::hw::Pfn;
use crate::kcount::KernelEvent;
use std::collections::VecDeque;

/// The swap cache holds the slot (the folio being written, or read back).
pub const SWAP_HAS_CACHE: u8 = 0x40;
/// An unusable slot: the header.
const SWAP_MAP_BAD: u8 = 0x3f;
/// SWAP_ADDRESS_SPACE_PAGES: up to 6.17 each 2^14 slots had a swap cache XArray.
const SWAP_ADDRESS_SPACE_PAGES: u64 = 1 << 14;
/// XA_CHUNK_SHIFT: an XArray node has 64 slots.
const XA_CHUNK_SHIFT: u32 = 6;
/// The largest reference count a slot's map byte holds before continuation pages.
const SWAP_MAP_MAX: u8 = 0x3e;

/// Which list a cluster is on (its `flags`); `None` while a CPU's allocation holds it.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
enum List {
    None,
    Free,
    Nonfull,
    Frag,
    Full,
}

#[derive(Clone, Copy, Debug)]
struct Cluster {
    /// Slots in use (allocated, or unusable).
    count: u32,
    /// The order it serves (0 once empty again).
    order: u8,
    list: List,
}

/// One swapon'd device (swap_info_struct).
pub struct SwapInfo {
    /// swap_map: per slot its references and SWAP_HAS_CACHE, 0 when free.
    map: Vec<u8>,
    /// SWAPFILE_CLUSTER: a PMD's worth of slots with THP_SWAP, else 256.
    cluster_slots: u64,
    clusters: Vec<Cluster>,
    free: VecDeque<u32>,
    nonfull: Vec<VecDeque<u32>>,
    frag: Vec<VecDeque<u32>>,
    full: VecDeque<u32>,
    /// percpu_swap_cluster.offset[order] of each CPU: where its next allocation of
    /// that order looks first (0: none).
    percpu: Vec<Vec<u64>>,
    /// Slots in use, the header excluded.
    pub inuse_pages: u64,
    /// The zeromap: slots whose page was all zeroes, never written to the device.
    zeromap: Vec<bool>,
    /// A drained CPU cluster is followed by a free cluster before a nonfull one (up
    /// to 6.17); 9a42aed48421 (6.18) prefers nonfull ones on a device without discard.
    pub free_first: bool,
    /// The folios caching slots (swap_state.rs).
    pub cache: SwapCache,
}

/// The most pages a swap device has: the swap header's `last_page` is a 32-bit field
/// (union swap_header, include/linux/swap.h), so mkswap and read_swap_header stop there.
pub const MAX_SWAP_PAGES: u64 = 1 << 32;

impl SwapInfo {
    /// Host bytes `swapon` of `pages` pages takes at most: a swap_map byte and a
    /// zeromap flag per slot, and per cluster (of 256 slots at least) its state and a
    /// list entry, doubled for a VecDeque's growth.
    pub fn host_bytes(pages: u64) -> u64 {
        let per_slot = (std::mem::size_of::<u8>() + std::mem::size_of::<bool>()) as u64;
        let per_cluster = (std::mem::size_of::<Cluster>() + 2 * std::mem::size_of::<u32>()) as u64;
        pages
            .saturating_mul(per_slot)
            .saturating_add(pages.div_ceil(256).saturating_mul(per_cluster))
    }

    /// swapon of a device of `pages` pages (the header included), with clusters of
    /// `cluster_slots` and orders below `nr_orders`, for `ncpus` CPUs.
    pub fn swapon(pages: u64, cluster_slots: u64, nr_orders: usize, ncpus: usize) -> Result<SwapInfo, String> {
        if pages < 2 {
            return Err(format!("a swap device of {pages} pages has no slot beyond its header"));
        }
        if pages > MAX_SWAP_PAGES {
            return Err(format!(
                "a swap device of {pages} pages is larger than the 2^32 pages a swap header can describe"
            ));
        }
        let nr_clusters = pages.div_ceil(cluster_slots);
        let mut clusters = vec![
            Cluster {
                count: 0,
                order: 0,
                list: List::None,
            };
            nr_clusters as usize
        ];
        // setup_clusters: the header, and the slots past the end of the last cluster,
        // count as used, so their clusters start on nonfull[0].
        clusters[0].count += 1;
        let tail = nr_clusters * cluster_slots - pages;
        clusters[nr_clusters as usize - 1].count += tail as u32;
        let mut si = SwapInfo {
            map: vec![0; pages as usize],
            cluster_slots,
            clusters,
            free: VecDeque::new(),
            nonfull: vec![VecDeque::new(); nr_orders],
            frag: vec![VecDeque::new(); nr_orders],
            full: VecDeque::new(),
            percpu: vec![vec![0; nr_orders]; ncpus],
            inuse_pages: 0,
            zeromap: vec![false; pages as usize],
            free_first: false,
            cache: SwapCache::default(),
        };
        si.map[0] = SWAP_MAP_BAD;
        for i in 0..nr_clusters as u32 {
            if si.clusters[i as usize].count > 0 {
                si.move_cluster(i, List::Nonfull);
            } else {
                si.move_cluster(i, List::Free);
            }
        }
        Ok(si)
    }

    /// Slots the device has, the header included.
    pub fn max(&self) -> u64 {
        self.map.len() as u64
    }

    /// get_nr_swap_pages: slots free (the header is never one).
    pub fn free_pages(&self) -> u64 {
        self.max() - 1 - self.inuse_pages
    }

    /// The list of `kind` for clusters of `order`.
    fn list_mut(&mut self, kind: List, order: u8) -> Option<&mut VecDeque<u32>> {
        match kind {
            List::Free => Some(&mut self.free),
            List::Nonfull => Some(&mut self.nonfull[order as usize]),
            List::Frag => Some(&mut self.frag[order as usize]),
            List::Full => Some(&mut self.full),
            List::None => None,
        }
    }

    /// move_cluster: take `ci` off its list (if any) and append it to `to`.
    fn move_cluster(&mut self, ci: u32, to: List) {
        self.take_off_list(ci);
        let order = self.clusters[ci as usize].order;
        if let Some(l) = self.list_mut(to, order) {
            l.push_back(ci);
        }
        self.clusters[ci as usize].list = to;
    }

    fn take_off_list(&mut self, ci: u32) {
        let c = self.clusters[ci as usize];
        if let Some(l) = self.list_mut(c.list, c.order) {
            let pos = l
                .iter()
                .position(|&x| x == ci)
                .expect("a cluster on the list its flag names");
            l.remove(pos);
        }
        self.clusters[ci as usize].list = List::None;
    }

    /// isolate_lock_cluster: the first cluster of a list, taken off it.
    fn isolate(&mut self, kind: List, order: u8) -> Option<u32> {
        let ci = *self.list_mut(kind, order)?.front()?;
        self.take_off_list(ci);
        Some(ci)
    }

    fn cluster_of(&self, offset: u64) -> u32 {
        (offset / self.cluster_slots) as u32
    }

    /// cluster_is_usable: any cluster for order 0; an empty one or one of this order
    /// for a large allocation.
    fn usable(&self, ci: u32, order: u8) -> bool {
        let c = self.clusters[ci as usize];
        order == 0 || c.count == 0 || c.order == order
    }

    /// relocate_cluster after an allocation: free, frag or full by its count.
    fn relocate(&mut self, ci: u32) {
        let c = self.clusters[ci as usize];
        if c.count == 0 {
            if c.list != List::Free {
                self.free_cluster(ci);
            }
        } else if (c.count as u64) < self.cluster_slots {
            if c.list != List::Frag {
                self.move_cluster(ci, List::Frag);
            }
        } else if c.list != List::Full {
            self.move_cluster(ci, List::Full);
        }
    }

    /// __free_cluster: back to the tail of the free list, serving no order.
    fn free_cluster(&mut self, ci: u32) {
        self.take_off_list(ci);
        self.clusters[ci as usize].order = 0;
        self.move_cluster(ci, List::Free);
    }

    /// alloc_swap_scan_cluster: the first free aligned run of 2^order slots in `ci` at
    /// or after `offset`; relocates the cluster and points `cpu`'s offset for the order
    /// past the run (or nowhere once the cluster is full or scanned to its end).
    fn scan_cluster(&mut self, cpu: usize, ci: u32, mut offset: u64, order: u8) -> Option<u64> {
        let nr = 1u64 << order;
        let start = ci as u64 * self.cluster_slots;
        let end = (start + self.cluster_slots).min(self.max());
        let mut found = None;
        let mut next = 0;
        let c = self.clusters[ci as usize];
        if end >= nr && c.count as u64 + nr <= self.cluster_slots {
            let last = end - nr;
            while offset <= last {
                let empty = self.clusters[ci as usize].count == 0;
                if empty
                    || self.map[offset as usize..(offset + nr) as usize]
                        .iter()
                        .all(|&m| m == 0)
                {
                    // cluster_alloc_range: the first allocation sets the cluster's order.
                    let cl = &mut self.clusters[ci as usize];
                    if cl.count == 0 {
                        cl.order = order;
                    }
                    cl.count += nr as u32;
                    self.map[offset as usize..(offset + nr) as usize].fill(SWAP_HAS_CACHE);
                    self.inuse_pages += nr;
                    found = Some(offset);
                    offset += nr;
                    if (self.clusters[ci as usize].count as u64) < self.cluster_slots && offset <= last {
                        next = offset;
                    }
                    break;
                }
                offset += nr;
            }
        }
        self.relocate(ci);
        self.percpu[cpu][order as usize] = next;
        found
    }

    /// alloc_swap_scan_list: isolate clusters of a list in turn (all of them, or just
    /// the first) until one yields a run.
    fn scan_list(&mut self, cpu: usize, kind: List, list_order: u8, order: u8, all: bool) -> Option<u64> {
        loop {
            let ci = self.isolate(kind, list_order)?;
            let offset = ci as u64 * self.cluster_slots;
            if let Some(found) = self.scan_cluster(cpu, ci, offset, order) {
                return Some(found);
            }
            if !all {
                return None;
            }
        }
    }

    /// folio_alloc_swap's slot search for a folio of `order` reclaimed on `cpu`:
    /// swap_alloc_fast, then cluster_alloc_swap_entry. The slots come back with the
    /// swap cache holding them. None when no run of the order is left.
    pub fn folio_alloc_swap(&mut self, cpu: usize, order: u8) -> Option<u64> {
        if (1u64 << order) > self.cluster_slots {
            return None;
        }
        let offset = self.percpu[cpu][order as usize];
        if offset != 0 {
            let ci = self.cluster_of(offset);
            if self.usable(ci, order) {
                let from = if self.clusters[ci as usize].count == 0 {
                    ci as u64 * self.cluster_slots
                } else {
                    offset
                };
                // The cluster stays on whatever list it is on; relocate moves it.
                if let Some(found) = self.scan_cluster(cpu, ci, from, order) {
                    return Some(found);
                }
            }
        }
        self.cluster_alloc_swap_entry(cpu, order)
    }

    /// cluster_alloc_swap_entry for a non-discarding solid-state device.
    fn cluster_alloc_swap_entry(&mut self, cpu: usize, order: u8) -> Option<u64> {
        let pmd_order = self.cluster_slots.trailing_zeros() as u8;
        if self.free_first {
            if let Some(f) = self.scan_list(cpu, List::Free, 0, order, false) {
                return Some(f);
            }
        }
        if order < pmd_order {
            if let Some(f) = self.scan_list(cpu, List::Nonfull, order, order, true) {
                return Some(f);
            }
        }
        if !self.free_first {
            if let Some(f) = self.scan_list(cpu, List::Free, 0, order, false) {
                return Some(f);
            }
        }
        if order < pmd_order {
            if let Some(f) = self.scan_list(cpu, List::Frag, order, order, false) {
                return Some(f);
            }
        }
        if order > 0 {
            return None;
        }
        // Order 0 takes a slot from clusters of any higher order.
        for o in 1..self.nonfull.len() as u8 {
            if let Some(f) = self.scan_list(cpu, List::Frag, o, 0, true) {
                return Some(f);
            }
            if let Some(f) = self.scan_list(cpu, List::Nonfull, o, 0, true) {
                return Some(f);
            }
        }
        None
    }

    /// swap_duplicate: one more pte refers to the slot (fork).
    pub fn swap_duplicate(&mut self, offset: u64) {
        let m = &mut self.map[offset as usize];
        assert!(
            *m & !SWAP_HAS_CACHE < SWAP_MAP_MAX,
            "slot {offset}: count continuation is not modelled"
        );
        *m += 1;
    }

    /// A pte's reference to the slot is gone (zap, or swap-in).
    pub fn swap_entry_put(&mut self, offset: u64) {
        let m = &mut self.map[offset as usize];
        assert!(*m & !SWAP_HAS_CACHE > 0, "slot {offset}: no reference to drop");
        *m -= 1;
        self.free_if_unused(offset);
    }

    /// swapcache_prepare for one slot a pte still holds: the swap cache claims it
    /// (SWAP_HAS_CACHE), for the folio about to be read into it.
    pub fn swapcache_prepare(&mut self, offset: u64) {
        let m = &mut self.map[offset as usize];
        assert!(
            *m & !SWAP_HAS_CACHE > 0 && *m & SWAP_HAS_CACHE == 0,
            "slot {offset}: unused or already cached"
        );
        *m |= SWAP_HAS_CACHE;
    }

    /// swap_only_has_cache: no pte holds any of the `nr` slots from `offset`, the
    /// swap cache alone does.
    fn only_has_cache(&self, offset: u64, nr: u64) -> bool {
        self.map[offset as usize..(offset + nr) as usize]
            .iter()
            .all(|&m| m == SWAP_HAS_CACHE)
    }

    /// Whether the swap cache holds the slot.
    pub fn has_cache(&self, offset: u64) -> bool {
        self.map[offset as usize] & SWAP_HAS_CACHE != 0
    }

    /// vm_swap_full: more than half the device's slots in use, when reclaim and
    /// swap-in stop keeping slots for folios that are also in memory.
    pub fn vm_swap_full(&self) -> bool {
        let total = self.max() - 1;
        (total - self.inuse_pages) * 2 < total
    }

    /// The swap cache lets go of `nr` slots from `offset` (the folio written out and
    /// freed, or read back and mapped).
    pub fn swapcache_clear(&mut self, offset: u64, nr: u64) {
        for o in offset..offset + nr {
            let m = &mut self.map[o as usize];
            assert!(*m & SWAP_HAS_CACHE != 0, "slot {o}: not in the swap cache");
            *m &= !SWAP_HAS_CACHE;
            self.free_if_unused(o);
        }
    }

    /// swap_zeromap_folio_set / clear: whether the slot's page was all zeroes.
    pub fn set_zero(&mut self, offset: u64, zero: bool) {
        self.zeromap[offset as usize] = zero;
    }

    pub fn is_zero(&self, offset: u64) -> bool {
        self.zeromap[offset as usize]
    }

    /// The height of the XArray holding `offset`'s swap cache entry up to 6.17: the
    /// levels of 64 slots needed for the highest index in use in its swap address
    /// space (SWAP_ADDRESS_SPACE_PAGES slots; slot 0 is the header, never cached). A
    /// slot in use holds a folio or, once reclaim has freed its folio, a shadow, and
    /// clear_shadow_from_swap_cache empties it when freed; xas_shrink keeps the tree
    /// no taller than that index needs, and a lone index 0 lives in the head (0).
    pub fn xa_height(&self, offset: u64) -> u32 {
        let base = offset & !(SWAP_ADDRESS_SPACE_PAGES - 1);
        let end = (base + SWAP_ADDRESS_SPACE_PAGES).min(self.max());
        let mut top = None;
        let mut hi = end;
        while hi > base.max(1) && top.is_none() {
            let ci = self.cluster_of(hi - 1);
            let lo = (u64::from(ci) * self.cluster_slots).max(base).max(1);
            if self.clusters[ci as usize].count > 0 {
                top = (lo..hi).rev().find(|&o| self.map[o as usize] != 0);
            }
            hi = lo;
        }
        match top.map(|o| o - base) {
            None | Some(0) => 0,
            Some(index) => (64 - index.leading_zeros()).div_ceil(XA_CHUNK_SHIFT),
        }
    }

    /// References (not counting the swap cache) to the slot.
    pub fn swap_count(&self, offset: u64) -> u8 {
        self.map[offset as usize] & !SWAP_HAS_CACHE
    }

    /// swap_entries_free: a slot with nothing left is free, and its cluster moves to
    /// nonfull[order] (or the free list when empty).
    fn free_if_unused(&mut self, offset: u64) {
        if self.map[offset as usize] != 0 {
            return;
        }
        let ci = self.cluster_of(offset);
        self.clusters[ci as usize].count -= 1;
        self.inuse_pages -= 1;
        if self.clusters[ci as usize].count == 0 {
            self.free_cluster(ci);
        } else if self.clusters[ci as usize].list != List::Nonfull {
            self.move_cluster(ci, List::Nonfull);
        }
    }
}

impl super::Kernel {
    /// CONFIG_THP_SWAP: arm64 selects ARCH_WANTS_THP_SWAP only with 4K pages, so with
    /// 16K or 64K a large folio is split before it is swapped out.
    pub fn thp_swap(&self) -> bool {
        self.arch.granule().page_size() == 4096
    }

    /// folio_swapped: a pte still holds one of the slots of a folio in the swap cache.
    fn folio_swapped(&self, folio: Pfn) -> bool {
        let si = self.swap.as_ref().expect("a swap cache without a device");
        let slot = si.cache.swap_of(folio).expect("a folio in the swap cache");
        (slot..slot + self.memmap.folio_nr_pages(folio)).any(|s| si.swap_count(s) > 0)
    }

    /// folio_free_swap: a folio in the swap cache whose slots no pte holds leaves it
    /// (the slots are freed) and is dirty, its only copy now in memory. Whether it did.
    pub fn folio_free_swap(&mut self, folio: Pfn) -> bool {
        if !self.memmap.folio_test(folio, PageFlags::SWAPCACHE) || self.folio_swapped(folio) {
            return false;
        }
        self.swap_cache_del_folio(folio);
        self.memmap.folio_set(folio, PageFlags::DIRTY);
        true
    }

    /// free_swap_and_cache_nr: `nr` ptes from the one holding `offset` let go of their
    /// slots (zap, MADV_FREE); a slot then held by the swap cache alone has its folio
    /// reclaimed if nothing maps it or swap is full (__try_to_reclaim_swap with
    /// TTRS_UNMAPPED | TTRS_FULL).
    pub fn free_swap_and_cache_nr(&mut self, offset: u64, nr: u64) {
        let si = self.swap.as_mut().expect("a swap pte without a swap device");
        let mut any_only_cache = false;
        for o in offset..offset + nr {
            si.swap_entry_put(o);
            any_only_cache |= si.only_has_cache(o, 1);
        }
        if !any_only_cache {
            return;
        }
        let mut o = offset;
        while o < offset + nr {
            let only_cache = self.swap.as_ref().expect("checked").only_has_cache(o, 1);
            let step = match only_cache.then(|| self.swap_cache_lookup(o)).flatten() {
                Some(folio) => {
                    let n = self.memmap.folio_nr_pages(folio);
                    self.__try_to_reclaim_swap(folio);
                    // Folios sit naturally aligned in swap: on to the next boundary.
                    (o + 1).next_multiple_of(n) - o
                }
                None => 1,
            };
            o += step;
        }
    }

    /// __try_to_reclaim_swap (TTRS_UNMAPPED | TTRS_FULL): drop `folio` from the swap
    /// cache if nothing maps it (or swap is full) and no pte holds any of its slots.
    fn __try_to_reclaim_swap(&mut self, folio: Pfn) {
        let si = self.swap.as_ref().expect("a swap cache without a device");
        let slot = si.cache.swap_of(folio).expect("a folio in the swap cache");
        let nr = self.memmap.folio_nr_pages(folio);
        let need = self.memmap.folio_mapcount(folio) == 0 || si.vm_swap_full();
        if need && si.only_has_cache(slot, nr) {
            self.folio_ref_add(folio, 1);
            self.swap_cache_del_folio(folio);
            self.memmap.folio_set(folio, PageFlags::DIRTY);
            self.folio_put(folio);
        }
    }

    /// swapon of a zram-like device of `bytes` (SWP_SOLIDSTATE, SWP_SYNCHRONOUS_IO):
    /// clusters of a PMD's worth of slots with THP_SWAP (arm64: 4K pages only), else 256.
    pub fn sys_swapon(&mut self, bytes: u64) -> Result<(), String> {
        if self.swap.is_some() {
            return Err("swapon: a swap device is already on".into());
        }
        self.arch.kc.inc(KernelEvent::Swapon);
        let g = self.arch.granule();
        let cluster = if self.thp_swap() { 1u64 << g.pmd_order() } else { 256 };
        let ncpus = self.arch.hw.cpus.len();
        let mut si = SwapInfo::swapon(bytes >> g.page_shift(), cluster, g.pmd_order() as usize + 1, ncpus)?;
        si.free_first = self.swap_free_first;
        self.swap = Some(si);
        Ok(())
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    /// A zram device of `mib` MiB, 4K pages, 512-slot clusters, orders 0..=9, 2 CPUs.
    fn zram(mib: u64) -> SwapInfo {
        SwapInfo::swapon(mib << 8, 512, 10, 2).unwrap()
    }

    #[test]
    fn a_device_past_the_headers_32_bit_last_page_is_refused() {
        let Err(e) = SwapInfo::swapon(MAX_SWAP_PAGES + 1, 512, 10, 2) else {
            panic!("accepted")
        };
        assert!(e.contains("2^32 pages"), "{e}");
        assert_eq!(SwapInfo::host_bytes(1 << 18), (1 << 19) + (1 << 10) * 16);
    }

    /// Up to 6.17 the swap cache's XArray of each 2^14 slots is as tall as its highest
    /// slot in use needs, 64 slots a level, and shrinks back when that slot is freed.
    #[test]
    fn the_swap_cache_xarray_is_as_tall_as_its_highest_slot_in_use() {
        let mut si = zram(128);
        assert_eq!(si.xa_height(1), 0, "an empty tree");
        assert_eq!(si.folio_alloc_swap(0, 0), Some(1));
        assert_eq!(si.xa_height(1), 1);
        let pmds: Vec<u64> = (0..8).map(|_| si.folio_alloc_swap(0, 9).unwrap()).collect();
        assert_eq!(pmds[0], 512);
        assert_eq!(si.xa_height(1), 3, "slot {} needs a third level", pmds[7] + 511);
        // The second address space (slots 16384 on) is a tree of its own.
        assert_eq!(si.xa_height(1 << 14), 0);
        for &p in pmds.iter().skip(1) {
            si.swapcache_clear(p, 512);
        }
        assert_eq!(si.xa_height(1), 2, "slots 512..1023 are left");
        si.swapcache_clear(pmds[0], 512);
        assert_eq!(si.xa_height(2), 1);
    }

    #[test]
    fn the_first_order0_slot_follows_the_header_in_cluster_0() {
        let mut si = zram(128);
        assert_eq!(si.folio_alloc_swap(0, 0), Some(1));
        assert_eq!(si.folio_alloc_swap(0, 0), Some(2));
        // Another CPU has no cluster yet: cluster 0 is this CPU's (off every list), so
        // it starts a free one.
        assert_eq!(si.folio_alloc_swap(1, 0), Some(512));
        assert_eq!(si.inuse_pages, 3);
    }

    #[test]
    fn a_64k_folio_gets_an_aligned_run_of_a_free_cluster() {
        let mut si = zram(128);
        assert_eq!(si.folio_alloc_swap(0, 4), Some(512));
        assert_eq!(si.folio_alloc_swap(0, 4), Some(528));
        // Order 0 does not share the order-4 cluster while others are left.
        assert_eq!(si.folio_alloc_swap(0, 0), Some(1));
    }

    #[test]
    fn a_pmd_folio_needs_a_whole_free_cluster() {
        let mut si = zram(2);
        // 512 slots: one cluster, the header's, never wholly free.
        assert_eq!(si.folio_alloc_swap(0, 9), None);
        let mut si = zram(4);
        assert_eq!(si.folio_alloc_swap(0, 9), Some(512));
        assert_eq!(si.folio_alloc_swap(0, 9), None);
    }

    #[test]
    fn a_full_device_refuses_and_a_freed_slot_is_reused() {
        let mut si = zram(2);
        for want in 1..512 {
            assert_eq!(si.folio_alloc_swap(0, 0), Some(want));
        }
        assert_eq!(si.folio_alloc_swap(0, 0), None);
        si.swapcache_clear(100, 1);
        assert_eq!(si.inuse_pages, 510);
        assert_eq!(si.folio_alloc_swap(0, 0), Some(100));
    }

    #[test]
    fn a_slot_stays_until_its_last_reference_and_the_cache_are_gone() {
        let mut si = zram(8);
        let s = si.folio_alloc_swap(0, 0).unwrap();
        si.swap_duplicate(s); // the pte written by try_to_unmap
        si.swap_duplicate(s); // a fork
        si.swapcache_clear(s, 1); // written out, folio freed
        assert_eq!(si.swap_count(s), 2);
        si.swap_entry_put(s);
        assert_eq!(si.inuse_pages, 1);
        si.swap_entry_put(s);
        assert_eq!(si.inuse_pages, 0);
    }

    #[test]
    fn swap_is_full_past_half_its_slots_cached_ones_included() {
        // 1023 usable slots: full once fewer than 511.5 are free.
        let mut si = zram(4);
        for _ in 0..511 {
            si.folio_alloc_swap(0, 0).unwrap();
        }
        assert!(!si.vm_swap_full());
        // The slot is allocated until the swap cache lets it go too.
        let s = si.folio_alloc_swap(0, 0).unwrap();
        assert!(si.vm_swap_full());
        si.swapcache_clear(s, 1);
        assert!(!si.vm_swap_full());
    }

    #[test]
    fn an_emptied_cluster_serves_another_order() {
        let mut si = zram(8);
        let s = si.folio_alloc_swap(0, 4).unwrap();
        assert_eq!(s, 512);
        si.swapcache_clear(s, 16);
        // Cluster 1 is empty again, at the tail of the free list behind 2 and 3.
        assert_eq!(si.folio_alloc_swap(0, 9), Some(1024));
        assert_eq!(si.folio_alloc_swap(0, 9), Some(1536));
        assert_eq!(si.folio_alloc_swap(0, 9), Some(512));
    }

    #[test]
    fn order0_takes_slots_from_a_higher_order_cluster_when_nothing_else_is_left() {
        let mut si = zram(4);
        assert_eq!(si.folio_alloc_swap(0, 4), Some(512));
        for want in 1..512 {
            assert_eq!(si.folio_alloc_swap(1, 0), Some(want));
        }
        // Cluster 0 is full; order 0 steals from the order-4 cluster's free slots.
        assert_eq!(si.folio_alloc_swap(1, 0), Some(528));
        for _ in 529..1024 {
            assert!(si.folio_alloc_swap(1, 0).is_some());
        }
        assert_eq!(si.inuse_pages, 1023);
        assert_eq!(si.folio_alloc_swap(1, 0), None);
        assert_eq!(si.folio_alloc_swap(0, 4), None);
    }
}
