//! mm/mmu_gather.c + include/asm-generic/tlb.h: gathering pages and page tables to
//! free until the TLB has been flushed.
//!
//! ```text
//!  local batch (MMU_GATHER_BUNDLE = 8 slots) -> batch 1 -> ... -> batch N
//!  each allocated batch: MAX_GATHER_BATCH = (PAGE_SIZE - 16) / 8 slots (510 for 4K)
//!  N <= MAX_GATHER_BATCH_COUNT = 10000 / MAX_GATHER_BATCH; a page takes 1 slot, a
//!  large-folio batch 2 (page + nr_pages); a batch counts as full one slot early.
//! ```

use super::mm_types::MmId;
use super::Kernel;
use crate::arch::arm64::tlb::tlb_flush;
use crate::hw::{Asid, Pfn};
use crate::kcount::KernelEvent;

pub const MMU_GATHER_BUNDLE: usize = 8;

/// One gathered entry: `nr` pages from `page` of one folio.
#[derive(Clone, Copy, Debug)]
struct Gathered {
    folio: Pfn,
    nr: u32,
}

/// The storage of a gather's page list, empty between gathers.
#[derive(Default)]
pub struct GatherPages(Vec<Gathered>);

pub struct MmuGather {
    pub asid: Asid,
    pub fullmm: bool,
    /// Range to flush, [start, end); start == u64::MAX when empty.
    pub start: u64,
    pub end: u64,
    pub freed_tables: bool,
    pub cleared_ptes: bool,
    pub cleared_pmds: bool,
    pub cleared_puds: bool,
    /// Slots used per batch; [0] is the local batch.
    batch_nr: Vec<usize>,
    batch_max: Vec<usize>,
    active: usize,
    /// What the batches hold, in order.
    pages: Vec<Gathered>,
    /// Page tables waiting for the flush.
    tables: Vec<Pfn>,
    /// Pages whose rmap removal waits for the TLB flush (delay_rmap: a dirty file pte,
    /// whose folio could otherwise be written back while a CPU still writes through a
    /// stale entry); only in the local and active batches (tlb_next_batch refuses more).
    delayed: Vec<(Pfn, u32)>,
    max_gather_batch: usize,
    max_gather_batch_count: usize,
}

impl MmuGather {
    /// tlb_gather_mmu / tlb_gather_mmu_fullmm.
    pub fn new(asid: Asid, fullmm: bool, page_size: u64) -> MmuGather {
        let max_gather_batch = (page_size as usize - 16) / 8;
        MmuGather {
            asid,
            fullmm,
            start: u64::MAX,
            end: 0,
            freed_tables: false,
            cleared_ptes: false,
            cleared_pmds: false,
            cleared_puds: false,
            batch_nr: vec![0],
            batch_max: vec![MMU_GATHER_BUNDLE],
            active: 0,
            pages: Vec::new(),
            tables: Vec::new(),
            delayed: Vec::new(),
            max_gather_batch,
            max_gather_batch_count: 10000 / max_gather_batch,
        }
    }

    /// __tlb_adjust_range.
    #[inline]
    pub fn adjust_range(&mut self, addr: u64, size: u64) {
        self.start = self.start.min(addr);
        self.end = self.end.max(addr + size);
    }

    /// tlb_remove_tlb_entries: `nr` ptes from `addr` were cleared.
    #[inline]
    pub fn remove_tlb_entries(&mut self, addr: u64, nr: u64, page_size: u64) {
        self.adjust_range(addr, nr * page_size);
        self.cleared_ptes = true;
    }

    /// tlb_flush_pmd_range.
    #[inline]
    pub fn flush_pmd_range(&mut self, addr: u64, size: u64) {
        self.adjust_range(addr, size);
        self.cleared_pmds = true;
    }

    /// tlb_flush_pud_range.
    #[inline]
    pub fn flush_pud_range(&mut self, addr: u64, size: u64) {
        self.adjust_range(addr, size);
        self.cleared_puds = true;
    }

    /// tlb->delayed_rmap: rmaps wait for the flush (the zap must flush before it drops
    /// the page table lock).
    pub fn delayed_rmap(&self) -> bool {
        !self.delayed.is_empty()
    }

    pub fn range_is_empty(&self) -> bool {
        self.start >= self.end
    }

    /// __tlb_reset_range.
    pub fn reset_range(&mut self) {
        self.start = u64::MAX;
        self.end = 0;
        self.freed_tables = false;
        self.cleared_ptes = false;
        self.cleared_pmds = false;
        self.cleared_puds = false;
    }

    /// tlb_next_batch: move to (or allocate) the next batch; false at the count limit,
    /// or with delayed rmaps past the local batch.
    fn next_batch(&mut self) -> bool {
        if !self.delayed.is_empty() && self.active != 0 {
            return false;
        }
        if self.active + 1 < self.batch_nr.len() {
            self.active += 1;
            return true;
        }
        if self.batch_nr.len() - 1 == self.max_gather_batch_count {
            return false;
        }
        self.batch_nr.push(0);
        self.batch_max.push(self.max_gather_batch);
        self.active += 1;
        true
    }

    /// __tlb_remove_folio_pages: gather `nr` pages of `folio`; true when the gather
    /// is full and the caller must flush. Once per zapped folio: inline(always), as
    /// plain inline still left a call (callgrind).
    #[inline(always)]
    pub fn remove_folio_pages(&mut self, folio: Pfn, nr: u32, delay_rmap: bool) -> bool {
        self.batch_nr[self.active] += Self::slots(nr);
        self.pages.push(Gathered { folio, nr });
        if delay_rmap {
            self.delayed.push((folio, nr));
        }
        if self.batch_nr[self.active] >= self.batch_max[self.active] - 1 && !self.next_batch() {
            return true;
        }
        false
    }

    /// The batch slots `nr` pages of one folio take: the page, and the count in a
    /// second slot when more than one (ENCODED_PAGE_BIT_NR_PAGES_NEXT).
    #[inline(always)]
    pub fn slots(nr: u32) -> usize {
        if nr == 1 {
            1
        } else {
            2
        }
    }

    /// MAX_TABLE_BATCH: the page tables one batch page holds (a page of pointers
    /// after struct mmu_table_batch's rcu_head and count).
    pub fn max_table_batch(page_size: u64) -> usize {
        ((page_size - 24) / 8) as usize
    }
}

impl Kernel {
    /// __tlb_remove_folio_pages, counting the batch slots it uses.
    #[inline(always)]
    pub fn __tlb_remove_folio_pages(&mut self, tlb: &mut MmuGather, folio: Pfn, nr: u32, delay_rmap: bool) -> bool {
        self.arch
            .kc
            .add(KernelEvent::TlbRemoveFolioPages, MmuGather::slots(nr) as u64);
        tlb.remove_folio_pages(folio, nr, delay_rmap)
    }

    /// tlb_flush_rmaps: the rmap removals the flush was waited for (order-0 pages:
    /// the folio is the page).
    pub fn tlb_flush_rmaps(&mut self, tlb: &mut MmuGather, mm: MmId) {
        for (folio, nr) in std::mem::take(&mut tlb.delayed) {
            self.folio_remove_rmap_ptes(folio, folio, nr as u64, mm);
        }
    }

    /// tlb_gather_mmu / tlb_gather_mmu_fullmm for `mm`. The page list reuses the last
    /// gather's storage: a full gather holds ~9,700 entries, which the host would
    /// otherwise allocate and fault in afresh for every unmap.
    pub fn tlb_gather_mmu(&mut self, mm: MmId, fullmm: bool) -> MmuGather {
        let mut tlb = MmuGather::new(self.mm(mm).asid, fullmm, self.arch.granule().page_size());
        tlb.pages = std::mem::take(&mut self.gather_pages.0);
        tlb
    }

    /// tlb_remove_table: a page table to free after the flush. A full batch is
    /// flushed at once (tlb_table_flush: tlb_table_invalidate, then the tables go),
    /// and the range starts afresh: unmapping 1 GiB frees 512 pte tables and flushes
    /// twice, as the 6.12 guest does.
    pub fn tlb_remove_table(&mut self, tlb: &mut MmuGather, table: Pfn) {
        tlb.tables.push(table);
        if tlb.tables.len() == MmuGather::max_table_batch(self.arch.granule().page_size()) {
            self.tlb_flush_mmu_tlbonly(tlb);
            for t in tlb.tables.drain(..) {
                self.pgtable_free(t);
            }
        }
    }

    /// tlb_flush_mmu_tlbonly: flush the gathered range if anything was cleared.
    pub fn tlb_flush_mmu_tlbonly(&mut self, tlb: &mut MmuGather) {
        if !(tlb.freed_tables || tlb.cleared_ptes || tlb.cleared_pmds || tlb.cleared_puds) {
            return;
        }
        tlb_flush(&mut self.arch, tlb);
        tlb.reset_range();
    }

    /// tlb_flush_mmu_free: free the gathered tables and pages. The buffers keep their
    /// capacity: a full gather is ~160 KiB, which the host allocator would otherwise
    /// map and fault in afresh for every batch.
    fn tlb_flush_mmu_free(&mut self, tlb: &mut MmuGather) {
        for t in tlb.tables.drain(..) {
            self.pgtable_free(t);
        }
        // free_pages_and_swap_cache: an unmapped folio leaves the swap cache first.
        for g in &tlb.pages {
            self.free_swap_cache(g.folio);
        }
        self.folios_put_refs(tlb.pages.drain(..).map(|g| (g.folio, g.nr as i32)));
        tlb.batch_nr.iter_mut().for_each(|n| *n = 0);
        tlb.active = 0;
    }

    /// tlb_flush_mmu.
    pub fn tlb_flush_mmu(&mut self, tlb: &mut MmuGather) {
        self.tlb_flush_mmu_tlbonly(tlb);
        self.tlb_flush_mmu_free(tlb);
    }

    /// tlb_finish_mmu; the emptied page list is kept for the next gather.
    pub fn tlb_finish_mmu(&mut self, mut tlb: MmuGather) {
        self.tlb_flush_mmu(&mut tlb);
        self.gather_pages.0 = tlb.pages;
    }

    /// tlb_end_vma: flush at each VMA boundary unless tearing down the whole mm.
    pub fn tlb_end_vma(&mut self, tlb: &mut MmuGather) {
        if tlb.fullmm {
            return;
        }
        self.tlb_flush_mmu_tlbonly(tlb);
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn order0_capacity_before_a_forced_flush() {
        // 7 in the local batch, then 19 batches of 509 usable slots.
        let mut tlb = MmuGather::new(1, false, 4096);
        let mut n = 0;
        while !tlb.remove_folio_pages(Pfn(100), 1, false) {
            n += 1;
        }
        assert_eq!(n + 1, 7 + 19 * 509);
    }

    #[test]
    fn large_folio_batches_take_two_slots() {
        let mut tlb = MmuGather::new(1, false, 4096);
        let mut n = 0;
        while !tlb.remove_folio_pages(Pfn(100), 16, false) {
            n += 1;
        }
        // Local: 3 entries (6 slots reach max-1 = 7? no: 6 < 7, 8 >= 7 -> 4 entries).
        assert_eq!(n + 1, 4 + 19 * 255);
    }
}
