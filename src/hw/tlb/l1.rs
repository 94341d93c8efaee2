//! The fully associative L1 of one CPU's TLB, with O(1) lookup, fill and victim
//! choice, so a simulated TLB miss costs a few probes instead of a scan.
//!
//! ```text
//!  slots:    [ s0 ][ s1 ][ s2 ] ...        stable positions, a free list for holes
//!  LRU:      head(MRU) ⇄ s2 ⇄ s0 ⇄ s1 = tail(LRU victim) ⇄ back to head (a ring)
//!  buckets:  hash(span class, va >> span) ──► s1 ──► s0 ──► NIL   (chain per bucket)
//! ```
//! A lookup probes one bucket per span size present in L1; true LRU replacement is
//! the tail of the list, which is what "smallest last-use stamp" gave before. The
//! list is a ring, so the tail is `prev[head]` and a full L1's fill, which makes its
//! victim's slot the most recent, only moves `head` back one slot.

use super::{ClassCounts, Slot, TlbEntry};
use crate::hw::addr::Asid;

const NIL: u8 = u8::MAX;

/// Links are u8 slot numbers into arrays of 256, so following one needs no bounds check.
type Links = [u8; 256];

/// Most buckets an L1 has: 4 per entry, rounded up to a power of two, for under 255 entries.
const MAX_BUCKETS: usize = 1024;

pub(super) struct L1 {
    slots: Vec<Slot>,
    live: [bool; 256],
    /// LRU ring links, most recently used at `head` (NIL when empty), least at `prev[head]`.
    prev: Links,
    next: Links,
    head: u8,
    /// Next slot in the same hash bucket.
    chain: Links,
    /// Per live slot, the bucket it is chained in, so unchaining needs no rehash.
    bucket_of: [u16; 256],
    buckets: Box<[u8; MAX_BUCKETS]>,
    /// 64 - log2(buckets): the shift that keeps a hash's top bits.
    hash_shift: u32,
    free: Vec<u8>,
    /// The TLB's span shifts, by class (at most 16 classes: an L2 tag keeps 4 bits).
    shifts: [u32; 16],
    /// Live entries per span class.
    classes: ClassCounts,
    len: usize,
    /// Whether any live entry may be pending.
    pub(super) pending: bool,
}

impl L1 {
    pub(super) fn new(capacity: usize, span_shifts: &[u32]) -> L1 {
        assert!(capacity < NIL as usize, "L1 of {capacity} entries is too large");
        assert!(span_shifts.len() <= 16, "{} span classes", span_shifts.len());
        let bucket_bits = (capacity * 4).next_power_of_two().trailing_zeros();
        debug_assert!(1 << bucket_bits <= MAX_BUCKETS);
        L1 {
            slots: Vec::with_capacity(capacity),
            live: [false; 256],
            prev: [NIL; 256],
            next: [NIL; 256],
            head: NIL,
            chain: [NIL; 256],
            bucket_of: [0; 256],
            buckets: Box::new([NIL; MAX_BUCKETS]),
            hash_shift: 64 - bucket_bits,
            free: Vec::new(),
            shifts: std::array::from_fn(|c| span_shifts.get(c).copied().unwrap_or(0)),
            classes: ClassCounts::default(),
            len: 0,
            pending: false,
        }
    }

    pub(super) fn len(&self) -> usize {
        self.len
    }

    #[inline]
    fn bucket(&self, class: u8, va: u64) -> usize {
        let vpn = va >> self.shifts[class as usize & 15];
        let h = (vpn ^ ((class as u64) << 56)).wrapping_mul(0x9E37_79B9_7F4A_7C15);
        (h >> self.hash_shift) as usize & (MAX_BUCKETS - 1)
    }

    /// The slot that answers a lookup for (`asid`, `va`), most recently used first.
    #[inline]
    pub(super) fn find(&self, asid: Asid, va: u64) -> Option<usize> {
        if self.head != NIL && self.slots[self.head as usize].entry.matches(asid, va) {
            return Some(self.head as usize);
        }
        for class in self.classes.present() {
            let class = class as u8;
            let mut i = self.buckets[self.bucket(class, va)];
            while i != NIL {
                let s = &self.slots[i as usize];
                if s.class == class && s.entry.matches(asid, va) {
                    return Some(i as usize);
                }
                i = self.chain[i as usize];
            }
        }
        None
    }

    /// The most recently used slot, if any.
    #[inline]
    pub(super) fn mru(&self) -> Option<usize> {
        (self.head != NIL).then_some(self.head as usize)
    }

    pub(super) fn entry(&self, i: usize) -> &TlbEntry {
        &self.slots[i].entry
    }

    /// Mark slot `i` used now (move it to the head of the LRU list).
    #[inline]
    pub(super) fn touch(&mut self, i: usize, stamp: u64) {
        self.slots[i].stamp = stamp;
        if self.head as usize != i {
            self.unlink_lru(i as u8);
            self.push_lru(i as u8);
        }
    }

    /// The entry the next insert evicts, when L1 is full: the LRU. The caller moves it
    /// out first, reading it where it lies, so no fill hands a whole slot back through
    /// a temporary (a wide reload of narrow stores, which stalls).
    #[inline(always)]
    pub(super) fn victim(&self) -> Option<&Slot> {
        (self.free.is_empty() && self.slots.len() == self.slots.capacity())
            .then(|| &self.slots[self.prev[self.head as usize] as usize])
    }

    /// Insert `slot` as most recently used, over `victim()` when full; returns its index.
    #[inline(always)]
    pub(super) fn insert(&mut self, slot: Slot) -> usize {
        let i = if let Some(i) = self.free.pop() {
            i
        } else if self.slots.len() < self.slots.capacity() {
            let i = self.slots.len() as u8;
            self.slots.push(slot);
            i
        } else {
            return self.replace_lru(slot);
        };
        self.slots[i as usize] = slot;
        self.live[i as usize] = true;
        self.pending |= slot.entry.pending;
        self.classes.add(slot.class as usize);
        self.chain_in(i, slot.class, slot.entry.va);
        self.push_lru(i);
        self.len += 1;
        i as usize
    }

    /// A full L1's fill: the LRU entry's slot takes `slot` and becomes the most recently
    /// used. The slot stays live, so only its bucket changes and the ring turns so its
    /// tail is the head.
    #[inline(always)]
    fn replace_lru(&mut self, slot: Slot) -> usize {
        let i = self.prev[self.head as usize];
        let old_class = self.slots[i as usize].class;
        self.slots[i as usize] = slot;
        self.unchain(i);
        self.head = i;
        if old_class != slot.class {
            self.classes.remove(old_class as usize);
            self.classes.add(slot.class as usize);
        }
        self.pending |= slot.entry.pending;
        self.chain_in(i, slot.class, slot.entry.va);
        i as usize
    }

    /// Drop slot `i` and return its entry.
    pub(super) fn remove(&mut self, i: usize) -> TlbEntry {
        let slot = self.unlink(i);
        self.free.push(i as u8);
        slot.entry
    }

    /// Take slot `i` out of its bucket chain and the LRU list; the caller reuses or frees it.
    fn unlink(&mut self, i: usize) -> Slot {
        debug_assert!(self.live[i]);
        let slot = self.slots[i];
        self.unchain(i as u8);
        self.unlink_lru(i as u8);
        self.classes.remove(slot.class as usize);
        self.live[i] = false;
        self.len -= 1;
        slot
    }

    /// Put slot `i`, holding a (`class`, `va`) entry, at the head of its bucket's chain.
    #[inline]
    fn chain_in(&mut self, i: u8, class: u8, va: u64) {
        let b = self.bucket(class, va);
        self.chain[i as usize] = self.buckets[b];
        self.buckets[b] = i;
        self.bucket_of[i as usize] = b as u16;
    }

    /// Take slot `i` out of its bucket's chain.
    #[inline]
    fn unchain(&mut self, i: u8) {
        let b = self.bucket_of[i as usize] as usize & (MAX_BUCKETS - 1);
        if self.buckets[b] == i {
            self.buckets[b] = self.chain[i as usize];
        } else {
            let mut p = self.buckets[b];
            while self.chain[p as usize] != i {
                p = self.chain[p as usize];
            }
            self.chain[p as usize] = self.chain[i as usize];
        }
    }

    #[inline]
    fn push_lru(&mut self, i: u8) {
        if self.head == NIL {
            self.prev[i as usize] = i;
            self.next[i as usize] = i;
        } else {
            let (h, t) = (self.head, self.prev[self.head as usize]);
            self.prev[i as usize] = t;
            self.next[i as usize] = h;
            self.next[t as usize] = i;
            self.prev[h as usize] = i;
        }
        self.head = i;
    }

    #[inline]
    fn unlink_lru(&mut self, i: u8) {
        let (p, n) = (self.prev[i as usize], self.next[i as usize]);
        if n == i {
            self.head = NIL;
            return;
        }
        self.next[p as usize] = n;
        self.prev[n as usize] = p;
        if self.head == i {
            self.head = n;
        }
    }

    /// Indices of live slots, most recently used first.
    fn live_slots(&self) -> impl Iterator<Item = usize> + '_ {
        let head = self.head;
        std::iter::successors((head != NIL).then_some(head), move |&i| {
            let n = self.next[i as usize];
            (n != head).then_some(n)
        })
        .map(|i| i as usize)
    }

    /// Each live entry's address and last-use stamp, in slot order.
    #[cfg(test)]
    pub(super) fn stamps(&self) -> Vec<(u64, u64)> {
        self.live_slots()
            .map(|i| (self.slots[i].entry.va, self.slots[i].stamp))
            .collect()
    }

    pub(super) fn iter(&self) -> impl Iterator<Item = &TlbEntry> {
        self.live_slots().map(|i| &self.slots[i].entry)
    }

    /// Each live entry in slot order, for a scan whose result no order changes: one
    /// pass over the slots, not a walk of the LRU ring's links one after another.
    pub(super) fn iter_unordered(&self) -> impl Iterator<Item = &TlbEntry> {
        (self.slots.iter().zip(&self.live))
            .filter(|(_, &live)| live)
            .map(|(s, _)| &s.entry)
    }

    /// Mark pending every live entry `f` selects and is not pending yet; returns how many.
    pub(super) fn mark_pending(&mut self, f: impl Fn(&TlbEntry) -> bool) -> u64 {
        let mut n = 0;
        for i in 0..self.slots.len() {
            let e = &mut self.slots[i].entry;
            if self.live[i] && !e.pending && f(e) {
                e.pending = true;
                n += 1;
            }
        }
        self.pending |= n > 0;
        n
    }

    /// Remove every live entry `f` selects, passing each removed entry to `gone`.
    pub(super) fn remove_where(&mut self, f: impl Fn(&TlbEntry) -> bool, mut gone: impl FnMut(&TlbEntry)) {
        for i in 0..self.slots.len() {
            if self.live[i] && f(&self.slots[i].entry) {
                gone(&self.remove(i));
            }
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::hw::memory::{PhysMem, TableId};
    use crate::hw::{Granule, Pfn};

    fn slot(va: u64, class: u8, asid: Option<Asid>) -> Slot {
        static TABLE: std::sync::OnceLock<TableId> = std::sync::OnceLock::new();
        let table = *TABLE.get_or_init(|| PhysMem::new(Granule::K4, 1 << 30).materialize_table(Pfn(1)));
        Slot {
            entry: TlbEntry {
                asid,
                va,
                span_shift: [12, 16, 21][class as usize],
                pa: va,
                level: 3,
                writable: true,
                pending: false,
                table,
                index: 0,
            },
            stamp: 0,
            class,
        }
    }

    #[test]
    fn the_least_recently_used_entry_is_the_victim() {
        let mut l1 = L1::new(3, &[12, 16, 21]);
        for p in 0..3u64 {
            assert!(l1.victim().is_none());
            l1.insert(slot(p << 12, 0, Some(1)));
        }
        let first = l1.find(1, 0).unwrap();
        l1.touch(first, 9);
        assert_eq!(l1.victim().expect("full").entry.va, 1 << 12);
        l1.insert(slot(3 << 12, 0, Some(1)));
        assert_eq!(l1.iter().map(|e| e.va >> 12).collect::<Vec<_>>(), [3, 0, 2]);
    }

    #[test]
    fn a_full_l1_keeps_exactly_the_most_recent_entries_findable() {
        let mut l1 = L1::new(4, &[12, 16, 21]);
        for p in 0..10u64 {
            let old = l1.victim().map(|o| o.entry.va >> 16);
            l1.insert(slot(p << 16, (p % 2) as u8, Some(1)));
            assert_eq!(old, p.checked_sub(4), "victim of fill {p}");
        }
        for p in 0..10u64 {
            assert_eq!(l1.find(1, p << 16).is_some(), p >= 6, "page {p}");
        }
        assert_eq!(l1.iter().map(|e| e.va >> 16).collect::<Vec<_>>(), [9, 8, 7, 6]);
        assert_eq!(l1.len(), 4);
    }

    #[test]
    fn lookups_find_every_span_size_and_respect_the_asid() {
        let mut l1 = L1::new(8, &[12, 16, 21]);
        l1.insert(slot(0x20_0000, 2, None));
        l1.insert(slot(0x1_0000, 1, Some(2)));
        l1.insert(slot(0x5000, 0, Some(1)));
        assert_eq!(l1.find(7, 0x3f_ffff).map(|i| l1.entry(i).va), Some(0x20_0000));
        assert_eq!(l1.find(2, 0x1_f000).map(|i| l1.entry(i).va), Some(0x1_0000));
        assert!(l1.find(1, 0x1_f000).is_none());
        assert!(l1.find(2, 0x5000).is_none());
        assert_eq!(l1.find(1, 0x5fff).map(|i| l1.entry(i).va), Some(0x5000));
    }

    #[test]
    fn removal_keeps_chains_and_order_intact() {
        let mut l1 = L1::new(64, &[12]);
        for p in 0..64u64 {
            l1.insert(slot(p << 12, 0, Some(1)));
        }
        let mut gone = Vec::new();
        l1.remove_where(|e| (e.va >> 12) % 3 == 0, |e| gone.push(e.va >> 12));
        assert_eq!(gone.len(), 22);
        assert_eq!(l1.len(), 42);
        for p in 0..64u64 {
            assert_eq!(l1.find(1, p << 12).is_some(), p % 3 != 0, "page {p}");
        }
        let order: Vec<u64> = l1.iter().map(|e| e.va >> 12).collect();
        assert_eq!(order, (0..64).rev().filter(|p| p % 3 != 0).collect::<Vec<_>>());
    }
}
