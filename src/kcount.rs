//! The kernel's own work: how often the mm and arch code ran the functions where the
//! seeds' changes differ, named as the kernel names them (`kernel.<function>`; a
//! `.pages` / `.ptes` key is the number of pages / ptes those calls covered).
//! Architectural events (`arch.*`) say what the hardware saw; these say what the
//! kernel did to get there (seed 000's order-0 munmap issues the same TLBIs and pte
//! writes in both zap variants, yet runs different code). A `.folio_lookups` key counts
//! the struct pages a function read to find a pte's folio (vm_normal_page or
//! vm_normal_folio finding a page, then page_folio and folio_test_large): a read of
//! the vmemmap, cold in a large mapping, which no pte or TLBI count shows (the 6.17-rc1
//! mremap regression, 0b5be138ce00).
//!
//! `kernel.folio_pte_batch.reads` counts folio_pte_batch's loop steps: each a pte read and
//! compared, or with contpte a whole block (pte_batch_hint), which is how contpte's
//! batched zap does less of this work than a kernel reading every pte (seed 000).
//!
//! The swap cache's keys (`kernel.swap_cache*`) count its structure's work: lookups,
//! additions and deletions (6.18's names; 6.12's are filemap_get_folio on the swap
//! address space, add_to_swap_cache, __delete_from_swap_cache), the slot entries they
//! store, and, by `swap-cache`, the XArray's nodes and lock (up to 6.17) or the
//! cluster's lock (the swap table, 6.18+).
//!
//! The counters live in `Arch` (`arch.kc`), so that the arch code (contpte) and the
//! core mm count into one set; they are not hardware. Counting is an array increment.

use crate::hw::events::counters;

counters! {
    /// One kind of kernel work.
    KernelEvent, KernelEvents {
    HandleMmFault => "kernel.handle_mm_fault",
    DoAnonymousPage => "kernel.do_anonymous_page",
    DoWpPage => "kernel.do_wp_page",
    DoReadFault => "kernel.do_read_fault",
    DoSharedFault => "kernel.do_shared_fault",
    FilemapMapPages => "kernel.filemap_map_pages",
    ShmemFault => "kernel.shmem_fault",
    ShmemSwapinFolio => "kernel.shmem_swapin_folio",
    ShmemWriteout => "kernel.shmem_writeout",
    FolioAddFileRmapPtes => "kernel.folio_add_file_rmap_ptes",
    FolioAlloc => "kernel.folio_alloc",
    FolioAllocPages => "kernel.folio_alloc.pages",
    FolioFree => "kernel.folio_free",
    ZapPteRange => "kernel.zap_pte_range",
    ZapPteRangeLoops => "kernel.zap_pte_range.loops",
    ZapPteRangePtes => "kernel.zap_pte_range.ptes",
    ChangePteRangePtes => "kernel.change_pte_range.ptes",
    ChangePteRangeFolioLookups => "kernel.change_pte_range.folio_lookups",
    MovePtesFolioLookups => "kernel.move_ptes.folio_lookups",
    ZapPresentPtes => "kernel.zap_present_ptes",
    FolioPteBatchReads => "kernel.folio_pte_batch.reads",
    ZapPresentPtesPtes => "kernel.zap_present_ptes.ptes",
    FolioRemoveRmapPtes => "kernel.folio_remove_rmap_ptes",
    FolioRemoveRmapPtesPages => "kernel.folio_remove_rmap_ptes.pages",
    PageRemoveRmap => "kernel.page_remove_rmap",
    TlbRemoveFolioPages => "kernel.tlb_remove_folio_pages",
    FolioRefAtomic => "kernel.folio_ref_atomic",
    FolioMapcountAtomic => "kernel.folio_mapcount_atomic",
    PtepClearFlush => "kernel.ptep_clear_flush",
    ArchTlbbatchAddPending => "kernel.arch_tlbbatch_add_pending",
    ArchTlbbatchFlush => "kernel.arch_tlbbatch_flush",
    FlushTlbBatchedPending => "kernel.flush_tlb_batched_pending",
    ArchFlushTlbBatchedPending => "kernel.arch_flush_tlb_batched_pending",
    ExitMmapBatchedPending => "kernel.exit_mmap.batched_pending",
    FlushTlbMulti => "kernel.flush_tlb_multi",
    FlushTlbFunc => "kernel.flush_tlb_func",
    SwitchMmFlush => "kernel.switch_mm_irqs_off.flush",
    ContpteConvert => "kernel.contpte_convert",
    ContpteTryFold => "kernel.__contpte_try_fold",
    ContpteTryUnfold => "kernel.__contpte_try_unfold",
    ContpteTryUnfoldPartial => "kernel.contpte_try_unfold_partial",
    ContptePtepGet => "kernel.contpte_ptep_get",
    ContpteSetPtes => "kernel.contpte_set_ptes",
    ContpteClearFullPtes => "kernel.contpte_clear_full_ptes",
    ContpteGetAndClearFullPtes => "kernel.contpte_get_and_clear_full_ptes",
    ContpteWrprotectPtes => "kernel.contpte_wrprotect_ptes",
    ContptePtepGetInsns => "kernel.contpte_ptep_get.insns",
    ContptePtepGetInsnsUnmeasured => "kernel.contpte_ptep_get.insns_unmeasured",
    Syscall => "kernel.syscall",
    DupMmap => "kernel.dup_mmap",
    ExitMmap => "kernel.exit_mmap",
    Swapon => "kernel.swapon",
    FolioMcCopy => "kernel.folio_mc_copy",
    FolioMcCopyPages => "kernel.folio_mc_copy.pages",
    SwapCacheGetFolio => "kernel.swap_cache_get_folio",
    SwapCacheAddFolio => "kernel.swap_cache_add_folio",
    SwapCacheDelFolio => "kernel.swap_cache_del_folio",
    SwapCacheSlots => "kernel.swap_cache.slots",
    SwapCacheXaNodes => "kernel.swap_cache.xa_nodes",
    SwapCacheXaLock => "kernel.swap_cache.xa_lock",
    SwapCacheClusterLock => "kernel.swap_cache.cluster_lock",
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn names_are_unique_and_start_with_kernel() {
        crate::hw::events::assert_names_unique(KernelEvent::ALL.iter().map(|e| e.name()), "kernel.");
    }
}
