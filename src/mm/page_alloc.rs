//! mm/page_alloc.c: the buddy allocator over the simulated RAM (one zone per node).
//!
//! Free blocks are kept on per-order lists linked through the memmap, so allocation
//! and freeing are O(MAX_PAGE_ORDER) with no host allocation. Lists are LIFO, which
//! keeps the allocator deterministic. A block split for an allocation is carved
//! (`Carve`): the next allocations of that order take its pages in turn, as expand()'s
//! lists would hand them out, without the lists written until something else needs
//! them. RAM enters the allocator lazily, a block at a time from an untouched range
//! (like deferred struct-page init), so a terabyte machine boots without touching its
//! memmap.

use super::folio::{MemMap, PageFlags, NIL};
use crate::hw::{Granule, Pfn};

/// MAX_PAGE_ORDER on arm64 for each granule (CONFIG_ARCH_FORCE_MAX_ORDER).
pub const fn max_page_order(g: Granule) -> u32 {
    match g {
        Granule::K4 => 10,
        Granule::K16 => 11,
        Granule::K64 => 13,
    }
}

/// Orders any granule's allocator has (MAX_PAGE_ORDER + 1 at most).
const NR_ORDERS: usize = 14;
const _: () = assert!(
    NR_ORDERS as u32 <= super::folio::SECTION_SHIFT,
    "a max-order block must fit a memmap section"
);

/// A zone's watermarks, in pages.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub struct Watermarks {
    pub min: u64,
    pub low: u64,
    pub high: u64,
}

impl Watermarks {
    /// __setup_per_zone_wmarks for one zone of `managed` pages of `page_size`, with
    /// calculate_min_free_kbytes's min_free_kbytes (int_sqrt(lowmem_kbytes * 16),
    /// within [128, 262144]) and the default watermark_scale_factor (10 per 10000).
    pub fn new(managed: u64, page_size: u64) -> Watermarks {
        let kbytes = managed * (page_size >> 10);
        let min_free_kbytes = (kbytes * 16).isqrt().clamp(128, 262144);
        let min = min_free_kbytes / (page_size >> 10);
        let step = (min >> 2).max(managed * 10 / 10000);
        Watermarks {
            min,
            low: min + step,
            high: min + 2 * step,
        }
    }
}

/// The rest of a block that allocations of one order are taking from its start, as
/// sequential faults do: the pages [next, end) are free and, on the lists, exactly the
/// blocks expand() left (one per set bit of `end - next`, each alone on its list,
/// smallest first), but not written to the lists or the memmap yet. The next
/// allocation of `order` is `next` whatever those lists say, so it is taken here with
/// no list operation; anything else the allocator does writes the blocks out first
/// (`Buddy::uncarve`), after which nothing tells a carve from an eager split.
///
/// ```text
///   alloc(0) splits an order-3 block at P:      P | P+1 | P+2 P+3 | P+4 ... P+7
///   handed out ──────────────────────────────────┘   order 0   order 1     order 2
///   carve: next = P+1, end = P+8 (7 = 0b111: one block of each order below 3)
/// ```
#[derive(Clone, Copy, Debug)]
struct Carve {
    next: u64,
    end: u64,
    order: u32,
}

pub struct Buddy {
    max_order: u32,
    /// The zone's watermarks (kswapd wakes under `low`, sleeps over `high`).
    pub wmark: Watermarks,
    heads: [u32; NR_ORDERS],
    nr_free: [u64; NR_ORDERS],
    /// Bit `o` set while the order-`o` list is non-empty: the smallest block that can
    /// serve an allocation is one bit scan away.
    nonempty: u32,
    /// Free pages in total, untouched ones included.
    pub free_pages: u64,
    /// [untouched, end) has not entered the free lists yet.
    untouched: u64,
    /// The block being carved (`Carve`), if any.
    carve: Option<Carve>,
    /// The zone spans [start, end): a buddy outside it belongs to another node's zone.
    start: u64,
    end: u64,
}

impl Buddy {
    /// An allocator owning every frame in [start, end).
    pub fn new(g: Granule, start: Pfn, end: Pfn) -> Buddy {
        let max_order = max_page_order(g);
        assert!((max_order as usize) < NR_ORDERS);
        let managed = end.0 - start.0;
        Buddy {
            max_order,
            wmark: Watermarks::new(managed, g.page_size()),
            heads: [NIL; NR_ORDERS],
            nr_free: [0; NR_ORDERS],
            nonempty: 0,
            free_pages: end.0 - start.0,
            untouched: start.0,
            carve: None,
            start: start.0,
            end: end.0,
        }
    }

    /// Move the next largest aligned block of untouched RAM onto the free lists. Out of
    /// line: once per block, it stays out of the allocation's fast path.
    #[cold]
    #[inline(never)]
    fn grow(&mut self, mm: &mut MemMap) -> bool {
        let pfn = self.untouched;
        if pfn >= self.end {
            return false;
        }
        let mut order = self.max_order;
        while order > 0 && (pfn & ((1 << order) - 1) != 0 || pfn + (1 << order) > self.end) {
            order -= 1;
        }
        mm.online(Pfn(pfn), Pfn(pfn + (1 << order)));
        self.untouched += 1 << order;
        self.free_pages -= 1 << order;
        self.add_free(mm, pfn, order);
        true
    }

    pub fn max_order(&self) -> u32 {
        self.max_order
    }
    pub fn nr_free(&self, order: u32) -> u64 {
        let carved = self.carve.is_some_and(|c| (c.end - c.next) >> order & 1 != 0);
        self.nr_free[order as usize] + carved as u64
    }

    /// Writes the carve's blocks to their lists (each list below the carved block's
    /// order, from the carve's, is empty while it lasts). The block at `next` is of the
    /// order of the lowest set bit of `end - next`: `end` is aligned to the carved
    /// block's size, so that bit is `next`'s own alignment.
    #[cold]
    #[inline(never)]
    fn uncarve(&mut self, mm: &mut MemMap) {
        let Some(Carve { mut next, end, .. }) = self.carve.take() else {
            return;
        };
        self.free_pages -= end - next;
        while next < end {
            let order = (end - next).trailing_zeros();
            self.add_free(mm, next, order);
            next += 1 << order;
        }
    }

    #[inline(always)]
    fn add_free(&mut self, mm: &mut MemMap, pfn: u64, order: u32) {
        let head = self.heads[order as usize];
        {
            let p = mm.page_mut(Pfn(pfn));
            p.flags = PageFlags::BUDDY;
            p.order = order as u8;
            p.set_buddy_links(NIL, head);
        }
        if head != NIL {
            mm.page_mut(Pfn(head as u64)).set_buddy_prev(pfn as u32);
        }
        self.heads[order as usize] = pfn as u32;
        self.nonempty |= 1 << order;
        self.nr_free[order as usize] += 1;
        self.free_pages += 1 << order;
    }

    #[inline(always)]
    fn del_free(&mut self, mm: &mut MemMap, pfn: u64, order: u32) {
        // Like the kernel (__ClearPageBuddy, set_page_private(page, 0), list_del), the
        // page keeps no trace of the list: a block merged away leaves the same struct
        // page whether it was ever on a list or not (`free_range` relies on it).
        let (prev, next) = {
            let p = mm.page_mut(Pfn(pfn));
            p.flags.remove(PageFlags::BUDDY);
            p.order = 0;
            let links = p.buddy_links();
            p.set_buddy_links(0, 0);
            links
        };
        if prev != NIL {
            mm.page_mut(Pfn(prev as u64)).set_buddy_next(next);
        } else {
            self.heads[order as usize] = next;
            if next == NIL {
                self.nonempty &= !(1 << order);
            }
        }
        if next != NIL {
            mm.page_mut(Pfn(next as u64)).set_buddy_prev(prev);
        }
        self.nr_free[order as usize] -= 1;
        self.free_pages -= 1 << order;
    }

    /// __rmqueue_smallest + expand: the smallest free block of at least `order`, split
    /// down with the upper halves returned to the free lists. Inline, with the list
    /// operations: an allocation is a few loads and stores, less than a call's cost.
    #[inline(always)]
    pub fn alloc(&mut self, mm: &mut MemMap, order: u32) -> Option<Pfn> {
        if let Some(c) = &mut self.carve {
            if c.order == order {
                let pfn = c.next;
                c.next += 1 << order;
                if c.next == c.end {
                    self.carve = None;
                }
                self.free_pages -= 1 << order;
                return Some(Pfn(pfn));
            }
            self.uncarve(mm);
        }
        if order > self.max_order {
            return None;
        }
        let cur = loop {
            let fit = self.nonempty >> order;
            if fit != 0 {
                break order + fit.trailing_zeros();
            }
            if !self.grow(mm) {
                return None;
            }
        };
        let pfn = self.heads[cur as usize] as u64;
        self.del_free(mm, pfn, cur);
        if cur > order {
            // expand(), its blocks kept as a carve.
            self.carve = Some(Carve {
                next: pfn + (1 << order),
                end: pfn + (1 << cur),
                order,
            });
            self.free_pages += (1 << cur) - (1 << order);
        }
        Some(Pfn(pfn))
    }

    /// __free_one_page: free a block, merging with free buddies.
    pub fn free(&mut self, mm: &mut MemMap, pfn: Pfn, order: u32) {
        self.uncarve(mm);
        let mut pfn = pfn.0;
        let mut order = order;
        while order < self.max_order {
            let buddy = pfn ^ (1 << order);
            if buddy < self.start || buddy + (1 << order) > self.end {
                break;
            }
            let free_buddy = mm
                .buddy_page(Pfn(buddy))
                .is_some_and(|p| p.flags.contains(PageFlags::BUDDY) && p.order as u32 == order);
            if !free_buddy {
                break;
            }
            self.del_free(mm, buddy, order);
            pfn &= !(1 << order);
            order += 1;
        }
        self.add_free(mm, pfn, order);
    }

    /// Free the `nr` pages from `start`, each a free-standing page, as the largest
    /// aligned blocks they make up. Within an aligned block every merge is with a
    /// buddy inside it until its last page comes back, and a list entry pushed and
    /// taken off again leaves the others in order, so the free lists come out exactly
    /// as `nr` order-0 frees in ascending order would leave them, at a fraction of the work.
    pub fn free_range(&mut self, mm: &mut MemMap, start: Pfn, nr: u64) {
        let (mut pfn, end) = (start.0, start.0 + nr);
        while pfn < end {
            let fits = 63 - (end - pfn).leading_zeros();
            let order = pfn.trailing_zeros().min(fits).min(self.max_order);
            self.free(mm, Pfn(pfn), order);
            pfn += 1 << order;
        }
    }

    /// The allocator's whole state for tests: counts, and every list in order with
    /// the struct pages of the blocks on it (a carve written out first).
    #[cfg(test)]
    pub(crate) fn snapshot(&mut self, mm: &mut MemMap) -> String {
        self.uncarve(mm);
        let mut out = format!(
            "{:?} {:?} {:b} {}\n",
            self.heads, self.nr_free, self.nonempty, self.free_pages
        );
        for &head in &self.heads {
            let mut at = head;
            while at != NIL {
                let p = mm.page(Pfn(at as u64));
                out += &format!("{at}:{p:?} ");
                at = p.buddy_links().1;
            }
            out += "\n";
        }
        out
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn setup(pages: u64) -> (MemMap, Buddy) {
        (MemMap::new(pages), Buddy::new(Granule::K4, Pfn(0), Pfn(pages)))
    }

    #[test]
    fn watermarks_follow_min_free_kbytes_and_the_scale_factor() {
        // 64 MiB: min_free_kbytes = sqrt(65536 * 16) = 1024 KiB = 256 pages; the
        // step is 256 / 4 = 64 (over 16384 * 10 / 10000 = 16).
        assert_eq!(
            Watermarks::new(16384, 4096),
            Watermarks {
                min: 256,
                low: 320,
                high: 384
            }
        );
        // 16 GiB: min 16384 KiB = 4096 pages, step 4194 (the scale factor's).
        let w = Watermarks::new(4 << 20, 4096);
        assert_eq!((w.min, w.low, w.high), (4096, 8290, 12484));
    }

    #[test]
    fn ram_enters_lazily_one_max_order_block_at_a_time() {
        let (mut mm, mut b) = setup(1 << 24);
        assert_eq!(b.free_pages, 1 << 24);
        assert_eq!(mm.online_sections(), 0);
        b.alloc(&mut mm, 0).unwrap();
        assert_eq!(mm.online_sections(), 1);
        assert_eq!(b.free_pages, (1 << 24) - 1);
    }

    #[test]
    fn unaligned_ranges_enter_in_aligned_blocks() {
        let mut mm = MemMap::new(4096);
        let mut b = Buddy::new(Granule::K4, Pfn(3), Pfn(4096));
        assert_eq!(b.alloc(&mut mm, 0), Some(Pfn(3)));
        assert_eq!(b.alloc(&mut mm, 2), Some(Pfn(4)));
        // Growing for order 10 carves 8, 16, ... 512 on the way to 1024.
        assert_eq!(b.alloc(&mut mm, 10), Some(Pfn(1024)));
        assert_eq!(b.alloc(&mut mm, 9), Some(Pfn(512)));
        assert_eq!(b.free_pages, 4093 - 1 - 4 - 1024 - 512);
    }

    #[test]
    fn split_and_merge_restore_the_initial_state() {
        let (mut mm, mut b) = setup(1 << 11);
        let a = b.alloc(&mut mm, 0).unwrap();
        assert_eq!(a, Pfn(0));
        assert_eq!(b.free_pages, (1 << 11) - 1);
        // Splitting one 1024-block left one free block at each order 0..9.
        for o in 0..10 {
            assert_eq!(b.nr_free(o), 1, "order {o}");
        }
        let c = b.alloc(&mut mm, 4).unwrap();
        assert_eq!(c.0 % 16, 0);
        b.free(&mut mm, a, 0);
        b.free(&mut mm, c, 4);
        // Everything merged back into the one block carved; the other is untouched.
        assert_eq!(b.nr_free(10), 1);
        assert_eq!((0..10).map(|o| b.nr_free(o)).sum::<u64>(), 0);
        assert_eq!(b.free_pages, 1 << 11);
    }

    /// An allocation with its struct pages set up, as every caller does
    /// (prep_new_folio): what the allocator leaves in a page it hands out is not read.
    fn alloc(mm: &mut MemMap, b: &mut Buddy, order: u32) -> Option<Pfn> {
        let p = b.alloc(mm, order)?;
        mm.prep_new_folio(p, order);
        Some(p)
    }

    #[test]
    fn freeing_a_range_leaves_the_lists_as_freeing_its_pages_in_turn_does() {
        // A fragmented start: 4096 pages allocated one by one, every fifth and every
        // block of 64 at 1000 given back, then runs of every alignment freed.
        let runs = [(1, 3), (5, 200), (1024, 1024), (2047, 9), (3000, 700), (3999, 97)];
        let build = || {
            let (mut mm, mut b) = setup(1 << 13);
            let pages: Vec<Pfn> = (0..4096).map(|_| alloc(&mut mm, &mut b, 0).unwrap()).collect();
            for p in pages.iter().filter(|p| p.0 % 5 == 0 || (1000..1064).contains(&p.0)) {
                if !runs.iter().any(|&(s, n)| (s..s + n).contains(&p.0)) {
                    mm.clear_pages(*p, 1, 0);
                    b.free(&mut mm, *p, 0);
                }
            }
            (mm, b)
        };
        let (mut mm1, mut b1) = build();
        let (mut mm2, mut b2) = build();
        for (s, n) in runs {
            mm1.clear_pages(Pfn(s), n, 0);
            mm2.clear_pages(Pfn(s), n, 0);
            for p in s..s + n {
                b1.free(&mut mm1, Pfn(p), 0);
            }
            b2.free_range(&mut mm2, Pfn(s), n);
            assert_eq!(b1.snapshot(&mut mm1), b2.snapshot(&mut mm2), "after run {s}+{n}");
        }
        for p in 0..4096 {
            assert_eq!(
                format!("{:?}", mm1.page(Pfn(p))),
                format!("{:?}", mm2.page(Pfn(p))),
                "page {p}"
            );
        }
    }

    /// One allocator's state after `ops` (allocations of an order; frees of the
    /// `n`th block still allocated, alone or as a range of its pages), every struct
    /// page included; with `eager`, a carve is written out after each allocation, so
    /// every split is expand()'s.
    fn after_ops(ops: &[(u8, u32, usize)], eager: bool) -> (Vec<Option<Pfn>>, String) {
        let (mut mm, mut b) = setup(1 << 13);
        let (mut held, mut got) = (Vec::new(), Vec::new());
        for &(op, order, n) in ops {
            if op < 2 || held.is_empty() {
                let p = alloc(&mut mm, &mut b, order);
                if eager {
                    b.uncarve(&mut mm);
                }
                got.push(p);
                held.extend(p.map(|p| (p, order)));
                continue;
            }
            let (p, order) = held.swap_remove(n % held.len());
            mm.clear_folio(p, order);
            if op == 2 {
                b.free(&mut mm, p, order);
            } else {
                b.free_range(&mut mm, p, 1 << order);
            }
        }
        let mut state = b.snapshot(&mut mm);
        for p in 0..1 << 13 {
            state += &format!("{:?}\n", mm.page(Pfn(p)));
        }
        (got, state)
    }

    proptest::proptest! {
        /// Carving leaves the pages handed out, the lists and every struct page as
        /// splitting each block at once does, over allocations of mixed orders
        /// (a carve of one order interrupted by another) and frees between them.
        #[test]
        fn carving_a_block_leaves_what_splitting_it_at_once_does(
            ops in proptest::collection::vec((0..4u8, 0..5u32, 0..64usize), 1..200)
        ) {
            proptest::prop_assert_eq!(after_ops(&ops, false), after_ops(&ops, true));
        }
    }

    #[test]
    fn a_carve_hands_out_a_block_from_its_start_and_counts_its_blocks() {
        let (mut mm, mut b) = setup(1 << 11);
        let got: Vec<u64> = (0..5).map(|_| b.alloc(&mut mm, 0).unwrap().0).collect();
        assert_eq!(got, [0, 1, 2, 3, 4]);
        // [5, 1024) as expand() leaves it: one block at orders 0, 1 and 3..9 (the
        // second 1024-block has not entered the lists).
        let counts: Vec<u64> = (0..11).map(|o| b.nr_free(o)).collect();
        assert_eq!(counts, [1, 1, 0, 1, 1, 1, 1, 1, 1, 1, 0]);
        assert_eq!(b.free_pages, (1 << 11) - 5);
        // Another order writes the carve out and takes the order-3 block at 8.
        assert_eq!(b.alloc(&mut mm, 3), Some(Pfn(8)));
        assert_eq!(b.nr_free(3), 0);
        assert_eq!(b.alloc(&mut mm, 0), Some(Pfn(5)));
    }

    #[test]
    fn a_free_block_never_merges_with_a_buddy_outside_the_zone() {
        // Two zones splitting 2048 pages unevenly: the first ends inside a max-order block.
        let mut mm = MemMap::new(1 << 11);
        let mut a = Buddy::new(Granule::K4, Pfn(0), Pfn(1000));
        let mut b = Buddy::new(Granule::K4, Pfn(1000), Pfn(2048));
        let pa: Vec<Pfn> = (0..1000).map(|_| a.alloc(&mut mm, 0).unwrap()).collect();
        let pb = b.alloc(&mut mm, 0).unwrap();
        assert_eq!(pb, Pfn(1000));
        b.free(&mut mm, pb, 0);
        for p in pa {
            a.free(&mut mm, p, 0);
        }
        assert_eq!((a.free_pages, b.free_pages), (1000, 1048));
        assert_eq!(a.nr_free(10), 0, "no block may take pages of the other zone");
    }

    #[test]
    fn exhaustion_returns_none() {
        let (mut mm, mut b) = setup(1 << 10);
        assert!(b.alloc(&mut mm, 10).is_some());
        assert!(b.alloc(&mut mm, 0).is_none());
    }

    #[test]
    fn an_order_above_max_page_order_is_refused_without_touching_ram() {
        let (mut mm, mut b) = setup(1 << 12);
        assert!(b.alloc(&mut mm, 11).is_none());
        assert_eq!(mm.online_sections(), 0);
        assert_eq!(b.free_pages, 1 << 12);
    }

    #[test]
    fn allocation_takes_the_smallest_block_that_fits() {
        let (mut mm, mut b) = setup(1 << 11);
        let first = b.alloc(&mut mm, 0).unwrap();
        // Free blocks of orders 0..9 remain beside the order-0 page; order 3 comes from
        // the order-3 block, not from splitting a larger one.
        let o3 = b.alloc(&mut mm, 3).unwrap();
        assert_eq!(o3, Pfn(first.0 + 8));
        assert_eq!(b.nr_free(3), 0);
        assert_eq!((4..10).map(|o| b.nr_free(o)).sum::<u64>(), 6);
    }
}
