//! mm/memcontrol.c (cgroup v1, as on the validation host): the workload's one memory
//! cgroup (`memlimit`), its page counter with the limit, the per-CPU charge stock, and
//! try_charge_memcg's reclaim when a charge would go over the limit.
//!
//! Charged: anon folios (mem_cgroup_charge at fault, copy-on-write, swap-in,
//! collapse), user page-table pages (__GFP_ACCOUNT), and the slab objects of a new
//! mapping (its vm_area_struct at mmap, anon_vma and anon_vma_chain at its first
//! fault), byte by byte through the obj_cgroup stock. Not charged yet: the slab
//! objects of VMA splits and fork, and none is uncharged.
//! The pages charged to the cgroup (folio->memcg_data) are kept in a set beside the
//! memmap, which keeps struct page at 16 bytes; every page of a charged folio is in
//! it, so a split needs nothing and a migration moves them (mem_cgroup_migrate).

use super::Kernel;
use crate::hw::Pfn;
use std::collections::BTreeSet;

/// MEMCG_CHARGE_BATCH: pages a charge takes ahead into the per-CPU stock.
pub const MEMCG_CHARGE_BATCH: u64 = 64;
/// MAX_RECLAIM_RETRIES.
const MAX_RECLAIM_RETRIES: u32 = 16;
/// PAGE_ALLOC_COSTLY_ORDER.
const PAGE_ALLOC_COSTLY_ORDER: u32 = 3;
/// The accounted slab caches' object sizes (s->size, what obj_full_size charges), as
/// on the validation host (/sys/kernel/slab/<cache>/slab_size).
pub const VM_AREA_STRUCT_SIZE: u64 = 192;
pub const ANON_VMA_SIZE: u64 = 104;
pub const ANON_VMA_CHAIN_SIZE: u64 = 64;

/// struct mem_cgroup, as far as charging goes: `memory` page counter and its limit
/// (memory.limit_in_bytes), and this cgroup's pages in the one CPU's stock.
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct MemCgroup {
    pub limit: u64,
    pub usage: u64,
    pub stock: u64,
    /// The one CPU's obj_stock: bytes charged ahead for slab objects.
    pub obj_stock: u64,
    /// Every page charged: each page of a charged folio, and charged page tables.
    charged: BTreeSet<u64>,
}

impl MemCgroup {
    pub fn new(limit_pages: u64) -> MemCgroup {
        MemCgroup {
            limit: limit_pages,
            usage: 0,
            stock: 0,
            obj_stock: 0,
            charged: BTreeSet::new(),
        }
    }

    /// mem_cgroup_migrate: `dst`'s `nr` pages take over `src`'s charge.
    pub fn migrate(&mut self, src: Pfn, dst: Pfn, nr: u64) {
        if self.charged.remove(&src.0) {
            for i in 1..nr {
                self.charged.remove(&(src.0 + i));
            }
            self.charged.extend(dst.0..dst.0 + nr);
        }
    }

    /// mem_cgroup_margin: pages the counter can still take.
    pub fn margin(&self) -> u64 {
        self.limit.saturating_sub(self.usage)
    }

    /// page_counter_try_charge.
    fn try_charge(&mut self, nr: u64) -> bool {
        if self.usage + nr > self.limit {
            return false;
        }
        self.usage += nr;
        true
    }

    /// consume_stock.
    fn consume_stock(&mut self, nr: u64) -> bool {
        if nr > MEMCG_CHARGE_BATCH || self.stock < nr {
            return false;
        }
        self.stock -= nr;
        true
    }

    /// refill_stock: over a batch's worth, the stock goes back to the counter.
    fn refill_stock(&mut self, nr: u64) {
        if nr > MEMCG_CHARGE_BATCH {
            self.usage -= nr;
            return;
        }
        self.stock += nr;
        if self.stock > MEMCG_CHARGE_BATCH {
            self.drain_stock();
        }
    }

    /// drain_stock / drain_all_stock (one CPU).
    fn drain_stock(&mut self) {
        self.usage -= std::mem::take(&mut self.stock);
    }
}

impl Kernel {
    /// mem_cgroup_charge for a new folio: charges it to the workload's cgroup, if
    /// there is one. `may_reclaim` is the gfp's __GFP_DIRECT_RECLAIM (an mTHP fault
    /// under the default defrag has none: its charge fails rather than reclaims).
    /// False when the cgroup cannot take it.
    pub fn mem_cgroup_charge(&mut self, folio: Pfn, may_reclaim: bool) -> bool {
        if self.memcg.is_none() {
            return true;
        }
        let nr = self.memmap.folio_nr_pages(folio);
        if !self.try_charge_memcg(nr, may_reclaim) {
            return false;
        }
        let cg = self.memcg.as_mut().expect("checked");
        cg.charged.extend(folio.0..folio.0 + nr);
        true
    }

    /// obj_cgroup_charge of a slab object of `size` bytes: from the obj stock, else
    /// whole pages through try_charge_memcg (forced, as for a page table), the
    /// rest of the last page left in the stock.
    pub fn obj_cgroup_charge(&mut self, size: u64) {
        let ps = self.arch.granule().page_size();
        let Some(cg) = self.memcg.as_mut() else {
            return;
        };
        if cg.obj_stock >= size {
            cg.obj_stock -= size;
            return;
        }
        let nr_bytes = size & (ps - 1);
        let nr_pages = size / ps + u64::from(nr_bytes > 0);
        if !self.try_charge_memcg(nr_pages, true) {
            self.memcg.as_mut().expect("checked").usage += nr_pages;
        }
        if nr_bytes > 0 {
            self.memcg.as_mut().expect("checked").obj_stock += ps - nr_bytes;
        }
    }

    /// __memcg_kmem_charge_page for a user page-table page (GFP_PGTABLE_USER can
    /// reclaim; the model does not OOM on a page table, it forces the charge).
    pub(super) fn memcg_kmem_charge_page(&mut self, page: Pfn) {
        if self.memcg.is_none() {
            return;
        }
        if !self.try_charge_memcg(1, true) {
            self.memcg.as_mut().expect("checked").usage += 1;
        }
        self.memcg.as_mut().expect("checked").charged.insert(page.0);
    }

    /// __memcg_kmem_uncharge_page: a kmem uncharge refills the stock
    /// (obj_cgroup_uncharge_pages).
    pub(super) fn memcg_kmem_uncharge_page(&mut self, page: Pfn) {
        if let Some(cg) = self.memcg.as_mut().filter(|cg| cg.charged.contains(&page.0)) {
            cg.charged.remove(&page.0);
            cg.refill_stock(1);
        }
    }

    /// mem_cgroup_uncharge (uncharge_batch) of a folio being freed: straight to the
    /// counter.
    pub(super) fn mem_cgroup_uncharge(&mut self, folio: Pfn, nr: u64) {
        if let Some(cg) = self.memcg.as_mut().filter(|cg| cg.charged.contains(&folio.0)) {
            for i in 0..nr {
                cg.charged.remove(&(folio.0 + i));
            }
            cg.usage -= nr;
        }
    }

    /// try_charge_memcg: from the stock, else a batch (or just `nr`) from the
    /// counter; over the limit, reclaim from the cgroup and retry, drain the stock
    /// once, retry while reclaim frees something (small charges) or
    /// MAX_RECLAIM_RETRIES times; then fail (the memcg OOM, which the model reports
    /// as the fault's OOM).
    fn try_charge_memcg(&mut self, nr: u64, may_reclaim: bool) -> bool {
        let mut batch = nr.max(MEMCG_CHARGE_BATCH);
        let mut retries = MAX_RECLAIM_RETRIES;
        let mut drained = false;
        loop {
            let cg = self.memcg.as_mut().expect("a memory cgroup");
            if cg.consume_stock(nr) {
                return true;
            }
            if cg.try_charge(batch) {
                if batch > nr {
                    cg.refill_stock(batch - nr);
                }
                return true;
            }
            if batch > nr {
                batch = nr;
                continue;
            }
            if !may_reclaim {
                return false;
            }
            let reclaimed = self.try_to_free_mem_cgroup_pages(nr);
            let cg = self.memcg.as_mut().expect("a memory cgroup");
            if cg.margin() >= nr {
                continue;
            }
            if !drained {
                cg.drain_stock();
                drained = true;
                continue;
            }
            if reclaimed > 0 && nr <= 1 << PAGE_ALLOC_COSTLY_ORDER {
                continue;
            }
            if retries == 0 {
                return false;
            }
            retries -= 1;
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn a_charge_takes_a_batch_into_the_stock_and_later_ones_come_from_it() {
        let mut cg = MemCgroup::new(1000);
        assert!(cg.try_charge(64));
        cg.refill_stock(63);
        assert_eq!((cg.usage, cg.stock), (64, 63));
        assert!(cg.consume_stock(1));
        assert!(!cg.consume_stock(63));
        // Ten pages in use go back to the stock: over a batch, the whole stock goes
        // back to the counter, leaving the two pages still in use.
        assert!(cg.try_charge(10));
        cg.refill_stock(10);
        assert_eq!((cg.usage, cg.stock), (2, 0));
    }

    #[test]
    fn the_counter_refuses_past_the_limit() {
        let mut cg = MemCgroup::new(10);
        assert!(cg.try_charge(10));
        assert!(!cg.try_charge(1));
        assert_eq!((cg.margin(), cg.usage), (0, 10));
    }
}
