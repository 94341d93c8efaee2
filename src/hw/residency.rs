//! A reverse index over the entries of every CPU's TLB, kept only while the checkers
//! run. It answers "does any TLB still map these frames?" and "may a TLB hold a
//! translation filled from this descriptor?" with a few hash probes, where a scan
//! would visit every entry of every CPU (8 x 1328 with the default sizes) on every
//! frame free or descriptor write.
//!
//! Each TLB entry is counted once (the TLB keeps each translation in one place), under
//! every `PA >> span_shift` chunk its output range touches and under the run of
//! descriptors it was filled from.

use std::collections::HashMap;
use std::hash::{BuildHasherDefault, Hasher};

use super::addr::Granule;
use super::memory::TableId;
use super::tlb::TlbEntry;

/// A multiplicative hasher: keys are already well spread integers and SipHash would
/// dominate the cost of a probe.
#[derive(Default)]
struct MulHasher(u64);

impl Hasher for MulHasher {
    fn write(&mut self, bytes: &[u8]) {
        for &b in bytes {
            self.write_u64(b as u64);
        }
    }
    #[inline]
    fn write_u64(&mut self, n: u64) {
        self.0 = (self.0 ^ n).wrapping_mul(0x9e37_79b9_7f4a_7c15);
    }
    #[inline]
    fn finish(&self) -> u64 {
        self.0 ^ (self.0 >> 29)
    }
}

type CountMap = HashMap<u64, u32, BuildHasherDefault<MulHasher>>;

fn inc(map: &mut CountMap, key: u64) {
    *map.entry(key).or_insert(0) += 1;
}

fn dec(map: &mut CountMap, key: u64) {
    let n = map.get_mut(&key).expect("residency index out of step with the TLBs");
    *n -= 1;
    if *n == 0 {
        map.remove(&key);
    }
}

pub struct Residency {
    granule: Granule,
    enabled: bool,
    /// Entries per (span_shift, PA >> span_shift), the shift in the top byte.
    by_pa: CountMap,
    /// Entries per span shift, so lookups skip sizes no TLB holds.
    per_shift: [u32; 64],
    /// Entries per (table slot, descriptor index >> contiguous bits of the level).
    by_src: CountMap,
}

impl Residency {
    pub fn new(granule: Granule) -> Residency {
        Residency {
            granule,
            enabled: false,
            by_pa: CountMap::default(),
            per_shift: [0; 64],
            by_src: CountMap::default(),
        }
    }

    pub fn enabled(&self) -> bool {
        self.enabled
    }

    /// Start tracking, indexing the entries the TLBs already hold.
    pub fn enable<'a>(&mut self, entries: impl Iterator<Item = &'a TlbEntry>) {
        self.enabled = true;
        for e in entries {
            self.add(e);
        }
    }

    /// Stop tracking and forget everything.
    pub fn disable(&mut self) {
        self.enabled = false;
        self.by_pa.clear();
        self.by_src.clear();
        self.per_shift = [0; 64];
    }

    /// A TLB entry was filled.
    #[inline]
    pub fn add(&mut self, e: &TlbEntry) {
        if self.enabled {
            self.update(e, true);
        }
    }

    /// A TLB entry left the TLB (evicted, or removed by a completed invalidation).
    #[inline]
    pub fn remove(&mut self, e: &TlbEntry) {
        if self.enabled {
            self.update(e, false);
        }
    }

    fn update(&mut self, e: &TlbEntry, add: bool) {
        let f = if add { inc } else { dec };
        let s = e.span_shift;
        // An output range not aligned to its span (a misprogrammed CONT run) touches two chunks.
        for chunk in (e.pa >> s)..=((e.pa + ((1u64 << s) - 1)) >> s) {
            f(&mut self.by_pa, pa_key(s, chunk));
        }
        let n = &mut self.per_shift[s as usize];
        *n = if add { *n + 1 } else { *n - 1 };
        let src = self.src_key(e.table, e.index as usize, e.level);
        f(&mut self.by_src, src);
    }

    /// Whether some TLB entry maps any byte of [pa, pa + len).
    pub fn maps_frames(&self, pa: u64, len: u64) -> bool {
        let last = pa + (len - 1);
        (0..64u32).filter(|&s| self.per_shift[s as usize] != 0).any(|s| {
            let (lo, hi) = (pa >> s, last >> s);
            if hi - lo < self.by_pa.len() as u64 {
                (lo..=hi).any(|c| self.by_pa.contains_key(&pa_key(s, c)))
            } else {
                self.by_pa
                    .keys()
                    .any(|&k| k >> 56 == s as u64 && (lo..=hi).contains(&(k & PA_CHUNK_MASK)))
            }
        })
    }

    /// Whether some TLB entry may have been filled from descriptor `index` of `table`
    /// (a level-`level` table): a cheap filter before looking at the TLBs themselves.
    pub fn may_hold_from(&self, table: TableId, index: usize, level: u8) -> bool {
        !self.by_src.is_empty() && self.by_src.contains_key(&self.src_key(table, index, level))
    }

    /// Descriptors of one contiguous run share a key, so a contiguous entry and the
    /// page entries it overlaps are found from any descriptor of the run.
    fn src_key(&self, table: TableId, index: usize, level: u8) -> u64 {
        let run_bits = self.granule.cont_entries_at(level).trailing_zeros();
        ((table.slot() as u64) << 32) | (index >> run_bits) as u64
    }
}

const PA_CHUNK_MASK: u64 = (1 << 56) - 1;

fn pa_key(shift: u32, chunk: u64) -> u64 {
    ((shift as u64) << 56) | chunk
}
