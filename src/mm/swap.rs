//! mm/swap.c and include/linux/mm_inline.h: the LRU lists reclaim scans, the per-CPU
//! lru_add folio batch new folios wait in, and moving folios between the lists.
//!
//! The model has one lruvec: the workload's memory cgroup's (`memlimit`) or, without
//! one, the node's. 6.18 without MGLRU (the validation host has no lru_gen) keeps
//! the classic lists: a new anon folio goes to the inactive anon list
//! (folio_add_lru sets PG_active only under lru_gen), a lazyfree one to the inactive
//! file list (lru_lazyfree).
//!
//! A folio's LRU state (the lru links, PG_lru, PG_active, PG_referenced,
//! PG_workingset) is kept beside the memmap, by head pfn, so struct page stays 32
//! bytes. The lru_add batch takes no reference here (the kernel's does): a reference
//! more would change every refcount test the model already matches; a folio freed
//! while waiting in it just leaves it.

use super::folio::PageFlags;
use super::Kernel;
use crate::hw::Pfn;
use std::collections::HashMap;

/// PAGEVEC_SIZE: the folios a folio_batch holds.
pub const PAGEVEC_SIZE: usize = 31;

/// enum lru_list, the evictable ones (the model has no unevictable list).
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum LruList {
    InactiveAnon = 0,
    ActiveAnon = 1,
    InactiveFile = 2,
    ActiveFile = 3,
}

impl LruList {
    /// for_each_evictable_lru's order.
    pub const EVICTABLE: [LruList; 4] = [
        LruList::InactiveAnon,
        LruList::ActiveAnon,
        LruList::InactiveFile,
        LruList::ActiveFile,
    ];
    pub fn is_active(self) -> bool {
        matches!(self, LruList::ActiveAnon | LruList::ActiveFile)
    }
    pub fn is_file(self) -> bool {
        matches!(self, LruList::InactiveFile | LruList::ActiveFile)
    }
    /// The active list of the same type.
    pub fn active(self) -> LruList {
        if self.is_file() {
            LruList::ActiveFile
        } else {
            LruList::ActiveAnon
        }
    }
}

/// One folio's LRU state. `prev` is toward the list's head (newer), `next` toward
/// its tail (older), where reclaim takes folios (lru_to_folio).
#[derive(Clone, Copy, Debug, Default, PartialEq, Eq)]
pub struct LruFolio {
    prev: Option<u64>,
    next: Option<u64>,
    /// The list it is on while `lru`; pages it counts there.
    list: Option<LruList>,
    pages: u64,
    /// PG_lru: on a list (not isolated, not waiting in the batch).
    pub lru: bool,
    pub active: bool,
    pub referenced: bool,
    pub workingset: bool,
}

/// struct lruvec: the four lists, their sizes in pages, the reclaim cost balance.
#[derive(Default)]
pub struct Lruvec {
    head: [Option<u64>; 4],
    tail: [Option<u64>; 4],
    nr_pages: [u64; 4],
    folios: HashMap<u64, LruFolio>,
    /// cpu_fbatches.lru_add of the one CPU the workload's faults run on.
    fbatch: Vec<Pfn>,
    /// lruvec->anon_cost and file_cost (lru_note_cost).
    pub anon_cost: u64,
    pub file_cost: u64,
}

impl Lruvec {
    /// Host bytes the LRU state of one folio takes at most: its map entry and control
    /// byte, times 24/7 for a hash table at 7/8 load caught growing (old and new tables
    /// both live). 512 MiB of order-0 folios measured 171 bytes each.
    pub const HOST_BYTES_PER_FOLIO: u64 = (std::mem::size_of::<(u64, LruFolio)>() as u64 + 1) * 24 / 7;

    /// lruvec_page_state(NR_LRU_BASE + lru): pages on `lru`.
    pub fn size(&self, lru: LruList) -> u64 {
        self.nr_pages[lru as usize]
    }

    /// The folio's LRU state, if it has been added to the LRU (or its batch).
    pub fn state(&self, folio: Pfn) -> Option<&LruFolio> {
        self.folios.get(&folio.0)
    }
    pub fn state_mut(&mut self, folio: Pfn) -> &mut LruFolio {
        self.folios.entry(folio.0).or_default()
    }

    /// lru_to_folio: the oldest folio on `lru`.
    pub fn lru_to_folio(&self, lru: LruList) -> Option<Pfn> {
        self.tail[lru as usize].map(Pfn)
    }

    /// lruvec_add_folio: at the head of `lru`, counting `pages`.
    fn add(&mut self, folio: Pfn, lru: LruList, pages: u64) {
        let l = lru as usize;
        let old_head = self.head[l];
        {
            let s = self.folios.entry(folio.0).or_default();
            debug_assert!(!s.lru, "folio {folio:?} already on an LRU list");
            s.prev = None;
            s.next = old_head;
            s.list = Some(lru);
            s.pages = pages;
            s.lru = true;
        }
        match old_head {
            Some(h) => self.folios.get_mut(&h).expect("linked").prev = Some(folio.0),
            None => self.tail[l] = Some(folio.0),
        }
        self.head[l] = Some(folio.0);
        self.nr_pages[l] += pages;
    }

    /// lruvec_del_folio: off its list (PG_lru cleared); its other flags stay.
    pub fn del(&mut self, folio: Pfn) {
        let s = self.folios.get_mut(&folio.0).expect("a folio on the LRU");
        let (prev, next, lru, pages) = (s.prev, s.next, s.list.take().expect("on a list"), s.pages);
        s.lru = false;
        s.prev = None;
        s.next = None;
        let l = lru as usize;
        match prev {
            Some(p) => self.folios.get_mut(&p).expect("linked").next = next,
            None => self.head[l] = next,
        }
        match next {
            Some(n) => self.folios.get_mut(&n).expect("linked").prev = prev,
            None => self.tail[l] = prev,
        }
        self.nr_pages[l] -= pages;
    }

    /// list_add_tail(&new->lru, &folio->lru): `new` right on the newer side of
    /// `folio`, on its list.
    fn add_before(&mut self, new: Pfn, folio: Pfn) {
        let s = self.folios[&folio.0];
        let lru = s.list.expect("on a list");
        let l = lru as usize;
        {
            let n = self.folios.entry(new.0).or_default();
            n.prev = s.prev;
            n.next = Some(folio.0);
            n.list = Some(lru);
            n.pages = 1;
            n.lru = true;
        }
        match s.prev {
            Some(p) => self.folios.get_mut(&p).expect("linked").next = Some(new.0),
            None => self.head[l] = Some(new.0),
        }
        self.folios.get_mut(&folio.0).expect("linked").prev = Some(new.0);
    }

    /// Folios from the oldest on `lru`.
    #[cfg(test)]
    pub fn iter_from_tail(&self, lru: LruList) -> impl Iterator<Item = Pfn> + '_ {
        std::iter::successors(self.tail[lru as usize], move |p| self.folios[p].prev).map(Pfn)
    }
}

impl Kernel {
    /// folio_lru_list: where a folio belongs by its flags; lazyfree (anon, not
    /// swap-backed) folios are on the file lists.
    pub fn folio_lru_list(&self, folio: Pfn) -> LruList {
        let file = !self.memmap.folio_test(folio, PageFlags::SWAPBACKED);
        let active = self.lruvec.state(folio).is_some_and(|s| s.active);
        match (file, active) {
            (false, false) => LruList::InactiveAnon,
            (false, true) => LruList::ActiveAnon,
            (true, false) => LruList::InactiveFile,
            (true, true) => LruList::ActiveFile,
        }
    }

    /// lruvec_add_folio: onto the head of the list its flags say.
    pub fn lruvec_add_folio(&mut self, folio: Pfn) {
        let lru = self.folio_lru_list(folio);
        let pages = self.memmap.folio_nr_pages(folio);
        self.lruvec.add(folio, lru, pages);
    }

    /// folio_add_lru_vma / folio_add_lru: a new folio waits in the lru_add batch,
    /// which moves to the lists when full, or at once for a large folio.
    pub fn folio_add_lru(&mut self, folio: Pfn) {
        self.lruvec.state_mut(folio);
        self.lruvec.fbatch.push(folio);
        if self.lruvec.fbatch.len() == PAGEVEC_SIZE || self.memmap.folio_order(folio) > 0 {
            self.lru_add_drain();
        }
    }

    /// lru_add_drain: the batch's folios onto their lists, in the order added.
    pub fn lru_add_drain(&mut self) {
        for folio in std::mem::take(&mut self.lruvec.fbatch) {
            self.lruvec_add_folio(folio);
        }
    }

    /// lru_lazyfree (MADV_FREE of a swap-backed anon folio): to the inactive file
    /// list, PG_active, PG_referenced and SWAPBACKED cleared.
    pub fn lru_lazyfree(&mut self, folio: Pfn) {
        let on_lru = self.lruvec.state(folio).is_some_and(|s| s.lru);
        if on_lru {
            self.lruvec.del(folio);
        }
        let s = self.lruvec.state_mut(folio);
        s.active = false;
        s.referenced = false;
        self.memmap.folio_clear(folio, PageFlags::SWAPBACKED);
        if on_lru {
            self.lruvec_add_folio(folio);
        }
    }

    /// folio_isolate_lru: take the folio off its list, with a reference, for the
    /// caller; false when it is not on one (still in the batch, or isolated already).
    pub fn folio_isolate_lru(&mut self, folio: Pfn) -> bool {
        if !self.lruvec.state(folio).is_some_and(|s| s.lru) {
            return false;
        }
        self.lruvec.del(folio);
        self.folio_ref_add(folio, 1);
        true
    }

    /// folio_putback_lru: an isolated folio back through the lru_add batch, its
    /// isolation reference dropped.
    pub fn folio_putback_lru(&mut self, folio: Pfn) {
        self.folio_add_lru(folio);
        self.folio_put(folio);
    }

    /// __page_cache_release (a folio being freed): off the LRU, out of the batch.
    pub(super) fn lru_forget_folio(&mut self, folio: Pfn) {
        let Some(s) = self.lruvec.folios.get(&folio.0).copied() else {
            return;
        };
        if s.lru {
            self.lruvec.del(folio);
        } else if let Some(i) = self.lruvec.fbatch.iter().position(|&f| f == folio) {
            self.lruvec.fbatch.remove(i);
        }
        self.lruvec.folios.remove(&folio.0);
    }

    /// lru_add_split_folio for every new folio of a split (`folio` now order 0,
    /// `nr` pages before): each tail takes the head's flags and, while the head is on
    /// a list, goes right on its newer side, in ascending order; a tail of an isolated
    /// head is isolated too (the caller lists it), one of a batched head joins the batch.
    pub(super) fn lru_add_split_folio(&mut self, folio: Pfn, nr: u64) {
        let Some(head) = self.lruvec.folios.get(&folio.0).copied() else {
            return;
        };
        self.lruvec.folios.get_mut(&folio.0).expect("present").pages = 1;
        for i in 1..nr {
            let tail = Pfn(folio.0 + i);
            if self.memmap.folio_ref_count(tail) == 0 {
                continue;
            }
            let s = self.lruvec.state_mut(tail);
            s.active = head.active;
            s.referenced = head.referenced;
            s.workingset = head.workingset;
            if head.lru {
                // The head's count on its list already covers the tail.
                self.lruvec.add_before(tail, folio);
            } else if self.lruvec.fbatch.contains(&folio) {
                self.lruvec.fbatch.push(tail);
            }
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::hw::MachineConfig;
    use crate::mm::mm_types::VmFlags;
    use crate::sim::tests::boot_with as boot;
    use crate::sim::user_access;

    const BASE: u64 = 0x1000_0000_0000;

    #[test]
    fn new_anon_folios_wait_in_the_batch_until_31_then_go_inactive_oldest_at_the_tail() {
        let (mut k, mm) = boot(MachineConfig::default(), &[]);
        k.do_mmap(mm, BASE, 64 << 12, VmFlags::READ | VmFlags::WRITE | VmFlags::NOHUGEPAGE)
            .unwrap();
        for i in 0..40 {
            user_access(&mut k, mm, 0, BASE + (i << 12), true).unwrap();
        }
        assert_eq!(k.lruvec.size(LruList::InactiveAnon), 31);
        assert_eq!(k.lruvec.size(LruList::ActiveAnon), 0);
        k.lru_add_drain();
        assert_eq!(k.lruvec.size(LruList::InactiveAnon), 40);
        let first = k.memmap.folio_of(k.page_table_pfn(mm, BASE).unwrap());
        assert_eq!(k.lruvec.lru_to_folio(LruList::InactiveAnon), Some(first));
        assert_eq!(k.lruvec.iter_from_tail(LruList::InactiveAnon).count(), 40);
    }

    #[test]
    fn a_64k_folio_goes_to_the_list_at_once_and_its_split_keeps_the_pages_counted() {
        let (mut k, mm) = boot(MachineConfig::default(), &[("hugepages-64kB/enabled", "always")]);
        k.do_mmap(mm, BASE, 64 << 10, VmFlags::READ | VmFlags::WRITE).unwrap();
        // Every page written, so the split keeps them all (no zero-page remap).
        for i in 0..16 {
            user_access(&mut k, mm, 0, BASE + (i << 12), true).unwrap();
        }
        assert_eq!(k.lruvec.size(LruList::InactiveAnon), 16);
        let folio = k.memmap.folio_of(k.page_table_pfn(mm, BASE).unwrap());
        k.folio_ref_add(folio, 1);
        assert!(crate::mm::huge_memory::split_folio(&mut k, folio, 1));
        k.folio_put(folio);
        assert_eq!(k.lruvec.size(LruList::InactiveAnon), 16);
        let order: Vec<u64> = k
            .lruvec
            .iter_from_tail(LruList::InactiveAnon)
            .map(|p| p.0 - folio.0)
            .collect();
        assert_eq!(order, [0, 15, 14, 13, 12, 11, 10, 9, 8, 7, 6, 5, 4, 3, 2, 1]);
    }

    #[test]
    fn freeing_takes_folios_off_the_lists_and_out_of_the_batch() {
        let (mut k, mm) = boot(MachineConfig::default(), &[]);
        k.do_mmap(mm, BASE, 40 << 12, VmFlags::READ | VmFlags::WRITE | VmFlags::NOHUGEPAGE)
            .unwrap();
        for i in 0..40 {
            user_access(&mut k, mm, 0, BASE + (i << 12), true).unwrap();
        }
        k.do_munmap(mm, BASE, BASE + (40 << 12));
        assert_eq!(k.lruvec.size(LruList::InactiveAnon), 0);
        assert!(k.lruvec.fbatch.is_empty() && k.lruvec.folios.is_empty());
    }
}
