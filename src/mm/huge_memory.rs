//! mm/huge_memory.c: PMD-mapped THP faults, the huge zero page, splitting a huge
//! pmd into ptes, zapping a huge pmd, and the deferred split queue.

use super::folio::{Links, PageFlags, NIL};
use super::memory::{vm_page_prot, VmFault};
use super::migrate::remove_migration_pte;
use super::mm_types::{MmId, VmFlags, Vma};
use super::mmu_gather::MmuGather;
use super::pgtable::PmdPtr;
use super::rmap::{MigrationEntry, TtuFlags};
use super::vmstat::{MthpStat, VmEvent};
use super::Kernel;
use crate::arch::arm64::pgtable::pmd_trans_huge;
use crate::arch::arm64::pgtable::{MigrationKind, Pte, PtePtr};
use crate::arch::arm64::tlbflush::__flush_tlb_range;
use crate::arch::arm64::tlbflush::pte_needs_flush;
use crate::hw::{Attr, Desc, Pfn};

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

/// pmdp_clear_flush_young (generic): clear the pmd's accessed flag; if it was set,
/// flush_pmd_tlb_range. Returns whether it was set.
pub fn pmdp_clear_flush_young(k: &mut Kernel, mm: MmId, pmd: PmdPtr, haddr: u64) -> bool {
    let d = k.pxd_get(2, pmd);
    if !d.has(Attr::AF) {
        return false;
    }
    k.pxd_set(2, haddr, pmd, d.without(Attr::AF));
    flush_pmd_tlb_range(k, mm, haddr);
    true
}

/// pmdp_invalidate: the pmd made present-invalid (still a THP to software walkers,
/// not to the MMU), then flush_pmd_tlb_range. Returns the old pmd.
pub fn pmdp_invalidate(k: &mut Kernel, mm: MmId, pmd: PmdPtr, haddr: u64) -> Desc {
    let old = k.pxd_get(2, pmd);
    k.pxd_set(2, haddr, pmd, old.without(Attr::VALID).with(Attr::NG));
    flush_pmd_tlb_range(k, mm, haddr);
    old
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

/// get_huge_zero_folio (through mm_get_huge_zero_folio): the global huge zero folio,
/// allocated and zeroed on first use, kept thereafter (the model has no shrinker to
/// free it). `huge-zero=allocated` calls it at boot, as CONFIG_PERSISTENT_HUGE_ZERO_FOLIO
/// does, or as a host that used it before the run still has it.
pub fn get_huge_zero_folio(k: &mut Kernel) -> Option<Pfn> {
    if let Some(f) = k.huge_zero_folio {
        return Some(f);
    }
    let order = k.arch.granule().pmd_order();
    match k.folio_alloc(order) {
        Some(f) => {
            k.arch.clear_pages(1 << order);
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
    k.anon_vma_prepare(mm, vma);
    k.khugepaged_enter_vma(mm, vma);
    let prot = vm_page_prot(vma);
    if !write && k.knobs.use_zero_page {
        let Some(zero) = get_huge_zero_folio(k) else {
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
    let Some(folio) = vma_alloc_anon_folio_pmd(k) else {
        return VmFault::Fallback;
    };
    if !deposit_pgtable(k, mm, haddr) {
        k.folio_put(folio);
        return VmFault::Oom;
    }
    map_anon_folio_pmd_pf(k, mm, vma, folio, pmd, haddr);
    VmFault::Done
}

/// vma_alloc_anon_folio_pmd: a PMD-order folio, charged, counting the fallback on
/// failure. The charge does not reclaim: the model gives THP faults the gfp of the
/// default defrag without MADV_HUGEPAGE (GFP_TRANSHUGE_LIGHT).
fn vma_alloc_anon_folio_pmd(k: &mut Kernel) -> Option<Pfn> {
    let order = k.arch.granule().pmd_order();
    let charged = match k.folio_alloc(order) {
        Some(f) if k.mem_cgroup_charge(f, false) => Some(f),
        Some(f) => {
            k.folio_put(f);
            k.stat.count_vm_event(VmEvent::ThpFaultFallbackCharge);
            k.stat.count_mthp_stat(order, MthpStat::AnonFaultFallbackCharge);
            None
        }
        None => None,
    };
    match charged {
        // folio_zero_user
        Some(_) => k.arch.clear_pages(1 << order),
        None => {
            k.stat.count_vm_event(VmEvent::ThpFaultFallback);
            k.stat.count_mthp_stat(order, MthpStat::AnonFaultFallback);
        }
    }
    charged
}

/// map_anon_folio_pmd_nopf: map a new exclusive THP with a pmd (fault or collapse).
pub fn map_anon_folio_pmd_nopf(k: &mut Kernel, mm: MmId, vma: &Vma, folio: Pfn, pmd: PmdPtr, haddr: u64) {
    let g = k.arch.granule();
    let mut entry = Pte::pfn_pte(folio, vm_page_prot(vma), g);
    if vma.flags.contains(VmFlags::WRITE) {
        entry = entry.pte_mkdirty().pte_mkwrite();
    }
    k.folio_add_new_anon_rmap(folio, mm, haddr, true);
    k.folio_add_lru(folio);
    k.pxd_set(2, haddr, pmd, pte_to_pmd(entry));
    deferred_split_folio(k, folio, false);
}

/// map_anon_folio_pmd_pf: map_anon_folio_pmd_nopf, counting the fault.
fn map_anon_folio_pmd_pf(k: &mut Kernel, mm: MmId, vma: &Vma, folio: Pfn, pmd: PmdPtr, haddr: u64) {
    let order = k.arch.granule().pmd_order();
    map_anon_folio_pmd_nopf(k, mm, vma, folio, pmd, haddr);
    k.mm_mut(mm).rss_anon += 1 << order;
    k.stat.count_vm_event(VmEvent::ThpFaultAlloc);
    k.stat.count_mthp_stat(order, MthpStat::AnonFaultAlloc);
}

/// do_huge_pmd_wp_page: a write to the huge zero page gets a new THP (6.13+,
/// do_huge_zero_wp_pmd); an exclusive THP, or one whose only reference is this
/// mapping, is reused; otherwise (or when no THP can be allocated) the pmd is split
/// and the pte path copies.
///
/// With `huge_zero_wp_split` (`huge-zero-wp=split`, before 1ced09e0331f "mm:
/// allocate THP on hugezeropage wp-fault", 6.13) the huge zero pmd always goes to
/// the fallback: __split_huge_zero_page_pmd, then do_wp_page copies the one page.
pub fn do_huge_pmd_wp_page(k: &mut Kernel, mm: MmId, vma: &Vma, pmd: PmdPtr, addr: u64) -> VmFault {
    let g = k.arch.granule();
    let d = k.pxd_get(2, pmd);
    if is_huge_zero_pmd(k, d) {
        if k.huge_zero_wp_split {
            // 6.12: `if (is_huge_zero_pmd(orig_pmd)) goto fallback;`
        } else if let Some(folio) = vma_alloc_anon_folio_pmd(k) {
            let haddr = addr & !(g.pmd_size() - 1);
            // pmdp_huge_clear_flush, keeping the deposited table.
            k.pxd_set(2, haddr, pmd, Desc::ZERO);
            flush_pmd_tlb_range(k, mm, haddr);
            map_anon_folio_pmd_pf(k, mm, vma, folio, pmd, haddr);
            return VmFault::Done;
        }
    } else {
        let folio = d.pfn(g);
        if k.memmap.folio_ref_count(folio) == 1 {
            k.memmap.page_mut(folio).flags.insert(PageFlags::ANON_EXCLUSIVE);
        }
        if k.memmap.page(folio).flags.contains(PageFlags::ANON_EXCLUSIVE) {
            let haddr = addr & !(g.pmd_size() - 1);
            let entry = pmd_to_pte(d).pte_mkyoung().pte_mkdirty().pte_mkwrite();
            // pmdp_set_access_flags(.., dirty = 1): a changed entry's stale read-only
            // copy is invalidated (flush_tlb_page; since cb1fa2e99955, 6.19, on this
            // CPU only, over the pmd's range).
            if pte_to_pmd(entry) != d {
                k.pxd_set(2, haddr, pmd, pte_to_pmd(entry));
                let asid = k.mm(mm).asid;
                use crate::arch::arm64::tlbflush::{flush_tlb_page, flush_tlb_range_local};
                if k.arch.wp_flush_local {
                    let cpu = k.arch.cpu;
                    flush_tlb_range_local(&mut k.arch.hw, cpu, asid, haddr, haddr + g.pmd_size(), g.pmd_size());
                } else {
                    flush_tlb_page(&mut k.arch.hw, asid, haddr);
                }
            }
            return VmFault::Done;
        }
    }
    __split_huge_pmd(k, mm, vma, pmd, addr);
    VmFault::Fallback
}

/// __split_huge_pmd: replace a huge pmd by a pte table mapping the same pages (the
/// huge zero page becomes zero-page ptes). The folio stays whole, now pte-mapped.
pub fn __split_huge_pmd(k: &mut Kernel, mm: MmId, vma: &Vma, pmd: PmdPtr, addr: u64) {
    __split_huge_pmd_locked(k, mm, vma, pmd, addr, None);
}

/// split_huge_pmd_locked(.., freeze = true), as try_to_migrate_one does it for a
/// PMD-mapped folio: the pmd goes straight to pte migration entries, so the only TLB
/// maintenance is pmdp_invalidate's pmd flush; no pte is ever valid, so there is no
/// pte TLBI, no contpte fold or unfold and no pte rmap. Appends to `out` where the
/// entries are, for remove_migration_ptes.
pub fn split_huge_pmd_locked_freeze(
    k: &mut Kernel,
    mm: MmId,
    vma: &Vma,
    pmd: PmdPtr,
    haddr: u64,
    out: &mut Vec<MigrationEntry>,
) {
    __split_huge_pmd_locked(k, mm, vma, pmd, haddr, Some(out));
}

/// The pmd_populate(mm, &_pmd, pgtable) of __split_huge_pmd_locked and
/// __split_huge_zero_page_pmd: the ptes are reached through an on-stack pmd built with
/// set_pmd, and a valid table entry costs its DSB ISHST + ISB even there (the real
/// pmd gets its own pair at the end). No page table changes.
fn pmd_populate_on_stack(k: &mut Kernel) {
    k.arch.hw.dsb_ishst();
    k.arch.hw.isb();
}

/// __split_huge_pmd_locked (and __split_huge_zero_page_pmd for the huge zero page).
/// With `freeze`, migration entries are collected instead of present ptes written.
fn __split_huge_pmd_locked(
    k: &mut Kernel,
    mm: MmId,
    vma: &Vma,
    pmd: PmdPtr,
    addr: u64,
    freeze: Option<&mut Vec<MigrationEntry>>,
) {
    let g = k.arch.granule();
    let haddr = addr & !(g.pmd_size() - 1);
    let nr = 1usize << g.pmd_order();
    let ps = g.page_size();
    let old = k.pxd_get(2, pmd);
    if !pmd_trans_huge(old) {
        return;
    }
    let freeze_was_some = freeze.is_some();
    k.stat.count_vm_event(VmEvent::ThpSplitPmd);
    if vma.is_shmem() {
        // !vma_is_anonymous: a file pmd is not split into ptes but zapped
        // (pmdp_huge_clear_flush); the page cache keeps the folio whole. Before the
        // folio rmap API this branch called page_remove_rmap(page, vma, true).
        if k.rmap_page_api {
            k.arch.kc.inc(crate::kcount::KernelEvent::PageRemoveRmap);
        }
        k.pxd_set(2, haddr, pmd, Desc::ZERO);
        flush_pmd_tlb_range(k, mm, haddr);
        zap_file_pmd(k, mm, old);
        let folio = old.pfn(g);
        k.folio_put(folio);
        return;
    }
    let amm = k.arch_mm(mm);
    let prot = vm_page_prot(vma);
    if is_huge_zero_pmd(k, old) {
        // pmdp_huge_clear_flush.
        k.pxd_set(2, haddr, pmd, Desc::ZERO);
        flush_pmd_tlb_range(k, mm, haddr);
        let table = withdraw_pgtable(k, mm, haddr);
        pmd_populate_on_stack(k);
        let tid = k.arch.hw.mem.table_id(table).unwrap();
        let entry = Pte::pfn_pte(k.zero_pfn, prot, g).pte_mkspecial();
        for i in 0..nr {
            k.arch.set_ptes(
                amm,
                haddr + i as u64 * ps,
                PtePtr { table: tid, index: i },
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
    pmdp_invalidate(k, mm, pmd, haddr);
    let folio = old.pfn(g);
    let exclusive = k.memmap.page(folio).flags.contains(PageFlags::ANON_EXCLUSIVE);
    if oldp.pte_dirty() {
        k.memmap.folio_set(folio, PageFlags::DIRTY);
    }
    match freeze {
        // folio_try_share_anon_rmap_pmd: the exclusive bit moves into the entries.
        Some(_) if exclusive => set_anon_exclusive(k, folio, nr as u64, false),
        Some(_) => {}
        None => {
            k.folio_ref_add(folio, nr as i32 - 1);
            k.folio_add_anon_rmap_ptes(folio, folio, nr as u64, mm, exclusive);
        }
    }
    let table = withdraw_pgtable(k, mm, haddr);
    pmd_populate_on_stack(k);
    let tid = k.arch.hw.mem.table_id(table).unwrap();
    match freeze {
        Some(out) => {
            let kind = MigrationKind::of(oldp.pte_write(), exclusive);
            for i in 0..nr {
                let (ptep, addr) = (PtePtr { table: tid, index: i }, haddr + i as u64 * ps);
                let page = Pfn(folio.0 + i as u64);
                let entry = Pte::make_migration_entry(page, kind, oldp.pte_young(), oldp.pte_dirty(), g);
                k.arch.__set_pte(addr, ptep, entry);
                out.push(MigrationEntry {
                    mm,
                    ptep,
                    addr,
                    pmd: false,
                });
            }
        }
        None => {
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
            let ptep = PtePtr { table: tid, index: 0 };
            k.arch.set_ptes(amm, haddr, ptep, entry, nr, Some((folio, nr as u64)));
        }
    }
    k.folio_remove_rmap_pmd(folio, mm);
    if freeze_was_some {
        // The pmd's reference goes with it; remove_migration_pte takes one per pte.
        k.folio_put_refs(folio, 1);
    }
    k.pxd_set(2, haddr, pmd, Desc::table(table.to_phys(g)));
}

/// set_pmd_migration_entry (try_to_migrate of a PMD-mapped THP without
/// TTU_SPLIT_HUGE_PMD): pmdp_invalidate flushes the pmd at once (a pmd's flush is
/// never deferred), the exclusive bit moves into the entry, the pmd becomes a
/// migration entry of the head page, and its rmap and reference go.
pub fn set_pmd_migration_entry(k: &mut Kernel, mm: MmId, pmd: PmdPtr, haddr: u64) {
    let g = k.arch.granule();
    let old = pmdp_invalidate(k, mm, pmd, haddr);
    let oldp = pmd_to_pte(old);
    let folio = old.pfn(g);
    let nr = k.memmap.folio_nr_pages(folio);
    let exclusive = k.memmap.page(folio).flags.contains(PageFlags::ANON_EXCLUSIVE);
    if exclusive {
        set_anon_exclusive(k, folio, nr, false);
    }
    if oldp.pte_dirty() {
        k.memmap.folio_set(folio, PageFlags::DIRTY);
    }
    let kind = MigrationKind::of(oldp.pte_write(), exclusive);
    let entry = Pte::make_migration_entry(folio, kind, oldp.pte_young(), oldp.pte_dirty(), g);
    k.pxd_set(2, haddr, pmd, entry.0);
    k.folio_remove_rmap_pmd(folio, mm);
    k.folio_put_refs(folio, 1);
}

/// remove_migration_pmd: the pmd migration entry at `pmd` maps the THP `dst` again,
/// with what the entry kept: write permission, exclusivity, young and (if the folio
/// is dirty) dirty.
pub fn remove_migration_pmd(k: &mut Kernel, mm: MmId, pmd: PmdPtr, haddr: u64, dst: Pfn) {
    let g = k.arch.granule();
    let old = Pte(k.pxd_get(2, pmd));
    let kind = old.migration_kind().expect("a pmd migration entry");
    let vma = k.mm(mm).find_vma(haddr).expect("a pmd outside any VMA");
    k.folio_ref_add(dst, 1);
    let mut entry = Pte::pfn_pte(dst, vm_page_prot(&vma), g);
    if kind == MigrationKind::Write {
        entry = entry.pte_mkwrite();
    }
    if !old.is_migration_entry_young(g) {
        entry = entry.pte_mkold();
    }
    if k.memmap.folio_test(dst, PageFlags::DIRTY) && old.is_migration_entry_dirty(g) {
        entry = entry.pte_mkdirty();
    }
    k.folio_add_anon_rmap_pmd(dst, mm, kind != MigrationKind::Read);
    k.pxd_set(2, haddr, pmd, pte_to_pmd(entry));
}

/// Set or clear PageAnonExclusive on `nr` pages from `page`.
fn set_anon_exclusive(k: &mut Kernel, page: Pfn, nr: u64, on: bool) {
    for i in 0..nr {
        k.memmap
            .page_mut(Pfn(page.0 + i))
            .flags
            .set(PageFlags::ANON_EXCLUSIVE, on);
    }
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

/// The file side of a cleared pmd (zap_huge_pmd, __split_huge_pmd_locked): its dirt
/// and young bit go to the folio, its rmap and MM_SHMEMPAGES go; the caller drops
/// the pmd's reference. No table was deposited (arm64 does not need one for a file
/// pmd).
fn zap_file_pmd(k: &mut Kernel, mm: MmId, old: Desc) {
    let g = k.arch.granule();
    let folio = old.pfn(g);
    let p = pmd_to_pte(old);
    if p.pte_dirty() {
        k.memmap.folio_set(folio, PageFlags::DIRTY);
    }
    k.folio_remove_rmap_pmd(folio, mm);
    k.mm_mut(mm).rss_shmem -= 1 << g.pmd_order();
}

/// do_set_pmd: map the PMD-order page-cache `folio` (its reference from the fault
/// becomes the pmd's) with one pmd at `addr`'s PMD block, dirty and writable on a
/// write fault, counting thp_file_mapped. Fallback when the block does not lie in
/// the VMA at a matching file offset, the folio is not PMD-sized, or the pmd is
/// no longer none.
pub fn do_set_pmd(k: &mut Kernel, mm: MmId, vma: &Vma, pmd: PmdPtr, addr: u64, folio: Pfn, write: bool) -> VmFault {
    let g = k.arch.granule();
    let order = g.pmd_order();
    let haddr = addr & !(g.pmd_size() - 1);
    let suitable = k.thp_vma_suitable_orders(vma, addr, 1 << order) != 0
        && ((vma.start >> g.page_shift()) - vma.pgoff).is_multiple_of(1 << order);
    if !suitable || k.memmap.folio_order(folio) != order || !k.pxd_get(2, pmd).is_none() {
        return VmFault::Fallback;
    }
    let mut entry = Pte::pfn_pte(folio, vm_page_prot(vma), g);
    if write {
        entry = entry.pte_mkdirty().pte_mkwrite();
    }
    k.mm_mut(mm).rss_shmem += 1 << order;
    k.folio_add_file_rmap_pmd(folio, mm);
    k.pxd_set(2, haddr, pmd, pte_to_pmd(entry));
    k.stat.count_vm_event(VmEvent::ThpFileMapped);
    VmFault::Done
}

/// zap_huge_pmd: unmap a whole huge pmd.
pub fn zap_huge_pmd(k: &mut Kernel, tlb: &mut MmuGather, mm: MmId, pmd: PmdPtr, addr: u64) {
    let g = k.arch.granule();
    let haddr = addr & !(g.pmd_size() - 1);
    let old = k.pxd_get(2, pmd);
    k.pxd_set(2, haddr, pmd, Desc::ZERO);
    tlb.flush_pmd_range(haddr, g.pmd_size());
    let folio = old.pfn(g);
    if !is_huge_zero_pmd(k, old) && k.shmem.folio_inode(folio).is_some() {
        if k.rmap_page_api {
            k.arch.kc.inc(crate::kcount::KernelEvent::PageRemoveRmap);
        }
        zap_file_pmd(k, mm, old);
        if tlb.remove_folio_pages(folio, 1, false) {
            k.tlb_flush_mmu(tlb);
        }
        return;
    }
    zap_deposited_table(k, mm, haddr);
    if is_huge_zero_pmd(k, old) {
        return;
    }
    // page_remove_rmap(page, vma, true) before the folio API; a split's pmd removal
    // was open-coded in __split_huge_pmd_locked, so only the zap counts a call.
    if k.rmap_page_api {
        k.arch.kc.inc(crate::kcount::KernelEvent::PageRemoveRmap);
    }
    k.folio_remove_rmap_pmd(folio, mm);
    k.mm_mut(mm).rss_anon -= 1 << g.pmd_order();
    if tlb.remove_folio_pages(folio, 1, false) {
        k.tlb_flush_mmu(tlb);
    }
}

/// unmap_huge_pmd_locked (__discard_anon_folio_pmd_locked), try_to_unmap_one's
/// `folio_test_lazyfree` branch under `if (!pvmw.pte)` in Debian's 7.0 and 7.2
/// (`lazyfree-pmd=discard`): a lazyfree THP is discarded at its pmd, never split. A
/// folio written since MADV_FREE (its pmd dirty) is marked swap-backed and kept
/// mapped; else the pmd is cleared and flushed (pmdp_huge_clear_flush: one range TLBI
/// at once, none deferred to the batch) and, unless someone else holds a reference,
/// the pmd's rmap, deposited table, rss and reference go; otherwise the pmd is put
/// back. False keeps the folio mapped (walk_abort). The source checks the dirt a
/// second time after the clear, for a CPU that wrote meanwhile: none runs between
/// here. Reclaim never passes TTU_IGNORE_MLOCK, so a locked VMA never gets here
/// and its mlock_drain_local is not needed.
pub fn unmap_huge_pmd_locked(k: &mut Kernel, mm: MmId, pmd: PmdPtr, haddr: u64, folio: Pfn) -> bool {
    let orig = k.pxd_get(2, pmd);
    if pmd_to_pte(orig).pte_dirty() {
        k.memmap.folio_set(folio, PageFlags::DIRTY);
    }
    if k.memmap.folio_test(folio, PageFlags::DIRTY) {
        k.memmap.folio_set(folio, PageFlags::SWAPBACKED);
        return false;
    }
    k.pxd_set(2, haddr, pmd, Desc::ZERO);
    flush_pmd_tlb_range(k, mm, haddr);
    if k.memmap.folio_ref_count(folio) != k.memmap.folio_mapcount(folio) + 1 {
        k.pxd_set(2, haddr, pmd, orig);
        return false;
    }
    k.folio_remove_rmap_pmd(folio, mm);
    zap_deposited_table(k, mm, haddr);
    k.mm_mut(mm).rss_anon -= 1 << k.arch.granule().pmd_order();
    k.folio_put(folio);
    true
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
    // Reclaim is handling a folio in the swap cache: not the shrinker's too.
    if k.memmap.folio_test(folio, PageFlags::SWAPCACHE) {
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
    ds_queue_add(k, folio);
}

/// Put a folio at the tail of the deferred split queue unless it is on it. Its place
/// is kept in its record (`LargeFolio::deferred`), as the kernel keeps _deferred_list
/// in the folio (only folios of order 2 and up are queued).
fn ds_queue_add(k: &mut Kernel, folio: Pfn) {
    if !k.memmap.folio_test(folio, PageFlags::DEFERRED) {
        k.memmap.folio_set(folio, PageFlags::DEFERRED);
        let tail = k.ds_queue.tail;
        k.memmap.large_mut(folio).deferred = Links { prev: tail, next: NIL };
        if tail == NIL {
            k.ds_queue.head = folio.0 as u32;
        } else {
            k.memmap.large_mut(Pfn(tail as u64)).deferred.next = folio.0 as u32;
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
    ds_queue_del(k, folio);
}

/// list_del_init of the folio's deferred list entry.
fn ds_queue_del(k: &mut Kernel, folio: Pfn) {
    k.memmap.folio_clear(folio, PageFlags::DEFERRED);
    let Links { prev, next } = std::mem::replace(&mut k.memmap.large_mut(folio).deferred, Links::NONE);
    if prev == NIL {
        k.ds_queue.head = next;
    } else {
        k.memmap.large_mut(Pfn(prev as u64)).deferred.next = next;
    }
    if next == NIL {
        k.ds_queue.tail = prev;
    } else {
        k.memmap.large_mut(Pfn(next as u64)).deferred.prev = prev;
    }
    k.ds_queue.len -= 1;
}

/// copy_huge_pmd (fork): the child maps the THP (or the huge zero page) with its own
/// deposited table; both pmds are write-protected and the child's starts old.
pub fn copy_huge_pmd(k: &mut Kernel, dst: MmId, dst_pmd: PmdPtr, src_pmd: PmdPtr, addr: u64) -> bool {
    let g = k.arch.granule();
    let haddr = addr & !(g.pmd_size() - 1);
    if !deposit_pgtable(k, dst, haddr) {
        return false;
    }
    let pmd = k.pxd_get(2, src_pmd);
    if !is_huge_zero_pmd(k, pmd) {
        let folio = pmd.pfn(g);
        k.folio_ref_add(folio, 1);
        k.folio_try_dup_anon_rmap_pmd(folio, dst);
        k.mm_mut(dst).rss_anon += 1 << g.pmd_order();
    }
    let p = pmd_to_pte(pmd);
    if p.pte_write() {
        k.pxd_set(2, haddr, src_pmd, pte_to_pmd(p.pte_wrprotect()));
    }
    k.pxd_set(2, haddr, dst_pmd, pte_to_pmd(p.pte_wrprotect().pte_mkold()));
    true
}

/// move_huge_pmd (mremap of a whole huge pmd): the pmd moves from `old` to the empty
/// `new_pmd` with its deposited table, and the old range is flushed if it was present.
/// The folio's pages keep their index in step with the new place.
pub fn move_huge_pmd(k: &mut Kernel, mm: MmId, old: u64, new: u64, old_pmd: PmdPtr, new_pmd: PmdPtr) -> bool {
    let g = k.arch.granule();
    if !k.pxd_get(2, new_pmd).is_none() {
        return false;
    }
    let pmd = k.pxd_get(2, old_pmd);
    k.pxd_set(2, old, old_pmd, Desc::ZERO);
    if let Some(table) = k.mm_mut(mm).deposited.remove(&old) {
        k.mm_mut(mm).deposited.insert(new, table);
    }
    k.pxd_set(2, new, new_pmd, pmd);
    let p = pmd_to_pte(pmd);
    if p.pte_present() {
        flush_pmd_tlb_range(k, mm, old);
        if !is_huge_zero_pmd(k, pmd) {
            let folio = pmd.pfn(g);
            k.memmap
                .set_page_index(folio, 1 << g.pmd_order(), new >> g.page_shift());
        }
    }
    true
}

/// change_huge_pmd (mprotect of a whole huge pmd): pmdp_invalidate_ad, pmd_modify,
/// and write permission again where the THP is exclusive and the VMA writable.
pub fn change_huge_pmd(k: &mut Kernel, tlb: &mut MmuGather, mm: MmId, vma: &Vma, pmd: PmdPtr, haddr: u64) {
    let g = k.arch.granule();
    let old = k.pxd_get(2, pmd);
    pmdp_invalidate(k, mm, pmd, haddr);
    let oldp = pmd_to_pte(old);
    let mut entry = oldp.pte_modify(vm_page_prot(vma));
    let folio = old.pfn(g);
    let exclusive = !is_huge_zero_pmd(k, old) && k.memmap.page(folio).flags.contains(PageFlags::ANON_EXCLUSIVE);
    // can_change_pmd_writable (c27f479ef542, 6.2); before, the pmd stays read-only
    // and the next write faults.
    if !k.mprotect_mkwrite_dirty_pte_only
        && vma.flags.contains(VmFlags::WRITE)
        && !entry.pte_write()
        && entry.pte_valid()
        && exclusive
    {
        entry = entry.pte_mkwrite();
    }
    k.pxd_set(2, haddr, pmd, pte_to_pmd(entry));
    if pte_needs_flush(oldp, entry, k.prot_flush_elide) {
        tlb.flush_pmd_range(haddr, g.pmd_size());
    }
}

/// split_folio / __folio_split to order 0: unmap every mapping of the large `folio`,
/// make each page its own folio; an anon folio's pages are mapped back, pages nobody
/// maps are freed; a shmem folio's pages stay in the page cache, each at its index,
/// unmapped (remap_page leaves file folios to fault back in).
/// `pins` are the caller's references (it still holds them on the first page after).
/// Fails, counting split_failed, while someone else holds a reference.
pub fn split_folio(k: &mut Kernel, folio: Pfn, pins: i32) -> bool {
    let g = k.arch.granule();
    let order = k.memmap.folio_order(folio);
    if order == 0 {
        return true;
    }
    if !can_split_folio(k, folio, pins) {
        k.stat.count_mthp_stat(order, MthpStat::SplitFailed);
        if order == g.pmd_order() {
            k.stat.count_vm_event(VmEvent::ThpSplitPageFailed);
        }
        return false;
    }
    let file = k.shmem.folio_inode(folio);
    let entries = unmap_folio(k, folio);
    let nr = 1u64 << order;
    if file.is_some() {
        // Frozen with the page cache's references; each page gets its own back below.
        k.memmap.folio_ref_add(folio, -(nr as i32));
    } else {
        folio_unqueue_deferred_split(k, folio);
        if k.memmap.folio_test(folio, PageFlags::PARTIALLY_MAPPED) {
            k.memmap.folio_clear(folio, PageFlags::PARTIALLY_MAPPED);
            k.stat.mod_mthp_stat(order, MthpStat::NrAnonPartiallyMapped, -1);
        }
    }
    __split_folio_to_order_0(k, folio, pins);
    match file {
        Some(ino) => k.shmem_split_folio(folio, nr, ino),
        None => k.stat.mod_mthp_stat(order, MthpStat::NrAnon, -1),
    }
    k.stat.count_mthp_stat(order, MthpStat::Split);
    if order == g.pmd_order() {
        k.stat.count_vm_event(VmEvent::ThpSplitPage);
    }
    remap_page(k, folio, &entries);
    // lru_add_split_folio, with each page's references back (the model's remap takes
    // them where the kernel's unfreeze did).
    k.lru_add_split_folio(folio, 1 << order);
    for i in 0..(1u64 << order) {
        let page = Pfn(folio.0 + i);
        if k.memmap.folio_ref_count(page) == 0 {
            k.free_folio(page);
        }
    }
    true
}

/// unmap_folio: try_to_migrate with TTU_BATCH_FLUSH and TTU_SYNC (and
/// TTU_SPLIT_HUGE_PMD for a PMD-order folio; TTU_RMAP_LOCKED has no model
/// counterpart), then
/// try_to_unmap_flush. Batched as in reclaim: each pte's TLBI goes out without waiting
/// and one DSB ISH waits for them all before the folio is frozen.
fn unmap_folio(k: &mut Kernel, folio: Pfn) -> Vec<MigrationEntry> {
    let mut flags = TtuFlags::BATCH_FLUSH | TtuFlags::SYNC;
    if k.memmap.folio_order(folio) == k.arch.granule().pmd_order() {
        flags |= TtuFlags::SPLIT_HUGE_PMD;
    }
    // A file folio is unmapped for good (try_to_unmap), an anon one to migration
    // entries (try_to_migrate) that remap_page turns back into ptes.
    let entries = if k.shmem.folio_inode(folio).is_some() {
        if k.memmap.folio_mapcount(folio) > 0 {
            k.try_to_unmap_file(folio, flags);
        }
        Vec::new()
    } else {
        k.try_to_migrate(folio, flags)
    };
    k.try_to_unmap_flush();
    entries
}

/// remap_page (remove_migration_ptes with RMP_USE_SHARED_ZEROPAGE): each migration
/// entry becomes a pte of its page, now a small folio, or of the shared zero page
/// where the page holds only zeroes (try_to_map_unused_to_zeropage, 6.12+).
fn remap_page(k: &mut Kernel, folio: Pfn, entries: &[MigrationEntry]) {
    for e in entries {
        remove_migration_pte(k, e, folio, folio, k.split_zeropage);
    }
}

/// can_split_folio: every reference but the caller's `pins` is a mapping, or the
/// page cache's (one per page of a shmem folio).
pub fn can_split_folio(k: &Kernel, folio: Pfn, pins: i32) -> bool {
    let cache = match k.shmem.folio_inode(folio) {
        Some(_) => k.memmap.folio_nr_pages(folio) as i32,
        None => 0,
    };
    k.memmap.folio_ref_count(folio) == k.memmap.folio_mapcount(folio) + cache + pins
}

/// split_folio_to_list (reclaim): split, and put every page that is still in use on
/// `list` with a reference of its own, as lru_add_split_folio does.
pub fn split_folio_to_list(k: &mut Kernel, folio: Pfn, list: &mut Vec<Pfn>) -> bool {
    let nr = k.memmap.folio_nr_pages(folio);
    if !split_folio(k, folio, 1) {
        return false;
    }
    // The list's tail is taken first: in address order, the last page comes first.
    for i in 1..nr {
        let page = Pfn(folio.0 + if k.split_list_reversed { nr - i } else { i });
        if k.memmap.folio_ref_count(page) > 0 {
            k.folio_ref_add(page, 1);
            list.push(page);
        }
    }
    true
}

/// __split_folio_to_order (to 0): every page becomes a folio of its own, unmapped,
/// inheriting the head's anon state; the caller's `pins` stay on the first page (the
/// mappings' references went with them, remove_migration_pte takes them again).
fn __split_folio_to_order_0(k: &mut Kernel, folio: Pfn, pins: i32) {
    debug_assert_eq!(
        k.memmap.folio_ref_count(folio),
        pins,
        "references besides the pins at split"
    );
    let inherit =
        k.memmap.page(folio).flags & (PageFlags::ANON | PageFlags::SWAPBACKED | PageFlags::DIRTY | PageFlags::MLOCKED);
    // The head keeps its place on its LRU list (lru_add_split_folio puts the tails
    // beside it).
    k.memmap.split_to_order_0(folio, inherit, pins);
}

/// deferred_split_scan: take every queued folio off the queue and split the partially
/// mapped ones; a folio that cannot be split goes back on the queue. Others (a THP
/// queued at fault, not underused with max_ptes_none at its default) just leave it.
/// Returns how many were split.
pub fn deferred_split_scan(k: &mut Kernel) -> u64 {
    let mut batch = Vec::new();
    while k.ds_queue.head != NIL {
        let folio = Pfn(k.ds_queue.head as u64);
        ds_queue_del(k, folio);
        batch.push(folio);
    }
    let mut split = 0;
    for folio in batch {
        k.folio_ref_add(folio, 1);
        if k.memmap.folio_test(folio, PageFlags::PARTIALLY_MAPPED) {
            if split_folio(k, folio, 1) {
                split += 1;
            } else {
                ds_queue_add(k, folio);
            }
        }
        k.folio_put(folio);
    }
    split
}

/// madvise_free_huge_pmd: a whole, unshared THP becomes lazyfree with an old, clean
/// pmd (true: done). A THP only partly in [addr, next) is split (pmd and folio) and
/// left to the pte walk (false), as is the huge zero page.
pub fn madvise_free_huge_pmd(k: &mut Kernel, tlb: &mut MmuGather, mm: MmId, pmd: PmdPtr, addr: u64, next: u64) -> bool {
    let g = k.arch.granule();
    let old = k.pxd_get(2, pmd);
    if is_huge_zero_pmd(k, old) {
        return false;
    }
    let folio = old.pfn(g);
    if k.folio_maybe_mapped_shared(folio) {
        return true;
    }
    if next - addr != g.pmd_size() {
        k.folio_ref_add(folio, 1);
        split_folio(k, folio, 1);
        k.folio_put(folio);
        if pmd_trans_huge(k.pxd_get(2, pmd)) {
            // The split failed: leave the THP as it is.
            return true;
        }
        return false;
    }
    k.memmap.folio_clear(folio, PageFlags::DIRTY);
    let p = pmd_to_pte(old);
    if p.pte_young() || p.pte_dirty() {
        let haddr = addr & !(g.pmd_size() - 1);
        pmdp_invalidate(k, mm, pmd, haddr);
        k.pxd_set(2, haddr, pmd, pte_to_pmd(p.pte_mkold().pte_mkclean()));
        tlb.flush_pmd_range(haddr, g.pmd_size());
    }
    k.folio_mark_lazyfree(folio);
    true
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::hw::{Event, MachineConfig};
    use crate::kcount::KernelEvent;
    use crate::report::PageKind;
    use crate::sim::tests::{assert_clean, boot_with as boot};
    use crate::sim::user_access;

    const BASE: u64 = 0x1000_0000_0000;
    const K4: u64 = 4096;

    /// A mapped, written region of `len` bytes; returns the folio mapping BASE.
    fn written(k: &mut Kernel, mm: MmId, len: u64, flags: VmFlags) -> Pfn {
        k.do_mmap(mm, BASE, len, VmFlags::READ | VmFlags::WRITE | flags)
            .unwrap();
        for a in (BASE..BASE + len).step_by(K4 as usize) {
            user_access(k, mm, 0, a, true).unwrap();
        }
        k.memmap.folio_of(k.page_table_pfn(mm, BASE).unwrap())
    }

    /// A written `len` region's first folio, split (under a reference, as reclaim
    /// holds one); the kernel with the events from before the split.
    fn split_written(
        knobs: &[(&str, &str)],
        len: u64,
        flags: VmFlags,
    ) -> (Kernel, MmId, crate::hw::Events, crate::kcount::KernelEvents) {
        let (mut k, mm) = boot(MachineConfig::default(), knobs);
        let folio = written(&mut k, mm, len, flags);
        let (ev, kc) = (k.arch.hw.ev.clone(), k.arch.kc.clone());
        k.folio_ref_add(folio, 1);
        assert!(split_folio(&mut k, folio, 1));
        k.folio_put(folio);
        assert_clean(&k);
        (k, mm, ev, kc)
    }

    #[test]
    fn splitting_a_pte_mapped_folio_waits_once_for_its_deferred_tlbis() {
        let (k, mm, ev, kc) = split_written(&[("hugepages-64kB/enabled", "always")], 64 << 10, VmFlags::empty());
        let d = |e| k.arch.hw.ev.get(e) - ev.get(e);
        // The contpte unfold (its own 16 TLBIs without TLBI range ops, and a DSB ISH),
        // then one TLBI per pte and one DSB ISH for them all (try_to_unmap_flush).
        assert_eq!(d(Event::ContpteConvert), 1);
        assert_eq!(d(Event::TlbiVale1is), 16 + 16);
        assert_eq!(d(Event::DsbIsh), 2);
        let dk = |e| k.arch.kc.get(e) - kc.get(e);
        assert_eq!(dk(KernelEvent::FolioRemoveRmapPtes), 16);
        assert_eq!(dk(KernelEvent::ArchTlbbatchFlush), 1);
        assert_eq!(dk(KernelEvent::PtepClearFlush), 0);
        assert_eq!(k.stat.mthp(4, MthpStat::SplitDeferred), 1);
        assert!((0..16).all(|i| k.page_kind(mm, BASE + i * K4) == Some(PageKind::Order(0))));
    }

    #[test]
    fn splitting_a_pmd_mapped_thp_freezes_the_pmd_without_pte_tlbis() {
        let (k, mm, ev, kc) = split_written(&[], 2 << 20, VmFlags::HUGEPAGE);
        let d = |e| k.arch.hw.ev.get(e) - ev.get(e);
        // pmdp_invalidate's flush_pmd_tlb_range only: one TLBI, one DSB ISH.
        assert_eq!(d(Event::TlbiTotal), 1);
        assert_eq!(d(Event::DsbIsh), 1);
        assert_eq!(d(Event::ContpteConvert), 0);
        assert_eq!(d(Event::ContpteFold), 0);
        assert_eq!(
            k.arch.kc.get(KernelEvent::FolioRemoveRmapPtes) - kc.get(KernelEvent::FolioRemoveRmapPtes),
            0
        );
        assert_eq!(k.stat.event(VmEvent::ThpSplitPmd), 1);
        assert_eq!(k.stat.event(VmEvent::ThpSplitPage), 1);
        assert!((0..512).all(|i| k.page_kind(mm, BASE + i * K4) == Some(PageKind::Order(0))));
    }

    /// The huge zero pmd of a read, then a write into it.
    fn write_after_huge_zero_read(split: bool) -> (Kernel, MmId, crate::hw::Events) {
        let (mut k, mm) = boot(MachineConfig::default(), &[]);
        k.huge_zero_wp_split = split;
        k.do_mmap(mm, BASE, 2 << 20, VmFlags::READ | VmFlags::WRITE | VmFlags::HUGEPAGE)
            .unwrap();
        user_access(&mut k, mm, 0, BASE, false).unwrap();
        assert_eq!(k.page_kind(mm, BASE), Some(PageKind::Zero));
        let ev = k.arch.hw.ev.clone();
        user_access(&mut k, mm, 0, BASE + K4, true).unwrap();
        assert_clean(&k);
        (k, mm, ev)
    }

    #[test]
    fn a_write_to_the_huge_zero_pmd_maps_a_new_thp() {
        let (k, mm, ev) = write_after_huge_zero_read(false);
        assert_eq!(k.stat.event(VmEvent::ThpSplitPmd), 0);
        assert_eq!(k.stat.event(VmEvent::ThpFaultAlloc), 1);
        assert_eq!(k.page_kind(mm, BASE), Some(PageKind::Order(9)));
        assert_eq!(k.arch.hw.ev.get(Event::TlbiTotal) - ev.get(Event::TlbiTotal), 1);
    }

    /// Before 1ced09e0331f (6.12): the huge zero pmd is split into zero-page ptes and
    /// do_wp_page copies the written page alone: the pmd flush, then ptep_clear_flush.
    #[test]
    fn a_write_to_the_huge_zero_pmd_splits_it_and_copies_one_page_with_huge_zero_wp_split() {
        let (k, mm, ev) = write_after_huge_zero_read(true);
        let d = |e| k.arch.hw.ev.get(e) - ev.get(e);
        assert_eq!(k.stat.event(VmEvent::ThpSplitPmd), 1);
        assert_eq!(k.stat.event(VmEvent::ThpFaultAlloc), 0);
        assert_eq!(k.page_kind(mm, BASE), Some(PageKind::Zero));
        assert_eq!(k.page_kind(mm, BASE + K4), Some(PageKind::Order(0)));
        assert_eq!(k.page_kind(mm, BASE + 2 * K4), Some(PageKind::Zero));
        assert_eq!(d(Event::TlbiTotal), 2);
        assert_eq!(d(Event::TlbiVale1is), 1);
        assert_eq!(d(Event::DsbIsh), 2);
        assert_eq!(d(Event::Isb), 2);
    }

    #[test]
    fn a_pmd_split_populates_the_stack_pmd_and_the_real_one() {
        let (mut k, mm) = boot(MachineConfig::default(), &[]);
        written(&mut k, mm, 2 << 20, VmFlags::HUGEPAGE);
        let ev = k.arch.hw.ev.clone();
        let vma = k.mm(mm).find_vma(BASE).unwrap();
        let pmd = k.pmd_offset(mm, BASE).unwrap();
        __split_huge_pmd(&mut k, mm, &vma, pmd, BASE);
        assert_clean(&k);
        assert_eq!(k.arch.hw.ev.get(Event::Isb) - ev.get(Event::Isb), 2);
    }
}
