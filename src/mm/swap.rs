//! mm/swap.c and include/linux/mm_inline.h: the LRU lists reclaim scans, the per-CPU
//! lru_add folio batch new folios wait in, and moving folios between the lists.
//!
//! The model has one lruvec: the workload's memory cgroup's (`memlimit`) or, without
//! one, the node's. 6.18 without MGLRU (the validation host has no lru_gen) keeps
//! the classic lists: a new anon folio goes to the inactive anon list
//! (folio_add_lru sets PG_active only under lru_gen), a lazyfree one to the inactive
//! file list (lru_lazyfree).
//!
//! A folio's LRU state is kept by pfn, as the kernel keeps it in the folio: the
//! list links (`MemMap::lru_links`) and PG_lru, PG_active, PG_referenced and
//! PG_workingset (`LruFlags`; struct page's own flags word is full) are in its
//! `FolioHead`, a large folio's in its record, an order-0 folio's beside the memmap,
//! so every list operation is a few indexed loads. The lru_add batch takes no
//! reference here (the kernel's does): a
//! reference more would change every refcount test the model already matches; a
//! folio freed while waiting in it just leaves it.

use super::folio::{Links, LruFlags, MemMap, PageFlags, NIL};
use super::Kernel;
use crate::hw::Pfn;

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
    /// The list of a type and activeness.
    fn of(file: bool, active: bool) -> LruList {
        match (file, active) {
            (false, false) => LruList::InactiveAnon,
            (false, true) => LruList::ActiveAnon,
            (true, false) => LruList::InactiveFile,
            (true, true) => LruList::ActiveFile,
        }
    }
    /// The flags that say a folio is on this list.
    fn flags(self) -> LruFlags {
        let mut f = LruFlags::LRU;
        f.set(LruFlags::ON_ACTIVE, self.is_active());
        f.set(LruFlags::ON_FILE, self.is_file());
        f
    }
}

/// struct lruvec: the four lists, their sizes in pages, the reclaim cost balance.
/// A list runs from `head` (newest) through each folio's `next` link to `tail`
/// (oldest, where reclaim takes folios: lru_to_folio); `prev` points back.
pub struct Lruvec {
    head: [u32; 4],
    tail: [u32; 4],
    nr_pages: [u64; 4],
    /// cpu_fbatches.lru_add of the one CPU the workload's faults run on.
    pub(super) fbatch: Vec<Pfn>,
    /// lruvec->anon_cost and file_cost (lru_note_cost).
    pub anon_cost: u64,
    pub file_cost: u64,
}

impl Default for Lruvec {
    fn default() -> Self {
        Lruvec {
            head: [NIL; 4],
            tail: [NIL; 4],
            nr_pages: [0; 4],
            fbatch: Vec::with_capacity(PAGEVEC_SIZE),
            anon_cost: 0,
            file_cost: 0,
        }
    }
}

impl Lruvec {
    /// lruvec_page_state(NR_LRU_BASE + lru): pages on `lru`.
    pub fn size(&self, lru: LruList) -> u64 {
        self.nr_pages[lru as usize]
    }

    /// lru_to_folio: the oldest folio on `lru`.
    pub fn lru_to_folio(&self, lru: LruList) -> Option<Pfn> {
        let t = self.tail[lru as usize];
        (t != NIL).then_some(Pfn(t as u64))
    }

    /// lruvec_add_folio of each of `folios` in turn, all bound for `lru`: at the head,
    /// counting their pages. Linked in one pass, as adding them one by one leaves the
    /// list (the last newest): a folio's newer neighbour is the next in the slice, its
    /// older the one before or the list's old head, so each folio's links are stored
    /// once and the old head's and the list's ends once a batch. Inline, as the
    /// list's few stores are less than a call.
    #[inline(always)]
    fn add_run(&mut self, mm: &mut MemMap, folios: &[Pfn], lru: LruList) {
        let (Some(&oldest), Some(&newest)) = (folios.first(), folios.last()) else {
            return;
        };
        let l = lru as usize;
        let old_head = self.head[l];
        let mut older = old_head;
        let mut pages = 0;
        for (i, &folio) in folios.iter().enumerate() {
            // Flags and links in one FolioHead: one look-up of where it is.
            let h = mm.folio_head_mut(folio);
            debug_assert!(
                !h.flags.contains(LruFlags::LRU),
                "folio {folio:?} already on an LRU list"
            );
            h.flags = (h.flags - (LruFlags::ON_ACTIVE | LruFlags::ON_FILE)) | lru.flags();
            h.lru = Links {
                prev: folios.get(i + 1).map_or(NIL, |n| n.0 as u32),
                next: older,
            };
            older = folio.0 as u32;
            pages += mm.folio_nr_pages(folio);
        }
        if old_head == NIL {
            self.tail[l] = oldest.0 as u32;
        } else {
            mm.lru_links_mut(Pfn(old_head as u64)).prev = oldest.0 as u32;
        }
        self.head[l] = newest.0 as u32;
        self.nr_pages[l] += pages;
    }

    /// The list folio `folio` is on (PG_lru set).
    fn list_of(mm: &MemMap, folio: Pfn) -> LruList {
        let f = mm.lru(folio);
        debug_assert!(f.contains(LruFlags::LRU), "folio {folio:?} on no LRU list");
        LruList::of(f.contains(LruFlags::ON_FILE), f.contains(LruFlags::ON_ACTIVE))
    }

    /// lruvec_del_folio: off its list (PG_lru cleared); its other flags stay. Inline,
    /// as `add`.
    #[inline(always)]
    pub fn del(&mut self, mm: &mut MemMap, folio: Pfn) {
        let l = Self::list_of(mm, folio) as usize;
        let h = mm.folio_head_mut(folio);
        h.flags.remove(LruFlags::LRU | LruFlags::ON_ACTIVE | LruFlags::ON_FILE);
        let Links { prev, next } = std::mem::replace(&mut h.lru, Links::NONE);
        self.join(mm, l, prev, next);
        self.nr_pages[l] -= mm.folio_nr_pages(folio);
    }

    /// `prev` and `next` made neighbours on list `l`, what lay between them cut out; a
    /// NIL `prev` makes `next` the head, a NIL `next` makes `prev` the tail.
    #[inline]
    fn join(&mut self, mm: &mut MemMap, l: usize, prev: u32, next: u32) {
        if prev == NIL {
            self.head[l] = next;
        } else {
            mm.lru_links_mut(Pfn(u64::from(prev))).next = next;
        }
        if next == NIL {
            self.tail[l] = prev;
        } else {
            mm.lru_links_mut(Pfn(u64::from(next))).prev = prev;
        }
    }

    /// `del` of every folio on a list among the folios of `order` filling pfns `run`,
    /// leaving the lists as deleting them one by one would (the run's own links are
    /// left for the caller to clear): each stretch of run folios lying next to each
    /// other on a list is cut out whole, its neighbours outside the run relinked once,
    /// so a run freed in the order it was faulted costs one relink, not one per folio.
    fn del_run(&mut self, mm: &mut MemMap, run: std::ops::Range<u64>, order: u32) {
        // NIL is no pfn of a run: pfns fit below it in the links.
        let inside = |p: u32| run.contains(&u64::from(p));
        for pfn in run.clone().step_by(1 << order) {
            let h = mm.folio_head_of_order(Pfn(pfn), order);
            let f = h.flags;
            if !f.contains(LruFlags::LRU) {
                continue;
            }
            let l = LruList::of(f.contains(LruFlags::ON_FILE), f.contains(LruFlags::ON_ACTIVE)) as usize;
            self.nr_pages[l] -= 1 << order;
            let Links { prev, mut next } = h.lru;
            if inside(prev) {
                continue;
            }
            // The first of a stretch: its end is the first folio after it outside the run.
            while inside(next) {
                next = mm.folio_head_of_order(Pfn(u64::from(next)), order).lru.next;
            }
            self.join(mm, l, prev, next);
        }
    }

    /// list_add_tail(&new->lru, &folio->lru): `new` right on the newer side of
    /// `folio`, on its list; the list's count already covers it.
    fn add_before(&mut self, mm: &mut MemMap, new: Pfn, folio: Pfn) {
        let lru = Self::list_of(mm, folio);
        *mm.lru_mut(new) |= lru.flags();
        let prev = mm.lru_links(folio).prev;
        *mm.lru_links_mut(new) = Links {
            prev,
            next: folio.0 as u32,
        };
        if prev == NIL {
            self.head[lru as usize] = new.0 as u32;
        } else {
            mm.lru_links_mut(Pfn(prev as u64)).next = new.0 as u32;
        }
        mm.lru_links_mut(folio).prev = new.0 as u32;
    }

    /// Every list linked both ways, each folio on it in use with PG_lru and its list
    /// flagged, and no more pages on it than its size. (Not equal: a split's tails that
    /// are freed at once, unmapped zero-filled pages, stay counted in the head's list.)
    pub fn check(&self, mm: &MemMap) -> Result<(), String> {
        for lru in LruList::EVICTABLE {
            let (mut at, mut next, mut pages) = (self.tail[lru as usize], NIL, 0u64);
            while at != NIL {
                let folio = Pfn(at as u64);
                let p = mm.page(folio);
                let links = mm.lru_links(folio);
                if links.next != next
                    || mm.lru(folio) & !(LruFlags::ACTIVE | LruFlags::REFERENCED | LruFlags::WORKINGSET) != lru.flags()
                    || !p.flags.contains(PageFlags::INUSE)
                {
                    return Err(format!("{lru:?} list: bad entry {at:#x} ({p:?}, {:?})", mm.lru(folio)));
                }
                pages += mm.folio_nr_pages(folio);
                if pages > self.nr_pages[lru as usize] {
                    return Err(format!("{lru:?} list longer than its size"));
                }
                next = at;
                at = links.prev;
            }
            if next != self.head[lru as usize] {
                return Err(format!("{lru:?} list: its head is not its newest folio"));
            }
        }
        Ok(())
    }

    /// Folios from the oldest on `lru`.
    #[cfg(test)]
    pub fn iter_from_tail<'a>(&self, mm: &'a MemMap, lru: LruList) -> impl Iterator<Item = Pfn> + 'a {
        let first = self.tail[lru as usize];
        std::iter::successors((first != NIL).then_some(first), move |&p| {
            let prev = mm.lru_links(Pfn(p as u64)).prev;
            (prev != NIL).then_some(prev)
        })
        .map(|p| Pfn(p as u64))
    }
}

impl Kernel {
    /// folio_lru_list: where a folio belongs by its flags; lazyfree (anon, not
    /// swap-backed) folios are on the file lists.
    pub fn folio_lru_list(&self, folio: Pfn) -> LruList {
        let file = !self.memmap.folio_test(folio, PageFlags::SWAPBACKED);
        LruList::of(file, self.memmap.lru(folio).contains(LruFlags::ACTIVE))
    }

    /// lruvec_add_folio: onto the head of the list its flags say.
    #[inline]
    pub fn lruvec_add_folio(&mut self, folio: Pfn) {
        let lru = self.folio_lru_list(folio);
        self.lruvec.add_run(&mut self.memmap, &[folio], lru);
    }

    /// lruvec_del_folio.
    #[inline]
    pub fn lruvec_del_folio(&mut self, folio: Pfn) {
        self.lruvec.del(&mut self.memmap, folio);
    }

    /// folio_add_lru_vma / folio_add_lru: a new folio waits in the lru_add batch,
    /// which moves to the lists when full, or at once for a large folio.
    #[inline]
    pub fn folio_add_lru(&mut self, folio: Pfn) {
        self.lruvec.fbatch.push(folio);
        if self.lruvec.fbatch.len() == PAGEVEC_SIZE || self.memmap.folio_order(folio) > 0 {
            self.lru_add_drain();
        }
    }

    /// lru_add_drain: the batch's folios onto their lists, in the order added; each
    /// stretch of them bound for one list (a batch of new anon folios is one) linked
    /// in one pass. Adding a folio changes no other's flags, so each one's list is
    /// what it would be when its turn came one by one.
    pub fn lru_add_drain(&mut self) {
        // A batch of one (a large folio, drained as it comes) goes to its list without
        // the batch taken out and put back around it (54 instructions a 64K folio).
        if let [folio] = self.lruvec.fbatch[..] {
            self.lruvec.fbatch.clear();
            self.lruvec_add_folio(folio);
            return;
        }
        let batch = std::mem::take(&mut self.lruvec.fbatch);
        let mut rest = &batch[..];
        while let Some(&first) = rest.first() {
            let lru = self.folio_lru_list(first);
            let n = 1 + rest[1..].iter().take_while(|&&f| self.folio_lru_list(f) == lru).count();
            self.lruvec.add_run(&mut self.memmap, &rest[..n], lru);
            rest = &rest[n..];
        }
        self.lruvec.fbatch = batch;
        self.lruvec.fbatch.clear();
    }

    /// lru_lazyfree (MADV_FREE of a swap-backed anon folio): to the inactive file
    /// list, PG_active, PG_referenced and SWAPBACKED cleared.
    pub fn lru_lazyfree(&mut self, folio: Pfn) {
        let on_lru = self.memmap.lru(folio).contains(LruFlags::LRU);
        if on_lru {
            self.lruvec_del_folio(folio);
        }
        self.memmap
            .lru_mut(folio)
            .remove(LruFlags::ACTIVE | LruFlags::REFERENCED);
        self.memmap.folio_clear(folio, PageFlags::SWAPBACKED);
        if on_lru {
            self.lruvec_add_folio(folio);
        }
    }

    /// folio_isolate_lru: take the folio off its list, with a reference, for the
    /// caller; false when it is not on one (still in the batch, or isolated already).
    pub fn folio_isolate_lru(&mut self, folio: Pfn) -> bool {
        if !self.memmap.lru(folio).contains(LruFlags::LRU) {
            return false;
        }
        self.lruvec_del_folio(folio);
        self.folio_ref_add(folio, 1);
        true
    }

    /// folio_putback_lru: an isolated folio back through the lru_add batch, its
    /// isolation reference dropped.
    pub fn folio_putback_lru(&mut self, folio: Pfn) {
        self.folio_add_lru(folio);
        self.folio_put(folio);
    }

    /// __page_cache_release of each folio of `order` filling pfns `run` (folios being
    /// freed): off the LRU or out of the lru_add batch, its LRU flags cleared, in one
    /// pass over the lists (`Lruvec::del_run`) and one over their flags; their struct
    /// pages' links are the caller's to clear, as it frees them.
    pub(super) fn lru_forget_run(&mut self, run: std::ops::Range<u64>, order: u32) {
        self.lruvec.del_run(&mut self.memmap, run.clone(), order);
        let batch = &mut self.lruvec.fbatch;
        if !batch.is_empty() {
            for pfn in run.clone().step_by(1 << order) {
                if !self.memmap.lru(Pfn(pfn)).contains(LruFlags::LRU) {
                    if let Some(i) = batch.iter().position(|&b| b.0 == pfn) {
                        batch.remove(i);
                    }
                }
            }
        }
        self.memmap.lru_clear_run(run, order);
    }

    /// lru_add_split_folio for every new folio of a split (`folio` now order 0): each
    /// tail takes the head's flags and, while the head is on a list, goes right on
    /// its newer side, in ascending order; a tail of an isolated head is isolated too
    /// (the caller lists it), one of a batched head joins the batch.
    pub(super) fn lru_add_split_folio(&mut self, folio: Pfn, nr: u64) {
        let head = self.memmap.lru(folio);
        let inherit = head & (LruFlags::ACTIVE | LruFlags::REFERENCED | LruFlags::WORKINGSET);
        let batched = !head.contains(LruFlags::LRU) && self.lruvec.fbatch.contains(&folio);
        for i in 1..nr {
            let tail = Pfn(folio.0 + i);
            if self.memmap.folio_ref_count(tail) == 0 {
                continue;
            }
            *self.memmap.lru_mut(tail) = inherit;
            if head.contains(LruFlags::LRU) {
                self.lruvec.add_before(&mut self.memmap, tail, folio);
            } else if batched {
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
        assert_eq!(k.lruvec.iter_from_tail(&k.memmap, LruList::InactiveAnon).count(), 40);
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
            .iter_from_tail(&k.memmap, LruList::InactiveAnon)
            .map(|p| p.0 - folio.0)
            .collect();
        assert_eq!(order, [0, 15, 14, 13, 12, 11, 10, 9, 8, 7, 6, 5, 4, 3, 2, 1]);
    }

    #[test]
    fn a_run_forgotten_at_once_leaves_the_lists_as_one_by_one_does() {
        let (mut k, mm) = boot(MachineConfig::default(), &[]);
        k.do_mmap(mm, BASE, 40 << 12, VmFlags::READ | VmFlags::WRITE | VmFlags::NOHUGEPAGE)
            .unwrap();
        for i in 0..40 {
            user_access(&mut k, mm, 0, BASE + (i << 12), true).unwrap();
        }
        k.lru_add_drain();
        let folios: Vec<Pfn> = (0..40)
            .map(|i| k.memmap.folio_of(k.page_table_pfn(mm, BASE + (i << 12)).unwrap()))
            .collect();
        // Every third folio to the active list, so stretches on both lists break where
        // a folio of the other list or one outside the run lies between.
        for &f in folios.iter().step_by(3) {
            k.lruvec_del_folio(f);
            *k.memmap.lru_mut(f) |= LruFlags::ACTIVE;
            k.lruvec_add_folio(f);
        }
        let lo = folios.iter().map(|f| f.0).min().unwrap();
        let run = lo + 5..lo + 27;
        let left = |k: &Kernel, lru| -> Vec<u64> {
            k.lruvec
                .iter_from_tail(&k.memmap, lru)
                .map(|p| p.0)
                .filter(|p| !run.contains(p))
                .collect()
        };
        let lists = [LruList::InactiveAnon, LruList::ActiveAnon];
        let want = lists.map(|lru| left(&k, lru));
        for (lru, want) in lists.iter().zip(&want) {
            assert!(k.lruvec.size(*lru) > want.len() as u64, "{lru:?} loses folios");
        }
        k.lru_forget_run(run.clone(), 0);
        for (lru, want) in lists.into_iter().zip(want) {
            let got: Vec<u64> = k.lruvec.iter_from_tail(&k.memmap, lru).map(|p| p.0).collect();
            assert_eq!(got, want, "{lru:?}");
            assert_eq!(k.lruvec.size(lru), want.len() as u64, "{lru:?}");
        }
        k.lruvec.check(&k.memmap).unwrap();
        assert!(run.clone().all(|p| k.memmap.lru(Pfn(p)).is_empty()));
    }

    /// A folio of `drain_case`: (order, PG_active, swap-backed).
    type NewFolio = (u32, bool, bool);

    /// Folios `listed` added to their lists, then `batched` put in the lru_add batch
    /// and drained, by `lru_add_drain` or, when `one_by_one`, by `lruvec_add_folio` of
    /// each in turn (the drain's reference): every list from its tail, its size, and
    /// each folio's LRU flags.
    fn drain_case(listed: &[NewFolio], batched: &[NewFolio], one_by_one: bool) -> (Vec<(Vec<u64>, u64)>, Vec<u8>) {
        let (mut k, _) = boot(MachineConfig::default(), &[]);
        let new = |k: &mut Kernel, &(order, active, swapbacked): &NewFolio| {
            let f = k.folio_alloc(order).unwrap();
            k.memmap.lru_mut(f).set(LruFlags::ACTIVE, active);
            if swapbacked {
                k.memmap.folio_set(f, PageFlags::SWAPBACKED);
            }
            f
        };
        let mut folios: Vec<Pfn> = listed.iter().map(|nf| new(&mut k, nf)).collect();
        for &f in &folios {
            k.lruvec_add_folio(f);
        }
        let batch: Vec<Pfn> = batched.iter().map(|nf| new(&mut k, nf)).collect();
        folios.extend(&batch);
        if one_by_one {
            for &f in &batch {
                k.lruvec_add_folio(f);
            }
        } else {
            k.lruvec.fbatch = batch.clone();
            k.lru_add_drain();
            assert!(k.lruvec.fbatch.is_empty());
        }
        k.lruvec.check(&k.memmap).unwrap();
        let lists = LruList::EVICTABLE
            .map(|lru| {
                (
                    k.lruvec.iter_from_tail(&k.memmap, lru).map(|p| p.0).collect(),
                    k.lruvec.size(lru),
                )
            })
            .to_vec();
        let flags = folios.iter().map(|&f| k.memmap.lru(f).bits()).collect();
        (lists, flags)
    }

    proptest::proptest! {
        #![proptest_config(proptest::test_runner::Config { cases: 128, ..Default::default() })]
        /// The drain, linking each stretch of its batch bound for one list in one pass,
        /// leaves the lists, their sizes and every folio's flags as adding the batch's
        /// folios one by one does, over folios of mixed orders and lists, onto lists
        /// empty or not.
        #[test]
        fn a_drain_in_one_pass_a_list_leaves_what_one_add_a_folio_does(
            listed in proptest::collection::vec((0..3u32, proptest::bool::ANY, proptest::bool::ANY), 0..8),
            batched in proptest::collection::vec(
                (proptest::prop_oneof![6 => proptest::strategy::Just(0u32), 1 => 1..3u32], proptest::bool::weighted(0.2), proptest::bool::weighted(0.8)),
                0..=PAGEVEC_SIZE,
            ),
        ) {
            proptest::prop_assert_eq!(drain_case(&listed, &batched, false), drain_case(&listed, &batched, true));
        }
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
        assert!(k.lruvec.fbatch.is_empty());
        // No folio, and no freed frame, has LRU flags left (a tail or a page table has
        // none of its own).
        assert!((0..k.memmap.nr_pages()).all(|p| k
            .memmap
            .try_page(Pfn(p))
            .is_none_or(
                |pg| pg.flags.intersects(PageFlags::TAIL | PageFlags::PGTABLE) || k.memmap.lru(Pfn(p)).is_empty()
            )));
    }
}
