//! A reverse index over the entries of every CPU's TLB, kept only while the checkers
//! run. It answers "does any TLB still map these frames?" and "may a TLB hold a
//! translation filled from this descriptor?" with a few hash probes, where a scan
//! would visit every entry of every CPU (8 x 1328 with the default sizes) on every
//! frame free or descriptor write.
//!
//! Each TLB entry is counted once (the TLB keeps each translation in one place), under
//! every `PA >> span_shift` chunk its output range touches and under the run of
//! descriptors it was filled from.

use super::addr::Granule;
use super::memory::TableId;
use super::tlb::TlbEntry;

type CountMap = super::IntMap<u32>;

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
        let s = u32::from(e.span_shift);
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
        ((table.key() as u64) << 32) | (index >> run_bits) as u64
    }
}

const PA_CHUNK_MASK: u64 = (1 << 56) - 1;

fn pa_key(shift: u32, chunk: u64) -> u64 {
    ((shift as u64) << 56) | chunk
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::hw::addr::{Asid, Pfn};
    use crate::hw::memory::PhysMem;
    use crate::hw::tlb::{Tlb, TlbConfig, TlbiScope};

    /// A small xorshift generator: deterministic without a dependency.
    fn rng(seed: &mut u64) -> u64 {
        *seed ^= *seed << 13;
        *seed ^= *seed >> 7;
        *seed ^= *seed << 17;
        *seed
    }

    #[test]
    fn the_index_agrees_with_a_scan_through_fills_evictions_and_invalidations() {
        let g = Granule::K4;
        let mut mem = PhysMem::new(g, 1 << 30);
        let tables: Vec<TableId> = (0..4).map(|p| mem.materialize_table(Pfn(p))).collect();
        let cfg = TlbConfig {
            l1_entries: 4,
            l2_sets: 8,
            l2_ways: 2,
        };
        let mut tlbs = [Tlb::new(cfg, g), Tlb::new(cfg, g)];
        let mut res = Residency::new(g);
        res.enable(std::iter::empty());
        let mut seed = 0x9e37_79b9u64;
        for step in 0..4000 {
            let r = rng(&mut seed);
            let tlb = &mut tlbs[(r & 1) as usize];
            let page = (r >> 8) % 64;
            let asid = ((r >> 16) % 2) as Asid;
            match (r >> 4) % 8 {
                0..=3 => {
                    let cont = (r >> 20).is_multiple_of(4);
                    let span_shift = if cont { 16 } else { 12 };
                    let va = (page << 12) & !((1u64 << span_shift) - 1);
                    if tlb.lookup(asid, va, &mut res).is_none() {
                        let index = ((va >> 12) % 512) as u32;
                        let table = tables[((r >> 24) % 4) as usize];
                        let pa = (va + (1 << 20)) ^ (((r >> 28) % 2) << 16);
                        let e = crate::hw::tlb::TlbEntry {
                            asid: Some(asid),
                            va,
                            span_shift,
                            pa,
                            level: 3,
                            writable: true,
                            pending: false,
                            table,
                            index,
                        };
                        tlb.fill(e, &mut res);
                    }
                }
                4 => {
                    tlb.invalidate(&TlbiScope::Va {
                        asid: Some(asid),
                        first: page << 12,
                        last: (page << 12) + 0x1fff,
                    });
                }
                5 => tlb.complete_pending(&mut res),
                6 => tlb.drop_entry(asid, page << 12, &mut res),
                _ => {
                    tlb.lookup(asid, page << 12, &mut res);
                }
            }
            for pfn in 0x100..0x150u64 {
                let scan = tlbs
                    .iter()
                    .flat_map(|t| t.iter())
                    .any(|e| e.maps_pa(pfn << 12, 1 << 12));
                assert_eq!(res.maps_frames(pfn << 12, 1 << 12), scan, "step {step} pfn {pfn:#x}");
            }
            for e in tlbs.iter().flat_map(|t| t.iter()) {
                assert!(
                    res.may_hold_from(e.table, e.index as usize, e.level),
                    "step {step}: {e:?}"
                );
            }
        }
        assert!(res.maps_frames(0, 1 << 30) == tlbs.iter().any(|t| !t.is_empty()));
    }

    #[test]
    fn a_disabled_index_holds_nothing() {
        let g = Granule::K4;
        let table = PhysMem::new(g, 1 << 30).materialize_table(Pfn(1));
        let mut tlb = Tlb::new(TlbConfig::default(), g);
        let mut res = Residency::new(g);
        let e = crate::hw::tlb::TlbEntry {
            asid: None,
            va: 0,
            span_shift: 12,
            pa: 0x5000,
            level: 3,
            writable: true,
            pending: false,
            table,
            index: 0,
        };
        tlb.fill(e, &mut res);
        assert!(!res.maps_frames(0x5000, 0x1000));
        res.enable(tlb.iter());
        assert!(res.maps_frames(0x5000, 0x1000));
        assert!(res.may_hold_from(table, 0, 3));
        res.disable();
        assert!(!res.maps_frames(0x5000, 0x1000));
    }
}
