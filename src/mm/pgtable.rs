//! The software page-table walk (pgd_offset .. pte_offset_map) and table allocation
//! (__pud_alloc, __pmd_alloc, __pte_alloc) of include/linux/pgtable.h and mm/memory.c.

use super::mm_types::MmId;
use super::Kernel;
use crate::arch::arm64::pgtable::PtePtr;
use crate::hw::walk::path_key;
use crate::hw::{Desc, Event, Granule, Pfn, TableId};

/// A pointer to a pmd (or any upper-level) entry.
pub type PmdPtr = PtePtr;

fn read_event(level: u8) -> Event {
    match level {
        0 => Event::PgdRead,
        1 => Event::PudRead,
        2 => Event::PmdRead,
        _ => Event::PteRead,
    }
}

fn write_event(level: u8) -> Event {
    match level {
        0 => Event::PgdWrite,
        1 => Event::PudWrite,
        2 => Event::PmdWrite,
        _ => Event::PteWrite,
    }
}

fn alloc_event(level: u8) -> Event {
    match level {
        0 => Event::TableAllocL0,
        1 => Event::TableAllocL1,
        2 => Event::TableAllocL2,
        _ => Event::TableAllocL3,
    }
}

impl Kernel {
    /// Read an upper-level entry (pgdp_get / pudp_get / pmdp_get).
    #[inline]
    pub fn pxd_get(&mut self, level: u8, p: PmdPtr) -> Desc {
        self.arch.hw.ev.inc(read_event(level));
        self.arch.hw.mem.read(p.table, p.index)
    }

    /// Write an upper-level entry (set_pmd / pmd_populate / pmd_clear ...).
    #[inline]
    pub fn pxd_set(&mut self, level: u8, addr: u64, p: PmdPtr, d: Desc) {
        self.arch.set_pxd(level, addr, p, d, write_event(level));
    }

    /// Allocate a zeroed page-table page for `level` (pte_alloc_one / pmd_alloc_one).
    pub fn pgtable_alloc(&mut self, level: u8) -> Option<(Pfn, TableId)> {
        let pfn = self.alloc_pages_local(0)?;
        self.memmap.prep_pgtable_page(pfn);
        self.arch.hw.ev.inc(alloc_event(level));
        self.memcg_kmem_charge_page(pfn);
        Some((pfn, self.arch.hw.mem.materialize_table(pfn)))
    }

    /// Free a page-table page once no walker can reach it.
    pub fn pgtable_free(&mut self, pfn: Pfn) {
        self.arch.hw.mem.release_table(pfn);
        self.arch.hw.ev.inc(Event::TableFree);
        self.memcg_kmem_uncharge_page(pfn);
        self.memmap.clear_pgtable_page(pfn);
        self.free_pages_to_node(pfn, 0);
    }

    /// The table a table descriptor at `level` points at.
    #[inline(always)]
    pub fn table_of(&mut self, level: u8, d: Desc) -> TableId {
        self.pgtable_hint
            .next_table(&self.arch.hw.mem, level, d)
            .expect("table descriptor without a table")
    }

    /// Walk to the pmd entry for `addr` without allocating; None where a level is empty.
    pub fn pmd_offset(&mut self, mm: MmId, addr: u64) -> Option<PmdPtr> {
        self.walk_to_pmd(mm, addr, false)
    }

    /// Walk to the pmd entry for `addr`, allocating missing upper tables
    /// (p4d_alloc / pud_alloc / pmd_alloc). None on OOM.
    pub fn pmd_alloc(&mut self, mm: MmId, addr: u64) -> Option<PmdPtr> {
        self.walk_to_pmd(mm, addr, true)
    }

    fn walk_to_pmd(&mut self, mm: MmId, addr: u64, alloc: bool) -> Option<PmdPtr> {
        // One copy per granule, so the level loop unrolls with constant shifts.
        match self.arch.granule() {
            Granule::K4 => self.walk_to_pmd_in(Granule::K4, mm, addr, alloc),
            Granule::K16 => self.walk_to_pmd_in(Granule::K16, mm, addr, alloc),
            Granule::K64 => self.walk_to_pmd_in(Granule::K64, mm, addr, alloc),
        }
    }

    #[inline(always)]
    fn walk_to_pmd_in(&mut self, g: Granule, mm: MmId, addr: u64, alloc: bool) -> Option<PmdPtr> {
        if let Some(pmd) = self.pmd_if_remembered(mm, addr) {
            self.count_upper_reads(g);
            return Some(pmd);
        }
        let root = self.mm(mm).pgd_table;
        let key = path_key(g, addr, 2);
        let mut table = root;
        for level in g.start_level()..2 {
            let p = PmdPtr {
                table,
                index: g.index(addr, level),
            };
            let d = self.pxd_get(level, p);
            table = if d.is_table(level) {
                self.table_of(level, d)
            } else if alloc {
                let (pfn, id) = self.pgtable_alloc(level + 1)?;
                if level + 1 == 2 {
                    self.mm_mut(mm).nr_pmds += 1;
                }
                self.pxd_set(level, addr, p, Desc::table(pfn.to_phys(g)));
                id
            } else {
                return None;
            };
        }
        self.pgtable_hint.remember_path(&self.arch.hw.mem, root, key, table);
        Some(PmdPtr {
            table,
            index: g.index(addr, 2),
        })
    }

    /// The pmd entry for `addr` when the walk's memo has the path to its table (no
    /// descriptor above it written since): found without reading or counting anything.
    #[inline(always)]
    pub(super) fn pmd_if_remembered(&mut self, mm: MmId, addr: u64) -> Option<PmdPtr> {
        let g = self.arch.granule();
        let root = self.mm(mm).pgd_table;
        let table = (self.pgtable_hint).remembered_path(&self.arch.hw.mem, root, path_key(g, addr, 2))?;
        Some(PmdPtr {
            table,
            index: g.index(addr, 2),
        })
    }

    /// The reads of a walk to a pmd along a remembered path: its upper entries, which
    /// read as they did when the path was remembered (tables).
    #[inline(always)]
    pub(super) fn count_upper_reads(&mut self, g: Granule) {
        for level in g.start_level()..2 {
            self.arch.hw.ev.inc(read_event(level));
        }
    }

    /// walk_page_range at pmd granularity: call `f(kernel, pmd, value, addr, next)` for
    /// every pmd of [start, end) whose upper tables exist, `[addr, next)` being the
    /// part of the range under it. `f` returns false to stop the walk (which then
    /// returns false).
    pub fn walk_pmd_range(
        &mut self,
        mm: MmId,
        start: u64,
        end: u64,
        mut f: impl FnMut(&mut Kernel, PmdPtr, Desc, u64, u64) -> bool,
    ) -> bool {
        let pmd_size = self.arch.granule().pmd_size();
        let mut addr = start;
        while addr < end {
            let next = ((addr + pmd_size) & !(pmd_size - 1)).min(end);
            if let Some(pmd) = self.pmd_offset(mm, addr) {
                let d = self.pxd_get(2, pmd);
                if !f(self, pmd, d, addr, next) {
                    return false;
                }
            }
            addr = next;
        }
        true
    }

    /// pte_offset_map: the pte for `addr` if the pmd points at a pte table.
    #[inline]
    pub fn pte_offset_map(&mut self, pmd: PmdPtr, addr: u64) -> Option<PtePtr> {
        let g = self.arch.granule();
        let d = self.pxd_get(2, pmd);
        d.is_table(2).then(|| PtePtr {
            table: self.table_of(2, d),
            index: g.index(addr, 3),
        })
    }

    /// __pte_alloc: give an empty pmd a pte table (no-op if one appeared).
    pub fn pte_alloc(&mut self, mm: MmId, pmd: PmdPtr, addr: u64) -> bool {
        let g = self.arch.granule();
        if !self.pxd_get(2, pmd).is_none() {
            return true;
        }
        let Some((pfn, _)) = self.pgtable_alloc(3) else {
            return false;
        };
        self.mms[mm].as_mut().unwrap().nr_ptes += 1;
        self.pxd_set(2, addr, pmd, Desc::table(pfn.to_phys(g)));
        true
    }

    /// pte_offset_map after pte_alloc, for paths that know the pmd is a table.
    pub fn pte_offset(&mut self, mm: MmId, addr: u64) -> Option<PtePtr> {
        let pmd = self.pmd_offset(mm, addr)?;
        self.pte_offset_map(pmd, addr)
    }
}
