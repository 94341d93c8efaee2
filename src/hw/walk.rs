//! The hardware translation table walker.

use super::addr::{Granule, Pfn, PhysAddr, VirtAddr, PTE_LEVEL};
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

/// The tables the last walk went through: a host-side memo with no architectural
/// effect. Each step still reads its descriptor and checks that the remembered table
/// is the one the descriptor names, so a stale hint only costs the slow lookup; a
/// valid one lets the walk load every level's descriptor without first resolving the
/// previous level's frame.
#[derive(Clone, Copy, Debug, Default)]
pub struct WalkHint {
    tables: [Option<TableId>; 4],
}

impl WalkHint {
    /// The storage of table frame `pfn` at `level`: the hinted table if it still is.
    #[inline(always)]
    pub fn table(&mut self, mem: &PhysMem, level: u8, pfn: Pfn) -> Option<TableId> {
        let slot = &mut self.tables[level as usize];
        match *slot {
            Some(id) if mem.table_pfn(id) == pfn => Some(id),
            _ => {
                *slot = mem.table_id(pfn);
                *slot
            }
        }
    }
}

/// Walk the tables rooted at `root` for `va`, counting each descriptor fetch.
pub fn walk(mem: &PhysMem, ev: &mut Events, root: PhysAddr, va: VirtAddr) -> Result<Translation, WalkFault> {
    walk_hinted(mem, ev, &mut WalkHint::default(), root, va)
}

/// `walk`, starting from (and updating) `hint`.
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
    let mut level = g.start_level();
    let mut table_at = |level: u8, pa: PhysAddr| hint.table(mem, level, Pfn(pa.0 >> g.page_shift()));
    let mut table = table_at(level, root).expect("TTBR does not point at a table");
    loop {
        let index = g.index(va.0, level);
        let desc = mem.read(table, index);
        ev.inc(Event::WalkSteps);
        match desc.kind(level, g) {
            DescKind::Table(next) if level < PTE_LEVEL => {
                level += 1;
                table = table_at(level, next).expect("table descriptor points at a frame with no table");
            }
            DescKind::Block(base) | DescKind::Page(base) => {
                let leaf_shift = g.level_shift(level);
                let span_shift = if desc.has(Attr::CONT) {
                    leaf_shift + g.cont_entries_at(level).trailing_zeros()
                } else {
                    leaf_shift
                };
                let off = va.0 & ((1u64 << leaf_shift) - 1);
                return Ok(Translation {
                    pa: PhysAddr(base.0 + off),
                    level,
                    span_shift,
                    desc,
                    table,
                    index,
                });
            }
            _ => {
                ev.inc(Event::WalkFault);
                return Err(WalkFault { level });
            }
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;

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
}
