//! The hardware translation table walker.

use super::addr::{Granule, PhysAddr, VirtAddr, PTE_LEVEL};
use super::descriptor::{Attr, Desc, DescKind};
use super::events::{Event, Events};
use super::memory::{PhysMem, TableId};

/// A successful translation.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub struct Translation {
    /// Physical address of `va`.
    pub pa: PhysAddr,
    /// Level of the descriptor that answered (3 for a page, 1 or 2 for a block).
    pub level: u8,
    /// log2 of the VA span the resulting TLB entry may cover: a page or block, or the
    /// whole contiguous range when CONT was set.
    pub span_shift: u32,
    /// The leaf descriptor.
    pub desc: Desc,
    /// Where the leaf lives, so hardware AF/dirty updates can write it back.
    pub table: TableId,
    pub index: usize,
    /// Index in `table` of the first descriptor the span covers: `index`, or the first
    /// of its contiguous run. What a TLB entry records as its source.
    pub span_index: usize,
}

impl Translation {
    pub fn is_cont(&self) -> bool {
        self.desc.has(Attr::CONT)
    }
}

/// A translation fault, with the level whose descriptor was invalid.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub struct WalkFault {
    pub level: u8,
}

/// Which table each table descriptor lately followed points at: a host-side memo with
/// no architectural effect. A table descriptor's value names its next-level frame, and
/// which storage holds that frame changes only with `PhysMem::table_epoch`, so while
/// the epoch stands, reading the remembered value again at a level means the same next
/// table without decoding it. Every step still reads and counts its descriptor; a
/// changed descriptor only costs the slow lookup.
///
/// ```text
///  level:   0          1          2          3
///  desc:    D0 ──────► D1 ──────► D2 ──────► (leaf: never remembered)
///  next:    T1         T2         T3
/// ```
/// A walk also remembers the last table it reached below its upper levels, with the
/// root, a key naming the VA range and level (`path_key`) and `PhysMem::upper_gen`:
/// while no descriptor above level 3 has been written since, walking there again
/// would read the same descriptors, so the walk may start at that table. The hardware
/// walker remembers the level-3 table, the kernel's walk to a pmd its pmd table; the
/// steps skipped are still counted.
#[derive(Clone, Copy, Debug, Default)]
pub struct WalkHint {
    epoch: u64,
    /// The TTBR value last walked from, and its table.
    root: Option<(PhysAddr, TableId)>,
    /// Per level, the table descriptor last followed there (0, which no table
    /// descriptor is, when none).
    desc: [u64; 4],
    next: [TableId; 4],
    /// The last path remembered: its key (0 when none), root and upper generation,
    /// and the table it reached.
    path_key: u64,
    path_root: TableId,
    path_gen: u64,
    path_table: TableId,
}

/// The key of a path from the root to the level-`level` table that translates `va`:
/// `va`'s bits above that level, tagged with the level (so no key is 0).
#[inline(always)]
pub fn path_key(g: Granule, va: u64, level: u8) -> u64 {
    (va >> g.level_shift(level - 1)) | (u64::from(level) + 1) << 56
}

impl WalkHint {
    /// Forget everything if tables gained or lost storage since the memo was made.
    #[inline(always)]
    fn sync(&mut self, mem: &PhysMem) {
        if self.epoch != mem.table_epoch() {
            *self = WalkHint {
                epoch: mem.table_epoch(),
                ..WalkHint::default()
            };
        }
    }

    /// The table at `root`, the translation table base.
    #[inline(always)]
    pub fn root_table(&mut self, mem: &PhysMem, root: PhysAddr) -> Option<TableId> {
        self.sync(mem);
        match self.root {
            Some((pa, id)) if pa == root => Some(id),
            _ => {
                let id = mem.table_id_of(root)?;
                self.root = Some((root, id));
                Some(id)
            }
        }
    }

    /// The table the path `key` from `root` reached when remembered, if no descriptor
    /// above level 3 has been written since.
    #[inline(always)]
    pub fn remembered_path(&mut self, mem: &PhysMem, root: TableId, key: u64) -> Option<TableId> {
        self.sync(mem);
        (self.path_key == key && self.path_root == root && self.path_gen == mem.upper_gen()).then_some(self.path_table)
    }

    /// Remember that the path `key` from `root` reaches `table`, as the tables stand now.
    #[inline(always)]
    pub fn remember_path(&mut self, mem: &PhysMem, root: TableId, key: u64, table: TableId) {
        (self.path_key, self.path_root, self.path_gen, self.path_table) = (key, root, mem.upper_gen(), table);
    }

    /// The remembered next table for descriptor `d` read at `level`, if `d` is the one
    /// remembered there. Call after `root_table` or `next_table` in the same walk.
    #[inline(always)]
    fn remembered(&self, level: u8, d: Desc) -> Option<TableId> {
        let l = level as usize;
        (d.0 == self.desc[l] && d.0 != 0).then(|| self.next[l])
    }

    /// The table that table descriptor `d`, read at `level`, points at.
    #[inline(always)]
    pub fn next_table(&mut self, mem: &PhysMem, level: u8, d: Desc) -> Option<TableId> {
        self.sync(mem);
        self.remembered(level, d).or_else(|| self.learn(mem, level, d))
    }

    /// Look up and remember the table that `d`, read at `level`, points at: the slow
    /// path of `next_table`, for a descriptor `remembered` did not know.
    fn learn(&mut self, mem: &PhysMem, level: u8, d: Desc) -> Option<TableId> {
        let id = mem.table_id(d.pfn(mem.granule()))?;
        self.desc[level as usize] = d.0;
        self.next[level as usize] = id;
        Some(id)
    }
}

/// Walk the tables rooted at `root` for `va`, counting each descriptor fetch.
pub fn walk(mem: &PhysMem, ev: &mut Events, root: PhysAddr, va: VirtAddr) -> Result<Translation, WalkFault> {
    walk_hinted(mem, ev, &mut WalkHint::default(), root, va)
}

/// `walk`, starting from (and updating) `hint`. Inline: its one caller is the access
/// path, which every EL0 access and its retry after a fault take, and a call returning
/// the translation through memory cost a third of the walk.
#[inline(always)]
pub fn walk_hinted(
    mem: &PhysMem,
    ev: &mut Events,
    hint: &mut WalkHint,
    root: PhysAddr,
    va: VirtAddr,
) -> Result<Translation, WalkFault> {
    // One copy per granule, so every shift and mask of the walk is a constant.
    match mem.granule() {
        Granule::K4 => walk_in(Granule::K4, mem, ev, hint, root, va),
        Granule::K16 => walk_in(Granule::K16, mem, ev, hint, root, va),
        Granule::K64 => walk_in(Granule::K64, mem, ev, hint, root, va),
    }
}

#[inline(always)]
fn walk_in(
    g: Granule,
    mem: &PhysMem,
    ev: &mut Events,
    hint: &mut WalkHint,
    root: PhysAddr,
    va: VirtAddr,
) -> Result<Translation, WalkFault> {
    ev.inc(Event::Walk);
    let root = hint.root_table(mem, root).expect("TTBR does not point at a table");
    let key = path_key(g, va.0, PTE_LEVEL);
    let mut table = root;
    if let Some(pte_table) = hint.remembered_path(mem, root, key) {
        table = pte_table;
    } else {
        // A bounded level loop: with the granule constant it unrolls, every shift a constant.
        for level in g.start_level()..PTE_LEVEL {
            let index = g.index(va.0, level);
            let desc = mem.read(table, index);
            if let Some(next) = hint.remembered(level, desc) {
                table = next;
                continue;
            }
            match desc.kind(level, g) {
                DescKind::Table(_) => {
                    table = hint
                        .learn(mem, level, desc)
                        .expect("table descriptor points at a frame with no table");
                }
                DescKind::Block(base) => {
                    count_steps(g, ev, level);
                    return Ok(leaf(g, level, desc, base, table, index, va));
                }
                _ => return Err(fault(g, ev, level)),
            }
        }
        hint.remember_path(mem, root, key, table);
    }
    pte_step(g, mem, ev, table, va)
}

/// A walk's last step: `va`'s descriptor in the level-3 table `table`, its fetches
/// counted as the whole walk's.
#[inline(always)]
fn pte_step(
    g: Granule,
    mem: &PhysMem,
    ev: &mut Events,
    table: TableId,
    va: VirtAddr,
) -> Result<Translation, WalkFault> {
    let index = g.index(va.0, PTE_LEVEL);
    let desc = mem.read(table, index);
    match desc.kind(PTE_LEVEL, g) {
        DescKind::Page(base) => {
            count_steps(g, ev, PTE_LEVEL);
            Ok(leaf(g, PTE_LEVEL, desc, base, table, index, va))
        }
        _ => Err(fault(g, ev, PTE_LEVEL)),
    }
}

/// `walk` of `va` by a caller that knows the level-3 table it reaches (`table`): the
/// same translation or fault and the same counts, without the upper levels' reads.
/// The caller answers for `table` (no table descriptor above level 3 written since it
/// learnt it: `PhysMem::upper_gen` and `table_epoch` as they were).
#[inline(always)]
pub fn walk_to_known_table(
    mem: &PhysMem,
    ev: &mut Events,
    table: TableId,
    va: VirtAddr,
) -> Result<Translation, WalkFault> {
    ev.inc(Event::Walk);
    match mem.granule() {
        Granule::K4 => pte_step(Granule::K4, mem, ev, table, va),
        Granule::K16 => pte_step(Granule::K16, mem, ev, table, va),
        Granule::K64 => pte_step(Granule::K64, mem, ev, table, va),
    }
}

/// The translation fault `walk_to_known_table` ends in for a VA whose level-3
/// descriptor its caller has just read and found not valid: counted as that walk
/// counts it, without the descriptor read again or the cold call.
#[inline(always)]
pub fn count_known_pte_fault(g: Granule, ev: &mut Events) {
    ev.inc(Event::Walk);
    count_steps(g, ev, PTE_LEVEL);
    ev.inc(Event::WalkFault);
}

/// Count the descriptor fetches of a walk that ended at `level`: one per level from
/// the start, added once rather than level by level.
#[inline(always)]
fn count_steps(g: Granule, ev: &mut Events, level: u8) {
    ev.add(Event::WalkSteps, u64::from(level - g.start_level()) + 1);
}

/// The translation a block or page descriptor `desc`, read at `index` of `table`, gives `va`.
#[inline(always)]
fn leaf(g: Granule, level: u8, desc: Desc, base: PhysAddr, table: TableId, index: usize, va: VirtAddr) -> Translation {
    let leaf_shift = g.level_shift(level);
    let (span_shift, span_index) = if desc.has(Attr::CONT) {
        let run = g.cont_entries_at(level);
        (leaf_shift + run.trailing_zeros(), index & !(run - 1))
    } else {
        (leaf_shift, index)
    };
    Translation {
        pa: PhysAddr(base.0 + (va.0 & ((1u64 << leaf_shift) - 1))),
        level,
        span_shift,
        desc,
        table,
        index,
        span_index,
    }
}

/// A translation fault at `level`, counted. Out of line, although first touches make it
/// as common as a translation: the translating path stays straight-line code.
#[cold]
fn fault(g: Granule, ev: &mut Events, level: u8) -> WalkFault {
    count_steps(g, ev, level);
    ev.inc(Event::WalkFault);
    WalkFault { level }
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::hw::addr::Pfn;

    /// Hand-build a 4-level 4K table chain for `va` and return (mem, root, pte table).
    fn chain(g: Granule, va: u64) -> (PhysMem, PhysAddr, TableId) {
        let mut mem = PhysMem::new(g, 1 << 34);
        let mut pfn = 100u64;
        let root = mem.materialize_table(Pfn(pfn));
        let root_pa = Pfn(pfn).to_phys(g);
        let mut cur = root;
        for level in g.start_level()..PTE_LEVEL {
            pfn += 1;
            let next = mem.materialize_table(Pfn(pfn));
            mem.write(cur, g.index(va, level), Desc::table(Pfn(pfn).to_phys(g)));
            cur = next;
        }
        (mem, root_pa, cur)
    }

    #[test]
    fn page_walk_answers_at_level_3() {
        for g in [Granule::K4, Granule::K16, Granule::K64] {
            let va = 0x1234_5678_9000u64 & !(g.page_size() - 1);
            let (mut mem, root, pte) = chain(g, va);
            let pa = PhysAddr(0x8000_0000);
            mem.write(pte, g.index(va, 3), Desc::page(pa, Attr::AF));
            let mut ev = Events::default();
            let t = walk(&mem, &mut ev, root, VirtAddr(va + 0x10)).unwrap();
            assert_eq!(t.pa, PhysAddr(pa.0 + 0x10));
            assert_eq!(t.level, 3);
            assert_eq!(t.span_shift, g.page_shift());
            assert_eq!(ev.get(Event::WalkSteps), (4 - g.start_level()) as u64);
        }
    }

    #[test]
    fn contiguous_entries_cover_the_whole_block() {
        for g in [Granule::K4, Granule::K16, Granule::K64] {
            let va = 0x2000_0000_0000u64;
            let (mut mem, root, pte) = chain(g, va);
            let pa = PhysAddr(0x4000_0000);
            let n = g.cont_ptes();
            for i in 0..n {
                let d = Desc::page(PhysAddr(pa.0 + ((i as u64) << g.page_shift())), Attr::AF | Attr::CONT);
                mem.write(pte, g.index(va, 3) + i, d);
            }
            let mut ev = Events::default();
            let t = walk(&mem, &mut ev, root, VirtAddr(va + 3 * g.page_size())).unwrap();
            assert_eq!(t.span_shift, g.page_shift() + n.trailing_zeros());
            assert_eq!(1u64 << t.span_shift, g.cont_pte_size());
            assert_eq!(
                n,
                [16, 128, 32][[Granule::K4, Granule::K16, Granule::K64]
                    .iter()
                    .position(|x| *x == g)
                    .unwrap()]
            );
        }
    }

    #[test]
    fn invalid_entries_fault_at_their_level() {
        let g = Granule::K4;
        let va = 0x1000_0000_0000u64;
        let (mem, root, _) = chain(g, va);
        let mut ev = Events::default();
        assert_eq!(walk(&mem, &mut ev, root, VirtAddr(va)), Err(WalkFault { level: 3 }));
        assert_eq!(
            walk(&mem, &mut ev, root, VirtAddr(0x2000_0000_0000)),
            Err(WalkFault { level: 0 })
        );
        assert_eq!(ev.get(Event::WalkFault), 2);
    }

    #[test]
    fn block_walk_at_level_2() {
        let g = Granule::K4;
        let va = 0x1000_0020_0000u64;
        let mut mem = PhysMem::new(g, 1 << 34);
        let tables: Vec<_> = (0..3).map(|i| mem.materialize_table(Pfn(50 + i))).collect();
        mem.write(tables[0], g.index(va, 0), Desc::table(Pfn(51).to_phys(g)));
        mem.write(tables[1], g.index(va, 1), Desc::table(Pfn(52).to_phys(g)));
        mem.write(tables[2], g.index(va, 2), Desc::block(PhysAddr(0x4020_0000), Attr::AF));
        let mut ev = Events::default();
        let t = walk(&mem, &mut ev, Pfn(50).to_phys(g), VirtAddr(va + 0x1234)).unwrap();
        assert_eq!((t.level, t.span_shift, t.pa), (2, 21, PhysAddr(0x4020_1234)));
    }

    /// The pte table of `chain(g, va)` is the frame the level-2 descriptor names.
    const PTE_TABLE_PFN: u64 = 103;

    /// `chain` for 4K at `va`, its pte mapping PA 0x8000_0000, and a fresh hint.
    fn hinted_chain(va: u64) -> (PhysMem, PhysAddr, TableId, Events, WalkHint) {
        let g = Granule::K4;
        let (mut mem, root, pte) = chain(g, va);
        mem.write(pte, g.index(va, 3), Desc::page(PhysAddr(0x8000_0000), Attr::AF));
        (mem, root, pte, Events::default(), WalkHint::default())
    }

    #[test]
    fn a_hinted_walk_follows_a_rewritten_table_descriptor_at_once() {
        let g = Granule::K4;
        let va = 0x1000_0000_0000u64;
        let (mut mem, root, _, mut ev, mut hint) = hinted_chain(va);
        let other = mem.materialize_table(Pfn(200));
        mem.write(other, g.index(va, 3), Desc::page(PhysAddr(0x9000_0000), Attr::AF));
        let pmd = mem.table_id(Pfn(PTE_TABLE_PFN - 1)).unwrap();
        assert_eq!(
            walk_hinted(&mem, &mut ev, &mut hint, root, VirtAddr(va)).unwrap().pa.0,
            0x8000_0000
        );
        mem.write(pmd, g.index(va, 2), Desc::table(Pfn(200).to_phys(g)));
        assert_eq!(
            walk_hinted(&mem, &mut ev, &mut hint, root, VirtAddr(va)).unwrap().pa.0,
            0x9000_0000
        );
        assert_eq!(
            ev.get(Event::WalkSteps),
            8,
            "every step reads its descriptor, hinted or not"
        );
    }

    #[test]
    fn a_remembered_path_serves_only_its_own_pte_table_and_rereads_the_pte() {
        let g = Granule::K4;
        let va = 0x1000_0000_0000u64;
        let (mut mem, root, pte, mut ev, mut hint) = hinted_chain(va);
        walk_hinted(&mem, &mut ev, &mut hint, root, VirtAddr(va)).unwrap();
        // A pte write leaves the path standing; the walk still reads the new pte.
        mem.write_leaf(pte, g.index(va, 3), Desc::page(PhysAddr(0x9000_0000), Attr::AF));
        assert_eq!(
            walk_hinted(&mem, &mut ev, &mut hint, root, VirtAddr(va)).unwrap().pa.0,
            0x9000_0000
        );
        // The next 2 MiB has no pte table: its walk stops at level 2.
        assert_eq!(
            walk_hinted(&mem, &mut ev, &mut hint, root, VirtAddr(va + (2 << 20))),
            Err(WalkFault { level: 2 })
        );
        assert_eq!(ev.get(Event::WalkSteps), 4 + 4 + 3);
    }

    #[test]
    fn a_hinted_walk_does_not_trust_a_frame_whose_table_storage_moved() {
        let g = Granule::K4;
        let va = 0x1000_0000_0000u64;
        let (mut mem, root, pte, mut ev, mut hint) = hinted_chain(va);
        walk_hinted(&mem, &mut ev, &mut hint, root, VirtAddr(va)).unwrap();
        // The pte table frame loses its storage to another frame and gets new storage;
        // the level-2 descriptor naming it is unchanged.
        mem.release_table(Pfn(PTE_TABLE_PFN));
        let squatter = mem.materialize_table(Pfn(300));
        assert_eq!(squatter, pte, "the old storage was reused");
        let moved = mem.materialize_table(Pfn(PTE_TABLE_PFN));
        mem.write(moved, g.index(va, 3), Desc::page(PhysAddr(0x9000_0000), Attr::AF));
        assert_eq!(
            walk_hinted(&mem, &mut ev, &mut hint, root, VirtAddr(va)).unwrap().pa.0,
            0x9000_0000
        );
    }
}
