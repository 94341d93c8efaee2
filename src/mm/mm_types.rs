//! include/linux/mm_types.h: mm_struct and vm_area_struct.

use crate::hw::{Asid, Pfn, TableId};
use bitflags::bitflags;
use std::cell::Cell;
use std::collections::BTreeMap;

bitflags! {
    #[derive(Clone, Copy, Debug, PartialEq, Eq, Hash)]
    pub struct VmFlags: u32 {
        const READ = 1 << 0;
        const WRITE = 1 << 1;
        const EXEC = 1 << 2;
        /// MAP_SHARED: writes go to the object, fork shares the pages (no CoW).
        const SHARED = 1 << 3;
        const MAYREAD = 1 << 4;
        const MAYWRITE = 1 << 5;
        const MAYSHARE = 1 << 7;
        const LOCKED = 1 << 13;
        const HUGEPAGE = 1 << 29;
        const NOHUGEPAGE = 1 << 30;
    }
}

/// A private anonymous VMA, or a shared anonymous one (`file`: shmem_zero_setup's
/// inode).
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub struct Vma {
    pub start: u64,
    pub end: u64,
    pub flags: VmFlags,
    /// The anon_vma, by id: set by the first fault that maps an anon folio
    /// (anon_vma_prepare); fork copies page tables only of VMAs that have one.
    pub anon_vma: Option<u64>,
    /// vm_pgoff: the page offset of `start`; an anonymous VMA's is its start page at
    /// mmap, kept by mremap, so a moved VMA merges only with what continues it.
    pub pgoff: u64,
    /// swap_readahead_info: swap readahead's state (swap_state.rs), copied by fork
    /// and splits as vm_area_dup copies it.
    pub swap_readahead_info: u64,
    /// vm_file: the shmem inode behind a MAP_SHARED|MAP_ANONYMOUS mapping; its page
    /// cache index of `start` is `pgoff`.
    pub file: Option<u32>,
}

impl Vma {
    pub fn contains(&self, addr: u64) -> bool {
        self.start <= addr && addr < self.end
    }
    pub fn len(&self) -> u64 {
        self.end - self.start
    }
    pub fn is_empty(&self) -> bool {
        self.start == self.end
    }
    /// vma_is_shmem.
    pub fn is_shmem(&self) -> bool {
        self.file.is_some()
    }
    /// linear_page_index: the file index `addr` maps (shift: the page shift).
    pub fn linear_page_index(&self, addr: u64, shift: u32) -> u64 {
        self.pgoff + ((addr - self.start) >> shift)
    }
}

/// Index of an mm in the kernel's table.
pub type MmId = usize;

pub struct MmStruct {
    pub asid: Asid,
    /// The top-level table (pgd).
    pub pgd: Pfn,
    pub pgd_table: TableId,
    /// VMAs by start address; changed only through `vmas_mut`, which drops `vmacache`.
    vmas: BTreeMap<u64, Vma>,
    /// The VMA the last find_vma returned (the old per-task vmacache, one entry): a
    /// fault stream stays in one VMA, and the tree walk costs more than the fault's
    /// own page-table reads.
    vmacache: Cell<Option<Vma>>,
    /// Bumped by every `vmas_mut`, as the kernel's mm_lock_seq moves on when a writer
    /// of the VMAs lets go of the mmap lock: a copy of a VMA taken at one value is
    /// the tree's while it holds.
    vma_seq: u64,
    /// MM_ANONPAGES.
    pub rss_anon: i64,
    /// MM_SHMEMPAGES: shmem pages mapped.
    pub rss_shmem: i64,
    /// MM_SWAPENTS: ptes holding a swap entry.
    pub rss_swap: i64,
    /// Page-table pages below the pgd, for the invariant checks.
    pub nr_ptes: i64,
    pub nr_pmds: i64,
    /// Page tables deposited with PMD-mapped THPs (pgtable_trans_huge_deposit), by pmd address.
    pub deposited: BTreeMap<u64, Pfn>,
    /// The owning task's minor faults (each model process has one mm).
    pub min_flt: u64,
    /// Its major faults (a swap-in from the device).
    pub maj_flt: u64,
    /// tlb_flush_batched: pending generations of deferred reclaim flushes (seed 001).
    pub tlb_flush_pending: u64,
    pub tlb_flush_done: u64,
}

impl MmStruct {
    /// An address space with no VMAs yet.
    pub fn new(asid: Asid, pgd: Pfn, pgd_table: TableId) -> MmStruct {
        MmStruct {
            asid,
            pgd,
            pgd_table,
            vmas: BTreeMap::new(),
            vmacache: Cell::new(None),
            vma_seq: 0,
            rss_anon: 0,
            rss_shmem: 0,
            rss_swap: 0,
            nr_ptes: 0,
            nr_pmds: 0,
            deposited: BTreeMap::new(),
            min_flt: 0,
            maj_flt: 0,
            tlb_flush_pending: 0,
            tlb_flush_done: 0,
        }
    }
    /// The VMAs by start address.
    pub fn vmas(&self) -> &BTreeMap<u64, Vma> {
        &self.vmas
    }
    /// The VMAs, to change (vmacache_invalidate).
    pub fn vmas_mut(&mut self) -> &mut BTreeMap<u64, Vma> {
        self.vmacache.set(None);
        self.vma_seq += 1;
        &mut self.vmas
    }
    /// The VMA tree's sequence (`vma_seq`).
    #[inline]
    pub fn vma_seq(&self) -> u64 {
        self.vma_seq
    }
    /// find_vma: the VMA containing `addr`.
    #[inline]
    pub fn find_vma(&self, addr: u64) -> Option<Vma> {
        match self.vmacache.get() {
            Some(v) if v.contains(addr) => Some(v),
            _ => self.find_vma_slow(addr),
        }
    }
    /// find_vma past the vmacache: the tree lookup, which refills it.
    fn find_vma_slow(&self, addr: u64) -> Option<Vma> {
        let v = *self.vmas.range(..=addr).next_back()?.1;
        v.contains(addr).then(|| {
            self.vmacache.set(Some(v));
            v
        })
    }
    /// The VMAs intersecting [start, end), in order.
    pub fn vmas_in(&self, start: u64, end: u64) -> Vec<Vma> {
        let first = self.vmas.range(..=start).next_back().map(|(s, _)| *s).unwrap_or(start);
        self.vmas
            .range(first..end)
            .map(|(_, v)| *v)
            .filter(|v| v.end > start)
            .collect()
    }
    /// The neighbours' edges around [start, end): (prev end, next start).
    pub fn gap_around(&self, start: u64, end: u64) -> (Option<u64>, Option<u64>) {
        let prev = self
            .vmas
            .range(..start)
            .next_back()
            .map(|(_, v)| v.end)
            .filter(|e| *e <= start);
        let next = self.vmas.range(end..).next().map(|(s, _)| *s);
        (prev, next)
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn vma(start: u64, end: u64) -> Vma {
        Vma {
            start,
            end,
            flags: VmFlags::READ | VmFlags::WRITE,
            anon_vma: None,
            pgoff: start >> 12,
            swap_readahead_info: 0,
            file: None,
        }
    }

    #[test]
    fn find_vma_sees_every_change_made_after_it_cached_a_vma() {
        let mut mm = MmStruct::new(1, Pfn(1), TableId::NONE);
        mm.vmas_mut().insert(0x1000, vma(0x1000, 0x9000));
        assert_eq!(mm.find_vma(0x5000), Some(vma(0x1000, 0x9000)));
        // Shrink the cached VMA (a split) and give it an anon_vma.
        let v = mm.vmas_mut().get_mut(&0x1000).unwrap();
        v.end = 0x4000;
        v.anon_vma = Some(7);
        assert_eq!(mm.find_vma(0x5000), None);
        assert_eq!(mm.find_vma(0x3000).and_then(|v| v.anon_vma), Some(7));
        mm.vmas_mut().insert(0x4000, vma(0x4000, 0x9000));
        assert_eq!(mm.find_vma(0x5000), Some(vma(0x4000, 0x9000)));
        mm.vmas_mut().clear();
        assert_eq!(mm.find_vma(0x5000), None);
        assert_eq!(mm.find_vma(0x3000), None);
    }
}
