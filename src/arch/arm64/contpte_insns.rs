//! Seed 004: the instructions one contpte_ptep_get call executes, from the tables
//! `scripts/seed004-insns` measured (`tools/seed004/README.md`): our C of each variant
//! compiled by Debian's GCC 12 (`data/seed004-ptep-get-insns.json`) or clang 14
//! (`...-clang.json`), `contpte-insns=gcc|clang`, counted as
//! `kernel.contpte_ptep_get.insns`.
//!
//! The measured code branches on each pte it reads: `pte_dirty` tests PTE_DIRTY (bit
//! 55) first, then PTE_WRITE (bit 51), then PTE_RDONLY (bit 7), and `pte_young` tests
//! PTE_AF. The tables were measured with dirty ptes that have PTE_DIRTY set and clean
//! ptes that are writable and read-only; a call that reads any other pte
//! (hardware-dirty only, or clean and not writable) takes a path the table does not
//! give, and is counted in `kernel.contpte_ptep_get.insns_unmeasured` instead. Each
//! call records what its branches test (`Call`), and a variant's count is found in
//! one of two ways:
//! - by the first young and first dirty position in the block, the sweep's cell
//!   `[young][dirty]`, when the sweep's "only" and "from" layouts agree in every cell
//!   and no branch tests orig_pte (GCC's full-scan, and mod2 and early-exit with both
//!   compilers): then nothing but those positions moves the count;
//! - otherwise by the call's whole branch trace, among the traces of the sweep's
//!   cells (both layouts, orig_pte = pte 0); a trace no cell has is unmeasured. mod1
//!   tests orig_pte's bits, and clang's full scan costs one instruction more per
//!   dirty pte, so both count this way.
//!
//! The tables are for a 4K granule (16-entry blocks); other granules count nothing.
//!
//! What a call's branches test is decided by a few bits of each pte (dirty, young,
//! whether its encoding is measured) and of orig_pte, so a call's outcome (its count,
//! the ptes it reads, what it sets in orig_pte) is kept by those bits (`Memo`): seed
//! 004's benchmark makes a hundred million calls on blocks alike, and a repeated
//! block is not scanned again.

use super::contpte::scan;
use super::pgtable::{Pte, PtePtr, PtepGetVariant};
use crate::hw::descriptor::{Attr, Desc};
use std::sync::OnceLock;

/// The compiler whose code of the variants the counts are of (`contpte-insns`).
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum Compiler {
    /// Debian 12's GCC 12, as Debian builds its kernels.
    Gcc,
    /// Debian 12's clang 14, as Android (seed 004's phone) builds its kernels.
    Clang,
}

impl Compiler {
    /// The compiler's table, as build.rs read it from its JSON file.
    fn table(self) -> &'static Table {
        match self {
            Compiler::Gcc => &tables::GCC,
            Compiler::Clang => &tables::CLANG,
        }
    }
}

/// `GCC` and `CLANG`: the parts of `data/seed004-ptep-get-insns.json` and
/// `data/seed004-ptep-get-insns-clang.json` a count is looked up in, written by build.rs.
mod tables {
    use super::{Grids, Sweep, Table};
    include!(concat!(env!("OUT_DIR"), "/seed004_tables.rs"));
}

/// The block size the table was measured for (CONT_PTES with a 4K granule).
pub const MEASURED_CONT_PTES: usize = 16;
/// "No pte": the sweep's index 16.
const NONE: u8 = MEASURED_CONT_PTES as u8;
/// The trace's length is kept above this bit; a longer trace (a block larger than the
/// measured one) is unmeasured.
const TRACE_BITS: u8 = 56;

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

/// What one call's branches tested: per pte read, its dirty and young bits in order,
/// and mod1's tests of orig_pte; the first young and first dirty position read; and
/// whether every tested pte had a measured encoding.
#[derive(Clone, Copy, Debug)]
pub struct Call {
    bits: u64,
    len: u8,
    ok: bool,
    young: u8,
    dirty: u8,
    /// Whether the loop made orig_pte dirty, and young.
    made_dirty: bool,
    made_young: bool,
}

impl Default for Call {
    fn default() -> Self {
        Call {
            bits: 0,
            len: 0,
            ok: true,
            young: NONE,
            dirty: NONE,
            made_dirty: false,
            made_young: false,
        }
    }
}

impl Call {
    #[inline(always)]
    fn push(&mut self, b: bool) {
        if self.len >= TRACE_BITS {
            self.ok = false;
            return;
        }
        self.bits |= (b as u64) << self.len;
        self.len += 1;
    }

    /// The dirty bit as the measured code finds it; an unmeasured encoding spoils the call.
    #[inline(always)]
    fn dirty_of(&mut self, p: Pte) -> bool {
        measured_dirty(p).unwrap_or_else(|| {
            self.ok = false;
            p.pte_dirty()
        })
    }

    /// Pte `i` of the block was read as `p` and tested for dirty and young.
    #[inline(always)]
    pub fn read(&mut self, i: usize, p: Pte) {
        let dirty = self.dirty_of(p);
        if dirty && self.dirty == NONE {
            self.dirty = i as u8;
        }
        if p.pte_young() && self.young == NONE {
            self.young = i as u8;
        }
        self.push(dirty);
        self.push(p.pte_young());
    }

    /// The loop's pte_mkdirty of orig_pte.
    #[inline(always)]
    pub fn mkdirty(&mut self, orig: Pte) -> Pte {
        self.made_dirty = true;
        orig.pte_mkdirty()
    }

    /// The loop's pte_mkyoung of orig_pte.
    #[inline(always)]
    pub fn mkyoung(&mut self, orig: Pte) -> Pte {
        self.made_young = true;
        orig.pte_mkyoung()
    }

    /// orig_pte was tested for young (mod1's break).
    #[inline(always)]
    pub fn test_young(&mut self, orig: Pte) {
        self.push(orig.pte_young());
    }

    /// orig_pte was tested for dirty (mod1's break).
    #[inline(always)]
    pub fn test_dirty(&mut self, orig: Pte) {
        let d = self.dirty_of(orig);
        self.push(d);
    }

    /// The trace as one key, its length above its bits (at most 49: mod1 reads 15 ptes
    /// of 3 tests and a last of 4; mod2 at most 17 of 2).
    fn key(&self) -> u64 {
        self.bits | (self.len as u64) << TRACE_BITS
    }
}

/// How one variant's measured counts are looked up.
enum Index {
    /// `[first young][first dirty]`: the count depends on nothing else.
    First(&'static Grid),
    /// (trace key, instructions), sorted by key.
    Trace(Vec<(u64, u32)>),
}

/// The variants in the table's order, by the names the JSON gives them.
const VARIANTS: [(PtepGetVariant, &str); 4] = [
    (PtepGetVariant::FullScan, "full-scan"),
    (PtepGetVariant::Mod1, "mod1"),
    (PtepGetVariant::Mod2, "mod2"),
    (PtepGetVariant::EarlyExit, "early-exit"),
];

fn slot(v: PtepGetVariant) -> usize {
    VARIANTS
        .iter()
        .position(|(w, _)| *w == v)
        .expect("every variant measured")
}

/// What one call did, as far as anything outside it sees: its instructions (None:
/// a path not measured), the ptes it read, and whether it made orig_pte dirty and
/// young.
#[derive(Clone, Copy, Debug, Default, PartialEq, Eq)]
pub struct Outcome {
    pub insns: Option<u32>,
    pub reads: u8,
    made_dirty: bool,
    made_young: bool,
}

impl Outcome {
    /// The call's orig_pte: `orig` with what the loop set (pte_mkdirty and pte_mkyoung
    /// change different bits, so their order does not matter).
    #[inline]
    pub fn apply(&self, orig: Pte) -> Pte {
        let orig = if self.made_dirty { orig.pte_mkdirty() } else { orig };
        if self.made_young {
            orig.pte_mkyoung()
        } else {
            orig
        }
    }
}

/// What a pte's tests in a call can find: its dirty and young bits and whether its
/// encoding is measured.
#[inline(always)]
fn pte_bits(p: Pte) -> u64 {
    p.pte_dirty() as u64 | (p.pte_young() as u64) << 1 | (measured_dirty(p).is_none() as u64) << 2
}

/// The descriptor bits `pte_bits` reads: PTE_DIRTY, PTE_WRITE, PTE_RDONLY, PTE_AF.
const TESTED: u64 = Attr::SW_DIRTY.bits() | Attr::DBM.bits() | Attr::RDONLY.bits() | Attr::AF.bits();

/// A one in each pte's 3-bit field of the key: a field's value times this, in all.
const EVERY_FIELD: u64 = {
    let mut k = 0;
    let mut i = 0;
    while i < MEASURED_CONT_PTES {
        k |= 1 << (6 + 3 * i);
        i += 1;
    }
    k
};

/// The block's part of a call's key (`state_key`). A run's blocks mostly hold ptes
/// alike in every bit a call tests; such a block's part is its first pte's, repeated.
fn block_bits(block: &[Pte; MEASURED_CONT_PTES]) -> u64 {
    let first = block[0].0 .0;
    if block.iter().fold(0, |d, p| d | (p.0 .0 ^ first)) & TESTED == 0 {
        return pte_bits(block[0]) * EVERY_FIELD;
    }
    block_bits_each(block)
}

/// The block's part of the key, pte by pte.
fn block_bits_each(block: &[Pte; MEASURED_CONT_PTES]) -> u64 {
    block
        .iter()
        .enumerate()
        .fold(0, |k, (i, &p)| k | pte_bits(p) << (6 + 3 * i))
}

/// Everything a call's branches can test, as one key: per pte of the block and for
/// orig_pte its dirty and young bits and whether its encoding is measured, with the
/// variant and the compiler (54 bits), given the block's part.
#[inline]
fn state_key(cc: Compiler, v: PtepGetVariant, orig: Pte, block_bits: u64) -> u64 {
    block_bits | pte_bits(orig) | (slot(v) as u64) << 3 | (cc as u64) << 5
}

/// Memo slots: a run's blocks take few states (seed 004's scenarios two or three).
const MEMO_SLOTS: usize = 64;

/// Calls' outcomes by everything their branches test (`state_key`), in a small
/// direct-mapped table: what a call does is a function of its key, so a hit is the
/// outcome the scan would give.
#[derive(Debug)]
pub struct Memo {
    slots: Box<[(u64, Outcome); MEMO_SLOTS]>,
    /// The last block read: where and at which descriptor generation, and its part of
    /// the key (the calls of one walk step read one block many times).
    last: Option<(Option<(PtePtr, u64)>, u64)>,
}

impl Default for Memo {
    fn default() -> Self {
        // No key has bits above 54.
        Memo {
            slots: Box::new([(u64::MAX, Outcome::default()); MEMO_SLOTS]),
            last: None,
        }
    }
}

impl Memo {
    /// The outcome of a call of `v`, counted in `cc`'s table, with `orig` over the
    /// block `read` returns, scanned (by `contpte::scan`, the model's loop) the first
    /// time its state is seen in its slot. `at` is where the block is and the
    /// descriptor generation (`PhysMem::desc_gen`): the block is read again only when
    /// either differs from the last call's (None: always), or to scan it.
    #[inline]
    pub fn call(
        &mut self,
        cc: Compiler,
        v: PtepGetVariant,
        orig: Pte,
        at: Option<(PtePtr, u64)>,
        read: impl Fn() -> [Pte; MEASURED_CONT_PTES],
    ) -> Outcome {
        let bits = match self.last {
            Some((l, bits)) if at.is_some() && l == at => bits,
            _ => {
                let bits = block_bits(&read());
                self.last = Some((at, bits));
                bits
            }
        };
        let key = state_key(cc, v, orig, bits);
        let slot = &mut self.slots[(key.wrapping_mul(0x9E37_79B9_7F4A_7C15) >> 58) as usize];
        if slot.0 == key {
            return slot.1;
        }
        let block = read();
        let mut reads = 0;
        let (_, call) = scan(v, MEASURED_CONT_PTES, orig, |i| {
            reads += 1;
            block[i]
        });
        let out = Outcome {
            insns: InsnTable::get(cc).count(v, &call),
            reads,
            made_dirty: call.made_dirty,
            made_young: call.made_young,
        };
        *slot = (key, out);
        out
    }
}

/// One compiler's measured instructions per call.
pub struct InsnTable {
    cc: Compiler,
    /// Each variant's index, built the first time a call of it is counted: a run uses
    /// one variant, and building mod1's trace index scans every sweep block.
    variants: [OnceLock<Index>; 4],
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

/// The call variant `v` makes over `block`, with ptep and orig_pte its pte 0, as the
/// sweep measured it.
fn sweep_call(v: PtepGetVariant, block: &[Pte; MEASURED_CONT_PTES]) -> Call {
    scan(v, MEASURED_CONT_PTES, block[0], |i| block[i]).1
}

/// The parts of a seed 004 table a count is looked up in (the rest of the file, its
/// provenance and scenarios, is not built in).
struct Table {
    pte_old_clean: u64,
    sweep: Sweep,
}

/// The sweep's two layouts, young and dirty from a position ("from") or only there.
struct Sweep {
    only: Grids,
    from: Grids,
}

/// `[first young][first dirty]` instructions (16: none), per variant.
type Grid = [[u32; MEASURED_CONT_PTES + 1]; MEASURED_CONT_PTES + 1];

struct Grids {
    full_scan: Grid,
    mod1: Grid,
    mod2: Grid,
    early_exit: Grid,
}

impl Grids {
    fn of(&self, v: PtepGetVariant) -> &Grid {
        match v {
            PtepGetVariant::FullScan => &self.full_scan,
            PtepGetVariant::Mod1 => &self.mod1,
            PtepGetVariant::Mod2 => &self.mod2,
            PtepGetVariant::EarlyExit => &self.early_exit,
        }
    }
}

impl InsnTable {
    /// Variant `v`'s index, from `cc`'s table.
    fn index(cc: Compiler, v: PtepGetVariant) -> Index {
        let j = cc.table();
        let old_clean = j.pte_old_clean;
        let only = j.sweep.only.of(v);
        if v != PtepGetVariant::Mod1 && only == j.sweep.from.of(v) {
            return Index::First(only);
        }
        let mut t = Vec::new();
        for (grid, from) in [(only, false), (j.sweep.from.of(v), true)] {
            for (y, row) in grid.iter().enumerate() {
                for (d, &insns) in row.iter().enumerate() {
                    let block = sweep_block(from, y, d, old_clean);
                    t.push((sweep_call(v, &block).key(), insns));
                }
            }
        }
        t.sort_unstable();
        t.dedup();
        Index::Trace(t)
    }

    /// Variant `v`'s index, built once.
    fn variant(&self, v: PtepGetVariant) -> &Index {
        self.variants[slot(v)].get_or_init(|| InsnTable::index(self.cc, v))
    }

    /// `cc`'s table.
    pub fn get(cc: Compiler) -> &'static InsnTable {
        static GCC: OnceLock<InsnTable> = OnceLock::new();
        static CLANG: OnceLock<InsnTable> = OnceLock::new();
        let table = || InsnTable {
            cc,
            variants: Default::default(),
        };
        match cc {
            Compiler::Gcc => GCC.get_or_init(table),
            Compiler::Clang => CLANG.get_or_init(table),
        }
    }

    /// Instructions of a call of `v` that tested `call` (None: a path not measured).
    #[inline]
    pub fn count(&self, v: PtepGetVariant, call: &Call) -> Option<u32> {
        if !call.ok {
            return None;
        }
        match self.variant(v) {
            Index::First(t) => Some(t[call.young as usize][call.dirty as usize]),
            Index::Trace(t) => {
                let key = call.key();
                t.binary_search_by_key(&key, |e| e.0).ok().map(|i| t[i].1)
            }
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    const COMPILERS: [Compiler; 2] = [Compiler::Gcc, Compiler::Clang];

    fn json(cc: Compiler) -> serde_json::Value {
        serde_json::from_str(match cc {
            Compiler::Gcc => include_str!("../../../data/seed004-ptep-get-insns.json"),
            Compiler::Clang => include_str!("../../../data/seed004-ptep-get-insns-clang.json"),
        })
        .unwrap()
    }

    #[test]
    fn the_built_in_tables_are_the_json_files_grids() {
        for cc in COMPILERS {
            let (j, t) = (json(cc), cc.table());
            assert_eq!(format!("{:#x}", t.pte_old_clean), j["pte_old_clean"].as_str().unwrap());
            for (layout, grids) in [("only", &t.sweep.only), ("from", &t.sweep.from)] {
                for (v, name) in VARIANTS {
                    let want: Vec<Vec<u32>> = serde_json::from_value(j["sweep"][layout][name].clone()).unwrap();
                    assert_eq!(grids.of(v).map(Vec::from).to_vec(), want, "{cc:?} {layout} {name}");
                }
            }
        }
    }

    #[test]
    fn gccs_table_indexes_by_first_positions_all_but_mod1_and_clangs_traces_full_scan_too() {
        let by_first = |cc| {
            VARIANTS
                .iter()
                .filter(|(v, _)| matches!(InsnTable::get(cc).variant(*v), Index::First(_)))
                .map(|(_, n)| *n)
                .collect::<Vec<_>>()
        };
        assert_eq!(by_first(Compiler::Gcc), ["full-scan", "mod2", "early-exit"]);
        assert_eq!(by_first(Compiler::Clang), ["mod2", "early-exit"]);
    }

    #[test]
    fn equal_traces_have_equal_measured_counts() {
        for cc in COMPILERS {
            for (v, _) in VARIANTS {
                if let Index::Trace(t) = InsnTable::get(cc).variant(v) {
                    for w in t.windows(2) {
                        assert_ne!(w[0].0, w[1].0, "{cc:?}: one trace, two counts: {:?}", w);
                    }
                }
            }
        }
    }

    #[test]
    fn the_sweep_cells_reproduce_the_scenario_rows() {
        for cc in COMPILERS {
            let j = json(cc);
            let t = InsnTable::get(cc);
            let old_clean = 0x78000080000bc3u64;
            // (scenario, first young, first dirty, layout "from"?)
            for (sc, y, d, from) in [("1", 0, 0, true), ("2", 8, 16, false), ("3", 16, 16, false)] {
                let block = sweep_block(from, y, d, old_clean);
                for (v, name) in VARIANTS {
                    assert_eq!(
                        t.count(v, &sweep_call(v, &block)),
                        Some(j["scenarios"][sc][name].as_u64().unwrap() as u32),
                        "{cc:?} {sc} {name}"
                    );
                }
            }
        }
    }

    #[test]
    fn clangs_full_scan_costs_more_per_dirty_pte_where_gccs_does_not() {
        let cost = |cc, from, d| {
            let block = sweep_block(from, 16, d, 0x78000080000bc3);
            let v = PtepGetVariant::FullScan;
            InsnTable::get(cc).count(v, &sweep_call(v, &block))
        };
        // One dirty pte against all sixteen dirty.
        assert_eq!(cost(Compiler::Gcc, false, 0), cost(Compiler::Gcc, true, 0));
        assert_eq!(
            cost(Compiler::Clang, true, 0).unwrap() - cost(Compiler::Clang, false, 0).unwrap(),
            15
        );
    }

    /// A memoized call is the scan: the same orig_pte out, reads and count, over
    /// blocks and orig_ptes of every encoding the model can hold (measured or not),
    /// drawn from few kinds so that states repeat and hit the memo across calls.
    #[test]
    fn a_block_of_alike_ptes_has_the_key_part_each_pte_gives() {
        const BASE: u64 = 0x78000080000bc3;
        for extra in [0, 1 << 10, 1 << 55, 1 << 51, 1 << 7, 1 << 12, 1 << 52] {
            for flip in [BASE, BASE & !(1 << 7), BASE & !(1 << 51)] {
                let mut block = [Pte(Desc(flip | extra)); MEASURED_CONT_PTES];
                // Consecutive pfns differ in bits no call tests.
                for (i, p) in block.iter_mut().enumerate() {
                    p.0 .0 += (i as u64) << 12;
                }
                assert_eq!(block_bits(&block), block_bits_each(&block), "{:#x}", flip | extra);
                block[9] = Pte(Desc(block[9].0 .0 ^ 1 << 10));
                assert_eq!(block_bits(&block), block_bits_each(&block), "one pte unlike the rest");
            }
        }
    }

    #[test]
    fn a_memoized_call_gives_what_the_scan_gives() {
        const BASE: u64 = 0x78000080000bc3;
        let kinds = [
            BASE,                                   // old, clean
            BASE | 1 << 10,                         // young
            (BASE | 1 << 55) & !(1 << 7),           // dirty
            (BASE | 1 << 10 | 1 << 55) & !(1 << 7), // young and dirty
            BASE & !(1 << 7),                       // hardware-dirty only: unmeasured
            BASE & !(1 << 51),                      // clean, not writable: unmeasured
        ];
        let mut x = 0x2545_F491_4F6C_DD1Du64;
        let mut next = |n: usize| {
            x ^= x << 13;
            x ^= x >> 7;
            x ^= x << 17;
            (x % n as u64) as usize
        };
        let mut memos = [Memo::default(), Memo::default()];
        let mut hits = 0;
        for _ in 0..20_000 {
            // Mostly the same kind across a block, as a run's blocks are.
            let common = next(kinds.len());
            let block: [Pte; MEASURED_CONT_PTES] = std::array::from_fn(|_| {
                let k = if next(32) == 0 { next(kinds.len()) } else { common };
                Pte(Desc(kinds[k]))
            });
            let orig = if next(2) == 0 {
                block[0]
            } else {
                Pte(Desc(kinds[next(kinds.len())]))
            };
            let (v, _) = VARIANTS[next(VARIANTS.len())];
            let ci = next(2);
            let cc = COMPILERS[ci];
            let mut reads = 0;
            let (want, call) = scan(v, MEASURED_CONT_PTES, orig, |i| {
                reads += 1;
                block[i]
            });
            let key = state_key(cc, v, orig, block_bits(&block));
            hits += memos[ci].slots.iter().any(|s| s.0 == key) as u32;
            let out = memos[ci].call(cc, v, orig, None, || block);
            assert_eq!(out.apply(orig), want, "{v:?} {orig:?} {block:?}");
            assert_eq!(out.reads, reads);
            assert_eq!(out.insns, InsnTable::get(cc).count(v, &call));
        }
        assert!(hits > 1000, "{hits} hits: the memo was not exercised");
    }

    #[test]
    fn a_trace_longer_than_a_measured_block_is_unmeasured() {
        let mut c = Call::default();
        for i in 0..32 {
            c.read(i, sweep_block(false, 16, 16, 0x78000080000bc3)[0]);
        }
        assert!(!c.ok);
        let v = PtepGetVariant::FullScan;
        assert_eq!(InsnTable::get(Compiler::Clang).count(v, &c), None);
    }
}
