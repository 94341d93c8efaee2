//! mm/swap_state.c: the swap cache (the folio that holds a slot's data in memory)
//! and swap readahead.
//!
//! A fault on a slot still shared after fork (count above 1) may not skip the swap
//! cache: it reads through swapin_readahead, which on a non-rotating device is
//! swap_vma_readahead. That reads a window of the faulting VMA's swap ptes around the
//! address into swap-cache folios (PSWPIN each, SWAP_RA each beyond the target), and
//! faults that later find one are minor (a hit: SWAP_RA_HIT, which widens the next
//! window). The window state lives in the VMA (swap_readahead_info), packed as 6.18
//! packs it: the last fault's page address, the window, and the hits since.
//!
//! ```text
//!  swap_readahead_info:  | fault address (page aligned) | win | hits |
//!                                          PAGE_SHIFT --^     ^-- PAGE_SHIFT / 2
//!  0 reads as 4: a VMA's first fault starts with 4 hits, a window of 8 pages
//!  centred on the address (sequential faults then start it at the address).
//! ```

use super::folio::PageFlags;
use super::mm_types::{MmId, Vma};
use super::pgtable::PmdPtr;
use super::vmstat::{MthpStat, VmEvent};
use super::Kernel;
use crate::hw::Pfn;
use crate::kcount::KernelEvent;
use std::collections::BTreeMap;

/// vm.page-cluster's default: readahead windows of up to 2^3 pages.
const PAGE_CLUSTER: u32 = 3;
/// SWAP_RA_ORDER_CEILING: the vma window never exceeds 2^5 pages.
const SWAP_RA_ORDER_CEILING: u32 = 5;

/// The swap cache of one device: the folio in each cached slot (6.18 keeps it in the
/// cluster's swap table, ci->table[]) and each cached folio's first slot (folio->swap).
#[derive(Default)]
pub struct SwapCache {
    folios: BTreeMap<u64, Pfn>,
    swap: BTreeMap<Pfn, u64>,
}

impl SwapCache {
    /// Host bytes one cached folio takes at most: an entry in each map, doubled for
    /// B-tree nodes that are half full.
    pub const HOST_BYTES_PER_FOLIO: u64 =
        2 * (std::mem::size_of::<(u64, Pfn)>() + std::mem::size_of::<(Pfn, u64)>()) as u64;

    /// The folio caching `slot`, if any.
    pub fn folio(&self, slot: u64) -> Option<Pfn> {
        self.folios.get(&slot).copied()
    }

    /// folio->swap: the first slot of a folio in the swap cache.
    pub fn swap_of(&self, folio: Pfn) -> Option<u64> {
        self.swap.get(&folio).copied()
    }

    /// Every cached folio and its first slot.
    pub fn iter(&self) -> impl Iterator<Item = (Pfn, u64)> + '_ {
        self.swap.iter().map(|(f, s)| (*f, *s))
    }
}

/// The packed swap_readahead_info of a VMA, read as GET_SWAP_RA_VAL reads it.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
struct SwapRa {
    addr: u64,
    win: u64,
    hits: u64,
}

impl SwapRa {
    fn get(val: u64, page_shift: u32) -> SwapRa {
        let val = if val == 0 { 4 } else { val };
        let win_shift = page_shift / 2;
        let hits_mask = (1u64 << win_shift) - 1;
        let page_mask = !((1u64 << page_shift) - 1);
        SwapRa {
            addr: val & page_mask,
            win: (val & !page_mask & !hits_mask) >> win_shift,
            hits: val & hits_mask,
        }
    }

    /// SWAP_RA_VAL.
    fn val(addr: u64, win: u64, hits: u64, page_shift: u32) -> u64 {
        let win_shift = page_shift / 2;
        let hits_mask = (1u64 << win_shift) - 1;
        let page_mask = !((1u64 << page_shift) - 1);
        (addr & page_mask) | ((win << win_shift) & !page_mask & !hits_mask) | (hits & hits_mask)
    }
}

/// __swapin_nr_pages: the readahead window after a fault at page `offset` whose
/// predecessor was at `prev_offset`, given the readahead hits since and the previous
/// window: hits + 2 rounded up to a power of two (at least 4), or without hits 2 for
/// an adjacent page and 1 otherwise; at most `max_pages`, and never below half the
/// previous window.
fn swapin_nr_pages(prev_offset: u64, offset: u64, hits: u64, max_pages: u64, prev_win: u64) -> u64 {
    let mut pages = hits + 2;
    if pages == 2 {
        if offset != prev_offset.wrapping_add(1) && offset != prev_offset.wrapping_sub(1) {
            pages = 1;
        }
    } else {
        pages = pages.next_power_of_two().max(4);
    }
    pages.min(max_pages).max(prev_win / 2)
}

/// swapin_nr_pages' globals (swapin_readahead_hits, prev_offset,
/// last_readahead_pages): the cluster readahead's window state. The hits start at 4
/// (ATOMIC_INIT(4)), so the first window is already the whole cluster.
#[derive(Clone, Copy, Debug)]
pub struct ClusterRa {
    pub hits: u64,
    pub prev_offset: u64,
    pub last_pages: u64,
}

impl Default for ClusterRa {
    fn default() -> Self {
        ClusterRa {
            hits: 4,
            prev_offset: 0,
            last_pages: 0,
        }
    }
}

impl Kernel {
    /// The swap cache's folio for `slot`, with a reference taken (swap_cache_get_folio).
    pub fn swap_cache_get_folio(&mut self, slot: u64) -> Option<Pfn> {
        let folio = self.swap_cache_lookup(slot)?;
        self.folio_ref_add(folio, 1);
        Some(folio)
    }

    /// The lookup alone, counted: one table entry read under RCU (6.18+), or up to
    /// 6.17 filemap_get_folio's descent of the address space's XArray.
    pub fn swap_cache_lookup(&mut self, slot: u64) -> Option<Pfn> {
        let si = self.swap.as_ref()?;
        let folio = si.cache.folio(slot);
        let height = if self.swap_cache_xarray { si.xa_height(slot) } else { 0 };
        self.arch.kc.inc(KernelEvent::SwapCacheGetFolio);
        self.arch.kc.add(KernelEvent::SwapCacheXaNodes, u64::from(height));
        folio
    }

    /// What storing `nr` slot entries from `slot` costs the structure, counted before
    /// the slots are freed: the lock (the address space's xa_lock_irq, or the
    /// cluster's lock), one entry per slot, and up to 6.17 the XArray nodes walked:
    /// the descent, then a leaf of 64 slots per further 64 a large folio spans
    /// (xas_next; folios are naturally aligned, so they stay in one address space).
    fn swap_cache_store(&mut self, slot: u64, nr: u64) {
        let kc = &mut self.arch.kc;
        kc.add(KernelEvent::SwapCacheSlots, nr);
        if self.swap_cache_xarray {
            let height = self
                .swap
                .as_ref()
                .expect("a swap cache without a device")
                .xa_height(slot);
            let leaves = if height == 0 { 0 } else { nr.div_ceil(64) - 1 };
            kc.inc(KernelEvent::SwapCacheXaLock);
            kc.add(KernelEvent::SwapCacheXaNodes, u64::from(height) + leaves);
        } else {
            kc.inc(KernelEvent::SwapCacheClusterLock);
        }
    }

    /// swap_cache_add_folio: `folio` caches the slots from `slot` (their SWAP_HAS_CACHE
    /// already set), holding a reference per page.
    pub fn swap_cache_add_folio(&mut self, folio: Pfn, slot: u64) {
        let nr = self.memmap.folio_nr_pages(folio);
        self.arch.kc.inc(KernelEvent::SwapCacheAddFolio);
        self.swap_cache_store(slot, nr);
        let cache = &mut self.swap.as_mut().expect("a swap cache without a device").cache;
        for s in slot..slot + nr {
            let old = cache.folios.insert(s, folio);
            debug_assert!(old.is_none(), "slot {s} already cached");
        }
        cache.swap.insert(folio, slot);
        self.folio_ref_add(folio, nr as i32);
        self.memmap.folio_set(folio, PageFlags::SWAPCACHE);
    }

    /// __swap_cache_replace_folio (migration): `new` takes `old`'s slots in the swap
    /// cache, and the references the cache held.
    pub fn __swap_cache_replace_folio(&mut self, old: Pfn, new: Pfn) {
        let nr = self.memmap.folio_nr_pages(old);
        let slot = self
            .swap
            .as_ref()
            .and_then(|si| si.cache.swap_of(old))
            .expect("a folio in the swap cache");
        self.swap_cache_store(slot, nr);
        let cache = &mut self.swap.as_mut().expect("checked").cache;
        cache.swap.remove(&old);
        for s in slot..slot + nr {
            cache.folios.insert(s, new);
        }
        cache.swap.insert(new, slot);
        self.folio_ref_add(new, nr as i32);
        self.memmap.folio_set(new, PageFlags::SWAPCACHE);
        self.memmap.folio_clear(old, PageFlags::SWAPCACHE);
        self.folio_put_refs(old, nr as i32);
    }

    /// swap_cache_del_folio: `folio` leaves the swap cache; its slots lose
    /// SWAP_HAS_CACHE (put_swap_folio: freed if no pte holds them) and it the
    /// references the cache held. The caller holds one of its own.
    pub fn swap_cache_del_folio(&mut self, folio: Pfn) {
        let nr = self.memmap.folio_nr_pages(folio);
        let slot = self
            .swap
            .as_ref()
            .and_then(|si| si.cache.swap_of(folio))
            .expect("a folio in the swap cache");
        self.arch.kc.inc(KernelEvent::SwapCacheDelFolio);
        self.swap_cache_store(slot, nr);
        let si = self.swap.as_mut().expect("checked");
        si.cache.swap.remove(&folio);
        for s in slot..slot + nr {
            si.cache.folios.remove(&s);
        }
        si.swapcache_clear(slot, nr);
        self.memmap.folio_clear(folio, PageFlags::SWAPCACHE);
        self.folio_put_refs(folio, nr as i32);
    }

    /// swap_read_folio from a synchronous device (zram): the zeromap's all-zero pages
    /// are filled in place (SWPIN_ZERO), others read (PSWPIN, and the mTHP swpin stat).
    pub fn swap_read_folio(&mut self, folio: Pfn, slot: u64) {
        let order = self.memmap.folio_order(folio);
        let nr = 1u64 << order;
        let zero = self.swap.as_ref().expect("a swap-in without a device").is_zero(slot);
        if zero {
            self.stat.count_vm_events(VmEvent::SwpinZero, nr as i64);
            self.arch.clear_pages(nr);
        } else {
            self.stat.count_vm_events(VmEvent::Pswpin, nr as i64);
            if order > 0 {
                self.stat.count_mthp_stat(order, MthpStat::Swpin);
            }
        }
        for i in 0..nr {
            self.memmap.page_mut(Pfn(folio.0 + i)).nonzero = !zero;
        }
    }

    /// swap_writeout to a synchronous device (zram), of a folio in the swap cache at
    /// `slot`: all-zero pages only set the zeromap (SWPOUT_ZERO, no I/O), others are
    /// written (PSWPOUT, and the mTHP and THP swpout stats); the folio is clean after.
    pub fn swap_writeout(&mut self, folio: Pfn, slot: u64) {
        let order = self.memmap.folio_order(folio);
        let nr = 1u64 << order;
        let zero = (0..nr).all(|i| !self.memmap.page(Pfn(folio.0 + i)).nonzero);
        let si = self.swap.as_mut().expect("a swap-out without a device");
        for i in 0..nr {
            si.set_zero(slot + i, zero);
        }
        if zero {
            self.stat.count_vm_events(VmEvent::SwpoutZero, nr as i64);
        } else {
            self.stat.count_vm_events(VmEvent::Pswpout, nr as i64);
            self.stat.count_mthp_stat(order, MthpStat::Swpout);
            if order == self.arch.granule().pmd_order() {
                self.stat.count_vm_event(VmEvent::ThpSwpout);
            }
        }
        self.memmap.folio_clear(folio, PageFlags::DIRTY);
    }

    /// swap_update_readahead, on a fault that found its folio in the swap cache: a
    /// folio that readahead brought in (PG_readahead, cleared now) is a hit, counted in
    /// SWAP_RA_HIT and in the VMA's state, which also records the fault address.
    pub fn swap_update_readahead(&mut self, folio: Pfn, mm: MmId, vma: &Vma, addr: u64) {
        if self.memmap.folio_order(folio) > 0 {
            return;
        }
        let readahead = self.memmap.folio_test(folio, PageFlags::READAHEAD);
        self.memmap.folio_clear(folio, PageFlags::READAHEAD);
        let shift = self.arch.granule().page_shift();
        let info = self.swap_readahead_info(mm, vma);
        let ra = SwapRa::get(*info, shift);
        let hits_max = (1u64 << (shift / 2)) - 1;
        let hits = if readahead {
            (ra.hits + 1).min(hits_max)
        } else {
            ra.hits
        };
        *info = SwapRa::val(addr, ra.win, hits, shift);
        if readahead {
            self.stat.count_vm_event(VmEvent::SwapRaHit);
        }
    }

    /// __read_swap_cache_async: the folio caching `slot`, found (with a reference) or
    /// made: a new order-0 folio added to the swap cache, which the caller is to read
    /// (the bool). None when no pte holds the slot any more, or out of memory.
    pub fn __read_swap_cache_async(&mut self, slot: u64) -> Option<(Pfn, bool)> {
        if let Some(folio) = self.swap_cache_get_folio(slot) {
            return Some((folio, false));
        }
        if self.swap.as_ref()?.swap_count(slot) == 0 {
            return None;
        }
        let folio = self.folio_alloc(0)?;
        if !self.mem_cgroup_charge(folio, true) {
            self.folio_put(folio);
            return None;
        }
        let si = self.swap.as_mut().expect("checked");
        si.swapcache_prepare(slot);
        self.memmap.folio_set(folio, PageFlags::SWAPBACKED);
        self.swap_cache_add_folio(folio, slot);
        self.folio_add_lru(folio);
        Some((folio, true))
    }

    /// swap_cluster_readahead (shmem's swap-in before 6.14, and any swap-in without a
    /// VMA): read the aligned cluster of swapin_nr_pages slots around `slot` into the
    /// swap cache, the others marked PG_readahead (SWAP_RA), then return `slot`'s folio
    /// with a reference. The window follows the global readahead hits (`ClusterRa`).
    pub fn swap_cluster_readahead(&mut self, slot: u64) -> Option<Pfn> {
        let max_pages = 1u64 << PAGE_CLUSTER;
        let ra = &mut self.swap_cluster_ra;
        let hits = std::mem::take(&mut ra.hits);
        let pages = swapin_nr_pages(ra.prev_offset, slot, hits, max_pages, ra.last_pages);
        if hits == 0 {
            ra.prev_offset = slot;
        }
        ra.last_pages = pages;
        let mask = pages - 1;
        if mask != 0 {
            let max = self.swap.as_ref()?.max();
            let (start, end) = ((slot & !mask).max(1), (slot | mask).min(max - 1));
            for o in start..=end {
                let Some((folio, allocated)) = self.__read_swap_cache_async(o) else {
                    continue;
                };
                if allocated {
                    self.swap_read_folio(folio, o);
                    if o != slot {
                        self.memmap.folio_set(folio, PageFlags::READAHEAD);
                        self.stat.count_vm_event(VmEvent::SwapRa);
                    }
                }
                self.folio_put(folio);
            }
            self.lru_add_drain();
        }
        let (folio, allocated) = self.__read_swap_cache_async(slot)?;
        if allocated {
            self.swap_read_folio(folio, slot);
        }
        Some(folio)
    }

    /// vma->swap_readahead_info of the faulting VMA.
    fn swap_readahead_info(&mut self, mm: MmId, vma: &Vma) -> &mut u64 {
        &mut self
            .mm_mut(mm)
            .vmas_mut()
            .get_mut(&vma.start)
            .expect("the faulting VMA")
            .swap_readahead_info
    }

    /// swap_vma_ra_win: the window for a fault at `faddr` from the VMA's readahead
    /// state, which it then records (hits reset). Returns the window in pages and the
    /// range to read: `win` pages from the address when the faults go up page by page,
    /// ending at it when they go down, centred on it otherwise; within the VMA and the
    /// address's page table.
    fn swap_vma_ra_win(&mut self, mm: MmId, vma: &Vma, faddr: u64) -> (u64, u64, u64) {
        let g = self.arch.granule();
        let (ps, shift) = (g.page_size(), g.page_shift());
        let max_win = 1u64 << PAGE_CLUSTER.min(SWAP_RA_ORDER_CEILING);
        let info = self.swap_readahead_info(mm, vma);
        let ra = SwapRa::get(*info, shift);
        let win = swapin_nr_pages(ra.addr >> shift, faddr >> shift, ra.hits, max_win, ra.win);
        *info = SwapRa::val(faddr, win, 0, shift);
        if win == 1 {
            return (1, faddr, faddr + ps);
        }
        let left = if faddr == ra.addr + ps {
            faddr as i64
        } else if ra.addr == faddr + ps {
            faddr as i64 - (win * ps) as i64 + ps as i64
        } else {
            faddr as i64 - (((win - 1) / 2) * ps) as i64
        };
        let right = left + (win * ps) as i64;
        let pmd_start = faddr & !(g.pmd_size() - 1);
        let start = (left.max(0) as u64).max(vma.start).max(pmd_start);
        let end = (right as u64).min(vma.end).min(pmd_start + g.pmd_size());
        (win, start, end)
    }

    /// swap_vma_readahead (swapin_readahead with vma_ra_enabled, the default, on a
    /// non-rotating device): read every swap pte of the window into the swap cache,
    /// marking those beyond the target PG_readahead (SWAP_RA), then return the
    /// target's folio with a reference. None when out of memory.
    pub fn swap_vma_readahead(&mut self, mm: MmId, vma: &Vma, pmd: PmdPtr, slot: u64, addr: u64) -> Option<Pfn> {
        let ps = self.arch.granule().page_size();
        let (win, start, end) = self.swap_vma_ra_win(mm, vma, addr);
        if win > 1 {
            let amm = self.arch_mm(mm);
            let first = self.pte_offset_map(pmd, start).expect("a swap pte's table");
            for (i, a) in (start..end).step_by(ps as usize).enumerate() {
                let pte = self.arch.ptep_get(amm, first.add(i));
                if !pte.is_swap_pte() {
                    continue;
                }
                let Some((folio, allocated)) = self.__read_swap_cache_async(pte.pte_swp_offset()) else {
                    continue;
                };
                if allocated {
                    self.swap_read_folio(folio, pte.pte_swp_offset());
                    if a != addr {
                        self.memmap.folio_set(folio, PageFlags::READAHEAD);
                        self.stat.count_vm_event(VmEvent::SwapRa);
                    }
                }
                self.folio_put(folio);
            }
        }
        let (folio, allocated) = self.__read_swap_cache_async(slot)?;
        if allocated {
            self.swap_read_folio(folio, slot);
        }
        Some(folio)
    }

    /// free_swap_cache: a folio no longer mapped leaves the swap cache if no pte holds
    /// its slots either (folio_free_swap). The caller holds a reference.
    pub fn free_swap_cache(&mut self, folio: Pfn) {
        if self.memmap.folio_test(folio, PageFlags::SWAPCACHE) && self.memmap.folio_mapcount(folio) == 0 {
            self.folio_free_swap(folio);
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::hw::MachineConfig;
    use crate::mm::madvise::Madv;
    use crate::mm::mm_types::VmFlags;
    use crate::report::PageKind;
    use crate::sim::tests::{assert_clean, boot_with as boot};
    use crate::sim::user_access;

    const BASE: u64 = 0x1000_0000_0000;
    const K4: u64 = 4096;

    #[test]
    fn the_window_grows_with_hits_and_halves_at_most() {
        // No hits: 2 for an adjacent page, else 1.
        assert_eq!(swapin_nr_pages(10, 11, 0, 8, 0), 2);
        assert_eq!(swapin_nr_pages(10, 12, 0, 8, 0), 1);
        // Hits + 2, rounded up to a power of two of at least 4, capped.
        assert_eq!(swapin_nr_pages(0, 5, 1, 8, 0), 4);
        assert_eq!(swapin_nr_pages(0, 5, 3, 8, 0), 8);
        assert_eq!(swapin_nr_pages(0, 5, 9, 8, 0), 8);
        // Never below half the last window.
        assert_eq!(swapin_nr_pages(10, 12, 0, 8, 8), 4);
    }

    #[test]
    fn an_unused_vma_reads_as_four_hits() {
        let ra = SwapRa::get(0, 12);
        assert_eq!((ra.addr, ra.win, ra.hits), (0, 0, 4));
        let v = SwapRa::val(0x1234_5000, 8, 3, 12);
        assert_eq!(
            SwapRa::get(v, 12),
            SwapRa {
                addr: 0x1234_5000,
                win: 8,
                hits: 3
            }
        );
        // 64K pages: the window and hits have 8 bits each.
        let v = SwapRa::val(0x1_0000, 200, 255, 16);
        assert_eq!(
            SwapRa::get(v, 16),
            SwapRa {
                addr: 0x1_0000,
                win: 200,
                hits: 255
            }
        );
    }

    /// 32 pages swapped out, shared by fork; `child` then reads them in order.
    fn forked_after_pageout(pages: u64) -> (Kernel, MmId, MmId) {
        let (mut k, mm) = boot(MachineConfig::default(), &[]);
        k.sys_swapon(64 << 20).unwrap();
        k.do_mmap(
            mm,
            BASE,
            pages * K4,
            VmFlags::READ | VmFlags::WRITE | VmFlags::NOHUGEPAGE,
        )
        .unwrap();
        for a in (BASE..BASE + pages * K4).step_by(K4 as usize) {
            user_access(&mut k, mm, 0, a, true).unwrap();
        }
        k.do_madvise(mm, BASE, BASE + pages * K4, Madv::PageOut).unwrap();
        let child = k.dup_mmap(mm).unwrap();
        k.switch_mm(1, child);
        (k, mm, child)
    }

    /// The host's figures (tests/validation/swap_fork_child.wl): majors at pages 0, 5,
    /// 13, 21 and 29 reading 5, 8, 8, 8 and 3 pages.
    #[test]
    fn sequential_faults_on_shared_slots_read_ahead_as_the_host_does() {
        let (mut k, _, child) = forked_after_pageout(32);
        let mut majors = Vec::new();
        for i in 0..32 {
            let (maj, pswpin) = (k.mm(child).maj_flt, k.stat.event(VmEvent::Pswpin));
            user_access(&mut k, child, 1, BASE + i * K4, false).unwrap();
            if k.mm(child).maj_flt > maj {
                majors.push((i, k.stat.event(VmEvent::Pswpin) - pswpin));
            }
        }
        assert_clean(&k);
        assert_eq!(majors, [(0, 5), (5, 8), (13, 8), (21, 8), (29, 3)]);
        assert_eq!(k.stat.event(VmEvent::SwapRa), 27);
        assert_eq!(k.stat.event(VmEvent::SwapRaHit), 27);
    }

    /// sync-swapin: up to 6.19 the child's faults on shared slots read ahead (5 majors)
    /// and the parent's reads leave the folios cached; from 7.0 (f1879e8a0c60) each
    /// fault reads its own slot through the swap cache (32 majors, no readahead), and
    /// the parent's read, dropping the slot's last pte reference, frees the cache
    /// (ab08be8dc96a: always on a synchronous device).
    #[test]
    fn a_synchronous_device_reads_shared_slots_one_by_one_from_7_0() {
        for (cache, majors, ra, inuse) in [(false, 5, 27, 32), (true, 32, 0, 0)] {
            let (mut k, mm, child) = forked_after_pageout(32);
            k.swapin_sync_cache = cache;
            for a in (BASE..BASE + 32 * K4).step_by(K4 as usize) {
                user_access(&mut k, child, 1, a, false).unwrap();
            }
            assert_clean(&k);
            assert_eq!(k.mm(child).maj_flt, majors, "cache={cache}");
            assert_eq!(k.stat.event(VmEvent::SwapRa), ra, "cache={cache}");
            assert_eq!(k.stat.event(VmEvent::Pswpin), 32);
            for a in (BASE..BASE + 32 * K4).step_by(K4 as usize) {
                user_access(&mut k, mm, 0, a, false).unwrap();
            }
            assert_clean(&k);
            assert_eq!(k.mm(mm).maj_flt, 0);
            let si = k.swap.as_ref().unwrap();
            assert_eq!(
                (si.inuse_pages, si.cache.iter().count() as u64),
                (inuse, inuse),
                "cache={cache}"
            );
        }
    }

    /// After the child exits, the parent's slots are its own but its swap ptes lost
    /// their exclusive mark at fork. Up to 6.19 a read fault skips the cache and maps the
    /// page writable; from 7.0 the read goes through the cache, the swap pte alone says
    /// whether the page is exclusive, so it is mapped read-only and the write faults
    /// again (do_wp_page reuses it): swap_cache_write_after_read on the 7.3 guest.
    #[test]
    fn from_7_0_a_read_swap_in_after_fork_maps_read_only_and_the_write_faults() {
        for (cache, faults) in [(false, 1), (true, 2)] {
            let (mut k, mm, child) = forked_after_pageout(8);
            k.swapin_sync_cache = cache;
            k.exit_mmap(child);
            let flt = k.mm(mm).min_flt + k.mm(mm).maj_flt;
            user_access(&mut k, mm, 0, BASE + K4, false).unwrap();
            user_access(&mut k, mm, 0, BASE + K4, true).unwrap();
            assert_clean(&k);
            assert_eq!(k.mm(mm).min_flt + k.mm(mm).maj_flt - flt, faults, "cache={cache}");
            assert_eq!(k.swap.as_ref().unwrap().cache.iter().count(), 0);
        }
    }

    #[test]
    fn the_parent_finds_the_childs_folios_in_the_swap_cache_and_exit_frees_them() {
        let (mut k, mm, child) = forked_after_pageout(32);
        for a in (BASE..BASE + 32 * K4).step_by(K4 as usize) {
            user_access(&mut k, child, 1, a, false).unwrap();
        }
        let pswpin = k.stat.event(VmEvent::Pswpin);
        for a in (BASE..BASE + 32 * K4).step_by(K4 as usize) {
            user_access(&mut k, mm, 0, a, false).unwrap();
        }
        assert_clean(&k);
        assert_eq!(k.stat.event(VmEvent::Pswpin), pswpin);
        assert_eq!((k.mm(mm).min_flt, k.mm(mm).maj_flt), (64, 0));
        // Both map the same folios, still cached: the slots are held by the cache only.
        let si = k.swap.as_ref().unwrap();
        assert_eq!((si.inuse_pages, si.swap_count(1)), (32, 0));
        k.exit_mmap(child);
        assert_clean(&k);
        assert_eq!(k.swap.as_ref().unwrap().inuse_pages, 32);
        // The last mapping goes: free_swap_cache frees the folio and its slot.
        k.do_munmap(mm, BASE, BASE + 32 * K4);
        assert_clean(&k);
        let si = k.swap.as_ref().unwrap();
        assert_eq!((si.inuse_pages, si.cache.iter().count()), (0, 0));
    }

    /// The child's write copies (the parent's pte still holds the slot); the parent's
    /// write then frees the slot (should_try_to_free_swap) and reuses the folio.
    #[test]
    fn a_write_copies_while_the_slot_is_shared_and_reuses_once_it_is_not() {
        let (mut k, mm, child) = forked_after_pageout(8);
        user_access(&mut k, child, 1, BASE, true).unwrap();
        assert_clean(&k);
        let cached = k.swap.as_ref().unwrap().cache.folio(1).unwrap();
        assert_ne!(k.page_table_pfn(child, BASE), Some(cached));
        assert_eq!(k.memmap.folio_mapcount(cached), 0);
        user_access(&mut k, mm, 0, BASE, true).unwrap();
        assert_clean(&k);
        assert_eq!(k.page_table_pfn(mm, BASE), Some(cached));
        assert!(!k.memmap.folio_test(cached, PageFlags::SWAPCACHE));
        assert_eq!((k.mm(mm).min_flt, k.mm(mm).maj_flt), (9, 0));
        assert_eq!(k.page_kind(child, BASE + K4), Some(PageKind::Swap));
    }

    /// A zap that drops a slot's last pte reference frees an unmapped cached folio
    /// (free_swap_and_cache_nr): readahead's folios go with the child's exit.
    #[test]
    fn exit_frees_the_readahead_folios_nobody_mapped() {
        let (mut k, mm, child) = forked_after_pageout(32);
        user_access(&mut k, child, 1, BASE, false).unwrap();
        assert_eq!(k.stat.event(VmEvent::SwapRa), 4);
        k.do_munmap(mm, BASE, BASE + 32 * K4);
        assert_clean(&k);
        assert_eq!(k.swap.as_ref().unwrap().cache.iter().count(), 5);
        k.exit_mmap(child);
        assert_clean(&k);
        let si = k.swap.as_ref().unwrap();
        assert_eq!((si.inuse_pages, si.cache.iter().count()), (0, 0));
    }
}
