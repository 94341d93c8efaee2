//! A per-CPU TLB: a fully associative L1 in front of a set-associative L2, with
//! entries tagged by ASID (or global) that cover a page, a block, or a whole
//! contiguous range when the walk found CONT set.
//!
//! Invalidation is two-phase, as the architecture has it: a TLBI marks matching
//! entries pending; they may still translate until a DSB ISH completes them.

use super::addr::Asid;

/// Sizes of one CPU's TLB.
#[derive(Clone, Copy, Debug, PartialEq, Eq, serde::Serialize)]
pub struct TlbConfig {
    pub l1_entries: usize,
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
    /// log2 of the span in bytes.
    pub span_shift: u32,
    /// PA of the start of the span.
    pub pa: u64,
    /// Level of the leaf descriptor.
    pub level: u8,
    pub writable: bool,
    /// Hit by a TLBI that no DSB ISH has completed yet.
    pub pending: bool,
}

impl TlbEntry {
    #[inline]
    pub fn covers(&self, va: u64) -> bool {
        (va >> self.span_shift) == (self.va >> self.span_shift)
    }
    #[inline]
    pub fn matches(&self, asid: Asid, va: u64) -> bool {
        self.covers(va) && self.asid.is_none_or(|a| a == asid)
    }
    /// Whether the span overlaps [start, end).
    #[inline]
    pub fn overlaps(&self, start: u64, end: u64) -> bool {
        let s = self.va;
        let e = self.va + (1u64 << self.span_shift);
        s < end && start < e
    }
    /// Whether frame range [pa, pa+len) lies under this entry.
    #[inline]
    pub fn maps_pa(&self, pa: u64, len: u64) -> bool {
        self.pa < pa + len && pa < self.pa + (1u64 << self.span_shift)
    }
}

/// Where a lookup hit.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum TlbHit {
    L1,
    L2,
}

#[derive(Clone, Copy)]
struct Slot {
    entry: TlbEntry,
    stamp: u64,
}

/// One CPU's TLB.
pub struct Tlb {
    cfg: TlbConfig,
    l1: Vec<Slot>,
    l2: Vec<Vec<Slot>>,
    clock: u64,
}

impl Tlb {
    pub fn new(cfg: TlbConfig) -> Tlb {
        Tlb {
            cfg,
            l1: Vec::with_capacity(cfg.l1_entries),
            l2: vec![Vec::new(); cfg.l2_sets],
            clock: 0,
        }
    }

    /// L2 set index: hashed on the 4K-page number, so every span size shares the array.
    #[inline]
    fn set_of(&self, va: u64, span_shift: u32) -> usize {
        ((va >> span_shift) as usize) % self.cfg.l2_sets
    }

    /// Look up `va` for `asid`; promotes an L2 hit into L1.
    pub fn lookup(&mut self, asid: Asid, va: u64) -> Option<(TlbEntry, TlbHit)> {
        self.clock += 1;
        let now = self.clock;
        if let Some(s) = self.l1.iter_mut().find(|s| s.entry.matches(asid, va)) {
            s.stamp = now;
            return Some((s.entry, TlbHit::L1));
        }
        // L2 sets are indexed per span size; probe each size that can be cached.
        for shift in [12u32, 14, 16, 21, 25, 29, 30, 34, 35, 36] {
            let set = self.set_of(va, shift);
            if let Some(pos) = self.l2[set]
                .iter()
                .position(|s| s.entry.span_shift == shift && s.entry.matches(asid, va))
            {
                self.l2[set][pos].stamp = now;
                let e = self.l2[set][pos].entry;
                self.insert_l1(e);
                return Some((e, TlbHit::L2));
            }
        }
        None
    }

    fn insert_l1(&mut self, e: TlbEntry) -> Option<TlbEntry> {
        let slot = Slot {
            entry: e,
            stamp: self.clock,
        };
        if self.l1.len() < self.cfg.l1_entries {
            self.l1.push(slot);
            return None;
        }
        let victim = self
            .l1
            .iter()
            .enumerate()
            .min_by_key(|(_, s)| s.stamp)
            .map(|(i, _)| i)?;
        let old = std::mem::replace(&mut self.l1[victim], slot);
        Some(old.entry)
    }

    /// Cache a new translation in L1 and L2. Returns the entries already present that
    /// overlap it for the same ASID (a TLB conflict when non-empty) and the number evicted.
    pub fn fill(&mut self, e: TlbEntry) -> (Vec<TlbEntry>, u32) {
        self.clock += 1;
        let end = e.va + (1u64 << e.span_shift);
        let conflicts: Vec<TlbEntry> = self
            .iter()
            .filter(|o| o.overlaps(e.va, end) && (o.asid.is_none() || e.asid.is_none() || o.asid == e.asid))
            .copied()
            .collect();
        let mut evicted = 0;
        if self.insert_l1(e).is_some() {
            evicted += 1;
        }
        let set = self.set_of(e.va, e.span_shift);
        let slot = Slot {
            entry: e,
            stamp: self.clock,
        };
        let ways = self.cfg.l2_ways;
        let s = &mut self.l2[set];
        if s.len() < ways {
            s.push(slot);
        } else if let Some(v) = s.iter().enumerate().min_by_key(|(_, s)| s.stamp).map(|(i, _)| i) {
            s[v] = slot;
            evicted += 1;
        }
        (conflicts, evicted)
    }

    /// Every cached entry (L1 and L2; an entry may sit in both).
    pub fn iter(&self) -> impl Iterator<Item = &TlbEntry> {
        self.l1
            .iter()
            .map(|s| &s.entry)
            .chain(self.l2.iter().flatten().map(|s| &s.entry))
    }

    /// Mark entries matching `pred` pending; returns how many distinct translations matched.
    pub fn mark_pending(&mut self, mut pred: impl FnMut(&TlbEntry) -> bool) -> u64 {
        let mut n = 0;
        for s in self.l2.iter_mut().flatten() {
            if !s.entry.pending && pred(&s.entry) {
                s.entry.pending = true;
                n += 1;
            }
        }
        for s in self.l1.iter_mut() {
            if !s.entry.pending && pred(&s.entry) {
                s.entry.pending = true;
            }
        }
        n
    }

    /// Complete every pending invalidation (DSB ISH).
    pub fn complete_pending(&mut self) {
        self.l1.retain(|s| !s.entry.pending);
        for set in self.l2.iter_mut() {
            set.retain(|s| !s.entry.pending);
        }
    }

    /// Drop one translation outright (a faulting entry is not retained).
    pub fn drop_entry(&mut self, asid: Asid, va: u64) {
        self.l1.retain(|s| !s.entry.matches(asid, va));
        for set in self.l2.iter_mut() {
            set.retain(|s| !s.entry.matches(asid, va));
        }
    }

    pub fn len(&self) -> usize {
        self.l1.len() + self.l2.iter().map(|s| s.len()).sum::<usize>()
    }
    pub fn is_empty(&self) -> bool {
        self.len() == 0
    }
}
