//! mm/huge_memory.c: PMD-mapped THP faults, the huge zero page, splitting a huge
//! pmd into ptes, zapping a huge pmd, and the deferred split queue.

use super::folio::{PageFlags, NIL};
use super::memory::{vm_page_prot, VmFault};
use super::mm_types::{MmId, VmFlags, Vma};
use super::mmu_gather::MmuGather;
use super::pgtable::PmdPtr;
use super::vmstat::{MthpStat, VmEvent};
use super::Kernel;
use crate::arch::arm64::pgtable::Pte;
use crate::arch::arm64::tlbflush::__flush_tlb_range;
use crate::hw::{Attr, Desc, DescKind, Pfn};

/// A pmd block descriptor from a pte value (pte_pmd / PMD_TYPE_SECT).
fn pte_to_pmd(p: Pte) -> Desc {
    p.0.without(Attr::TABLE_OR_PAGE)
}

/// The pte value that describes the same mapping as a pmd block (pmd_pte).
fn pmd_to_pte(d: Desc) -> Pte {
    Pte(d.with(Attr::TABLE_OR_PAGE))
}

/// flush_pmd_tlb_range: stride PMD_SIZE, level 2.
fn flush_pmd_tlb_range(k: &mut Kernel, mm: MmId, haddr: u64) {
    let pmd_size = k.arch.granule().pmd_size();
    let asid = k.mm(mm).asid;
    __flush_tlb_range(&mut k.arch.hw, asid, haddr, haddr + pmd_size, pmd_size, false);
}

/// Deposit a pte table with a PMD mapping (pgtable_trans_huge_deposit).
fn deposit_pgtable(k: &mut Kernel, mm: MmId, haddr: u64) -> bool {
    let Some((pfn, _)) = k.pgtable_alloc(3) else {
        return false;
    };
    let m = k.mm_mut(mm);
    m.deposited.insert(haddr, pfn);
    m.nr_ptes += 1;
    true
}

/// pgtable_trans_huge_withdraw.
fn withdraw_pgtable(k: &mut Kernel, mm: MmId, haddr: u64) -> Pfn {
    k.mm_mut(mm)
        .deposited
        .remove(&haddr)
        .expect("no page table deposited for this pmd")
}

/// zap_deposited_table: the deposited table was never visible to hardware; free it now.
fn zap_deposited_table(k: &mut Kernel, mm: MmId, haddr: u64) {
    let pfn = withdraw_pgtable(k, mm, haddr);
    k.mm_mut(mm).nr_ptes -= 1;
    k.pgtable_free(pfn);
}

/// mm_get_huge_zero_folio: allocated on first use, kept thereafter.
fn mm_get_huge_zero_folio(k: &mut Kernel) -> Option<Pfn> {
    if let Some(f) = k.huge_zero_folio {
        return Some(f);
    }
    let order = k.arch.granule().pmd_order();
    match k.folio_alloc(order) {
        Some(f) => {
            k.memmap.folio_set(f, PageFlags::RESERVED);
            k.stat.count_vm_event(VmEvent::ThpZeroPageAlloc);
            k.huge_zero_folio = Some(f);
            Some(f)
        }
        None => {
            k.stat.count_vm_event(VmEvent::ThpZeroPageAllocFailed);
            None
        }
    }
}

fn is_huge_zero_pmd(k: &Kernel, d: Desc) -> bool {
    let g = k.arch.granule();
    k.huge_zero_folio.is_some_and(|f| d.pfn(g) == f)
}

/// do_huge_pmd_anonymous_page: the huge zero page for reads (use_zero_page), else a
/// PMD-order folio; falls back to the pte path when unsuitable or out of memory.
pub fn do_huge_pmd_anonymous_page(k: &mut Kernel, mm: MmId, vma: &Vma, pmd: PmdPtr, addr: u64, write: bool) -> VmFault {
    let g = k.arch.granule();
    let order = g.pmd_order();
    let haddr = addr & !(g.pmd_size() - 1);
    if k.thp_vma_suitable_orders(vma, addr, 1 << order) == 0 {
        return VmFault::Fallback;
    }
    let prot = vm_page_prot(vma);
    if !write && k.knobs.use_zero_page {
        let Some(zero) = mm_get_huge_zero_folio(k) else {
            k.stat.count_vm_event(VmEvent::ThpFaultFallback);
            return VmFault::Fallback;
        };
        if !deposit_pgtable(k, mm, haddr) {
            return VmFault::Oom;
        }
        let entry = pte_to_pmd(Pte::pfn_pte(zero, prot, g).pte_mkspecial());
        k.pxd_set(2, haddr, pmd, entry);
        return VmFault::Done;
    }
    let Some(folio) = vma_alloc_anon_folio_pmd(k) else { return VmFault::Fallback };
    if !deposit_pgtable(k, mm, haddr) {
        k.folio_put(folio);
        return VmFault::Oom;
    }
    map_anon_folio_pmd_pf(k, mm, vma, folio, pmd, haddr);
    VmFault::Done
}

/// vma_alloc_anon_folio_pmd: a PMD-order folio, counting the fallback on failure.
fn vma_alloc_anon_folio_pmd(k: &mut Kernel) -> Option<Pfn> {
    let order = k.arch.granule().pmd_order();
    let folio = k.folio_alloc(order);
    if folio.is_none() {
        k.stat.count_vm_event(VmEvent::ThpFaultFallback);
        k.stat.count_mthp_stat(order, MthpStat::AnonFaultFallback);
    }
    folio
}

/// map_anon_folio_pmd_pf: map a new exclusive THP with a pmd and count the fault.
fn map_anon_folio_pmd_pf(k: &mut Kernel, mm: MmId, vma: &Vma, folio: Pfn, pmd: PmdPtr, haddr: u64) {
    let g = k.arch.granule();
    let order = g.pmd_order();
    let mut entry = Pte::pfn_pte(folio, vm_page_prot(vma), g);
    if vma.flags.contains(VmFlags::WRITE) {
        entry = entry.pte_mkdirty().pte_mkwrite();
    }
    k.folio_add_new_anon_rmap(folio, true);
    k.pxd_set(2, haddr, pmd, pte_to_pmd(entry));
    deferred_split_folio(k, folio, false);
    k.mm_mut(mm).rss_anon += 1 << order;
    k.stat.count_vm_event(VmEvent::ThpFaultAlloc);
    k.stat.count_mthp_stat(order, MthpStat::AnonFaultAlloc);
}

/// do_huge_pmd_wp_page: a write to the huge zero page gets a new THP (6.12+,
/// do_huge_zero_wp_pmd); an exclusive THP is reused; otherwise (or when no THP can be
/// allocated) the pmd is split and the pte path copies.
pub fn do_huge_pmd_wp_page(k: &mut Kernel, mm: MmId, vma: &Vma, pmd: PmdPtr, addr: u64) -> VmFault {
    let g = k.arch.granule();
    let d = k.pxd_get(2, pmd);
    if is_huge_zero_pmd(k, d) {
        if let Some(folio) = vma_alloc_anon_folio_pmd(k) {
            let haddr = addr & !(g.pmd_size() - 1);
            // pmdp_huge_clear_flush, keeping the deposited table.
            k.pxd_set(2, haddr, pmd, Desc::ZERO);
            flush_pmd_tlb_range(k, mm, haddr);
            map_anon_folio_pmd_pf(k, mm, vma, folio, pmd, haddr);
            return VmFault::Done;
        }
    } else {
        let folio = d.pfn(g);
        if k.memmap.page(folio).flags.contains(PageFlags::ANON_EXCLUSIVE) {
            let haddr = addr & !(g.pmd_size() - 1);
            let entry = pmd_to_pte(d).pte_mkyoung().pte_mkdirty().pte_mkwrite();
            k.pxd_set(2, haddr, pmd, pte_to_pmd(entry));
            return VmFault::Done;
        }
    }
    __split_huge_pmd(k, mm, vma, pmd, addr);
    VmFault::Fallback
}

/// __split_huge_pmd: replace a huge pmd by a pte table mapping the same pages (the
/// huge zero page becomes zero-page ptes). The folio stays whole, now pte-mapped.
pub fn __split_huge_pmd(k: &mut Kernel, mm: MmId, vma: &Vma, pmd: PmdPtr, addr: u64) {
    let g = k.arch.granule();
    let haddr = addr & !(g.pmd_size() - 1);
    let nr = 1usize << g.pmd_order();
    let old = k.pxd_get(2, pmd);
    if !matches!(old.kind(2, g), DescKind::Block(_)) {
        return;
    }
    k.stat.count_vm_event(VmEvent::ThpSplitPmd);
    let amm = k.arch_mm(mm);
    let prot = vm_page_prot(vma);
    if is_huge_zero_pmd(k, old) {
        // pmdp_huge_clear_flush.
        k.pxd_set(2, haddr, pmd, Desc::ZERO);
        flush_pmd_tlb_range(k, mm, haddr);
        let table = withdraw_pgtable(k, mm, haddr);
        let tid = k.arch.hw.mem.table_id(table).unwrap();
        let ps = g.page_size();
        let entry = Pte::pfn_pte(k.zero_pfn, prot, g).pte_mkspecial();
        for i in 0..nr {
            k.arch.set_ptes(
                amm,
                haddr + i as u64 * ps,
                crate::arch::arm64::pgtable::PtePtr { table: tid, index: i },
                entry,
                1,
                None,
            );
        }
        k.pxd_set(2, haddr, pmd, Desc::table(table.to_phys(g)));
        return;
    }
    // pmdp_invalidate: keep it present-invalid while the ptes are built.
    let oldp = pmd_to_pte(old);
    k.pxd_set(2, haddr, pmd, old.without(Attr::VALID).with(Attr::NG));
    flush_pmd_tlb_range(k, mm, haddr);
    let folio = old.pfn(g);
    let exclusive = k.memmap.page(folio).flags.contains(PageFlags::ANON_EXCLUSIVE);
    k.memmap.folio_ref_add(folio, nr as i32 - 1);
    k.folio_add_anon_rmap_ptes(folio, folio, nr as u64, exclusive);
    let table = withdraw_pgtable(k, mm, haddr);
    let tid = k.arch.hw.mem.table_id(table).unwrap();
    let mut entry = Pte::pfn_pte(folio, prot, g);
    if oldp.pte_write() {
        entry = entry.pte_mkwrite();
    }
    if !oldp.pte_young() {
        entry = entry.pte_mkold();
    }
    if oldp.pte_dirty() {
        entry = entry.pte_mkdirty();
    }
    k.arch.set_ptes(
        amm,
        haddr,
        crate::arch::arm64::pgtable::PtePtr { table: tid, index: 0 },
        entry,
        nr,
        Some((folio, nr as u64)),
    );
    k.folio_remove_rmap_pmd(folio);
    k.pxd_set(2, haddr, pmd, Desc::table(table.to_phys(g)));
}

/// split_huge_pmd_address: split a huge pmd straddling `addr` (a VMA edge to be).
pub fn split_huge_pmd_address(k: &mut Kernel, mm: MmId, vma: &Vma, addr: u64) {
    let g = k.arch.granule();
    let pmd_size = g.pmd_size();
    if addr & (pmd_size - 1) == 0 {
        return;
    }
    let haddr = addr & !(pmd_size - 1);
    if haddr < vma.start || haddr + pmd_size > vma.end {
        return;
    }
    if let Some(pmd) = k.pmd_offset(mm, addr) {
        __split_huge_pmd(k, mm, vma, pmd, addr);
    }
}

/// zap_huge_pmd: unmap a whole huge pmd.
pub fn zap_huge_pmd(k: &mut Kernel, tlb: &mut MmuGather, mm: MmId, pmd: PmdPtr, addr: u64) {
    let g = k.arch.granule();
    let haddr = addr & !(g.pmd_size() - 1);
    let old = k.pxd_get(2, pmd);
    k.pxd_set(2, haddr, pmd, Desc::ZERO);
    tlb.flush_pmd_range(haddr, g.pmd_size());
    zap_deposited_table(k, mm, haddr);
    if is_huge_zero_pmd(k, old) {
        return;
    }
    let folio = old.pfn(g);
    k.folio_remove_rmap_pmd(folio);
    k.mm_mut(mm).rss_anon -= 1 << g.pmd_order();
    if tlb.remove_folio_pages(folio, 1) {
        k.tlb_flush_mmu(tlb);
    }
}

/// deferred_split_folio: queue a large anon folio for the split shrinker; the first
/// time it is seen partially mapped, mark it and count split_deferred.
pub fn deferred_split_folio(k: &mut Kernel, folio: Pfn, partially_mapped: bool) {
    let order = k.memmap.folio_order(folio);
    if order <= 1 {
        return;
    }
    if !partially_mapped && !k.knobs.shrink_underused {
        return;
    }
    if partially_mapped && !k.memmap.folio_test(folio, PageFlags::PARTIALLY_MAPPED) {
        k.memmap.folio_set(folio, PageFlags::PARTIALLY_MAPPED);
        if order == k.arch.granule().pmd_order() {
            k.stat.count_vm_event(VmEvent::ThpDeferredSplitPage);
        }
        k.stat.count_mthp_stat(order, MthpStat::SplitDeferred);
        k.stat.mod_mthp_stat(order, MthpStat::NrAnonPartiallyMapped, 1);
    }
    if !k.memmap.folio_test(folio, PageFlags::DEFERRED) {
        k.memmap.folio_set(folio, PageFlags::DEFERRED);
        let tail = k.ds_queue.tail;
        {
            let p = k.memmap.page_mut(folio);
            p.lru_prev = tail;
            p.lru_next = NIL;
        }
        if tail == NIL {
            k.ds_queue.head = folio.0 as u32;
        } else {
            k.memmap.page_mut(Pfn(tail as u64)).lru_next = folio.0 as u32;
        }
        k.ds_queue.tail = folio.0 as u32;
        k.ds_queue.len += 1;
    }
}

/// folio_unqueue_deferred_split: take a folio off the queue (freed or split).
pub fn folio_unqueue_deferred_split(k: &mut Kernel, folio: Pfn) {
    if !k.memmap.folio_test(folio, PageFlags::DEFERRED) {
        return;
    }
    let order = k.memmap.folio_order(folio);
    if k.memmap.folio_test(folio, PageFlags::PARTIALLY_MAPPED) {
        k.memmap.folio_clear(folio, PageFlags::PARTIALLY_MAPPED);
        k.stat.mod_mthp_stat(order, MthpStat::NrAnonPartiallyMapped, -1);
    }
    k.memmap.folio_clear(folio, PageFlags::DEFERRED);
    let (prev, next) = {
        let p = k.memmap.page(folio);
        (p.lru_prev, p.lru_next)
    };
    if prev == NIL {
        k.ds_queue.head = next;
    } else {
        k.memmap.page_mut(Pfn(prev as u64)).lru_next = next;
    }
    if next == NIL {
        k.ds_queue.tail = prev;
    } else {
        k.memmap.page_mut(Pfn(next as u64)).lru_prev = prev;
    }
    k.ds_queue.len -= 1;
}
