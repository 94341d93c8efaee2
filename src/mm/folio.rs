//! struct page / struct folio: the memmap, kept in lazily allocated sections
//! (like SPARSEMEM), so a large machine costs host memory only where it is used.
//!
//! ```text
//!  folio of order 2 (4 pages):
//!   pfn  n      n+1     n+2     n+3
//!  +-------+-------+-------+-------+
//!  | HEAD  | TAIL  | TAIL  | TAIL  |   tails point at the head (compound_head);
//!  | ref,  | head=n| head=n| head=n|   the head holds the folio-wide counts:
//!  | maps  |       |       |       |   refcount, large/entire mapcount, flags
//!  +-------+-------+-------+-------+   every page holds its own pte mapcount
//! ```

use crate::hostmem::HugeBuf;
use crate::hw::Pfn;
use bitflags::bitflags;

/// Empty link.
pub const NIL: u32 = u32::MAX;

bitflags! {
    #[derive(Clone, Copy, Debug, PartialEq, Eq, Default)]
    pub struct PageFlags: u16 {
        /// On a buddy free list (head of a free block).
        const BUDDY = 1 << 0;
        /// First page of a large folio.
        const HEAD = 1 << 1;
        /// Later page of a large folio.
        const TAIL = 1 << 2;
        const ANON = 1 << 3;
        /// PageAnonExclusive (per page).
        const ANON_EXCLUSIVE = 1 << 4;
        /// A translation table page.
        const PGTABLE = 1 << 5;
        /// Never freed: the zero pages, the kernel image.
        const RESERVED = 1 << 6;
        /// Folio flag: partially mapped (on the deferred split queue for it).
        const PARTIALLY_MAPPED = 1 << 7;
        /// Folio is on the deferred split queue.
        const DEFERRED = 1 << 8;
        /// Folio is swap-backed (cleared by MADV_FREE: lazyfree).
        const SWAPBACKED = 1 << 9;
        const DIRTY = 1 << 10;
        const MLOCKED = 1 << 11;
        /// Allocated and in use (not free).
        const INUSE = 1 << 12;
        /// Head only: FOLIO_MM_IDS_SHARED_BIT, "maybe mapped by more than one mm".
        const MAYBE_SHARED = 1 << 13;
        /// In the swap cache (slots allocated for it, reclaim writing it out, or read
        /// back while a forked mm's pte still holds the slot).
        const SWAPCACHE = 1 << 14;
        /// PG_readahead: swap readahead read it for a page not yet faulted on.
        const READAHEAD = 1 << 15;
    }
}

bitflags! {
    /// A folio's LRU page flags (PG_lru, PG_active, PG_referenced, PG_workingset) and
    /// which list it is counted on, in its `FolioHead` with its links: struct page's
    /// own flags word is full.
    #[derive(Clone, Copy, Debug, PartialEq, Eq, Default)]
    pub struct LruFlags: u8 {
        /// PG_lru: on a list (not isolated, not waiting in the lru_add batch).
        const LRU = 1 << 0;
        const ACTIVE = 1 << 1;
        const REFERENCED = 1 << 2;
        const WORKINGSET = 1 << 3;
        /// While LRU: the list it is on is an active one (as it was when added).
        const ON_ACTIVE = 1 << 4;
        /// While LRU: the list it is on is a file one.
        const ON_FILE = 1 << 5;
    }
}

/// One struct page: 16 bytes, so the memmap of a gigabyte of 4K pages is 4 MiB of
/// host memory, touched once per page the model uses: the host clears it, the model
/// streams it through its caches (at 32 bytes, padding it to 64 took a 64K-folio
/// bench child from 10.3 to 14.4 ms; docs/src/tasks/speed.md, twenty-fourth round).
/// What only a folio needs, once, is kept apart: a large folio's in its `LargeFolio`
/// record, an order-0 folio's in its `FolioHead` beside the memmap.
///
/// ```text
///  word, by what the page is (its flags):
///   free block's first page (BUDDY)    free-list links: prev (low half), next (high)
///   large folio's head (HEAD)          its LargeFolio slot
///   a tail, an order-0 folio's page    page->index
/// ```
///
/// A tail names no head: folios are naturally aligned, so a tail's `order` (its
/// folio's) is enough to find it, as the kernel finds a folio's size in page[1].
#[derive(Clone, Copy, Debug, Default, PartialEq, Eq)]
pub struct Page {
    pub flags: PageFlags,
    /// Buddy order of a free block's first page; a folio's order on its head and tails.
    pub order: u8,
    /// The page's contents are not all zero (written by the user, or copied from such
    /// a page): what pages_identical(page, ZERO_PAGE) would tell. Allocation zeroes.
    pub nonzero: bool,
    /// Pte mappings of this page (the kernel's _mapcount + 1).
    pub mapcount: i32,
    /// The table above; read and written through what it is.
    word: u64,
}

impl Page {
    /// A free block's free-list links (prev, next).
    #[inline]
    pub(super) fn buddy_links(&self) -> (u32, u32) {
        (self.word as u32, (self.word >> 32) as u32)
    }
    #[inline]
    pub(super) fn set_buddy_links(&mut self, prev: u32, next: u32) {
        self.word = u64::from(prev) | u64::from(next) << 32;
    }
    #[inline]
    pub(super) fn set_buddy_prev(&mut self, prev: u32) {
        self.set_buddy_links(prev, self.buddy_links().1);
    }
    #[inline]
    pub(super) fn set_buddy_next(&mut self, next: u32) {
        self.set_buddy_links(self.buddy_links().0, next);
    }
}

/// A doubly linked list entry: the LRU's, the deferred split queue's (pfns, NIL ends).
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub struct Links {
    pub prev: u32,
    pub next: u32,
}

impl Links {
    pub const NONE: Links = Links { prev: NIL, next: NIL };
}

/// A folio's refcount, its place on its LRU list and its LRU flags, which the kernel
/// keeps in its head struct page: a large folio's in its record, an order-0 folio's in
/// an array beside the memmap, one entry per frame, so a run of large folios never
/// touches that array. A page-table page has none: it holds the one reference its
/// allocation gave it, which nothing takes or drops. The flags were a byte per frame
/// in an array of their own, which the host backed with 4K pages: 64 of them a GiB,
/// at 1.2-1.7 µs each on the twenty-fifth round's host (tasks/speed.md).
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub struct FolioHead {
    pub refcount: i32,
    pub lru: Links,
    pub flags: LruFlags,
}

impl FolioHead {
    /// A free frame's, and a new folio's before its refcount is set.
    pub const NONE: FolioHead = FolioHead {
        refcount: 0,
        lru: Links::NONE,
        flags: LruFlags::empty(),
    };
}

/// A large folio's record: its folio-wide mapping counts (the kernel keeps them in
/// the folio's first tail pages), its refcount, its head page's index and its list
/// links (the kernel's are in the head and page[2]). One slot per large folio beside
/// the memmap, named by the head page's word, keeps every struct page small.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub struct LargeFolio {
    /// All mappings of the folio (ptes and pmds).
    pub large_mapcount: i32,
    /// Pmd mappings of the folio.
    pub entire_mapcount: i32,
    /// Pages of the folio mapped by at least one pte (_nr_pages_mapped).
    pub nr_pages_mapped: i32,
    /// The two mm slots (_mm_id, MM_ID_DUMMY = 0) and their mapcounts
    /// (_mm_id_mapcount, -1 when the slot is free).
    pub mm_id: [u32; 2],
    pub mm_id_mapcount: [i32; 2],
    pub head: FolioHead,
    /// The head page's index (its word holds this slot).
    pub index: u64,
    /// Its place on the deferred split queue (_deferred_list).
    pub deferred: Links,
}

impl Default for LargeFolio {
    fn default() -> Self {
        LargeFolio {
            large_mapcount: 0,
            entire_mapcount: 0,
            nr_pages_mapped: 0,
            mm_id: [0; 2],
            mm_id_mapcount: [-1; 2],
            head: FolioHead::NONE,
            index: 0,
            deferred: Links::NONE,
        }
    }
}

/// 65536 pages of 16 bytes: 1 MiB of the memmap a section.
pub(super) const SECTION_SHIFT: u32 = 16;
const SECTION_PAGES: usize = 1 << SECTION_SHIFT;

/// The memmap: one Page per frame in one reserved array (like vmemmap), brought
/// online a section at a time: the host backs a section only once it is online.
pub struct MemMap {
    nr_pages: u64,
    pages: HugeBuf<Page>,
    small: HugeBuf<FolioHead>,
    online: Vec<bool>,
    /// One slot per large folio that can exist (order >= 1: half the frames), handed
    /// out from the front, so no growing array is moved (and its new pages faulted in
    /// by the host) as folios come; `large_used` slots have been handed out.
    large: HugeBuf<LargeFolio>,
    large_used: usize,
    /// Slots of freed folios, most recent first, chained through their `mm_id[0]`
    /// (NIL ends it), so freeing 16,384 folios grows no list either.
    large_free: u32,
    large_live: usize,
}

/// Large-folio slots the host is asked to back at once in the array's 4K-page head:
/// the whole 64 KiB head, 1,024 slots (past it, `populate_to` backs a 2 MiB page at a
/// time).
const LARGE_POPULATE_BYTES: usize = 64 << 10;

impl MemMap {
    /// Host bytes each frame can take: its struct page and its order-0 folio entry.
    pub const HOST_BYTES_PER_FRAME: u64 = (std::mem::size_of::<Page>() + std::mem::size_of::<FolioHead>()) as u64;

    pub fn new(nr_pages: u64) -> MemMap {
        let n = (nr_pages as usize).div_ceil(SECTION_PAGES);
        MemMap {
            nr_pages,
            // SAFETY: every field of Page is an integer, a bool or a bitflags integer,
            // for which all-zero bytes are valid. All-zero is Page::default(), a page
            // no list or folio holds, which is all a page of a newly online section is.
            pages: unsafe { HugeBuf::zeroed(nr_pages as usize) },
            // SAFETY: every field of FolioHead is an integer, a pair of them or a
            // bitflags integer; all-zero flags are LruFlags::empty(), every frame's
            // until its folio is added to an LRU list. An entry is read only for an
            // order-0 folio, whose refcount its allocation wrote, and its links only
            // while it is on a list, which wrote them.
            small: unsafe { HugeBuf::zeroed(nr_pages as usize) },
            online: vec![false; n],
            // SAFETY: every field of LargeFolio is an integer or a pair of them. A slot
            // is written whole (`LargeFolio::default()`) when it is handed out, from the
            // first up: 2 MiB host pages past the array's first `HEAD` bytes (1,024
            // slots). The head was 1 MiB from the eighteenth round, when a 2 MiB host
            // page cost more than the 4K pages it replaced, and `hostmem`'s 256 KiB
            // from the twenty-fifth; 64 KiB from the twenty-sixth (tasks/speed.md).
            large: unsafe { HugeBuf::zeroed((nr_pages as usize / 2).max(1)) },
            large_used: 0,
            large_free: NIL,
            large_live: 0,
        }
    }
    pub fn nr_pages(&self) -> u64 {
        self.nr_pages
    }
    /// Bring the sections covering [start, end) online (done before pages there are used).
    /// Their struct pages are left the zeros they were created as (see `new`), so the
    /// host backs a page of them only when the model first uses it instead of the
    /// model writing a whole section at once.
    pub fn online(&mut self, start: Pfn, end: Pfn) {
        let first = (start.0 >> SECTION_SHIFT) as usize;
        let last = ((end.0 - 1) >> SECTION_SHIFT) as usize;
        self.online[first..=last].fill(true);
    }
    #[inline]
    fn is_online(&self, pfn: Pfn) -> bool {
        pfn.0 < self.nr_pages && self.online[(pfn.0 >> SECTION_SHIFT) as usize]
    }
    #[inline]
    pub fn page(&self, pfn: Pfn) -> &Page {
        debug_assert!(self.is_online(pfn), "page {pfn:?} in an offline section");
        &self.pages[pfn.0 as usize]
    }
    #[inline]
    pub fn page_mut(&mut self, pfn: Pfn) -> &mut Page {
        debug_assert!(self.is_online(pfn), "page {pfn:?} in an offline section");
        &mut self.pages[pfn.0 as usize]
    }
    /// The `nr` struct pages from `pfn`, for a loop over a folio's pages that needs no
    /// bounds check per page.
    #[inline]
    pub fn pages_mut(&mut self, pfn: Pfn, nr: u64) -> &mut [Page] {
        debug_assert!(self.is_online(pfn) && self.is_online(Pfn(pfn.0 + nr - 1)));
        &mut self.pages[pfn.0 as usize..(pfn.0 + nr) as usize]
    }
    #[inline]
    pub fn try_page(&self, pfn: Pfn) -> Option<&Page> {
        self.is_online(pfn).then(|| &self.pages[pfn.0 as usize])
    }
    /// The LRU flags of folio `folio`.
    #[inline]
    pub fn lru(&self, folio: Pfn) -> LruFlags {
        self.folio_head(folio).flags
    }
    #[inline]
    pub fn lru_mut(&mut self, folio: Pfn) -> &mut LruFlags {
        &mut self.folio_head_mut(folio).flags
    }
    /// Clear the LRU flags of the folios of `order` filling pfns `run` (being freed).
    #[inline]
    pub fn lru_clear_run(&mut self, run: std::ops::Range<u64>, order: u32) {
        if order == 0 {
            for s in &mut self.small[run.start as usize..run.end as usize] {
                s.flags = LruFlags::empty();
            }
        } else {
            for pfn in run.step_by(1 << order) {
                self.folio_head_mut(Pfn(pfn)).flags = LruFlags::empty();
            }
        }
    }
    /// The struct page of a buddy block, None past the end of RAM. A block and its
    /// buddy share a section (the largest block is smaller than one), so the block
    /// being online makes the buddy's page readable without `try_page`'s section check.
    #[inline]
    pub fn buddy_page(&self, pfn: Pfn) -> Option<&Page> {
        (pfn.0 < self.nr_pages).then(|| self.page(pfn))
    }
    /// Sections with storage, for memory reports.
    pub fn online_sections(&self) -> usize {
        self.online.iter().filter(|&&on| on).count()
    }

    // ---- folio helpers -------------------------------------------------------

    /// page_folio: the head pfn of the folio holding `pfn`.
    #[inline]
    pub fn folio_of(&self, pfn: Pfn) -> Pfn {
        let p = self.page(pfn);
        if p.flags.contains(PageFlags::TAIL) {
            Pfn(pfn.0 & !((1 << p.order) - 1))
        } else {
            pfn
        }
    }
    #[inline]
    pub fn folio_order(&self, folio: Pfn) -> u32 {
        let p = self.page(folio);
        if p.flags.contains(PageFlags::HEAD) {
            p.order as u32
        } else {
            0
        }
    }
    #[inline]
    pub fn folio_nr_pages(&self, folio: Pfn) -> u64 {
        1 << self.folio_order(folio)
    }
    #[inline]
    pub fn folio_test(&self, folio: Pfn, f: PageFlags) -> bool {
        self.page(folio).flags.contains(f)
    }
    #[inline]
    pub fn folio_set(&mut self, folio: Pfn, f: PageFlags) {
        self.page_mut(folio).flags.insert(f);
    }
    #[inline]
    pub fn folio_clear(&mut self, folio: Pfn, f: PageFlags) {
        self.page_mut(folio).flags.remove(f);
    }
    /// folio_mapcount: mappings of the folio (for a small folio, of its page).
    #[inline]
    pub fn folio_mapcount(&self, folio: Pfn) -> i32 {
        let p = self.page(folio);
        if p.flags.contains(PageFlags::HEAD) {
            self.large[p.word as usize].large_mapcount
        } else {
            p.mapcount
        }
    }
    /// The mapping counts of large folio `folio`.
    #[inline]
    pub fn large(&self, folio: Pfn) -> &LargeFolio {
        let p = self.page(folio);
        debug_assert!(p.flags.contains(PageFlags::HEAD), "{folio:?} is no large folio");
        &self.large[p.word as usize]
    }
    #[inline(always)]
    pub fn large_mut(&mut self, folio: Pfn) -> &mut LargeFolio {
        let p = self.page(folio);
        debug_assert!(p.flags.contains(PageFlags::HEAD), "{folio:?} is no large folio");
        let slot = p.word as usize;
        &mut self.large[slot]
    }
    /// Give back the record slot of a large folio whose head page is about to be
    /// rewritten (split, free).
    pub fn release_large(&mut self, folio: Pfn) {
        let p = self.page(folio);
        if p.flags.contains(PageFlags::HEAD) {
            let slot = p.word as u32;
            self.large[slot as usize].mm_id[0] = self.large_free;
            self.large_free = slot;
            self.large_live -= 1;
        }
    }
    /// Large folios alive (for leak checks).
    pub fn nr_large(&self) -> usize {
        self.large_live
    }
    /// Where a folio's `FolioHead` is: its record's slot, or its pfn in the order-0 array.
    #[inline(always)]
    fn head_at(&self, folio: Pfn) -> (bool, usize) {
        let p = self.page(folio);
        debug_assert!(
            !p.flags.intersects(PageFlags::TAIL | PageFlags::PGTABLE),
            "{folio:?} is no folio ({:?})",
            p.flags
        );
        if p.flags.contains(PageFlags::HEAD) {
            (true, p.word as usize)
        } else {
            (false, folio.0 as usize)
        }
    }
    /// A folio's refcount and LRU links.
    #[inline(always)]
    pub fn folio_head(&self, folio: Pfn) -> &FolioHead {
        match self.head_at(folio) {
            (true, slot) => &self.large[slot].head,
            (false, pfn) => &self.small[pfn],
        }
    }
    /// The `FolioHead` of a folio its caller knows to be of `order`: an order-0 one's
    /// without reading its struct page first (a run of freed folios).
    #[inline(always)]
    pub fn folio_head_of_order(&self, folio: Pfn, order: u32) -> &FolioHead {
        if order == 0 {
            debug_assert!(self.page(folio).order == 0 && !self.page(folio).flags.contains(PageFlags::HEAD));
            &self.small[folio.0 as usize]
        } else {
            self.folio_head(folio)
        }
    }
    #[inline(always)]
    pub fn folio_head_mut(&mut self, folio: Pfn) -> &mut FolioHead {
        match self.head_at(folio) {
            (true, slot) => &mut self.large[slot].head,
            (false, pfn) => &mut self.small[pfn],
        }
    }
    #[inline]
    pub fn folio_ref_count(&self, folio: Pfn) -> i32 {
        self.folio_head(folio).refcount
    }
    #[inline]
    pub fn folio_ref_add(&mut self, folio: Pfn, n: i32) {
        self.folio_head_mut(folio).refcount += n;
    }
    /// A folio's LRU links (its head's, the kernel's folio->lru).
    #[inline(always)]
    pub fn lru_links(&self, folio: Pfn) -> Links {
        self.folio_head(folio).lru
    }
    #[inline(always)]
    pub fn lru_links_mut(&mut self, folio: Pfn) -> &mut Links {
        &mut self.folio_head_mut(folio).lru
    }
    /// page->index (page_pgoff): a large folio's head keeps it in the folio's record.
    #[inline]
    pub fn page_index(&self, pfn: Pfn) -> u64 {
        let p = self.page(pfn);
        if p.flags.contains(PageFlags::HEAD) {
            self.large[p.word as usize].index
        } else {
            p.word
        }
    }
    /// Set the index of the `nr` pages of one folio from `pfn`: `first`, then each the
    /// next. Only the first can be a large folio's head, whose index is in its record.
    #[inline(always)]
    pub fn set_page_index(&mut self, pfn: Pfn, nr: u64, first: u64) {
        debug_assert!(self.is_online(pfn) && self.is_online(Pfn(pfn.0 + nr - 1)));
        let pages = &mut self.pages[pfn.0 as usize..(pfn.0 + nr) as usize];
        let Some((p, rest)) = pages.split_first_mut() else {
            return;
        };
        if p.flags.contains(PageFlags::HEAD) {
            self.large[p.word as usize].index = first;
        } else {
            p.word = first;
        }
        for (i, p) in rest.iter_mut().enumerate() {
            debug_assert!(!p.flags.contains(PageFlags::HEAD), "{pfn:?} + {nr}: two folios");
            p.word = first + 1 + i as u64;
        }
    }

    /// A large folio's record slot, reset: the most recently freed, else the next never
    /// used. Inline into `prep_compound_page`, its one caller, out of order 0's way.
    #[inline(always)]
    fn new_large_slot(&mut self) -> u32 {
        let slot = if self.large_free != NIL {
            let slot = self.large_free;
            self.large_free = self.large[slot as usize].mm_id[0];
            slot
        } else {
            self.large_used += 1;
            self.large.populate_to(self.large_used, LARGE_POPULATE_BYTES);
            self.large_used as u32 - 1
        };
        self.large_live += 1;
        self.large[slot as usize] = LargeFolio::default();
        slot
    }

    /// prep_compound_page / post_alloc_hook: turn a freshly allocated block into a
    /// folio of `order` with one reference. Inline to the head page, all an order-0
    /// folio (every page of an order-0 fault) needs.
    #[inline]
    pub fn prep_new_folio(&mut self, pfn: Pfn, order: u32) {
        *self.page_mut(pfn) = Page {
            flags: PageFlags::INUSE,
            ..Page::default()
        };
        if order > 0 {
            self.prep_compound_page(pfn, order);
        } else {
            self.small[pfn.0 as usize].refcount = 1;
        }
    }

    /// A page-table page (pagetable_alloc): in use, with the one reference its
    /// allocation gave it and that nothing takes or drops, so none is kept.
    pub fn prep_pgtable_page(&mut self, pfn: Pfn) {
        *self.page_mut(pfn) = Page {
            flags: PageFlags::INUSE | PageFlags::PGTABLE,
            ..Page::default()
        };
    }

    /// A page-table page about to go back to the buddy allocator (pagetable_free).
    /// Only its struct page is reset: it has no entry in the order-0 array, and
    /// touching one for each table among a run's folios would have the host back
    /// that whole array.
    pub fn clear_pgtable_page(&mut self, pfn: Pfn) {
        debug_assert!(self.page(pfn).flags.contains(PageFlags::PGTABLE));
        *self.page_mut(pfn) = Page::default();
    }

    /// prep_compound_page: a large folio's head record and tail pages.
    #[inline(never)]
    fn prep_compound_page(&mut self, pfn: Pfn, order: u32) {
        let slot = self.new_large_slot();
        self.large[slot as usize].head.refcount = 1;
        let head = self.page_mut(pfn);
        head.flags |= PageFlags::HEAD;
        head.order = order as u8;
        head.word = slot.into();
        let tail = Page {
            flags: PageFlags::TAIL | PageFlags::INUSE,
            order: order as u8,
            ..Page::default()
        };
        debug_assert!(self.is_online(Pfn(pfn.0 + (1 << order) - 1)));
        fill_pages(
            &mut self.pages[pfn.0 as usize + 1..(pfn.0 + (1 << order)) as usize],
            tail,
        );
    }

    /// __split_folio_to_order(0)'s struct pages: every page of large folio `folio`
    /// becomes an order-0 folio, in use, with its own index, contents and
    /// PageAnonExclusive, plus the folio's flags `inherit`; the first holds `pins`
    /// references and the folio's place on its LRU list, the others none. The folio's
    /// record is given back.
    pub fn split_to_order_0(&mut self, folio: Pfn, inherit: PageFlags, pins: i32) {
        let (index, head) = {
            let lf = self.large(folio);
            (lf.index, lf.head)
        };
        self.release_large(folio);
        let nr = 1u64 << self.page(folio).order;
        for i in 0..nr {
            let pfn = Pfn(folio.0 + i);
            let p = self.page_mut(pfn);
            debug_assert_eq!(p.mapcount, 0, "page {i} still mapped after unmap_folio");
            *p = Page {
                flags: (p.flags & PageFlags::ANON_EXCLUSIVE) | inherit | PageFlags::INUSE,
                nonzero: p.nonzero,
                // A tail's word is its index already; the head's is the record's.
                word: if i == 0 { index } else { p.word },
                ..Page::default()
            };
            self.small[pfn.0 as usize] = if i == 0 {
                FolioHead { refcount: pins, ..head }
            } else {
                FolioHead::NONE
            };
        }
    }

    /// Reset the pages of a folio about to go back to the buddy allocator (the
    /// allocator's tests; the kernel's frees go through `Kernel::free_folios`).
    #[cfg(test)]
    pub(crate) fn clear_folio(&mut self, pfn: Pfn, order: u32) {
        self.release_large(pfn);
        self.clear_pages(pfn, 1 << order, order);
    }

    /// Reset the `nr` pages from `pfn`, folios of `order`, about to go back to the
    /// buddy allocator. An order-0 folio's refcount is reset with them, so every free
    /// frame's is 0 whatever freed it.
    pub fn clear_pages(&mut self, pfn: Pfn, nr: u64, order: u32) {
        debug_assert!(self.is_online(pfn) && self.is_online(Pfn(pfn.0 + nr - 1)));
        let range = pfn.0 as usize..(pfn.0 + nr) as usize;
        fill_pages(&mut self.pages[range.clone()], Page::default());
        if order == 0 {
            for s in &mut self.small[range] {
                s.refcount = 0;
            }
        }
    }
}

/// `pages.fill(page)` in one 16-byte store a struct page (SSE2, which every x86-64
/// has). The compiler's own fill stores each field's constant apart, and a large
/// folio's tails are written this way twice in its life (prep_compound_page, then
/// freed).
#[inline(always)]
fn fill_pages(pages: &mut [Page], page: Page) {
    #[cfg(target_arch = "x86_64")]
    {
        use std::arch::x86_64::{__m128i, _mm_loadu_si128, _mm_storeu_si128};
        const { assert!(std::mem::size_of::<Page>() == 16) };
        let src = &page as *const Page as *const __m128i;
        // SAFETY: SSE2 is part of x86-64. A Page is 16 bytes of integer fields with
        // no padding (the size is checked above), read unaligned and stored whole
        // over each page.
        unsafe {
            let v = _mm_loadu_si128(src);
            for p in pages {
                _mm_storeu_si128(p as *mut Page as *mut __m128i, v);
            }
        }
    }
    #[cfg(not(target_arch = "x86_64"))]
    pages.fill(page);
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn a_struct_page_is_16_bytes() {
        assert_eq!(std::mem::size_of::<Page>(), 16);
    }

    #[test]
    fn only_online_pages_inside_ram_can_be_looked_up() {
        let mut mm = MemMap::new(4096);
        assert!(mm.try_page(Pfn(0)).is_none(), "offline");
        mm.online(Pfn(0), Pfn(4096));
        let p = mm.page(Pfn(4095));
        assert!(*p == Page::default(), "free, held by no list or folio");
        assert!(
            mm.try_page(Pfn(4096)).is_none(),
            "past the end of RAM, inside the section"
        );
        assert!(mm.try_page(Pfn(1 << 40)).is_none());
    }

    #[test]
    fn pages_filled_a_store_a_page_are_the_page_stored() {
        let mut mm = MemMap::new(1 << 10);
        mm.online(Pfn(0), Pfn(1 << 10));
        for pfn in 0..64 {
            let p = mm.page_mut(Pfn(pfn));
            *p = Page {
                flags: PageFlags::from_bits_retain(0xa5a5),
                order: 7,
                nonzero: true,
                mapcount: -5,
                word: u64::MAX - pfn,
            };
        }
        let was = format!("{:?}", mm.page(Pfn(40)));
        mm.clear_pages(Pfn(1), 30, 0);
        mm.prep_compound_page(Pfn(16), 3);
        let show = |mm: &MemMap, pfn| format!("{:?}", mm.page(Pfn(pfn)));
        let tail = Page {
            flags: PageFlags::TAIL | PageFlags::INUSE,
            order: 3,
            ..Page::default()
        };
        for pfn in (1..16).chain(24..31) {
            assert_eq!(show(&mm, pfn), format!("{:?}", Page::default()), "pfn {pfn}");
        }
        for pfn in 17..24 {
            assert_eq!(show(&mm, pfn), format!("{tail:?}"), "pfn {pfn}");
        }
        assert!(mm.page(Pfn(0)).nonzero && mm.page(Pfn(31)).nonzero, "outside the range");
        assert_eq!(show(&mm, 40), was);
    }

    #[test]
    fn large_folio_counts_live_beside_the_memmap_and_are_reused() {
        let mut mm = MemMap::new(1 << 15);
        mm.online(Pfn(0), Pfn(1 << 15));
        mm.prep_new_folio(Pfn(0), 4);
        mm.prep_new_folio(Pfn(16), 2);
        mm.prep_new_folio(Pfn(20), 0);
        assert_eq!(mm.nr_large(), 2);
        mm.large_mut(Pfn(0)).large_mapcount = 16;
        assert_eq!(mm.folio_mapcount(Pfn(0)), 16);
        let new = LargeFolio {
            head: FolioHead {
                refcount: 1,
                ..FolioHead::NONE
            },
            ..LargeFolio::default()
        };
        assert_eq!(mm.large(Pfn(16)), &new);
        assert_eq!((mm.folio_ref_count(Pfn(16)), mm.folio_ref_count(Pfn(20))), (1, 1));
        mm.clear_folio(Pfn(0), 4);
        mm.clear_folio(Pfn(20), 0);
        assert_eq!(mm.nr_large(), 1);
        // A new large folio takes the freed slot, reset.
        mm.prep_new_folio(Pfn(32), 3);
        assert_eq!(mm.nr_large(), 2);
        assert_eq!(mm.large(Pfn(32)), &new);
        assert_eq!(mm.folio_of(Pfn(39)), Pfn(32));
    }

    #[test]
    fn a_tail_finds_its_head_by_its_folios_order_and_alignment() {
        let mut mm = MemMap::new(1 << 12);
        mm.online(Pfn(0), Pfn(1 << 12));
        mm.prep_new_folio(Pfn(512), 9);
        mm.prep_new_folio(Pfn(1040), 4);
        mm.prep_new_folio(Pfn(1056), 0);
        for (pfn, head) in [
            (512, 512),
            (513, 512),
            (1023, 512),
            (1040, 1040),
            (1055, 1040),
            (1056, 1056),
        ] {
            assert_eq!(mm.folio_of(Pfn(pfn)), Pfn(head), "pfn {pfn}");
        }
    }

    #[test]
    fn a_large_heads_index_refcount_and_links_live_in_its_record() {
        let mut mm = MemMap::new(1 << 12);
        mm.online(Pfn(0), Pfn(1 << 12));
        mm.prep_new_folio(Pfn(64), 4);
        mm.prep_new_folio(Pfn(80), 0);
        mm.set_page_index(Pfn(64), 17, 0x1000);
        assert_eq!(mm.large(Pfn(64)).index, 0x1000, "the head's, in its record");
        assert_eq!(mm.page_index(Pfn(64)), 0x1000);
        assert_eq!(mm.page_index(Pfn(79)), 0x100f);
        assert_eq!(mm.page_index(Pfn(80)), 0x1010, "an order-0 folio's, in its page");
        mm.folio_ref_add(Pfn(64), 2);
        *mm.lru_links_mut(Pfn(64)) = Links { prev: 80, next: NIL };
        *mm.lru_links_mut(Pfn(80)) = Links { prev: NIL, next: 64 };
        assert_eq!(mm.large(Pfn(64)).head.refcount, 3);
        assert_eq!(mm.lru_links(Pfn(64)), Links { prev: 80, next: NIL });
        assert_eq!(mm.lru_links(Pfn(80)), Links { prev: NIL, next: 64 });
        // A split leaves the head its refcount (the pins), place and index.
        mm.split_to_order_0(Pfn(64), PageFlags::ANON, 3);
        assert_eq!(mm.nr_large(), 0);
        assert_eq!(mm.folio_ref_count(Pfn(64)), 3);
        assert_eq!(mm.folio_ref_count(Pfn(65)), 0);
        assert_eq!(mm.lru_links(Pfn(64)), Links { prev: 80, next: NIL });
        assert_eq!(mm.page_index(Pfn(64)), 0x1000);
        assert_eq!(mm.page_index(Pfn(70)), 0x1006);
        assert_eq!(mm.page(Pfn(70)).flags, PageFlags::ANON | PageFlags::INUSE);
    }
}
