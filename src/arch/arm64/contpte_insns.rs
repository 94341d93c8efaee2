//! Seed 004: the instructions one contpte_ptep_get call executes, from the measured
//! table `data/seed004-ptep-get-insns.json` (`tools/seed004/README.md`), counted as
//! `kernel.contpte_ptep_get.insns`.
//!
//! The measured code (GCC 12, -O2) branches on each pte it reads: `pte_dirty` tests
//! PTE_DIRTY (bit 55) first, then PTE_WRITE (bit 51), then PTE_RDONLY (bit 7), and
//! `pte_young` tests PTE_AF. The table was measured with dirty ptes that have
//! PTE_DIRTY set and clean ptes that are writable and read-only; a call that reads
//! any other pte (hardware-dirty only, or clean and not writable) takes a path the
//! table does not give, and is counted in `kernel.contpte_ptep_get.insns_unmeasured`
//! instead. For such ptes:
//! - full-scan, mod2, early-exit: the path is fixed by the first young and the first
//!   dirty position in the block (`Scan`; the measured "only" and "from" layouts
//!   agree in every cell, and no branch tests orig_pte), so the sweep's cell
//!   `[young][dirty]` is the count;
//! - mod1: the path also depends on the ptes before it stops and on orig_pte (its
//!   breaks test orig_pte's young and dirty bits), so the call's branch trace
//!   (`Trace`) is looked up among the traces of the sweep's cells (both layouts,
//!   orig_pte = pte 0); a trace no cell has is unmeasured.
//!
//! The table is for a 4K granule (16-entry blocks); other granules count nothing.

use super::pgtable::{Pte, PtepGetVariant};
use crate::hw::descriptor::Desc;
use std::sync::OnceLock;

const JSON: &str = include_str!("../../../data/seed004-ptep-get-insns.json");

/// The block size the table was measured for (CONT_PTES with a 4K granule).
pub const MEASURED_CONT_PTES: usize = 16;
/// "No pte": the sweep's index 16.
const NONE: u8 = MEASURED_CONT_PTES as u8;

/// Whether `p` is dirty, if its encoding takes a measured path through pte_dirty:
/// PTE_DIRTY set (dirty), or writable and read-only (clean).
#[inline(always)]
pub fn measured_dirty(p: Pte) -> Option<bool> {
    if p.pte_sw_dirty() {
        Some(true)
    } else if p.pte_write() && !p.pte_hw_dirty() {
        Some(false)
    } else {
        None
    }
}

/// The first young and first dirty positions among the ptes a call read, and
/// whether every one of them had a measured encoding.
#[derive(Clone, Copy, Debug)]
pub struct Scan {
    ok: bool,
    young: u8,
    dirty: u8,
}

impl Default for Scan {
    fn default() -> Self {
        Scan {
            ok: true,
            young: NONE,
            dirty: NONE,
        }
    }
}

impl Scan {
    /// Pte `i` of the block was read as `p`.
    #[inline(always)]
    pub fn read(&mut self, i: usize, p: Pte) {
        match measured_dirty(p) {
            Some(true) if self.dirty == NONE => self.dirty = i as u8,
            Some(_) => {}
            None => self.ok = false,
        }
        if p.pte_young() && self.young == NONE {
            self.young = i as u8;
        }
    }
}

/// The branch trace of one mod1 call: per pte read, its dirty and young bits; after
/// a dirty one, orig_pte's young bit; after a young one, orig_pte's dirty bit.
#[derive(Clone, Copy, Debug)]
pub struct Trace {
    bits: u64,
    len: u8,
    ok: bool,
}

impl Trace {
    #[inline(always)]
    fn push(&mut self, b: bool) {
        self.bits |= (b as u64) << self.len;
        self.len += 1;
    }
    /// The dirty bit as the measured code finds it; unmeasured encodings spoil the trace.
    #[inline(always)]
    fn dirty(&mut self, p: Pte) -> bool {
        match measured_dirty(p) {
            Some(d) => d,
            None => {
                self.ok = false;
                p.pte_dirty()
            }
        }
    }
    /// At most 49 bits (15 ptes of 3, the last of 4), so the length fits above them.
    fn key(&self) -> u64 {
        self.bits | (self.len as u64) << 56
    }
}

/// Seed 004's modification 1 over the `n` ptes `read` returns: one loop, stopping
/// once orig_pte is both young and dirty. Returns orig_pte and the call's trace.
#[inline]
pub fn mod1_scan(n: usize, mut orig: Pte, mut read: impl FnMut(usize) -> Pte) -> (Pte, Trace) {
    let mut t = Trace {
        bits: 0,
        len: 0,
        ok: true,
    };
    for i in 0..n {
        let p = read(i);
        let dirty = t.dirty(p);
        t.push(dirty);
        t.push(p.pte_young());
        if dirty {
            orig = orig.pte_mkdirty();
            t.push(orig.pte_young());
            if orig.pte_young() {
                break;
            }
        }
        if p.pte_young() {
            orig = orig.pte_mkyoung();
            let d = t.dirty(orig);
            t.push(d);
            if d {
                break;
            }
        }
    }
    (orig, t)
}

/// The measured instructions per call.
pub struct InsnTable {
    /// full-scan, mod2, early-exit: `[variant][first young][first dirty]`.
    first: [[[u32; 17]; 17]; 3],
    /// mod1: (trace key, instructions), sorted by key.
    mod1: Vec<(u64, u32)>,
}

/// The sweep's block: pte 0 old and clean as measured (`pte_old_clean`), the young
/// ones with PTE_AF, the dirty ones with PTE_DIRTY and without PTE_RDONLY.
fn sweep_block(from: bool, y: usize, d: usize, old_clean: u64) -> [Pte; MEASURED_CONT_PTES] {
    std::array::from_fn(|i| {
        let (young, dirty) = if from { (i >= y, i >= d) } else { (i == y, i == d) };
        let mut v = old_clean;
        if young {
            v |= 1 << 10;
        }
        if dirty {
            v = (v | 1 << 55) & !(1 << 7);
        }
        Pte(Desc(v))
    })
}

fn cell(v: &serde_json::Value, y: usize, d: usize) -> u32 {
    v[y][d].as_u64().expect("a measured count") as u32
}

impl InsnTable {
    fn parse() -> InsnTable {
        let j: serde_json::Value = serde_json::from_str(JSON).expect("seed 004 table");
        let old_clean = u64::from_str_radix(j["pte_old_clean"].as_str().unwrap().trim_start_matches("0x"), 16)
            .expect("pte_old_clean");
        let sweep = &j["sweep"];
        let mut first = [[[0; 17]; 17]; 3];
        for (k, name) in ["full-scan", "mod2", "early-exit"].iter().enumerate() {
            for (y, row) in first[k].iter_mut().enumerate() {
                for (d, c) in row.iter_mut().enumerate() {
                    *c = cell(&sweep["only"][name], y, d);
                }
            }
        }
        let mut mod1 = Vec::new();
        for (layout, from) in [("only", false), ("from", true)] {
            for y in 0..=MEASURED_CONT_PTES {
                for d in 0..=MEASURED_CONT_PTES {
                    let block = sweep_block(from, y, d, old_clean);
                    let (_, t) = mod1_scan(MEASURED_CONT_PTES, block[0], |i| block[i]);
                    mod1.push((t.key(), cell(&sweep[layout]["mod1"], y, d)));
                }
            }
        }
        mod1.sort_unstable();
        mod1.dedup();
        InsnTable { first, mod1 }
    }

    /// The table, parsed once.
    pub fn get() -> &'static InsnTable {
        static T: OnceLock<InsnTable> = OnceLock::new();
        T.get_or_init(InsnTable::parse)
    }

    /// Instructions of a full-scan, mod2 or early-exit call that read `s`.
    #[inline]
    pub fn first(&self, v: PtepGetVariant, s: &Scan) -> Option<u32> {
        let k = match v {
            PtepGetVariant::FullScan => 0,
            PtepGetVariant::Mod2 => 1,
            PtepGetVariant::EarlyExit => 2,
            PtepGetVariant::Mod1 => return None,
        };
        s.ok.then(|| self.first[k][s.young as usize][s.dirty as usize])
    }

    /// Instructions of a mod1 call with trace `t`; `memo` holds the last lookup (a
    /// run's blocks are mostly alike).
    #[inline]
    pub fn mod1(&self, t: &Trace, memo: &mut (u64, Option<u32>)) -> Option<u32> {
        if !t.ok {
            return None;
        }
        let key = t.key();
        if memo.0 == key {
            return memo.1;
        }
        let r = self
            .mod1
            .binary_search_by_key(&key, |e| e.0)
            .ok()
            .map(|i| self.mod1[i].1);
        *memo = (key, r);
        r
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn the_two_layouts_agree_for_the_variants_indexed_by_first_positions() {
        let j: serde_json::Value = serde_json::from_str(JSON).unwrap();
        for name in ["full-scan", "mod2", "early-exit"] {
            assert_eq!(j["sweep"]["only"][name], j["sweep"]["from"][name], "{name}");
        }
    }

    #[test]
    fn equal_mod1_traces_have_equal_measured_counts() {
        let t = InsnTable::get();
        for w in t.mod1.windows(2) {
            assert_ne!(w[0].0, w[1].0, "one trace, two counts: {:?}", w);
        }
    }

    #[test]
    fn the_sweep_cells_reproduce_the_scenario_rows() {
        let j: serde_json::Value = serde_json::from_str(JSON).unwrap();
        let t = InsnTable::get();
        let old_clean = 0x78000080000bc3u64;
        // (scenario, first young, first dirty, layout "from"?)
        for (sc, y, d, from) in [("1", 0, 0, true), ("2", 8, 16, false), ("3", 16, 16, false)] {
            let block = sweep_block(from, y, d, old_clean);
            let mut s = Scan::default();
            for (i, p) in block.iter().enumerate() {
                s.read(i, *p);
            }
            for (v, name) in [
                (PtepGetVariant::FullScan, "full-scan"),
                (PtepGetVariant::Mod2, "mod2"),
                (PtepGetVariant::EarlyExit, "early-exit"),
            ] {
                assert_eq!(
                    t.first(v, &s),
                    Some(j["scenarios"][sc][name].as_u64().unwrap() as u32),
                    "{sc} {name}"
                );
            }
            let (_, tr) = mod1_scan(16, block[0], |i| block[i]);
            assert_eq!(
                t.mod1(&tr, &mut (u64::MAX, None)),
                Some(j["scenarios"][sc]["mod1"].as_u64().unwrap() as u32),
                "{sc} mod1"
            );
        }
    }
}
