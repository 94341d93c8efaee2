//! mm/shmem.c: shared anonymous memory. A MAP_SHARED|MAP_ANONYMOUS mapping is backed
//! by an unlinked tmpfs inode (shmem_zero_setup), whose page cache holds its pages:
//! a fault looks the page up there or allocates it (shmem_fault, shmem_get_folio_gfp),
//! reclaim writes it to swap and leaves the slot in the cache in its place
//! (shmem_writeout), and a fault on that slot reads it back (shmem_swapin_folio). Fork
//! shares the pages (no anon_vma, no copy-on-write). Large folios (mTHP for shmem)
//! follow the `shmem_enabled` knobs (`thp_sysfs.rs`): allocated at fault down the
//! allowed orders (PMD-sized ones mapped by a pmd: do_set_pmd), written to swap and
//! read back whole, or split first where the kernel has no THP_SWAP.

use super::filemap::{AddressSpace, CacheEntry};
use super::folio::PageFlags;
use super::huge_memory::split_folio_to_list;
use super::memory::VmFault;
use super::mm_types::{VmFlags, Vma};
use super::vmstat::{MthpStat, VmEvent};
use super::Kernel;
use crate::hw::Pfn;
use crate::kcount::KernelEvent;
use std::collections::BTreeMap;

/// struct shmem_inode_info with its inode: the page cache, the pages it was charged
/// for (alloced) and those out on swap (swapped).
#[derive(Clone, Debug, Default)]
pub struct ShmemInode {
    pub mapping: AddressSpace,
    /// i_size, in pages.
    pub size: u64,
    pub alloced: u64,
    pub swapped: u64,
    /// The order of each large swap entry (a large folio written out whole), by its
    /// first index: the xarray's multi-index entry, here one slot per index.
    pub swap_orders: BTreeMap<u64, u32>,
    /// A secretmem inode (`secretmem.rs`), not shmem's: its own fault and free_folio.
    pub secret: bool,
}

/// The shmem "superblock": its inodes by number, and each cached folio's inode
/// (folio->mapping, which struct page has no room for here).
#[derive(Clone, Debug, Default)]
pub struct Shmem {
    inodes: Vec<Option<ShmemInode>>,
    mapping_of: BTreeMap<u64, u32>,
}

impl Shmem {
    pub fn inode(&self, ino: u32) -> &ShmemInode {
        self.inodes[ino as usize].as_ref().expect("a live shmem inode")
    }
    fn inode_mut(&mut self, ino: u32) -> &mut ShmemInode {
        self.inodes[ino as usize].as_mut().expect("a live shmem inode")
    }
    /// folio_mapping for a page-cache folio: its inode, if it is one.
    pub fn folio_inode(&self, folio: Pfn) -> Option<u32> {
        self.mapping_of.get(&folio.0).copied()
    }
    /// How many folios are in some inode's page cache.
    pub fn nr_cached(&self) -> usize {
        self.mapping_of.len()
    }
    /// Makes `ino` a secretmem inode (memfd_secret's file).
    pub fn set_secret(&mut self, ino: u32) {
        self.inode_mut(ino).secret = true;
    }
    /// The live inodes, by number.
    pub fn inodes(&self) -> impl Iterator<Item = (u32, &ShmemInode)> {
        (self.inodes.iter().enumerate()).filter_map(|(i, n)| n.as_ref().map(|n| (i as u32, n)))
    }
}

impl Kernel {
    /// shmem_zero_setup (shmem_file_setup "dev/zero"): a new inode of `pages` pages.
    pub fn shmem_zero_setup(&mut self, pages: u64) -> u32 {
        self.shmem.inodes.push(Some(ShmemInode {
            size: pages,
            ..Default::default()
        }));
        (self.shmem.inodes.len() - 1) as u32
    }

    /// shmem_add_to_page_cache: the cache takes a reference per page and the folio
    /// its index; a large folio fills every index of its (aligned) range.
    pub(super) fn shmem_add_to_page_cache(&mut self, folio: Pfn, ino: u32, index: u64) {
        let nr = self.memmap.folio_nr_pages(folio);
        self.folio_ref_add(folio, nr as i32);
        self.memmap.set_page_index(folio, nr, index);
        self.shmem.mapping_of.insert(folio.0, ino);
        let m = &mut self.shmem.inode_mut(ino).mapping;
        for i in 0..nr {
            m.i_pages.insert(index + i, CacheEntry::Folio(folio));
        }
        m.nrpages += nr;
    }

    /// shmem_delete_from_page_cache / __filemap_remove_folio: the folio leaves the
    /// cache, leaving its swap entry (from `radswap`, the first page's slot) or a hole;
    /// the cache's references go.
    pub fn shmem_delete_from_page_cache(&mut self, folio: Pfn, radswap: Option<u64>) {
        let ino = self.shmem.mapping_of.remove(&folio.0).expect("a page-cache folio");
        let index = self.memmap.page_index(folio);
        let nr = self.memmap.folio_nr_pages(folio);
        let inode = self.shmem.inode_mut(ino);
        let secret = inode.secret;
        for i in 0..nr {
            match radswap {
                Some(slot) => inode.mapping.i_pages.insert(index + i, CacheEntry::Swap(slot + i)),
                None => inode.mapping.i_pages.remove(&(index + i)),
            };
        }
        if radswap.is_some() && nr > 1 {
            inode.swap_orders.insert(index, self.memmap.folio_order(folio));
        }
        inode.mapping.nrpages -= nr;
        // filemap_free_folio: the mapping's free_folio before the cache's references go.
        if secret {
            self.secretmem_free_folio(folio);
        }
        self.folio_put_refs(folio, nr as i32);
    }

    /// shmem_fault -> shmem_get_folio_gfp(SGP_CACHE) for the VMA `vma` at `addr`
    /// (page `index` of the inode): the folio holding the page, and the page, with a
    /// reference for the caller to map; whether it was read from swap (VM_FAULT_MAJOR).
    pub fn shmem_fault(&mut self, vma: &Vma, addr: u64, index: u64) -> Result<(Pfn, Pfn, VmFault), VmFault> {
        self.arch.kc.inc(KernelEvent::ShmemFault);
        let ino = vma.file.expect("a shmem VMA");
        let (folio, ret) = match self.filemap_get_entry(ino, index) {
            Some(CacheEntry::Folio(f)) => (f, VmFault::Done),
            Some(CacheEntry::Swap(slot)) => self.shmem_swapin_folio(ino, index, slot)?,
            None => {
                let orders = self.knobs.shmem_allowable_orders(
                    vma.flags.contains(VmFlags::HUGEPAGE),
                    vma.flags.contains(VmFlags::NOHUGEPAGE),
                    index,
                    self.shmem.inode(ino).size,
                );
                let mut folio = None;
                if orders != 0 {
                    folio = self.shmem_alloc_and_add_folio(vma, addr, ino, index, orders);
                    if let Some(f) = folio {
                        let order = self.memmap.folio_order(f);
                        if order == self.arch.granule().pmd_order() {
                            self.stat.count_vm_event(VmEvent::ThpFileAlloc);
                        }
                        self.stat.count_mthp_stat(order, MthpStat::ShmemAlloc);
                    }
                }
                match folio {
                    Some(f) => (f, VmFault::Done),
                    None => (
                        self.shmem_alloc_and_add_folio(vma, addr, ino, index, 0)
                            .ok_or(VmFault::Oom)?,
                        VmFault::Done,
                    ),
                }
            }
        };
        let page = Pfn(folio.0 + index - self.memmap.page_index(folio));
        Ok((folio, page, ret))
    }

    /// shmem_alloc_and_add_folio: with `orders`, the suitable ones (in the VMA around
    /// `addr`, their aligned range of the cache empty: shmem_suitable_orders) from the
    /// highest down until an allocation succeeds (each failure counted shmem_fallback);
    /// a failed charge gives up (shmem_fallback_charge; the caller then takes order 0).
    /// The folio is cleared (SGP_CACHE's clear:) and in the cache and on the LRU.
    fn shmem_alloc_and_add_folio(&mut self, vma: &Vma, addr: u64, ino: u32, index: u64, orders: u64) -> Option<Pfn> {
        let (folio, index) = if orders != 0 {
            let mut suitable = self.shmem_suitable_orders(vma, addr, ino, index, orders);
            let mut found = None;
            while suitable != 0 {
                let order = 63 - suitable.leading_zeros();
                suitable &= !(1 << order);
                if let Some(f) = self.folio_alloc(order) {
                    found = Some((f, index & !((1 << order) - 1)));
                    break;
                }
                if order == self.arch.granule().pmd_order() {
                    self.stat.count_vm_event(VmEvent::ThpFileFallback);
                }
                self.stat.count_mthp_stat(order, MthpStat::ShmemFallback);
            }
            found?
        } else {
            (self.folio_alloc(0)?, index)
        };
        // The huge gfp (GFP_TRANSHUGE_LIGHT under the default defrag) cannot reclaim.
        if !self.mem_cgroup_charge(folio, orders == 0) {
            let order = self.memmap.folio_order(folio);
            if order == self.arch.granule().pmd_order() {
                self.stat.count_vm_event(VmEvent::ThpFileFallback);
                self.stat.count_vm_event(VmEvent::ThpFileFallbackCharge);
            }
            self.stat.count_mthp_stat(order, MthpStat::ShmemFallback);
            self.stat.count_mthp_stat(order, MthpStat::ShmemFallbackCharge);
            self.folio_put(folio);
            return None;
        }
        let nr = self.memmap.folio_nr_pages(folio);
        self.memmap.folio_set(folio, PageFlags::SWAPBACKED);
        self.shmem_add_to_page_cache(folio, ino, index);
        self.shmem.inode_mut(ino).alloced += nr;
        self.folio_add_lru(folio);
        self.arch.clear_pages(nr);
        Some(folio)
    }

    /// shmem_suitable_orders: of `orders`, those whose aligned block around `addr`
    /// lies in the VMA at a matching file offset (thp_vma_suitable_order), from the
    /// highest whose aligned range of the cache holds nothing (no folio, no swap entry).
    fn shmem_suitable_orders(&self, vma: &Vma, addr: u64, ino: u32, index: u64, orders: u64) -> u64 {
        let shift = self.arch.granule().page_shift();
        let mut orders = self.thp_vma_suitable_orders(vma, addr, orders);
        // A file VMA: vm_start, less vm_pgoff, must be aligned to the folio too.
        let mut o = orders;
        while o != 0 {
            let order = 63 - o.leading_zeros();
            o &= !(1 << order);
            if !((vma.start >> shift) - vma.pgoff).is_multiple_of(1 << order) {
                orders &= !(1 << order);
            }
        }
        let cache = &self.shmem.inode(ino).mapping.i_pages;
        while orders != 0 {
            let order = 63 - orders.leading_zeros();
            let start = index & !((1 << order) - 1);
            if cache.range(start..start + (1 << order)).next().is_none() {
                break;
            }
            orders &= !(1 << order);
        }
        orders
    }

    /// The swap entry holding `index`: its first index and order (a large folio
    /// written out whole left one entry of its order; else order 0).
    fn shmem_swap_entry(&self, ino: u32, index: u64) -> (u64, u32) {
        let orders = &self.shmem.inode(ino).swap_orders;
        match orders.range(..=index).next_back() {
            Some((&base, &order)) if index < base + (1 << order) => (base, order),
            _ => (index, 0),
        }
    }

    /// shmem_swapin_folio for the slot `slot` of page `index`: a folio still in the
    /// swap cache is taken from it (a readahead hit if readahead brought it);
    /// otherwise, zram being SWP_SYNCHRONOUS_IO, shmem_swap_alloc_folio reads a new
    /// folio of the swap entry's order without the swap cache (swapcache_prepare only
    /// fences the slots; 6.14+, 1dd44c0af4fa), falling back to the page alone when that
    /// allocation or its charge fails; or before that shmem_swapin_cluster reads the
    /// page through the swap cache with the cluster readahead around it
    /// (`shmem-swapin=cluster`). A large entry read a page at a time is split first
    /// (shmem_split_large_entry). The folio goes back into the page cache dirty (its
    /// swap copy is dropped: swap_free_nr), and the fault is major when it was read.
    fn shmem_swapin_folio(&mut self, ino: u32, index: u64, slot: u64) -> Result<(Pfn, VmFault), VmFault> {
        self.arch.kc.inc(KernelEvent::ShmemSwapinFolio);
        let (base, mut order) = self.shmem_swap_entry(ino, index);
        let mut cached = self.swap_cache_get_folio(slot);
        let mut ret = VmFault::Done;
        if let Some(f) = cached {
            if self.memmap.folio_test(f, PageFlags::READAHEAD) {
                self.memmap.folio_clear(f, PageFlags::READAHEAD);
                self.stat.count_vm_event(VmEvent::SwapRaHit);
                self.swap_cluster_ra.hits += 1;
            }
        } else if self.shmem_swapin_cluster {
            let f = self.swap_cluster_readahead(slot).ok_or(VmFault::Oom)?;
            self.stat.count_vm_event(VmEvent::PgMajFault);
            cached = Some(f);
            ret = VmFault::Major;
        }
        let folio = match cached {
            Some(f) => f,
            None => {
                ret = VmFault::Major;
                let f = self.shmem_swap_alloc_folio(slot - (index - base), order, slot)?;
                self.stat.count_vm_event(VmEvent::PgMajFault);
                f
            }
        };
        let nr = self.memmap.folio_nr_pages(folio);
        if order > self.memmap.folio_order(folio) {
            self.shmem.inode_mut(ino).swap_orders.remove(&base);
            order = 0;
        }
        let (start, first) = if order > 0 {
            (base, slot - (index - base))
        } else {
            (index, slot)
        };
        let inode = self.shmem.inode_mut(ino);
        inode.swap_orders.remove(&start);
        for i in start..start + nr {
            inode.mapping.i_pages.remove(&i);
        }
        self.shmem_add_to_page_cache(folio, ino, start);
        self.shmem.inode_mut(ino).swapped -= nr;
        if cached.is_some() {
            self.swap_cache_del_folio(folio);
        } else {
            self.swap.as_mut().expect("checked").swapcache_clear(first, nr);
        }
        self.memmap.folio_set(folio, PageFlags::DIRTY);
        let si = self.swap.as_mut().expect("checked");
        for s in first..first + nr {
            si.swap_entry_put(s);
        }
        Ok((folio, ret))
    }

    /// shmem_swap_alloc_folio: a folio of the entry's `order` (its first slot
    /// `first`), charged, its slots fenced (swapcache_prepare) and read; a large one
    /// whose allocation or charge fails falls back to the faulting page's own slot
    /// `slot` alone.
    fn shmem_swap_alloc_folio(&mut self, first: u64, order: u32, slot: u64) -> Result<Pfn, VmFault> {
        let (mut from, mut order) = (first, order);
        let f = loop {
            if let Some(f) = self.folio_alloc(order) {
                if self.mem_cgroup_charge(f, order == 0) {
                    break f;
                }
                self.folio_put(f);
            }
            if order == 0 {
                return Err(VmFault::Oom);
            }
            (from, order) = (slot, 0);
        };
        let si = self.swap.as_mut().expect("a swap entry without a device");
        for s in from..from + (1 << order) {
            si.swapcache_prepare(s);
        }
        self.memmap.folio_set(f, PageFlags::SWAPBACKED);
        self.folio_add_lru(f);
        self.swap_read_folio(f, from);
        Ok(f)
    }

    /// shmem_writeout (reclaim's pageout of a dirty shmem folio, already unmapped): a
    /// large folio goes whole (CONFIG_THP_SWAP) to a run of slots of its order; the
    /// swap cache takes it and the page cache keeps its swap entry in its place
    /// (swap_shmem_alloc), then swap_writeout. Without CONFIG_THP_SWAP (arm64 with 16K
    /// or 64K pages), or when no run of slots is free, the folio is split first
    /// (try_split: its pages kept dirty, the tails put on reclaim's `list` to be written
    /// in turn, 7.0+ counting swpout_fallback) and its first page written alone; before
    /// 6.12 every large folio was split so (`shmem-swapout=split`).
    /// None (AOP_WRITEPAGE_ACTIVATE, redirtied by the caller): no swap, no slot, or the
    /// split failed.
    pub fn shmem_writeout(&mut self, folio: Pfn, list: &mut Vec<Pfn>) -> Option<u64> {
        self.arch.kc.inc(KernelEvent::ShmemWriteout);
        let ino = self.shmem.folio_inode(folio).expect("a shmem folio");
        self.swap.as_ref()?;
        let mut order = self.memmap.folio_order(folio);
        let mut split = order > 0 && (!self.thp_swap() || self.shmem_swapout_split);
        let slot = loop {
            if split {
                self.memmap.folio_set(folio, PageFlags::DIRTY);
                if !split_folio_to_list(self, folio, list) {
                    return None;
                }
                if self.shmem_split_counts_fallback {
                    if order == self.arch.granule().pmd_order() {
                        self.stat.count_vm_event(VmEvent::ThpSwpoutFallback);
                    }
                    self.stat.count_mthp_stat(order, MthpStat::SwpoutFallback);
                }
                self.memmap.folio_clear(folio, PageFlags::DIRTY);
                order = 0;
            }
            match self.swap.as_mut()?.folio_alloc_swap(0, order as u8) {
                Some(slot) => break slot,
                None if order > 0 => split = true,
                None => return None,
            }
        };
        let nr = 1u64 << order;
        self.swap_cache_add_folio(folio, slot);
        self.shmem.inode_mut(ino).swapped += nr;
        let si = self.swap.as_mut().expect("checked");
        for s in slot..slot + nr {
            si.swap_duplicate(s);
        }
        self.shmem_delete_from_page_cache(folio, Some(slot));
        self.swap_writeout(folio, slot);
        Some(slot)
    }

    /// The page cache's side of __split_huge_page for the shmem `folio` of `nr` pages,
    /// now each a folio of its own: each index caches its own page again, with the
    /// cache's reference.
    pub(super) fn shmem_split_folio(&mut self, folio: Pfn, nr: u64, ino: u32) {
        let index = self.memmap.page_index(folio);
        for i in 0..nr {
            let page = Pfn(folio.0 + i);
            self.memmap.folio_ref_add(page, 1);
            self.shmem.mapping_of.insert(page.0, ino);
            (self.shmem.inode_mut(ino).mapping.i_pages).insert(index + i, CacheEntry::Folio(page));
        }
    }

    /// shmem_evict_inode (the last mapping of an unlinked inode is gone):
    /// shmem_truncate_range frees every cached folio and swap slot.
    pub fn shmem_evict_inode(&mut self, ino: u32) {
        let entries: Vec<CacheEntry> = self.shmem.inode(ino).mapping.i_pages.values().copied().collect();
        for e in entries {
            match e {
                // A large folio's later indices are gone with its first.
                CacheEntry::Folio(f) if self.shmem.folio_inode(f).is_none() => {}
                CacheEntry::Folio(f) => {
                    self.shmem_delete_from_page_cache(f, None);
                }
                CacheEntry::Swap(slot) => self.free_swap_and_cache_nr(slot, 1),
            }
        }
        self.shmem.inodes[ino as usize] = None;
    }

    /// After VMAs went away (munmap, exit): evict the inodes of `files` that no VMA of
    /// any mm maps any more (the file's last reference, fput).
    pub fn shmem_release(&mut self, files: impl IntoIterator<Item = u32>) {
        for ino in files {
            if self.shmem.inodes[ino as usize].is_none() {
                continue;
            }
            let mapped = (self.mms.iter().flatten()).any(|m| m.vmas().values().any(|v| v.file == Some(ino)));
            if !mapped {
                self.shmem_evict_inode(ino);
            }
        }
    }
}

#[cfg(test)]
mod tests {
    use crate::hw::MachineConfig;
    use crate::kcount::KernelEvent;
    use crate::mm::madvise::Madv;
    use crate::mm::mm_types::{MmId, VmFlags};
    use crate::mm::vmstat::{MthpStat, VmEvent};
    use crate::mm::Kernel;
    use crate::sim::tests::{assert_clean, boot_with as boot};
    use crate::sim::user_access;

    const BASE: u64 = 0x1000_0000_0000;
    const K4: u64 = 4096;
    const MB: u64 = 1 << 20;

    fn shared(k: &mut Kernel, mm: MmId, len: u64) {
        k.do_mmap(mm, BASE, len, VmFlags::READ | VmFlags::WRITE | VmFlags::SHARED)
            .unwrap();
    }

    /// Accesses every page of [BASE, BASE + len) in `mm`; the faults it took.
    fn touch(k: &mut Kernel, mm: MmId, len: u64, write: bool) -> u64 {
        k.switch_mm(0, mm);
        let before = k.mm(mm).min_flt + k.mm(mm).maj_flt;
        for a in (BASE..BASE + len).step_by(K4 as usize) {
            user_access(k, mm, 0, a, write).unwrap();
        }
        k.mm(mm).min_flt + k.mm(mm).maj_flt - before
    }

    #[test]
    fn a_forked_child_maps_the_parents_pages_sixteen_to_a_fault_and_writes_them_in_place() {
        let (mut k, mm) = boot(MachineConfig::default(), &[]);
        shared(&mut k, mm, MB);
        assert_eq!(touch(&mut k, mm, MB, true), 256);
        let child = k.dup_mmap(mm).unwrap();
        assert_eq!(k.mm(child).rss_shmem, 0, "fork copies no shared ptes");
        assert_eq!(touch(&mut k, child, MB, false), 16, "fault-around maps 64K a fault");
        assert_eq!(touch(&mut k, child, MB, true), 0, "the ptes are writable: no CoW");
        let (p, c) = (k.pte_offset(mm, BASE).unwrap(), k.pte_offset(child, BASE).unwrap());
        let g = k.arch.granule();
        assert_eq!(k.arch.__ptep_get(p).pte_pfn(g), k.arch.__ptep_get(c).pte_pfn(g));
        assert_clean(&k);
        // Mapped by both: MADV_PAGEOUT leaves the pages alone.
        k.sys_swapon(16 * MB).unwrap();
        k.switch_mm(0, mm);
        k.do_madvise(mm, BASE, BASE + MB, Madv::PageOut).unwrap();
        assert_eq!(k.stat.event(VmEvent::Pswpout), 0);
        k.exit_mmap(child);
        k.exit_mmap(mm);
        assert_eq!(k.shmem.inodes().count(), 0, "the last mapping's exit evicts the inode");
        assert_clean(&k);
    }

    /// 1 MiB shared, touched (written or read) and paged out to zram; the free pages
    /// before the page-out.
    fn paged_out(write: bool) -> (Kernel, MmId, u64) {
        let (mut k, mm) = boot(MachineConfig::default(), &[]);
        k.sys_swapon(16 * MB).unwrap();
        shared(&mut k, mm, MB);
        touch(&mut k, mm, MB, write);
        let free = k.nr_free_pages();
        k.do_madvise(mm, BASE, BASE + MB, Madv::PageOut).unwrap();
        assert_clean(&k);
        (k, mm, free)
    }

    #[test]
    fn pageout_writes_dirty_pages_to_swap_and_a_read_brings_them_back_dirty() {
        let (mut k, mm, free) = paged_out(true);
        assert_eq!(k.stat.event(VmEvent::Pswpout), 256);
        assert_eq!(k.nr_free_pages(), free + 256);
        assert_eq!(
            (k.mm(mm).rss_shmem, k.mm(mm).rss_swap),
            (0, 0),
            "the slots are the inode's"
        );
        assert_eq!(touch(&mut k, mm, MB, false), 256);
        assert_eq!(
            (k.stat.event(VmEvent::Pswpin), k.stat.event(VmEvent::PgMajFault)),
            (256, 256)
        );
        assert_eq!(k.swap.as_ref().unwrap().inuse_pages, 0, "swap-in frees the slots");
        assert_clean(&k);
        // Dirty after the swap-in: the next page-out writes every page again.
        k.do_madvise(mm, BASE, BASE + MB, Madv::PageOut).unwrap();
        assert_eq!(k.stat.event(VmEvent::Pswpout), 512);
        k.do_munmap(mm, BASE, BASE + MB);
        assert_eq!(k.swap.as_ref().unwrap().inuse_pages, 0, "eviction frees the slots");
        assert_clean(&k);
    }

    #[test]
    fn a_clean_page_is_dropped_by_pageout_and_reads_back_as_a_new_zeroed_page() {
        let (mut k, mm, free) = paged_out(false);
        assert_eq!(k.nr_free_pages(), free + 256);
        assert_eq!(k.stat.event(VmEvent::Pswpout), 0);
        assert_eq!(k.shmem.nr_cached(), 0);
        let allocs = k.arch.kc.get(KernelEvent::FolioAlloc);
        assert_eq!(touch(&mut k, mm, MB, false), 256);
        assert_eq!(k.arch.kc.get(KernelEvent::FolioAlloc), allocs + 256);
        assert_eq!(k.stat.event(VmEvent::PgMajFault), 0);
        assert_clean(&k);
    }

    #[test]
    fn munmap_drops_the_file_rmaps_while_another_mapper_keeps_the_pages_cached() {
        let (mut k, mm) = boot(MachineConfig::default(), &[]);
        shared(&mut k, mm, MB);
        touch(&mut k, mm, MB, true);
        let child = k.dup_mmap(mm).unwrap();
        k.switch_mm(0, mm);
        let removed = k.arch.kc.get(KernelEvent::FolioRemoveRmapPtes);
        k.do_munmap(mm, BASE, BASE + MB);
        assert_eq!(k.arch.kc.get(KernelEvent::FolioRemoveRmapPtes), removed + 256);
        assert_eq!(k.mm(mm).rss_shmem, 0);
        // The child keeps the inode, and the pages, alive.
        assert_eq!(k.shmem.nr_cached(), 256);
        assert_clean(&k);
        k.exit_mmap(child);
        assert_eq!(k.shmem.nr_cached(), 0);
        assert_clean(&k);
    }

    /// 1 MiB shared with 64K shmem folios allowed, written.
    fn shared_64k() -> (Kernel, MmId) {
        let (mut k, mm) = boot(MachineConfig::default(), &[("hugepages-64kB/shmem_enabled", "always")]);
        shared(&mut k, mm, MB);
        (k, mm)
    }

    #[test]
    fn a_write_fault_allocates_a_64k_shmem_folio_and_maps_all_its_ptes() {
        let (mut k, mm) = shared_64k();
        assert_eq!(touch(&mut k, mm, MB, true), 16);
        assert_eq!(k.stat.mthp(4, MthpStat::ShmemAlloc), 16);
        assert_eq!(k.shmem.nr_cached(), 16);
        assert_eq!(k.mm(mm).rss_shmem, 256);
        assert_clean(&k);
        // Zapped, the folios stay cached; a read maps each whole again in one fault.
        k.do_madvise(mm, BASE, BASE + MB, Madv::DontNeed).unwrap();
        assert_eq!(touch(&mut k, mm, MB, false), 16);
        assert_eq!(k.stat.mthp(4, MthpStat::ShmemAlloc), 16, "nothing new allocated");
        assert_clean(&k);
    }

    #[test]
    fn the_order_walk_skips_a_block_the_page_cache_already_holds_a_page_of() {
        let (mut k, mm) = boot(
            MachineConfig::default(),
            &[
                ("hugepages-64kB/shmem_enabled", "always"),
                ("hugepages-16kB/shmem_enabled", "always"),
            ],
        );
        shared(&mut k, mm, MB);
        // Without the 64K size a first fault caches a lone page; then 64K is allowed.
        k.knobs.set("hugepages-64kB/shmem_enabled", "never").unwrap();
        k.knobs.set("hugepages-16kB/shmem_enabled", "never").unwrap();
        touch(&mut k, mm, K4, true);
        k.knobs.set("hugepages-64kB/shmem_enabled", "always").unwrap();
        k.knobs.set("hugepages-16kB/shmem_enabled", "always").unwrap();
        touch(&mut k, mm, 64 << 10, true);
        // [0, 64K) holds page 0: 16K folios for [16K, 64K), and order 0 for [4K, 16K).
        assert_eq!(k.stat.mthp(4, MthpStat::ShmemAlloc), 0);
        assert_eq!(k.stat.mthp(2, MthpStat::ShmemAlloc), 3);
        assert_eq!(k.shmem.nr_cached(), 1 + 3 + 3);
        assert_clean(&k);
    }

    #[test]
    fn a_64k_shmem_folio_goes_to_swap_whole_and_comes_back_whole() {
        let (mut k, mm) = shared_64k();
        k.sys_swapon(16 * MB).unwrap();
        touch(&mut k, mm, MB, true);
        k.do_madvise(mm, BASE, BASE + MB, Madv::PageOut).unwrap();
        assert_eq!(k.stat.mthp(4, MthpStat::Swpout), 16);
        assert_eq!(k.stat.event(VmEvent::Pswpout), 256);
        assert_eq!(k.shmem.nr_cached(), 0);
        assert_clean(&k);
        // One major fault per folio, read back at the swap entry's order.
        assert_eq!(touch(&mut k, mm, MB, false), 16);
        assert_eq!(k.stat.mthp(4, MthpStat::Swpin), 16);
        assert_eq!(k.stat.event(VmEvent::PgMajFault), 16);
        assert_eq!(k.swap.as_ref().unwrap().inuse_pages, 0);
        assert_clean(&k);
        k.do_munmap(mm, BASE, BASE + MB);
        assert_eq!(k.shmem.inodes().count(), 0);
        assert_clean(&k);
    }

    #[test]
    fn a_large_swap_entry_read_a_page_at_a_time_is_split() {
        let (mut k, mm) = shared_64k();
        k.sys_swapon(16 * MB).unwrap();
        touch(&mut k, mm, 64 << 10, true);
        k.do_madvise(mm, BASE, BASE + (64 << 10), Madv::PageOut).unwrap();
        // As before 6.14 (shmem_swapin_cluster): order-0 reads through the swap cache.
        k.shmem_swapin_cluster = true;
        touch(&mut k, mm, K4, false);
        let ino = k.mm(mm).find_vma(BASE).unwrap().file.unwrap();
        assert!(k.shmem.inode(ino).swap_orders.is_empty(), "the entry was split");
        assert_eq!(k.stat.mthp(4, MthpStat::Swpin), 0);
        touch(&mut k, mm, 64 << 10, false);
        assert_eq!(k.shmem.inode(ino).swapped, 0);
        assert_clean(&k);
    }

    /// 256K shared with 64K shmem folios, written and paged out under `sets`: the
    /// report's counters.
    fn paged_out_64k(sets: &[&str]) -> crate::report::Counters {
        let src = "swapon 16M\nset hugepages-64kB/shmem_enabled always\nmmap a 256K shared\ntouch a\n\
                   madvise a 0 256K pageout\ntouch a read\n";
        let w = crate::workload::parse_str("s.wl", src).unwrap();
        let sets: Vec<String> = sets.iter().map(|s| s.to_string()).collect();
        crate::sim::run(&w, &crate::sim::Variants::from_sets(&sets).unwrap())
            .unwrap()
            .counters
    }

    #[test]
    fn without_thp_swap_a_large_shmem_folio_is_split_and_its_pages_written_alone() {
        // 16K pages: no THP_SWAP, so shmem_writeout splits each 64K folio (4 pages).
        let c = paged_out_64k(&["granule=16K", "shmem-split-stat=uncounted"]);
        assert_eq!(c["mthp.64kB.split"], 4);
        assert_eq!((c["mthp.64kB.swpout"], c["vmstat.pswpout"]), (0, 16));
        assert_eq!(c["mthp.64kB.swpout_fallback"], 0);
        // Read back a page at a time: the entries are order 0.
        assert_eq!((c["mthp.64kB.swpin"], c["vmstat.pgmajfault"]), (0, 16));
        // 6.19+ counts the split as a swap-out fallback.
        let c = paged_out_64k(&["granule=16K", "shmem-split-stat=counted"]);
        assert_eq!(c["mthp.64kB.swpout_fallback"], 4);
        // 4K pages (THP_SWAP): whole.
        let c = paged_out_64k(&[]);
        assert_eq!(
            (c["mthp.64kB.split"], c["mthp.64kB.swpout"], c["vmstat.pswpout"]),
            (0, 4, 64)
        );
    }

    /// 4 MiB shared with PMD-sized shmem folios (shmem_enabled always, the PMD size
    /// inheriting it).
    fn shared_pmd() -> (Kernel, MmId) {
        let (mut k, mm) = boot(MachineConfig::default(), &[("shmem_enabled", "always")]);
        shared(&mut k, mm, 4 * MB);
        (k, mm)
    }

    fn pmd_mapped(k: &mut Kernel, mm: MmId, addr: u64) -> bool {
        let pmd = k.pmd_offset(mm, addr).unwrap();
        crate::arch::arm64::pgtable::pmd_trans_huge(k.pxd_get(2, pmd))
    }

    #[test]
    fn a_pmd_sized_shmem_folio_is_mapped_by_its_pmd_and_mapped_again_by_fault_around() {
        let (mut k, mm) = shared_pmd();
        assert_eq!(touch(&mut k, mm, 4 * MB, true), 2, "one fault per 2M folio");
        assert_eq!(k.stat.event(VmEvent::ThpFileAlloc), 2);
        assert_eq!(k.stat.event(VmEvent::ThpFileMapped), 2);
        assert_eq!(k.stat.mthp(9, MthpStat::ShmemAlloc), 2);
        assert!(pmd_mapped(&mut k, mm, BASE));
        assert_eq!(k.mm(mm).rss_shmem, 1024);
        assert_eq!(k.mm(mm).nr_ptes, 0, "no pte table");
        assert_clean(&k);
        // Zapped whole, the folios stay cached; a read maps each by its pmd again.
        k.do_madvise(mm, BASE, BASE + 4 * MB, Madv::DontNeed).unwrap();
        assert_eq!((k.mm(mm).rss_shmem, k.shmem.nr_cached()), (0, 2));
        assert_clean(&k);
        assert_eq!(touch(&mut k, mm, 4 * MB, false), 2);
        assert_eq!(k.stat.event(VmEvent::ThpFileMapped), 4);
        assert_eq!(k.stat.event(VmEvent::ThpFileAlloc), 2, "nothing new allocated");
        assert_clean(&k);
        // A partial munmap zaps the whole pmd (a file pmd is not split into ptes).
        k.do_munmap(mm, BASE, BASE + MB);
        assert_eq!(k.stat.event(VmEvent::ThpSplitPmd), 1);
        assert_eq!(k.mm(mm).rss_shmem, 512);
        assert_eq!(k.shmem.nr_cached(), 2, "the folio stays whole in the cache");
        assert_clean(&k);
        k.do_munmap(mm, BASE + MB, BASE + 4 * MB);
        assert_eq!(k.shmem.inodes().count(), 0);
        assert_clean(&k);
    }

    #[test]
    fn a_pmd_sized_shmem_folio_goes_to_swap_whole_and_a_partial_pageout_splits_it() {
        let (mut k, mm) = shared_pmd();
        k.sys_swapon(16 * MB).unwrap();
        touch(&mut k, mm, 2 * MB, true);
        k.do_madvise(mm, BASE, BASE + 2 * MB, Madv::PageOut).unwrap();
        assert_eq!(k.stat.event(VmEvent::ThpSplitPmd), 1, "try_to_unmap zaps the pmd");
        assert_eq!(
            (k.stat.event(VmEvent::ThpSwpout), k.stat.event(VmEvent::Pswpout)),
            (1, 512)
        );
        assert_clean(&k);
        assert_eq!(
            touch(&mut k, mm, 2 * MB, false),
            1,
            "read back whole, mapped by the pmd"
        );
        assert_eq!(k.stat.mthp(9, MthpStat::Swpin), 1);
        assert!(pmd_mapped(&mut k, mm, BASE));
        assert_clean(&k);
        // Half of it: split_folio unmaps it and leaves 512 pages cached, none paged out.
        k.do_madvise(mm, BASE, BASE + MB, Madv::PageOut).unwrap();
        assert_eq!(k.stat.event(VmEvent::ThpSplitPage), 1);
        assert_eq!(k.stat.mthp(9, MthpStat::Split), 1);
        assert_eq!(k.stat.event(VmEvent::Pswpout), 512);
        assert_eq!((k.mm(mm).rss_shmem, k.shmem.nr_cached()), (0, 512));
        assert_clean(&k);
        assert_eq!(touch(&mut k, mm, 2 * MB, false), 32, "fault-around, 16 pages a fault");
        assert_clean(&k);
    }

    #[test]
    fn folio_referenced_finds_a_shmem_folios_pmd_through_its_file_mapping() {
        let (mut k, mm) = shared_pmd();
        touch(&mut k, mm, 2 * MB, true);
        let pmd = k.pmd_offset(mm, BASE).unwrap();
        let folio = k.pxd_get(2, pmd).pfn(k.arch.granule());
        assert_eq!(k.folio_referenced(folio), (1, false), "the access set the pmd's AF");
        assert_eq!(k.folio_referenced(folio), (0, false), "and the first look cleared it");
        assert_clean(&k);
    }

    #[test]
    fn order_1_shmem_folios_are_allocated_and_counted() {
        let (mut k, mm) = boot(MachineConfig::default(), &[("hugepages-8kB/shmem_enabled", "always")]);
        shared(&mut k, mm, 64 << 10);
        assert_eq!(touch(&mut k, mm, 64 << 10, true), 8);
        assert_eq!(k.stat.mthp(1, MthpStat::ShmemAlloc), 8);
        assert_clean(&k);
    }
}
