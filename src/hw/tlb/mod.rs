//! A per-CPU TLB: a fully associative L1 in front of a set-associative L2, with
//! entries tagged by ASID (or global) that cover a page, a block, or a whole
//! contiguous range when the walk found CONT set.
//!
//! ```text
//!  lookup(asid, va) ─► L1: fully associative, LRU, most recent hit probed first
//!                       │ miss                        ▲ hit: swapped into L1
//!                       ▼                             │
//!                      L2: sets x ways, one probe per leaf span size the granule has
//!                          (page, cont pte, pmd block, cont pmd, pud block) that is
//!                          present, set = (va >> span_shift) & (sets - 1)
//! ```
//! The levels are exclusive: a translation lives in exactly one place, L1 victims
//! move to L2, and only an L2 victim leaves the TLB (`arch.tlb.evict`).
//!
//! Invalidation is two-phase, as the architecture has it: a TLBI marks matching
//! entries pending; they may still translate until a DSB ISH completes them.
//!
//! Only leaf translations are cached; walk-cache (non-leaf) entries are not
//! modelled, so a last-level TLBI (VALE1IS, ...) removes exactly the entries its
//! all-levels twin (VAE1IS, ...) removes.

mod l1;

use std::ops::Range;

use super::addr::{Asid, Granule};
use super::memory::TableId;
use super::residency::Residency;
use l1::L1;

/// Sizes of one CPU's TLB.
#[derive(Clone, Copy, Debug, PartialEq, Eq, serde::Serialize)]
pub struct TlbConfig {
    pub l1_entries: usize,
    /// A power of two: the set index is a field of the VA.
    pub l2_sets: usize,
    pub l2_ways: usize,
}

impl Default for TlbConfig {
    /// Neoverse-N1-like: 48-entry L1 data TLB, 1280-entry 5-way L2 (256 sets).
    fn default() -> Self {
        TlbConfig {
            l1_entries: 48,
            l2_sets: 256,
            l2_ways: 5,
        }
    }
}

/// One cached translation.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub struct TlbEntry {
    /// None for a global (nG clear) entry.
    pub asid: Option<Asid>,
    /// VA of the start of the span.
    pub va: u64,
    /// log2 of the span in bytes (a byte keeps the entry to 32 bytes, half a line).
    pub span_shift: u8,
    /// PA of the start of the span.
    pub pa: u64,
    /// Level of the leaf descriptor.
    pub level: u8,
    pub writable: bool,
    /// Hit by a TLBI that no DSB ISH has completed yet.
    pub pending: bool,
    /// The table holding the leaf descriptor the entry was filled from.
    pub table: TableId,
    /// Index in `table` of the first descriptor the span covers (a contiguous entry
    /// covers the whole aligned run).
    pub index: u32,
}

impl TlbEntry {
    /// What an empty L2 slot holds.
    const EMPTY: TlbEntry = TlbEntry {
        asid: None,
        va: 0,
        span_shift: 0,
        pa: 0,
        level: 0,
        writable: false,
        pending: false,
        table: TableId::NONE,
        index: 0,
    };

    /// The last VA of the span (inclusive, so a span at the top of the address space
    /// does not overflow).
    #[inline]
    pub fn last(&self) -> u64 {
        self.va + ((1u64 << self.span_shift) - 1)
    }
    #[inline]
    pub fn covers(&self, va: u64) -> bool {
        (va >> self.span_shift) == (self.va >> self.span_shift)
    }
    /// Whether a lookup for `asid` may use this entry: global entries match every ASID.
    #[inline]
    pub fn matches(&self, asid: Asid, va: u64) -> bool {
        self.covers(va) && self.asid.is_none_or(|a| a == asid)
    }
    /// Whether the span overlaps [first, last] (inclusive).
    #[inline]
    pub fn overlaps(&self, first: u64, last: u64) -> bool {
        self.va <= last && first <= self.last()
    }
    /// Whether frame range [pa, pa+len) lies under this entry.
    #[inline]
    pub fn maps_pa(&self, pa: u64, len: u64) -> bool {
        self.pa < pa + len && pa < self.pa + (1u64 << self.span_shift)
    }
    /// The PA this entry gives `va`, which it must cover.
    #[inline]
    pub fn translate(&self, va: u64) -> u64 {
        self.pa + (va & ((1u64 << self.span_shift) - 1))
    }
    /// Whether the entry was filled from descriptor `index` of `table`, whose entries
    /// each map 2^`level_shift` bytes.
    pub fn filled_from(&self, table: TableId, index: usize, level_shift: u32) -> bool {
        table == self.table
            && (index as u64).wrapping_sub(self.index as u64) >> (u32::from(self.span_shift) - level_shift) == 0
    }
}

const _: () = assert!(std::mem::size_of::<TlbEntry>() == 32);

/// The L2 tag of a `shift`-sized span of class `class` covering `va`: never 0, and
/// equal for two spans exactly when they are the same span of the same class.
#[inline]
fn l2_tag_of(va: u64, shift: u32, class: u8) -> u64 {
    (va >> shift) << 4 | (class as u64 + 1)
}

/// The span class an L2 tag was made for.
#[inline]
fn l2_tag_class(tag: u64) -> usize {
    (tag & 0xf) as usize - 1
}

/// `Tlb::class_of` for a span shift that is no leaf size of the granule.
const NO_CLASS: u8 = u8::MAX;

/// Where a lookup hit.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum TlbHit {
    L1,
    L2,
}

/// The entries one TLBI removes, decoded from its operand.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum TlbiScope {
    /// Entries used to translate any VA in [first, last]: for the ASID, global entries
    /// included (Arm ARM: TLBI VAE1 matches global entries whatever the ASID), or for
    /// every ASID when None. A single-VA TLBI is the range [va, va].
    Va { asid: Option<Asid>, first: u64, last: u64 },
    /// The non-global entries of one ASID (ASIDE1IS leaves global entries alone).
    Asid(Asid),
    /// Every entry (VMALLE1IS).
    All,
}

impl TlbiScope {
    #[inline]
    pub fn matches(&self, e: &TlbEntry) -> bool {
        match *self {
            TlbiScope::Va { asid, first, last } => {
                e.overlaps(first, last) && (asid.is_none() || e.asid.is_none() || e.asid == asid)
            }
            TlbiScope::Asid(a) => e.asid == Some(a),
            TlbiScope::All => true,
        }
    }
}

#[derive(Clone, Copy)]
struct Slot {
    entry: TlbEntry,
    /// Last use, for LRU replacement.
    stamp: u64,
    /// Index of the span size in `Tlb::spans`.
    class: u8,
}

/// Entries per span class, with a bitmap of the classes that have any, so a lookup
/// probes only the span sizes present.
#[derive(Clone, Copy, Default)]
struct ClassCounts {
    n: [u32; 16],
    present: u32,
}

impl ClassCounts {
    #[inline]
    fn add(&mut self, class: usize) {
        self.n[class] += 1;
        self.present |= 1 << class;
    }

    #[inline]
    fn remove(&mut self, class: usize) {
        self.n[class] -= 1;
        if self.n[class] == 0 {
            self.present &= !(1 << class);
        }
    }

    /// The classes with entries, ascending.
    #[inline]
    fn present(&self) -> SetBits {
        SetBits(self.present)
    }

    fn total(&self) -> usize {
        self.n.iter().map(|&n| n as usize).sum()
    }
}

/// The set bits of a word, lowest first.
struct SetBits(u32);

impl Iterator for SetBits {
    type Item = usize;
    #[inline]
    fn next(&mut self) -> Option<usize> {
        if self.0 == 0 {
            return None;
        }
        let bit = self.0.trailing_zeros() as usize;
        self.0 &= self.0 - 1;
        Some(bit)
    }
}

/// The way an L2 fill takes in a set with these stamps: the first with the smallest.
/// An empty way's stamp is 0, below every live one (the clock has ticked before any
/// use), so that is the first free way, else the LRU. The default 5-way set is
/// compared unrolled: the loop's compare and two moves per way were a fifth of a fill.
#[inline(always)]
fn lru_way(stamps: &[u64]) -> usize {
    let first_min = |s: &[u64]| {
        let (mut way, mut oldest) = (0, s[0]);
        for (w, &t) in s.iter().enumerate().skip(1) {
            if t < oldest {
                (way, oldest) = (w, t);
            }
        }
        way
    };
    match <&[u64; 5]>::try_from(stamps) {
        Ok(s) => first_min(s),
        Err(_) => first_min(stamps),
    }
}

/// One CPU's TLB. Operations that can drop an entry take the machine's residency
/// index so the checkers' reverse maps stay in step (a disabled index costs a branch).
pub struct Tlb {
    cfg: TlbConfig,
    set_mask: usize,
    /// Leaf span shifts the granule allows, ascending: a span class is an index here.
    spans: Vec<u32>,
    /// L2 entries per span class.
    l2_classes: ClassCounts,
    /// Per span shift, its index in `spans` (NO_CLASS where the granule has no such leaf).
    class_of: [u8; 64],
    l1: L1,
    /// Per L2 slot, its entry (meaningful while the slot's tag is non-zero). This and
    /// the two arrays below are empty until the first entry reaches L2 (`alloc_l2`),
    /// so a CPU a run never schedules on costs the host no pages for them: glibc's
    /// calloc clears a zeroed request it carves from reused heap, which faulted in the
    /// 20 KiB of tags and stamps of each idle CPU of an eight-CPU machine. Every other
    /// reader of them either goes through a present span class, which only an entry
    /// placed in L2 makes, or walks them whole (TLBI by ASID or all, `iter`).
    l2: Vec<TlbEntry>,
    /// Per L2 slot, `l2_tag_of` its entry (0 when empty): a lookup scans a set's tags,
    /// one cache line, and reads an entry only on a tag match.
    l2_tag: Vec<u64>,
    /// Per L2 slot, its entry's last use; 0 while the slot is empty.
    l2_stamp: Vec<u64>,
    /// L2 slots marked pending since the last completion (possibly reused since).
    l2_pending: Vec<u32>,
    /// Reused buffer of L2 slot indices, to mutate while probing.
    scratch: Vec<usize>,
    clock: u64,
}

impl Tlb {
    pub fn new(cfg: TlbConfig, granule: Granule) -> Tlb {
        assert!(cfg.l1_entries > 0 && cfg.l2_ways > 0, "empty TLB level: {cfg:?}");
        assert!(cfg.l2_sets.is_power_of_two(), "L2 sets must be a power of two: {cfg:?}");
        let shifts = granule.leaf_span_shifts();
        assert!(shifts.len() < 15, "span classes must fit an L2 tag");
        let mut class_of = [NO_CLASS; 64];
        for (class, &s) in shifts.iter().enumerate() {
            class_of[s as usize] = class as u8;
        }
        Tlb {
            cfg,
            set_mask: cfg.l2_sets - 1,
            spans: shifts.clone(),
            l2_classes: ClassCounts::default(),
            class_of,
            l1: L1::new(cfg.l1_entries, &shifts),
            l2: Vec::new(),
            l2_tag: Vec::new(),
            l2_stamp: Vec::new(),
            l2_pending: Vec::new(),
            scratch: Vec::new(),
            clock: 0,
        }
    }

    pub fn config(&self) -> TlbConfig {
        self.cfg
    }

    /// The L2 slots of the set that holds spans of 2^`shift` bytes at `va`.
    #[inline]
    fn l2_set(&self, va: u64, shift: u32) -> Range<usize> {
        let base = ((va >> shift) as usize & self.set_mask) * self.cfg.l2_ways;
        base..base + self.cfg.l2_ways
    }

    /// Look up `va` for `asid`. An L2 hit moves the entry into L1.
    #[inline]
    pub fn lookup(&mut self, asid: Asid, va: u64, res: &mut Residency) -> Option<(TlbEntry, TlbHit)> {
        self.clock += 1;
        if let Some(i) = self.l1.find(asid, va) {
            self.l1.touch(i, self.clock);
            return Some((*self.l1.entry(i), TlbHit::L1));
        }
        let i = self.l2_find(asid, va)?;
        let mut slot = self.take_l2(i);
        slot.stamp = self.clock;
        let (j, _) = self.place_l1(slot, res);
        Some((*self.l1.entry(j), TlbHit::L2))
    }

    /// `lookup` of `va`, `va + stride`, … (at most `max` addresses) for as long as L1's
    /// most recent entry answers each (`find` tries it first), with a write needing a
    /// writable entry: the state and the entry those lookups would leave and return,
    /// and how many there were. A touch of a range repeats this for every page of a
    /// large entry, which is one update here instead of one lookup per page.
    #[inline]
    pub fn lookup_mru_run(
        &mut self,
        asid: Asid,
        va: u64,
        stride: u64,
        max: u64,
        write: bool,
    ) -> Option<(TlbEntry, u64)> {
        let i = self.l1.mru()?;
        let e = *self.l1.entry(i);
        if !e.matches(asid, va) || (write && !e.writable) {
            return None;
        }
        let last = e.va | ((1u64 << e.span_shift) - 1);
        let n = ((last - va) / stride + 1).min(max);
        self.clock += n;
        self.l1.touch(i, self.clock);
        Some((e, n))
    }

    /// A lookup its caller knows no entry answers (`first_answered`): the clock ticks
    /// as `lookup`'s does, and nothing else moves.
    #[inline]
    pub fn count_miss(&mut self) {
        self.clock += 1;
    }

    /// The clock, which every lookup and fill moves: unchanged, no entry was used,
    /// moved or added since.
    #[inline]
    pub fn clock(&self) -> u64 {
        self.clock
    }

    /// L1's most recently used entry: after a walk's fill, the entry it filled.
    #[inline]
    pub fn mru_entry(&self) -> Option<&TlbEntry> {
        self.l1.mru().map(|i| self.l1.entry(i))
    }

    /// The lowest VA of [first, last] that some entry could answer a lookup for `asid`
    /// of (pending entries too: they translate until a DSB completes them); None when
    /// no lookup there can hit.
    pub fn first_answered(&self, asid: Asid, first: u64, last: u64) -> Option<u64> {
        let answers = |e: &TlbEntry| e.asid.is_none_or(|a| a == asid);
        let mut lowest = (self.l1.iter_unordered())
            .filter(|e| e.overlaps(first, last) && answers(e))
            .map(|e| e.va.max(first))
            .min();
        // A class's spans overlapping the range have the tags from `first`'s span's to
        // `last`'s, in the sets those spans index (every set once there are as many):
        // one compare a tag, an entry read only on a match.
        for class in self.l2_classes.present() {
            let shift = self.spans[class];
            let (lo, hi) = (
                l2_tag_of(first, shift, class as u8),
                l2_tag_of(last, shift, class as u8),
            );
            let mut check = |i: usize| {
                let t = self.l2_tag[i];
                if t >= lo && t <= hi && l2_tag_class(t) == class && answers(&self.l2[i]) {
                    let va = self.l2[i].va.max(first);
                    lowest = Some(lowest.map_or(va, |l| l.min(va)));
                }
            };
            let v0 = first >> shift;
            if (last >> shift) - v0 >= self.set_mask as u64 {
                // Every tag, eight at a time compared with the range without a branch
                // (vector compares), each of a chunk with a match then checked.
                let span = hi - lo;
                let chunks = self.l2_tag.chunks_exact(8);
                let rest = self.l2_tag.len() - chunks.remainder().len();
                for (c, tags) in chunks.enumerate() {
                    if tags.iter().fold(false, |m, &t| m | (t.wrapping_sub(lo) <= span)) {
                        (c * 8..c * 8 + 8).for_each(&mut check);
                    }
                }
                (rest..self.l2_tag.len()).for_each(&mut check);
            } else {
                for v in v0..=(last >> shift) {
                    self.l2_set(v << shift, shift).for_each(&mut check);
                }
            }
        }
        lowest
    }

    fn l2_find(&self, asid: Asid, va: u64) -> Option<usize> {
        self.l2_classes.present().find_map(|class| {
            let shift = self.spans[class];
            let want = l2_tag_of(va, shift, class as u8);
            // The set's tags as one slice: one bounds check, not one a way.
            let set = self.l2_set(va, shift);
            let base = set.start;
            self.l2_tag[set]
                .iter()
                .enumerate()
                .find(|&(w, &t)| t == want && self.l2[base + w].asid.is_none_or(|a| a == asid))
                .map(|(w, _)| base + w)
        })
    }

    /// Indices of the L2 slots whose entries overlap [first, last]: per present span
    /// size, the sets that size's entries in the range index to (all sets at most).
    fn l2_overlapping(&self, first: u64, last: u64) -> impl Iterator<Item = usize> + '_ {
        self.l2_classes
            .present()
            .map(|class| self.spans[class])
            .flat_map(move |shift| {
                let lo = first >> shift;
                let nsets = ((last >> shift) - lo).min(self.set_mask as u64) + 1;
                (lo..lo + nsets)
                    .flat_map(move |v| self.l2_set(v << shift, shift))
                    .filter(move |&i| {
                        self.l2_tag[i] != 0
                            && u32::from(self.l2[i].span_shift) == shift
                            && self.l2[i].overlaps(first, last)
                    })
            })
    }

    /// Cache a new translation (it goes to L1). Returns whether an entry left the TLB.
    #[inline(always)]
    pub fn fill(&mut self, e: TlbEntry, res: &mut Residency) -> bool {
        self.clock += 1;
        let class = self.class_of.get(e.span_shift as usize).copied().unwrap_or(NO_CLASS);
        assert!(
            class != NO_CLASS,
            "span 2^{} is no leaf size of this granule",
            e.span_shift
        );
        let (i, evicted) = self.place_l1(
            Slot {
                entry: e,
                stamp: self.clock,
                class,
            },
            res,
        );
        // Read back where it was stored: `e` itself stays in registers (a reference to it
        // would make the walk build it in memory and L1 copy it whole, a stalled reload).
        res.add(self.l1.entry(i));
        evicted
    }

    /// Put `slot` in L1, the LRU victim first moved to L2; returns its L1 index and
    /// whether an entry left the TLB.
    #[inline(always)]
    fn place_l1(&mut self, slot: Slot, res: &mut Residency) -> (usize, bool) {
        let evicted = match self.l1.victim() {
            Some(&old) => self.place_l2(old, res),
            None => false,
        };
        (self.l1.insert(slot), evicted)
    }

    /// Put `slot` in its L2 set, evicting that set's LRU entry when full. Inline, so
    /// L1's victim is read where it lies rather than passed whole through the stack.
    #[inline(always)]
    fn place_l2(&mut self, slot: Slot, res: &mut Residency) -> bool {
        if self.l2.is_empty() {
            self.alloc_l2();
        }
        let e = slot.entry;
        let shift = u32::from(e.span_shift);
        let set = self.l2_set(e.va, shift);
        let i = set.start + lru_way(&self.l2_stamp[set.clone()]);
        let class = slot.class as usize;
        // The new entry overwrites the victim, whose class is in its tag.
        let old = std::mem::replace(&mut self.l2_tag[i], l2_tag_of(e.va, shift, slot.class));
        let evicted = old != 0;
        if !evicted {
            self.l2_classes.add(class);
        } else {
            if l2_tag_class(old) != class {
                self.l2_classes.remove(l2_tag_class(old));
                self.l2_classes.add(class);
            }
            res.remove(&self.l2[i]);
        }
        if e.pending {
            self.l2_pending.push(i as u32);
        }
        self.l2[i] = e;
        self.l2_stamp[i] = slot.stamp;
        evicted
    }

    /// L2's arrays, at the first entry that reaches L2.
    #[cold]
    #[inline(never)]
    fn alloc_l2(&mut self) {
        let slots = self.cfg.l2_sets * self.cfg.l2_ways;
        self.l2 = vec![TlbEntry::EMPTY; slots];
        self.l2_tag = vec![0; slots];
        self.l2_stamp = vec![0; slots];
    }

    fn take_l2(&mut self, i: usize) -> Slot {
        let tag = std::mem::take(&mut self.l2_tag[i]);
        debug_assert_ne!(tag, 0, "L2 slot {i} is empty");
        let class = l2_tag_class(tag);
        self.l2_classes.remove(class);
        Slot {
            entry: self.l2[i],
            stamp: std::mem::take(&mut self.l2_stamp[i]),
            class: class as u8,
        }
    }

    /// Entries that overlap `e` and could answer the same lookup (same ASID, or either
    /// global): filling `e` beside them creates a TLB conflict.
    pub fn overlapping<'a>(&'a self, e: &'a TlbEntry) -> impl Iterator<Item = &'a TlbEntry> + 'a {
        self.l1
            .iter()
            .filter(|o| o.overlaps(e.va, e.last()))
            .chain(self.l2_overlapping(e.va, e.last()).map(|i| &self.l2[i]))
            .filter(|o| o.asid.is_none() || e.asid.is_none() || o.asid == e.asid)
    }

    /// Entries of any ASID whose span covers `va`.
    pub fn covering(&self, va: u64) -> impl Iterator<Item = &TlbEntry> + '_ {
        self.l1
            .iter()
            .filter(move |e| e.covers(va))
            .chain(self.l2_overlapping(va, va).map(|i| &self.l2[i]))
    }

    /// Every cached entry.
    pub fn iter(&self) -> impl Iterator<Item = &TlbEntry> {
        self.l1.iter().chain(
            self.l2
                .iter()
                .zip(&self.l2_tag)
                .filter(|&(_, &t)| t != 0)
                .map(|(e, _)| e),
        )
    }

    /// TLBI: mark the entries in `scope` pending. Returns how many were newly marked.
    pub fn invalidate(&mut self, scope: &TlbiScope) -> u64 {
        if self.is_empty() {
            return 0;
        }
        let mut n = self.l1.mark_pending(|e| scope.matches(e));
        let mut idx = std::mem::take(&mut self.scratch);
        idx.clear();
        match *scope {
            TlbiScope::Va { first, last, .. } => idx.extend(self.l2_overlapping(first, last)),
            TlbiScope::Asid(_) | TlbiScope::All => idx.extend((0..self.l2_tag.len()).filter(|&i| self.l2_tag[i] != 0)),
        }
        for &i in &idx {
            let e = &mut self.l2[i];
            if !e.pending && scope.matches(e) {
                e.pending = true;
                self.l2_pending.push(i as u32);
                n += 1;
            }
        }
        self.scratch = idx;
        n
    }

    /// DSB ISH: remove every pending entry.
    pub fn complete_pending(&mut self, res: &mut Residency) {
        if self.l1.pending {
            self.l1.remove_where(|e| e.pending, |e| res.remove(e));
            self.l1.pending = false;
        }
        for k in 0..self.l2_pending.len() {
            let i = self.l2_pending[k] as usize;
            if self.l2_tag[i] != 0 && self.l2[i].pending {
                let old = self.take_l2(i);
                res.remove(&old.entry);
            }
        }
        self.l2_pending.clear();
    }

    /// Drop the entries a lookup for (`asid`, `va`) could use (hardware may discard
    /// an entry at any time; a write through a read-only entry re-walks).
    pub fn drop_entry(&mut self, asid: Asid, va: u64, res: &mut Residency) {
        self.l1.remove_where(|e| e.matches(asid, va), |e| res.remove(e));
        let mut idx = std::mem::take(&mut self.scratch);
        idx.clear();
        idx.extend(self.l2_overlapping(va, va));
        for &i in &idx {
            if self.l2[i].matches(asid, va) {
                let old = self.take_l2(i);
                res.remove(&old.entry);
            }
        }
        self.scratch = idx;
    }

    pub fn len(&self) -> usize {
        self.l1.len() + self.l2_classes.total()
    }
    pub fn is_empty(&self) -> bool {
        self.len() == 0
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::hw::addr::Pfn;
    use crate::hw::memory::PhysMem;

    fn table() -> TableId {
        static TABLE: std::sync::OnceLock<TableId> = std::sync::OnceLock::new();
        *TABLE.get_or_init(|| PhysMem::new(Granule::K4, 1 << 30).materialize_table(Pfn(1)))
    }

    fn entry(va: u64, span_shift: u32, asid: Option<Asid>) -> TlbEntry {
        TlbEntry {
            asid,
            va,
            span_shift: span_shift as u8,
            pa: va + (1 << 32),
            level: 3,
            writable: true,
            pending: false,
            table: table(),
            index: 0,
        }
    }

    #[test]
    fn an_l2_fill_takes_the_first_way_with_the_smallest_stamp() {
        // The unrolled 5-way set and any other width choose alike: the first free way
        // (stamp 0), else the least recently used, the first of equals.
        assert_eq!(lru_way(&[7, 3, 9, 3, 5]), 1);
        assert_eq!(lru_way(&[7, 8, 9, 4, 0]), 4);
        assert_eq!(lru_way(&[0, 0, 9, 4, 0]), 0);
        assert_eq!(lru_way(&[6, 5, 4, 3, 2]), 4);
        assert_eq!(lru_way(&[2, 1]), 1);
        assert_eq!(lru_way(&[9]), 0);
        assert_eq!(lru_way(&[4, 5, 6, 1, 8, 1]), 3);
    }

    fn tiny(l1_entries: usize, l2_sets: usize, l2_ways: usize) -> Tlb {
        Tlb::new(
            TlbConfig {
                l1_entries,
                l2_sets,
                l2_ways,
            },
            Granule::K4,
        )
    }

    /// An L2 entry alone at the first or the last page of a range longer than L2 has
    /// sets (the pass over every tag, eight at a time): found.
    #[test]
    fn a_pass_over_every_l2_tag_finds_an_entry_at_either_end_of_the_range() {
        let base = 1u64 << 30;
        let (lo, hi) = (base, base + (8 << 12) - 1);
        for at in [lo, hi & !0xfff] {
            let mut t = tiny(4, 4, 2);
            let mut res = Residency::new(Granule::K4);
            t.fill(entry(at, 12, Some(1)), &mut res);
            // Four fills elsewhere move it from L1 into L2.
            for k in 1..=4 {
                t.fill(entry(base + (1 << 24) + (k << 12), 12, Some(1)), &mut res);
            }
            assert!(t.l1.iter().all(|e| e.va != at), "{at:#x} still in L1");
            assert_eq!(t.first_answered(1, lo, hi), Some(at));
        }
    }

    proptest::proptest! {
        /// `first_answered`'s tag scan finds what a lookup of every page of the range
        /// would: the lowest page some entry (of the ASID or global, in L1 or L2, of
        /// any span size) answers.
        #[test]
        fn the_first_answered_address_is_the_first_page_a_lookup_hits(
            fills in proptest::collection::vec((0u64..96, 0usize..3, 0u8..3), 0..40),
            first in 0u64..96,
            len in 1u64..64,
            ways in 1usize..5,
        ) {
            // 4 to 16 L2 tags: the full pass's chunks of eight and its remainder.
            let mut t = tiny(4, 4, ways);
            let mut res = Residency::new(Granule::K4);
            let base = 1u64 << 30;
            for (page, span, asid) in fills {
                let shift = [12, 16, 21][span];
                let va = (base + (page << 12)) & !((1u64 << shift) - 1);
                let asid = [None, Some(1), Some(2)][asid as usize];
                // Overlapping entries are a conflict the fill path never makes.
                if t.iter().all(|e| !e.overlaps(va, va + (1 << shift) - 1)) {
                    t.fill(entry(va, shift, asid), &mut res);
                }
            }
            let (lo, hi) = (base + (first << 12), base + ((first + len) << 12) - 1);
            let hit = (lo..=hi).step_by(4096).find(|&va| t.iter().any(|e| e.matches(1, va)));
            proptest::prop_assert_eq!(t.first_answered(1, lo, hi), hit);
        }
    }

    #[test]
    fn a_run_of_hits_on_the_most_recent_entry_leaves_what_each_lookup_would() {
        let (mut one, mut run) = (tiny(4, 4, 2), tiny(4, 4, 2));
        let mut res = Residency::new(Granule::K4);
        let big = 1 << 30;
        for t in [&mut one, &mut run] {
            t.fill(entry(big + (1 << 20), 12, Some(1)), &mut res);
            t.fill(entry(big, 16, Some(1)), &mut res);
        }
        // The 64K entry's last 15 pages, each looked up, against one run of them.
        for p in 1..16 {
            let (e, hit) = one.lookup(1, big + (p << 12), &mut res).unwrap();
            assert_eq!((e.va, hit), (big, TlbHit::L1));
        }
        let (e, n) = run.lookup_mru_run(1, big + (1 << 12), 1 << 12, 100, true).unwrap();
        assert_eq!((e.va, n), (big, 15));
        assert_eq!(one.clock, run.clock);
        assert_eq!(one.l1.stamps(), run.l1.stamps());
        // At most `max`; none past the entry, for another ASID, or a write to a read-only entry.
        assert_eq!(run.lookup_mru_run(1, big, 1 << 12, 3, false).unwrap().1, 3);
        assert!(run.lookup_mru_run(1, big + (1 << 16), 1 << 12, 9, false).is_none());
        assert!(run.lookup_mru_run(2, big, 1 << 12, 9, false).is_none());
        let mut ro = entry(big, 16, Some(1));
        ro.writable = false;
        run.fill(ro, &mut res);
        assert!(run.lookup_mru_run(1, big, 1 << 12, 9, true).is_none());
    }

    #[test]
    fn every_leaf_span_of_the_granule_can_be_cached_and_found() {
        for g in [Granule::K4, Granule::K16, Granule::K64] {
            let mut tlb = Tlb::new(TlbConfig::default(), g);
            let mut res = Residency::new(g);
            for (i, s) in g.leaf_span_shifts().into_iter().enumerate() {
                let va = (i as u64 + 1) << 36;
                tlb.fill(entry(va, s, Some(1)), &mut res);
                // Push it out of L1 so the L2 probe for its size is exercised.
                for k in 0..48 {
                    tlb.fill(
                        entry(
                            (1 << 44) + (((i * 48 + k) as u64) << g.page_shift()),
                            g.page_shift(),
                            Some(1),
                        ),
                        &mut res,
                    );
                }
                let (e, hit) = tlb.lookup(1, va + (1 << s) - 1, &mut res).expect("cached");
                assert_eq!((e.va, e.span_shift.into(), hit), (va, s, TlbHit::L2), "{g:?} span {s}");
            }
        }
    }

    #[test]
    #[should_panic(expected = "no leaf size")]
    fn a_span_the_granule_cannot_map_is_refused() {
        let mut tlb = Tlb::new(TlbConfig::default(), Granule::K16);
        tlb.fill(entry(0, 12, None), &mut Residency::new(Granule::K16));
    }

    #[test]
    fn l1_victims_move_to_l2_and_l2_hits_move_back() {
        let mut tlb = tiny(2, 4, 2);
        let mut res = Residency::new(Granule::K4);
        for p in 0..3u64 {
            tlb.fill(entry(p << 12, 12, Some(1)), &mut res);
        }
        assert_eq!(tlb.len(), 3);
        assert_eq!(tlb.lookup(1, 0, &mut res).map(|(_, h)| h), Some(TlbHit::L2));
        assert_eq!(tlb.lookup(1, 0, &mut res).map(|(_, h)| h), Some(TlbHit::L1));
        // Each translation is held once.
        assert_eq!(tlb.len(), 3);
        assert_eq!(tlb.iter().count(), 3);
    }

    #[test]
    fn a_full_l2_set_evicts_its_least_recently_used_entry() {
        let mut tlb = tiny(1, 1, 2);
        let mut res = Residency::new(Granule::K4);
        let evicted: Vec<bool> = (0..4u64)
            .map(|p| tlb.fill(entry(p << 12, 12, Some(1)), &mut res))
            .collect();
        assert_eq!(evicted, [false, false, false, true]);
        assert!(tlb.lookup(1, 0, &mut res).is_none());
        assert!(tlb.lookup(1, 1 << 12, &mut res).is_some());
        assert_eq!(tlb.len(), 3);
    }

    #[test]
    fn capacity_follows_the_configuration() {
        let mut tlb = tiny(4, 8, 1);
        let mut res = Residency::new(Granule::K4);
        for p in 0..100u64 {
            tlb.fill(entry(p << 12, 12, Some(1)), &mut res);
        }
        assert_eq!(tlb.len(), 12);
        assert_eq!(
            tlb.config(),
            TlbConfig {
                l1_entries: 4,
                l2_sets: 8,
                l2_ways: 1
            }
        );
    }

    #[test]
    #[should_panic(expected = "power of two")]
    fn l2_sets_must_be_a_power_of_two() {
        tiny(4, 6, 2);
    }

    #[test]
    fn pending_entries_translate_until_completed() {
        for l1 in [1, 8] {
            let mut tlb = tiny(l1, 4, 2);
            let mut res = Residency::new(Granule::K4);
            for p in 0..4u64 {
                tlb.fill(entry(p << 12, 12, Some(1)), &mut res);
            }
            let scope = TlbiScope::Va {
                asid: Some(1),
                first: 0,
                last: 0x1fff,
            };
            assert_eq!(tlb.invalidate(&scope), 2);
            assert_eq!(tlb.invalidate(&scope), 0, "already pending");
            let (e, _) = tlb.lookup(1, 0, &mut res).expect("pending entries still hit");
            assert!(e.pending);
            tlb.complete_pending(&mut res);
            assert!(tlb.lookup(1, 0, &mut res).is_none());
            assert!(tlb.lookup(1, 0x1000, &mut res).is_none());
            assert_eq!(tlb.len(), 2);
        }
    }

    #[test]
    fn scopes_match_by_asid_global_and_range() {
        let (g, a1, a2) = (entry(0, 12, None), entry(0, 12, Some(1)), entry(0, 16, Some(2)));
        let va1 = TlbiScope::Va {
            asid: Some(1),
            first: 0x3000,
            last: 0x3000,
        };
        assert_eq!(
            [va1.matches(&g), va1.matches(&a1), va1.matches(&a2)],
            [false, false, false]
        );
        let va1 = TlbiScope::Va {
            asid: Some(1),
            first: 0,
            last: 0,
        };
        assert_eq!(
            [va1.matches(&g), va1.matches(&a1), va1.matches(&a2)],
            [true, true, false]
        );
        let any = TlbiScope::Va {
            asid: None,
            first: 0xf000,
            last: 0x1_2fff,
        };
        assert_eq!(
            [any.matches(&g), any.matches(&a1), any.matches(&a2)],
            [false, false, true]
        );
        let asid = TlbiScope::Asid(1);
        assert_eq!(
            [asid.matches(&g), asid.matches(&a1), asid.matches(&a2)],
            [false, true, false]
        );
    }

    #[test]
    fn entries_know_the_descriptors_they_came_from() {
        let mut e = entry(0x10000, 16, Some(1));
        e.index = 16;
        assert!(e.filled_from(e.table, 16, 12));
        assert!(e.filled_from(e.table, 31, 12));
        assert!(!e.filled_from(e.table, 32, 12));
        assert!(!e.filled_from(e.table, 15, 12));
        assert_eq!(e.translate(0x1_2345), 0x1_0001_2345);
    }
}
