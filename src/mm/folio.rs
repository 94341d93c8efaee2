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

use crate::hostmem::{HugeBuf, HEAD};
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
    /// which list it is counted on, one byte per page beside the memmap: struct page's
    /// own flags word is full, and this keeps it 32 bytes. Meaningful on a folio's head.
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

/// One struct page: 32 bytes, so the memmap of a gigabyte of 4K pages is 8 MiB of
/// host memory (touched once per page the model uses, it bounds fault throughput).
#[derive(Clone, Copy, Debug)]
pub struct Page {
    pub flags: PageFlags,
    /// Buddy order of a free block, or the folio order on a head page.
    pub order: u8,
    /// The page's contents are not all zero (written by the user, or copied from such
    /// a page): what pages_identical(page, ZERO_PAGE) would tell. Allocation zeroes.
    pub nonzero: bool,
    /// List links: a free block's buddy free list, an in-use folio's LRU list (on
    /// the head), the deferred split queue (on the third page, as the kernel keeps
    /// _deferred_list in a tail page).
    pub lru_prev: u32,
    pub lru_next: u32,
    /// compound_head of a tail page; on the head of a large folio, its `LargeFolio` slot.
    pub head: u32,
    /// Pte mappings of this page (the kernel's _mapcount + 1).
    pub mapcount: i32,
    /// Head only: folio refcount.
    pub refcount: i32,
    /// Anon: the virtual page number the page is mapped at (page->index), which is
    /// what lets the rmap walk find its ptes in every mm.
    pub index: u64,
}

impl Default for Page {
    fn default() -> Self {
        Page {
            flags: PageFlags::empty(),
            order: 0,
            nonzero: false,
            lru_prev: NIL,
            lru_next: NIL,
            head: NIL,
            mapcount: 0,
            refcount: 0,
            index: 0,
        }
    }
}

/// The folio-wide mapping counts of a large folio. The kernel keeps them in the
/// folio's first tail pages; the model keeps one slot per large folio beside the
/// memmap, named by the head page, which keeps every struct page small.
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
}

impl Default for LargeFolio {
    fn default() -> Self {
        LargeFolio {
            large_mapcount: 0,
            entire_mapcount: 0,
            nr_pages_mapped: 0,
            mm_id: [0; 2],
            mm_id_mapcount: [-1; 2],
        }
    }
}

/// 65536 pages of 32 bytes: one 2 MiB host huge page per section.
pub(super) const SECTION_SHIFT: u32 = 16;
const SECTION_PAGES: usize = 1 << SECTION_SHIFT;

/// The memmap: one Page per frame in one reserved array (like vmemmap), brought
/// online a section at a time: the host backs a section only once it is online.
pub struct MemMap {
    nr_pages: u64,
    pages: HugeBuf<Page>,
    lru: HugeBuf<LruFlags>,
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
/// 2,340 slots (past the head, `populate_to` backs a 2 MiB page at a time).
const LARGE_POPULATE_BYTES: usize = 64 << 10;

/// The large-folio records' 4K-page head: 37,449 slots, 2.3 GiB of 64K folios. A
/// 1 GiB touch of 64K folios takes 16,384 slots (448 KiB), which past a 256 KiB head
/// had the host clear a 2 MiB page for 192 KiB of them (tasks/speed.md, eighteenth
/// round).
const LARGE_HEAD: usize = 1 << 20;

impl MemMap {
    pub fn new(nr_pages: u64) -> MemMap {
        let n = (nr_pages as usize).div_ceil(SECTION_PAGES);
        MemMap {
            nr_pages,
            // SAFETY: every field of Page is an integer, a bool or a bitflags integer,
            // for which all-zero bytes are valid. All-zero is also a page no list or
            // folio holds, which is all a page of a newly online section is: it
            // differs from Page::default() only in the links and `head`, which are
            // read only on list members, tails and heads, all written before.
            pages: unsafe { HugeBuf::zeroed(nr_pages as usize, Some(HEAD)) },
            // SAFETY: all-zero bytes are LruFlags::empty(), every page's state until
            // its folio is added to an LRU list. 4K host pages back it, a section's
            // worth (64 KiB) at once when the section comes online.
            lru: unsafe { HugeBuf::zeroed(nr_pages as usize, None) },
            online: vec![false; n],
            // SAFETY: every field of LargeFolio is an integer. A slot is written whole
            // (`LargeFolio::default()`) when it is handed out, from the first up: 2 MiB
            // host pages past the array's first `LARGE_HEAD` bytes.
            large: unsafe { HugeBuf::zeroed((nr_pages as usize / 2).max(1), Some(LARGE_HEAD)) },
            large_used: 0,
            large_free: NIL,
            large_live: 0,
        }
    }
    pub fn nr_pages(&self) -> u64 {
        self.nr_pages
    }
    /// Bring the sections covering [start, end) online (done before pages there are used).
    /// Their struct pages and LRU flags are left the zeros they were created as (see
    /// `new`), so the host backs a page of them only when the model first uses it
    /// instead of the model writing a whole section at once. A new section's LRU flags
    /// are backed in one call (`HugeBuf::populate`) rather than by a host fault per
    /// 4 KiB as folios are added: a 1 GiB touch took 130 host faults there.
    pub fn online(&mut self, start: Pfn, end: Pfn) {
        let first = (start.0 >> SECTION_SHIFT) as usize;
        let last = ((end.0 - 1) >> SECTION_SHIFT) as usize;
        for s in first..=last {
            if !self.online[s] {
                self.online[s] = true;
                let from = s << SECTION_SHIFT;
                self.lru
                    .populate(from..(from + SECTION_PAGES).min(self.nr_pages as usize));
            }
        }
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
    /// The LRU flags of folio `folio` (its head page).
    #[inline]
    pub fn lru(&self, folio: Pfn) -> LruFlags {
        debug_assert!(self.is_online(folio), "page {folio:?} in an offline section");
        self.lru[folio.0 as usize]
    }
    #[inline]
    pub fn lru_mut(&mut self, folio: Pfn) -> &mut LruFlags {
        debug_assert!(self.is_online(folio), "page {folio:?} in an offline section");
        &mut self.lru[folio.0 as usize]
    }
    /// The LRU flags of the pages at pfns `run`.
    #[inline]
    pub fn lru_range_mut(&mut self, run: std::ops::Range<u64>) -> &mut [LruFlags] {
        &mut self.lru[run.start as usize..run.end as usize]
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
            Pfn(p.head as u64)
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
            self.large[p.head as usize].large_mapcount
        } else {
            p.mapcount
        }
    }
    /// The mapping counts of large folio `folio`.
    #[inline]
    pub fn large(&self, folio: Pfn) -> &LargeFolio {
        let p = self.page(folio);
        debug_assert!(p.flags.contains(PageFlags::HEAD), "{folio:?} is no large folio");
        &self.large[p.head as usize]
    }
    #[inline(always)]
    pub fn large_mut(&mut self, folio: Pfn) -> &mut LargeFolio {
        let p = self.page(folio);
        debug_assert!(p.flags.contains(PageFlags::HEAD), "{folio:?} is no large folio");
        let slot = p.head as usize;
        &mut self.large[slot]
    }
    /// Give back the counts slot of a large folio whose head page is about to be
    /// rewritten (split, free).
    pub fn release_large(&mut self, folio: Pfn) {
        let p = self.page(folio);
        if p.flags.contains(PageFlags::HEAD) {
            let slot = p.head;
            self.large[slot as usize].mm_id[0] = self.large_free;
            self.large_free = slot;
            self.large_live -= 1;
        }
    }
    /// Large folios alive (for leak checks).
    pub fn nr_large(&self) -> usize {
        self.large_live
    }
    #[inline]
    pub fn folio_ref_count(&self, folio: Pfn) -> i32 {
        self.page(folio).refcount
    }
    #[inline]
    pub fn folio_ref_add(&mut self, folio: Pfn, n: i32) {
        self.page_mut(folio).refcount += n;
    }

    /// A large folio's counts slot, reset: the most recently freed, else the next never
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
            refcount: 1,
            flags: PageFlags::INUSE,
            ..Page::default()
        };
        if order > 0 {
            self.prep_compound_page(pfn, order);
        }
    }

    /// prep_compound_page: a large folio's head record and tail pages.
    #[inline(never)]
    fn prep_compound_page(&mut self, pfn: Pfn, order: u32) {
        let slot = self.new_large_slot();
        let head = self.page_mut(pfn);
        head.flags |= PageFlags::HEAD;
        head.order = order as u8;
        head.head = slot;
        let tail = Page {
            flags: PageFlags::TAIL | PageFlags::INUSE,
            head: pfn.0 as u32,
            ..Page::default()
        };
        debug_assert!(self.is_online(Pfn(pfn.0 + (1 << order) - 1)));
        fill_pages(
            &mut self.pages[pfn.0 as usize + 1..(pfn.0 + (1 << order)) as usize],
            tail,
        );
    }

    /// Reset the pages of a folio about to go back to the buddy allocator.
    pub fn clear_folio(&mut self, pfn: Pfn, order: u32) {
        self.release_large(pfn);
        self.clear_pages(pfn, 1 << order);
    }

    /// Reset `nr` order-0 folios from `pfn` about to go back to the buddy allocator.
    pub fn clear_pages(&mut self, pfn: Pfn, nr: u64) {
        debug_assert!(self.is_online(pfn) && self.is_online(Pfn(pfn.0 + nr - 1)));
        fill_pages(&mut self.pages[pfn.0 as usize..(pfn.0 + nr) as usize], Page::default());
    }
}

/// `pages.fill(page)` in one 32-byte store a struct page where the build has AVX (as
/// builds for this machine's CPU do). The compiler's own fill stores each field's
/// constant apart (five stores a page), and a large folio's tails are written this way
/// twice in its life (prep_compound_page, then freed).
#[inline(always)]
fn fill_pages(pages: &mut [Page], page: Page) {
    #[cfg(all(target_arch = "x86_64", target_feature = "avx"))]
    {
        use std::arch::x86_64::{__m256i, _mm256_loadu_si256, _mm256_storeu_si256};
        const { assert!(std::mem::size_of::<Page>() == 32) };
        let src = &page as *const Page as *const __m256i;
        // SAFETY: the build enables AVX (target_feature), which src/hostcpu.rs checks
        // the CPU has before main. A Page is 32 bytes of integer fields with no padding
        // (the size is checked above), read unaligned and stored whole over each page.
        unsafe {
            let v = _mm256_loadu_si256(src);
            for p in pages {
                _mm256_storeu_si256(p as *mut Page as *mut __m256i, v);
            }
        }
    }
    #[cfg(not(all(target_arch = "x86_64", target_feature = "avx")))]
    pages.fill(page);
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn a_struct_page_is_32_bytes() {
        assert_eq!(std::mem::size_of::<Page>(), 32);
    }

    #[test]
    fn only_online_pages_inside_ram_can_be_looked_up() {
        let mut mm = MemMap::new(4096);
        assert!(mm.try_page(Pfn(0)).is_none(), "offline");
        mm.online(Pfn(0), Pfn(4096));
        let p = mm.page(Pfn(4095));
        assert!(
            p.flags.is_empty() && p.refcount == 0 && p.mapcount == 0,
            "free, held by no list or folio"
        );
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
                lru_prev: pfn as u32,
                lru_next: 3,
                head: 4,
                mapcount: -5,
                refcount: 6,
                index: u64::MAX - pfn,
            };
        }
        let was = format!("{:?}", mm.page(Pfn(40)));
        mm.clear_pages(Pfn(1), 30);
        mm.prep_compound_page(Pfn(16), 3);
        let show = |mm: &MemMap, pfn| format!("{:?}", mm.page(Pfn(pfn)));
        let tail = Page {
            flags: PageFlags::TAIL | PageFlags::INUSE,
            head: 16,
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
        assert_eq!(mm.large(Pfn(16)), &LargeFolio::default());
        mm.clear_folio(Pfn(0), 4);
        mm.clear_folio(Pfn(20), 0);
        assert_eq!(mm.nr_large(), 1);
        // A new large folio takes the freed slot, reset.
        mm.prep_new_folio(Pfn(32), 3);
        assert_eq!(mm.nr_large(), 2);
        assert_eq!(mm.large(Pfn(32)), &LargeFolio::default());
        assert_eq!(mm.folio_of(Pfn(39)), Pfn(32));
    }
}
