//! arch/arm64/include/asm/tlb.h: how an mmu_gather is flushed on arm64.

use super::pgtable::Arch;
use super::tlbflush::{__flush_tlb_range, __flush_tlb_range_unsplit, flush_tlb_mm};
use crate::mm::mmu_gather::MmuGather;

/// tlb_get_unmap_size: the stride is the smallest level cleared.
fn tlb_get_unmap_size(arch: &Arch, tlb: &MmuGather) -> u64 {
    let g = arch.granule();
    if tlb.cleared_ptes {
        g.page_size()
    } else if tlb.cleared_pmds {
        g.pmd_size()
    } else if tlb.cleared_puds {
        1 << g.pud_shift()
    } else {
        g.page_size()
    }
}

/// tlb_flush: a fullmm teardown flushes only if tables were freed (the ASID is
/// retired anyway); otherwise one range flush, last-level unless tables were freed.
pub fn tlb_flush(arch: &mut Arch, tlb: &MmuGather) {
    let last_level = !tlb.freed_tables;
    if tlb.fullmm {
        if !last_level {
            flush_tlb_mm(&mut arch.hw, tlb.asid);
        }
        return;
    }
    if tlb.range_is_empty() {
        return;
    }
    let stride = tlb_get_unmap_size(arch, tlb);
    // Only the gather's ranges reach flush_tlb_mm's fallback (the other callers flush
    // a page, a block or a pmd), so only here does the 6.9 split show.
    if arch.flush_range_nosync_split {
        __flush_tlb_range(&mut arch.hw, tlb.asid, tlb.start, tlb.end, stride, last_level);
    } else {
        __flush_tlb_range_unsplit(&mut arch.hw, tlb.asid, tlb.start, tlb.end, stride, last_level);
    }
}
