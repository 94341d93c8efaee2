//! mm/memblock.c, reduced to what early boot needs: the firmware's memory map (RAM
//! ranges, possibly with holes), the ranges already taken (the kernel image), and a
//! top-down allocator for early page tables.
//!
//! ```text
//!  memory:    [=========RAM=========]    hole    [=============RAM=============]
//!  reserved:  [img]                                          [pgtables  <-- grows down]
//!  phys_alloc hands out the highest free page below the top of memory, as
//!  memblock does by default (bottom_up = false).
//! ```
//!
//! Both lists are kept sorted, non-overlapping and merged, so the page-table
//! allocations of a large boot collapse into one reserved region and each allocation
//! costs a binary search.

use crate::hw::PhysAddr;

/// One physical range `[base, base + size)`.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub struct Region {
    pub base: PhysAddr,
    pub size: u64,
}

impl Region {
    pub fn end(&self) -> u64 {
        self.base.0 + self.size
    }
}

#[derive(Clone, Debug, Default)]
pub struct Memblock {
    memory: Vec<Region>,
    reserved: Vec<Region>,
}

/// Add `[base, end)` to a sorted, merged list.
fn insert(list: &mut Vec<Region>, base: u64, end: u64) {
    // Regions that overlap or touch [base, end) merge with it.
    let first = list.partition_point(|r| r.end() < base);
    let last = list.partition_point(|r| r.base.0 <= end);
    let (mut b, mut e) = (base, end);
    if first < last {
        b = b.min(list[first].base.0);
        e = e.max(list[last - 1].end());
    }
    list.splice(
        first..last,
        [Region {
            base: PhysAddr(b),
            size: e - b,
        }],
    );
}

/// Remove `[base, end)` from a sorted, merged list, splitting a region that straddles it.
fn subtract(list: &mut Vec<Region>, base: u64, end: u64) {
    let first = list.partition_point(|r| r.end() <= base);
    let last = list.partition_point(|r| r.base.0 < end);
    let mut keep = Vec::new();
    if first < last {
        let (lo, hi) = (list[first].base.0, list[last - 1].end());
        if lo < base {
            keep.push(Region {
                base: PhysAddr(lo),
                size: base - lo,
            });
        }
        if end < hi {
            keep.push(Region {
                base: PhysAddr(end),
                size: hi - end,
            });
        }
    }
    list.splice(first..last, keep);
}

impl Memblock {
    pub fn new() -> Memblock {
        Memblock::default()
    }

    /// memblock_add: firmware reports RAM at `[base, base + size)`.
    pub fn add(&mut self, base: PhysAddr, size: u64) {
        insert(&mut self.memory, base.0, base.0 + size);
    }

    /// memblock_remove: punch a hole in the memory map.
    pub fn remove(&mut self, base: PhysAddr, size: u64) {
        subtract(&mut self.memory, base.0, base.0 + size);
    }

    /// memblock_reserve: `[base, base + size)` is in use and will not be allocated.
    pub fn reserve(&mut self, base: PhysAddr, size: u64) {
        insert(&mut self.reserved, base.0, base.0 + size);
    }

    /// The RAM ranges in ascending order (what for_each_mem_range visits).
    pub fn memory(&self) -> &[Region] {
        &self.memory
    }

    pub fn reserved(&self) -> &[Region] {
        &self.reserved
    }

    /// memblock_start_of_DRAM.
    pub fn start_of_dram(&self) -> PhysAddr {
        self.memory.first().expect("no memory").base
    }

    /// memblock_end_of_DRAM: one past the last byte of RAM.
    pub fn end_of_dram(&self) -> PhysAddr {
        PhysAddr(self.memory.last().expect("no memory").end())
    }

    /// memblock_phys_mem_size: bytes of RAM, holes excluded.
    pub fn phys_mem_size(&self) -> u64 {
        self.memory.iter().map(|r| r.size).sum()
    }

    /// memblock_phys_alloc_range(size, align, 0, MEMBLOCK_ALLOC_ANYWHERE): the highest
    /// `align`-aligned free range of `size` bytes, now reserved; None when RAM is full.
    pub fn phys_alloc(&mut self, size: u64, align: u64) -> Option<PhysAddr> {
        for mem in self.memory.iter().rev() {
            // Walk the free gaps of `mem` from the top: between reserved regions that overlap it.
            let mut top = mem.end();
            let upto = self.reserved.partition_point(|r| r.base.0 < mem.end());
            for r in self.reserved[..upto].iter().rev().chain(std::iter::once(&Region {
                base: mem.base,
                size: 0,
            })) {
                let gap_lo = r.end().max(mem.base.0);
                if top >= gap_lo + size {
                    let cand = (top - size) & !(align - 1);
                    if cand >= gap_lo {
                        self.reserve(PhysAddr(cand), size);
                        return Some(PhysAddr(cand));
                    }
                }
                top = top.min(r.base.0);
                if top <= mem.base.0 {
                    break;
                }
            }
        }
        None
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    const G: u64 = 1 << 30;
    const M: u64 = 1 << 20;

    fn ranges(list: &[Region]) -> Vec<(u64, u64)> {
        list.iter().map(|r| (r.base.0, r.end())).collect()
    }

    #[test]
    fn adjacent_ranges_merge_and_holes_split() {
        let mut mb = Memblock::new();
        mb.add(PhysAddr(G), G);
        mb.add(PhysAddr(2 * G), G);
        assert_eq!(ranges(mb.memory()), vec![(G, 3 * G)]);
        mb.remove(PhysAddr(G + 3 * M), 2 * M);
        assert_eq!(ranges(mb.memory()), vec![(G, G + 3 * M), (G + 5 * M, 3 * G)]);
        assert_eq!(mb.phys_mem_size(), 2 * G - 2 * M);
        assert_eq!((mb.start_of_dram(), mb.end_of_dram()), (PhysAddr(G), PhysAddr(3 * G)));
        // A hole over a whole region and the edge of another.
        mb.remove(PhysAddr(0), G + 4 * M);
        assert_eq!(ranges(mb.memory()), vec![(G + 5 * M, 3 * G)]);
    }

    #[test]
    fn allocation_is_top_down_and_skips_reserved_ranges_and_holes() {
        let mut mb = Memblock::new();
        mb.add(PhysAddr(G), 8 * M);
        mb.add(PhysAddr(G + 16 * M), 8 * 4096);
        mb.reserve(PhysAddr(G + 16 * M + 6 * 4096), 4096);
        let got: Vec<u64> = (0..4)
            .map(|_| mb.phys_alloc(4096, 4096).unwrap().0 - G - 16 * M)
            .collect();
        // 7 is free, 6 reserved, then 5, 4, 3.
        assert_eq!(got, vec![7 * 4096, 5 * 4096, 4 * 4096, 3 * 4096]);
        for _ in 0..3 {
            mb.phys_alloc(4096, 4096).unwrap();
        }
        // The small region is full: the next page comes from the top of the first.
        assert_eq!(mb.phys_alloc(4096, 4096), Some(PhysAddr(G + 8 * M - 4096)));
        // Everything allocated merged into few reserved regions.
        assert_eq!(
            ranges(mb.reserved()),
            vec![(G + 8 * M - 4096, G + 8 * M), (G + 16 * M, G + 16 * M + 8 * 4096)]
        );
    }

    #[test]
    fn allocation_fails_when_full_and_honours_alignment() {
        let mut mb = Memblock::new();
        mb.add(PhysAddr(0x1000), 0x3000);
        assert_eq!(mb.phys_alloc(0x2000, 0x2000), Some(PhysAddr(0x2000)));
        assert_eq!(mb.phys_alloc(0x2000, 0x2000), None);
        assert_eq!(mb.phys_alloc(0x1000, 0x1000), Some(PhysAddr(0x1000)));
        assert_eq!(mb.phys_alloc(0x1000, 0x1000), None);
    }
}
