//! mm/khugepaged.c: collapse the pte-mapped pages under a pmd into a new THP, swapping
//! in what is swapped out first; by MADV_COLLAPSE (which ignores the sysfs knobs, but
//! not VM_NOHUGEPAGE, and khugepaged's max_ptes_none / max_ptes_swap /
//! max_ptes_shared limits) or by the khugepaged daemon's scan of the mms registered
//! with it (khugepaged_enter_vma), under those limits. With `khugepaged_mthp` (7.2+,
//! Nico Pache's series) the daemon also collapses anonymous ranges to the smaller
//! enabled mTHP orders (mthp_collapse).

use super::folio::{LruFlags, PageFlags};
use super::huge_memory::map_anon_folio_pmd_nopf;
use super::memory::VmFault;
use super::mm_types::{MmId, VmFlags, Vma};
use super::mmap::VmaError;
use super::vmstat::{MthpStat, VmEvent};
use super::Kernel;
use crate::arch::arm64::pgtable::{pmd_trans_huge, Pte};
use crate::arch::arm64::tlbflush::flush_tlb_range;
use crate::hw::{Desc, DescKind, Pfn};

/// KHUGEPAGED_MIN_MTHP_ORDER: the smallest order mthp_collapse tries.
const MIN_MTHP_ORDER: u32 = 2;

/// enum scan_result, the outcomes the model distinguishes.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
enum Scan {
    Succeed,
    /// No pte table under the pmd (SCAN_PMD_NULL / SCAN_PMD_NONE).
    PmdNull,
    PmdMapped,
    /// SCAN_EXCEED_NONE_PTE / _SWAP_PTE / _SHARED_PTE.
    Exceed(Limit),
    LackReferenced,
    /// SCAN_PTE_NON_PRESENT: a swap pte in an mTHP range at isolation.
    PteNonPresent,
    /// SCAN_PTE_MAPPED_HUGEPAGE: an mTHP range already mapped by a folio that large.
    PteMappedHugepage,
    AllocFail,
    /// SCAN_PAGE_RO, SCAN_PAGE_ANON, SCAN_PAGE_COUNT, SCAN_CGROUP_CHARGE_FAIL, a
    /// failed swap-in: no smaller order is tried.
    Fail,
}

/// khugepaged's limits on the ptes of a collapse (collapse_limits).
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
enum Limit {
    None,
    Swap,
    Shared,
}

/// What collapse_scan_pmd found: the swap ptes (`unmapped`), the referenced ones and
/// the present ones (cc->mthp_present_ptes).
struct Found {
    unmapped: usize,
    referenced: usize,
    present: Vec<bool>,
}

impl Kernel {
    /// Whether khugepaged would scan anything at all (7.x hugepage_enabled: the global
    /// or any anon size enabled; before, hugepage_pmd_enabled: the PMD size).
    fn khugepaged_enabled(&self) -> bool {
        let any = self.knobs.allowable_orders(true, false);
        if self.khugepaged_mthp {
            any != 0 || self.knobs.global_enabled()
        } else {
            any & (1 << self.arch.granule().pmd_order()) != 0
        }
    }

    /// collapse_possible_orders for TVA_KHUGEPAGED: the anon orders (every mTHP order
    /// with `khugepaged_mthp`, else the PMD order) the VMA's flags and the knobs allow,
    /// less those no aligned block of which fits at the VMA's end
    /// (__thp_vma_allowable_orders outside a fault: a 2M VMA takes no 32M THP).
    fn khugepaged_orders(&self, vma: &Vma) -> u64 {
        let g = self.arch.granule();
        let all = if self.khugepaged_mthp {
            self.knobs.anon_orders().fold(0, |m, o| m | 1 << o)
        } else {
            1u64 << g.pmd_order()
        };
        let f = vma.flags;
        let allowed = all
            & self
                .knobs
                .allowable_orders(f.contains(VmFlags::HUGEPAGE), f.contains(VmFlags::NOHUGEPAGE));
        let highest_fitting = (0..=g.pmd_order()).rev().find(|&o| {
            let size = g.page_size() << o;
            allowed & (1 << o) != 0 && vma.end - vma.start >= size && (vma.end - size) & !(size - 1) >= vma.start
        });
        // The kernel stops at the highest order that fits and keeps it and every
        // order below it.
        highest_fitting.map_or(0, |o| allowed & ((2u64 << o) - 1))
    }

    /// khugepaged_enter_vma: register `mm` with khugepaged (MMF_VM_HUGEPAGE, the tail
    /// of its mm list) when the VMA (with its new flags) could be collapsed. Called by
    /// MADV_HUGEPAGE and by a PMD-suitable anonymous fault (after anon_vma_prepare).
    /// Outside a fault, __thp_vma_allowable_orders allows no order to an anonymous VMA
    /// without an anon_vma (6.12 to 7.3): MADV_HUGEPAGE over a range never faulted in
    /// registers nothing.
    pub fn khugepaged_enter_vma(&mut self, mm: MmId, vma: &Vma) {
        if !self.khugepaged_mm.contains(&mm)
            // The VMA as it is now: the caller's copy may predate the fault's
            // anon_vma_prepare.
            && self.mm(mm).vmas().get(&vma.start).is_some_and(|v| v.anon_vma.is_some())
            && self.khugepaged_enabled()
            && self.khugepaged_orders(vma) != 0
        {
            self.khugepaged_mm.push(mm);
        }
    }

    /// khugepaged_fork: a child of a registered mm is registered too.
    pub fn khugepaged_fork(&mut self, child: MmId, parent: MmId) {
        if self.khugepaged_mm.contains(&parent) && !self.khugepaged_mm.contains(&child) {
            self.khugepaged_mm.push(child);
        }
    }

    /// __khugepaged_exit: the mm leaves khugepaged's list.
    pub fn khugepaged_exit(&mut self, mm: MmId) {
        self.khugepaged_mm.retain(|&m| m != mm);
    }

    /// One khugepaged_do_scan with pages_to_scan past any workload's size, the cursor
    /// at the list's head: collapse_scan_mm_slot over every registered mm in list
    /// order, each VMA it may collapse, each whole pmd range in it; then full_scans
    /// moves by one. Err for what the model does not collapse (file and shmem VMAs).
    pub fn khugepaged_do_scan(&mut self) -> Result<(), String> {
        let pmd_size = self.arch.granule().pmd_size();
        for mm in self.khugepaged_mm.clone() {
            let vmas: Vec<Vma> = self.mm(mm).vmas().values().copied().collect();
            for vma in vmas {
                if self.khugepaged_orders(&vma) == 0 {
                    continue;
                }
                let hstart = vma.start.next_multiple_of(pmd_size);
                let hend = vma.end & !(pmd_size - 1);
                if hstart >= hend {
                    continue;
                }
                if vma.file.is_some() {
                    return Err("khugepaged: collapsing a shmem range (collapse_file) is not modeled".into());
                }
                for addr in (hstart..hend).step_by(pmd_size as usize) {
                    if self.collapse_single_pmd(mm, &vma, addr, true) == Scan::Succeed {
                        self.khugepaged_pages_collapsed += 1;
                    }
                }
            }
        }
        self.khugepaged_full_scans += 1;
        Ok(())
    }

    /// madvise_collapse over [start, end) of one VMA: each whole pmd range inside it.
    pub fn madvise_collapse(&mut self, mm: MmId, vma: &Vma, start: u64, end: u64) -> Result<(), VmaError> {
        if vma.flags.contains(VmFlags::NOHUGEPAGE) {
            return Err(VmaError::Invalid("the range is MADV_NOHUGEPAGE"));
        }
        // hugepage_vma_revalidate: an anon VMA without an anon_vma (zero-page reads
        // only) has nothing to collapse.
        if vma.anon_vma.is_none() {
            return Err(VmaError::Invalid("nothing was faulted in to collapse (no anon_vma)"));
        }
        let pmd_size = self.arch.granule().pmd_size();
        let mut addr = (start + pmd_size - 1) & !(pmd_size - 1);
        let hend = end & !(pmd_size - 1);
        while addr < hend {
            if vma.start <= addr && addr + pmd_size <= vma.end {
                self.collapse_single_pmd(mm, vma, addr, false);
            }
            addr += pmd_size;
        }
        Ok(())
    }

    /// collapse_single_pmd for an anon range: collapse_scan_pmd, then the collapse of
    /// the whole pmd or (khugepaged with `khugepaged_mthp`) mthp_collapse.
    fn collapse_single_pmd(&mut self, mm: MmId, vma: &Vma, haddr: u64, khugepaged: bool) -> Scan {
        let pmd_order = self.arch.granule().pmd_order();
        let orders = if khugepaged {
            self.khugepaged_orders(vma)
        } else {
            1 << pmd_order
        };
        let found = match self.collapse_scan_pmd(mm, haddr, khugepaged, orders) {
            Ok(found) => found,
            Err(r) => return r,
        };
        if orders == 1 << pmd_order {
            return self.collapse_huge_page(mm, vma, haddr, &found, pmd_order, khugepaged);
        }
        self.mthp_collapse(mm, vma, haddr, &found, orders)
    }

    /// collapse_max_ptes_none / _swap / _shared: MADV_COLLAPSE has no limits; the
    /// PMD order takes the knobs; an mTHP order allows no swap and no shared pte, and
    /// scales max_ptes_none only from its maximum (any other value is taken as 0).
    fn collapse_limits(&self, order: u32, khugepaged: bool) -> (usize, usize, usize) {
        let pmd_order = self.arch.granule().pmd_order();
        let nr = 1usize << pmd_order;
        if !khugepaged {
            return (nr, nr, nr);
        }
        let k = &self.knobs;
        if order == pmd_order {
            return (
                k.max_ptes_none as usize,
                k.max_ptes_swap as usize,
                k.max_ptes_shared as usize,
            );
        }
        let none = if k.max_ptes_none as usize == nr - 1 {
            (1 << order) - 1
        } else {
            0
        };
        (none, 0, 0)
    }

    /// Counts a collapse failure or allocation for `order`: the vmstat event for the
    /// PMD order, and with `khugepaged_mthp` (the series' per-order statistics) the
    /// order's mTHP stat.
    fn count_collapse_event(&mut self, order: u32, event: VmEvent, stat: MthpStat) {
        if order == self.arch.granule().pmd_order() {
            self.stat.count_vm_event(event);
        }
        if self.khugepaged_mthp {
            self.stat.count_mthp_stat(order, stat);
        }
    }

    /// A range past one of `collapse_limits` at `order`: counted
    /// (count_collapse_event), the scan's result.
    fn collapse_exceeded(&mut self, order: u32, limit: Limit) -> Scan {
        let (event, stat) = match limit {
            Limit::None => (VmEvent::ThpScanExceedNonePte, MthpStat::CollapseExceedNonePte),
            Limit::Swap => (VmEvent::ThpScanExceedSwapPte, MthpStat::CollapseExceedSwapPte),
            Limit::Shared => (VmEvent::ThpScanExceedSharePte, MthpStat::CollapseExceedSharedPte),
        };
        self.count_collapse_event(order, event, stat);
        Scan::Exceed(limit)
    }

    /// Whether a present pte's page counts as referenced for khugepaged
    /// (folio_pte_referenced: the pte young or the folio referenced).
    fn folio_pte_referenced(&self, folio: Pfn, pte: Pte) -> bool {
        pte.pte_young() || self.memmap.lru(folio).contains(LruFlags::REFERENCED)
    }

    /// Whether a mapped page can be collapsed (SCAN_PAGE_ANON, SCAN_PAGE_COUNT): an
    /// anon folio with no references beyond its mappings and the swap cache's
    /// (folio_expected_ref_count).
    fn collapse_page_ok(&self, folio: Pfn) -> bool {
        let f = self.memmap.page(folio).flags;
        let cache_refs = if f.contains(PageFlags::SWAPCACHE) {
            self.memmap.folio_nr_pages(folio) as i32
        } else {
            0
        };
        f.contains(PageFlags::ANON)
            && self.memmap.folio_ref_count(folio) == self.memmap.folio_mapcount(folio) + cache_refs
    }

    /// collapse_scan_pmd (hpage_collapse_scan_pmd before 7.2): a pte table whose
    /// mapped pages are anon folios with no extra references, within the limits of
    /// `collapse_limits` (max_ptes_none lifted to the whole table when smaller orders
    /// are enabled: mthp_collapse checks it per order). 6.18 no longer needs a
    /// writable pte; with `collapse_ro_refuse` (before "mm: drop all references of
    /// writable and SCAN_PAGE_RO", 6.18) a range none of whose pages is mapped
    /// writable fails (SCAN_PAGE_RO). khugepaged also wants a referenced page, and
    /// half of them referenced when it must swap in.
    fn collapse_scan_pmd(&mut self, mm: MmId, haddr: u64, khugepaged: bool, orders: u64) -> Result<Found, Scan> {
        let g = self.arch.granule();
        let nr = 1usize << g.pmd_order();
        let pmd = self.pmd_offset(mm, haddr).ok_or(Scan::PmdNull)?;
        let d = self.pxd_get(2, pmd);
        if pmd_trans_huge(d) {
            return Err(Scan::PmdMapped);
        }
        if !matches!(d.kind(2, g), DescKind::Table(_)) {
            return Err(Scan::PmdNull);
        }
        let (mut max_none, max_swap, max_shared) = self.collapse_limits(g.pmd_order(), khugepaged);
        if orders != 1 << g.pmd_order() {
            max_none = nr - 1;
        }
        let ptep = self.pte_offset_map(pmd, haddr).expect("a pte table");
        let amm = self.arch_mm(mm);
        let (mut none, mut shared, mut writable) = (0, 0, false);
        let mut found = Found {
            unmapped: 0,
            referenced: 0,
            present: vec![false; nr],
        };
        let pmd_order = g.pmd_order();
        for i in 0..nr {
            let pte = self.arch.ptep_get(amm, ptep.add(i));
            if pte.pte_none() || (pte.pte_present() && self.is_zero_pfn(pte.pte_pfn(g))) {
                none += 1;
                if none > max_none {
                    return Err(self.collapse_exceeded(pmd_order, Limit::None));
                }
                continue;
            }
            if pte.is_swap_pte() {
                found.unmapped += 1;
                if found.unmapped > max_swap {
                    return Err(self.collapse_exceeded(pmd_order, Limit::Swap));
                }
                continue;
            }
            writable |= pte.pte_write();
            let folio = self.memmap.folio_of(pte.pte_pfn(g));
            if !self.memmap.page(folio).flags.contains(PageFlags::ANON) {
                return Err(Scan::Fail);
            }
            if self.folio_maybe_mapped_shared(folio) {
                shared += 1;
                if shared > max_shared {
                    return Err(self.collapse_exceeded(pmd_order, Limit::Shared));
                }
            }
            found.present[i] = true;
            if !self.collapse_page_ok(folio) {
                return Err(Scan::Fail);
            }
            if khugepaged && self.folio_pte_referenced(folio, pte) {
                found.referenced += 1;
            }
        }
        if self.collapse_ro_refuse && !writable {
            return Err(Scan::Fail);
        }
        if khugepaged && (found.referenced == 0 || (found.unmapped > 0 && found.referenced < nr / 2)) {
            return Err(Scan::LackReferenced);
        }
        Ok(found)
    }

    /// mthp_collapse: from the PMD order down, the largest enabled order whose
    /// naturally aligned range has enough present ptes (the PMD order counting the
    /// swap ptes too) is collapsed, then the scan moves past it; a failure that a
    /// smaller order might not meet tries the next smaller one.
    fn mthp_collapse(&mut self, mm: MmId, vma: &Vma, haddr: u64, found: &Found, orders: u64) -> Scan {
        let g = self.arch.granule();
        let (ps, pmd_order) = (g.page_size(), g.pmd_order());
        let nr_pmd = 1usize << pmd_order;
        let (mut offset, mut order) = (0usize, pmd_order);
        let (mut collapsed, mut alloc_failed, mut last) = (false, false, Scan::Fail);
        while offset < nr_pmd {
            let nr = 1usize << order;
            let mut next_offset = false;
            if orders & (1 << order) != 0 {
                let (max_none, ..) = self.collapse_limits(order, true);
                let mut occupied = found.present[offset..offset + nr].iter().filter(|&&p| p).count();
                if order == pmd_order {
                    occupied += found.unmapped;
                }
                if occupied >= nr - max_none.min(nr) {
                    let sub = Found {
                        unmapped: found.unmapped,
                        referenced: found.referenced,
                        present: Vec::new(),
                    };
                    match self.collapse_huge_page(mm, vma, haddr + offset as u64 * ps, &sub, order, true) {
                        Scan::Succeed => {
                            collapsed = true;
                            next_offset = true;
                        }
                        Scan::PteMappedHugepage => next_offset = true,
                        r @ (Scan::AllocFail | Scan::LackReferenced | Scan::Exceed(_) | Scan::PteNonPresent) => {
                            alloc_failed |= r == Scan::AllocFail;
                            last = r;
                        }
                        r => {
                            last = r;
                            break;
                        }
                    }
                }
            }
            if !next_offset && order > MIN_MTHP_ORDER && orders & ((1 << order) - 1) != 0 {
                order -= 1;
                continue;
            }
            offset += nr;
            order = if offset == 0 {
                pmd_order
            } else {
                offset.trailing_zeros().min(pmd_order)
            };
        }
        if collapsed {
            Scan::Succeed
        } else if alloc_failed {
            Scan::AllocFail
        } else {
            last
        }
    }

    /// __collapse_huge_page_swapin: do_swap_page (a read, not a fault: no task fault
    /// counts) for each swap pte of [start, start + nr pages), in address order; a
    /// large or readahead swap-in maps later ones on the way. An mTHP order swaps in
    /// nothing: its first swap pte fails it (SCAN_EXCEED_SWAP_PTE, counted per order).
    fn __collapse_huge_page_swapin(&mut self, mm: MmId, vma: &Vma, start: u64, order: u32) -> Scan {
        let g = self.arch.granule();
        let pmd = self.pmd_offset(mm, start).expect("scanned pmd");
        let ptep = self.pte_offset_map(pmd, start).expect("scanned pte table");
        let amm = self.arch_mm(mm);
        for i in 0..1usize << order {
            let pte = self.arch.ptep_get_lockless(amm, ptep.add(i));
            if !pte.is_swap_pte() {
                continue;
            }
            if order != g.pmd_order() {
                return self.collapse_exceeded(order, Limit::Swap);
            }
            let addr = start + i as u64 * g.page_size();
            if self.do_swap_page(mm, vma, pmd, ptep.add(i), addr, false, pte) == VmFault::Oom {
                return Scan::Fail;
            }
        }
        Scan::Succeed
    }

    /// __collapse_huge_page_isolate, with the pmd cleared: every pte of the range
    /// checked again against the order's limits (an mTHP range already mapped by a
    /// folio of that order or larger fails), reading each pte once.
    fn __collapse_huge_page_isolate(
        &mut self,
        mm: MmId,
        ptep: crate::arch::arm64::pgtable::PtePtr,
        order: u32,
        khugepaged: bool,
    ) -> Scan {
        let g = self.arch.granule();
        let amm = self.arch_mm(mm);
        let (max_none, _, max_shared) = self.collapse_limits(order, khugepaged);
        let (mut none, mut shared, mut referenced) = (0, 0, 0);
        for i in 0..1usize << order {
            let pte = self.arch.ptep_get(amm, ptep.add(i));
            if pte.pte_none() || (pte.pte_present() && self.is_zero_pfn(pte.pte_pfn(g))) {
                none += 1;
                if none > max_none {
                    return self.collapse_exceeded(order, Limit::None);
                }
                continue;
            }
            if !pte.pte_present() {
                return Scan::PteNonPresent;
            }
            let folio = self.memmap.folio_of(pte.pte_pfn(g));
            if self.folio_maybe_mapped_shared(folio) {
                shared += 1;
                if shared > max_shared {
                    return self.collapse_exceeded(order, Limit::Shared);
                }
            }
            if order != g.pmd_order() && self.memmap.folio_order(folio) >= order {
                return Scan::PteMappedHugepage;
            }
            if !self.collapse_page_ok(folio) {
                return Scan::Fail;
            }
            if khugepaged && self.folio_pte_referenced(folio, pte) {
                referenced += 1;
            }
        }
        if khugepaged && referenced == 0 {
            return Scan::LackReferenced;
        }
        Scan::Succeed
    }

    /// collapse_huge_page: allocate the folio of `order`, swap in the swap ptes,
    /// pmdp_collapse_flush (the whole pmd range's TLB entries, whatever the order),
    /// isolate (on failure the pte table goes back), copy and unmap the old pages
    /// (__collapse_huge_page_copy_succeeded: a folio's ptes at a time since
    /// 4ea3594a4741, 6.17; one at a time with `collapse_copy_per_pte`; each old folio
    /// then leaves the swap cache if nothing holds its slots), then map the new folio:
    /// the PMD order by the pmd, the emptied table deposited; an mTHP order by its
    /// ptes, the table back under the pmd.
    fn collapse_huge_page(
        &mut self,
        mm: MmId,
        vma: &Vma,
        start: u64,
        found: &Found,
        order: u32,
        khugepaged: bool,
    ) -> Scan {
        let g = self.arch.granule();
        let ps = g.page_size();
        let pmd_order = g.pmd_order();
        let haddr = start & !(g.pmd_size() - 1);
        let Some(folio) = self.folio_alloc(order) else {
            self.count_collapse_event(order, VmEvent::ThpCollapseAllocFailed, MthpStat::CollapseAllocFailed);
            return Scan::AllocFail;
        };
        self.count_collapse_event(order, VmEvent::ThpCollapseAlloc, MthpStat::CollapseAlloc);
        // alloc_charge_folio: SCAN_CGROUP_CHARGE_FAIL.
        if !self.mem_cgroup_charge(folio, true) {
            self.folio_put(folio);
            return Scan::Fail;
        }
        if found.unmapped > 0 {
            let r = self.__collapse_huge_page_swapin(mm, vma, start, order);
            if r != Scan::Succeed {
                self.folio_put(folio);
                return r;
            }
        }
        let pmd = self.pmd_offset(mm, haddr).expect("scanned pmd");
        let ptep = self.pte_offset_map(pmd, start).expect("scanned pte table");
        let table = self.arch.hw.mem.table_pfn(ptep.table);
        self.pxd_set(2, haddr, pmd, Desc::ZERO);
        let asid = self.mm(mm).asid;
        flush_tlb_range(&mut self.arch.hw, asid, haddr, haddr + g.pmd_size());
        let r = self.__collapse_huge_page_isolate(mm, ptep, order, khugepaged);
        if r != Scan::Succeed {
            self.pxd_set(2, haddr, pmd, Desc::table(table.to_phys(g)));
            self.folio_put(folio);
            return r;
        }
        let amm = self.arch_mm(mm);
        let nr_ptes = 1usize << order;
        // __collapse_huge_page_copy reads every pte for the page to copy (the model
        // copies in the loop below), while the blocks are still folded
        // (contpte_ptep_get), in 6.12 and 6.18 alike.
        for i in 0..nr_ptes {
            self.arch.ptep_get(amm, ptep.add(i));
        }
        let mut i = 0;
        while i < nr_ptes {
            let addr = start + i as u64 * ps;
            let pte = self.arch.ptep_get(amm, ptep.add(i));
            let pfn = pte.pte_pfn(g);
            if pte.pte_none() || self.is_zero_pfn(pfn) {
                // __collapse_huge_page_copy clears what had no page of its own.
                self.arch.clear_pages(1);
                self.mm_mut(mm).rss_anon += 1;
                if !pte.pte_none() {
                    self.arch.pte_clear(amm, addr, ptep.add(i));
                }
                i += 1;
                continue;
            }
            let src = self.memmap.folio_of(pfn);
            if self.collapse_copy_per_pte {
                // Before 4ea3594a4741 (6.17): ptep_clear and folio_remove_rmap_pte one
                // pte at a time; the first pte of a contpte block unfolds it, and the
                // first page unmapped leaves a large folio partially mapped (queued for
                // deferred split until its last page goes).
                self.arch.copy_pages(1);
                let nonzero = self.memmap.page(pfn).nonzero;
                self.memmap.page_mut(Pfn(folio.0 + i as u64)).nonzero = nonzero;
                self.arch.pte_clear(amm, addr, ptep.add(i));
                self.folio_remove_rmap_ptes(src, pfn, 1, mm);
                self.free_swap_cache(src);
                self.folio_put_refs(src, 1);
                i += 1;
                continue;
            }
            let nr = if self.memmap.folio_order(src) > 0 {
                self.folio_pte_batch(mm, src, ptep.add(i), pte, nr_ptes - i)
            } else {
                1
            };
            // __collapse_huge_page_copy: the new folio's pages take these pages' contents.
            self.arch.copy_pages(nr as u64);
            for j in 0..nr as u64 {
                let nonzero = self.memmap.page(Pfn(pfn.0 + j)).nonzero;
                self.memmap.page_mut(Pfn(folio.0 + i as u64 + j)).nonzero = nonzero;
            }
            self.arch.clear_full_ptes(amm, addr, ptep.add(i), nr, false);
            self.folio_remove_rmap_ptes(src, pfn, nr as u64, mm);
            self.free_swap_cache(src);
            self.folio_put_refs(src, nr as i32);
            i += nr;
        }
        if order == pmd_order {
            self.mm_mut(mm).deposited.insert(haddr, table);
            map_anon_folio_pmd_nopf(self, mm, vma, folio, pmd, haddr);
        } else {
            self.pxd_set(2, haddr, pmd, Desc::table(table.to_phys(g)));
            self.map_anon_folio_pte_nopf(mm, vma, folio, order, ptep, start);
        }
        Scan::Succeed
    }
}

#[cfg(test)]
mod tests {
    use crate::hw::MachineConfig;
    use crate::kcount::KernelEvent;
    use crate::mm::madvise::Madv;
    use crate::mm::mm_types::VmFlags;
    use crate::mm::vmstat::{MthpStat, VmEvent};
    use crate::report::PageKind;
    use crate::sim::tests::{assert_clean, boot_with as boot};
    use crate::sim::user_access;

    const BASE: u64 = 0x1000_0000_0000;
    const K4: u64 = 4096;
    const PMD: u64 = 2 << 20;

    fn rw() -> VmFlags {
        VmFlags::READ | VmFlags::WRITE
    }

    /// 32 64K folios collapsed into one THP. Batched (6.17+): one clear_full_ptes and
    /// one rmap removal per folio, no unfold. Per pte (6.12): each block's first
    /// ptep_clear unfolds it, each page has its own rmap removal, and each folio is left
    /// partially mapped on the way (split_deferred).
    /// MADV_COLLAPSE of a PMD's worth of written 64K folios (32 folded blocks), with
    /// the copy per pte or batched; the kernel with its counters from before.
    fn collapse_64k_folios(
        per_pte: bool,
    ) -> (
        crate::mm::Kernel,
        crate::mm::mm_types::MmId,
        crate::kcount::KernelEvents,
    ) {
        let (mut k, mm) = boot(MachineConfig::default(), &[("hugepages-64kB/enabled", "always")]);
        k.collapse_copy_per_pte = per_pte;
        k.do_mmap(mm, BASE, PMD, rw()).unwrap();
        for a in (BASE..BASE + PMD).step_by(K4 as usize) {
            user_access(&mut k, mm, 0, a, true).unwrap();
        }
        let kc = k.arch.kc.clone();
        k.do_madvise(mm, BASE, BASE + PMD, Madv::Collapse).unwrap();
        (k, mm, kc)
    }

    #[test]
    fn collapse_copy_per_pte_unfolds_each_block_and_queues_each_folio_for_deferred_split() {
        for per_pte in [false, true] {
            let (k, mm, kc) = collapse_64k_folios(per_pte);
            assert_clean(&k);
            let dk = |e| k.arch.kc.get(e) - kc.get(e);
            let got = (
                dk(KernelEvent::ContpteConvert),
                dk(KernelEvent::FolioRemoveRmapPtes),
                k.stat.mthp(4, MthpStat::SplitDeferred),
            );
            let want = if per_pte { (32, 512, 32) } else { (0, 32, 0) };
            assert_eq!(got, want, "per_pte {per_pte}");
            assert_eq!(k.stat.event(VmEvent::ThpCollapseAlloc), 1);
            assert_eq!(k.page_kind(mm, BASE), Some(PageKind::Order(9)));
            assert_eq!(k.stat.mthp(4, MthpStat::NrAnon), 0);
        }
    }

    /// 32 folded 64K blocks: hpage_collapse_scan_pmd, __collapse_huge_page_isolate and
    /// __collapse_huge_page_copy each read all 512 ptes through contpte_ptep_get; the
    /// unmap reads each block's first pte once more (per pte, the rest are unfolded).
    #[test]
    fn collapse_reads_each_folded_pte_in_scan_isolate_and_copy() {
        for per_pte in [false, true] {
            let (k, _, kc) = collapse_64k_folios(per_pte);
            let reads = k.arch.kc.get(KernelEvent::ContptePtepGet) - kc.get(KernelEvent::ContptePtepGet);
            assert_eq!(reads, 3 * 512 + 32, "per_pte {per_pte}");
        }
    }

    /// Swapped-out pages are swapped in first, as reads outside a fault: pgmajfault
    /// counts them, the task's fault counts do not.
    #[test]
    fn collapse_swaps_in_the_swapped_out_pages_first() {
        let (mut k, mm) = boot(MachineConfig::default(), &[("hugepages-64kB/enabled", "always")]);
        k.sys_swapon(64 << 20).unwrap();
        k.do_mmap(mm, BASE, PMD, rw()).unwrap();
        for a in (BASE..BASE + PMD).step_by(K4 as usize) {
            user_access(&mut k, mm, 0, a, true).unwrap();
        }
        k.do_madvise(mm, BASE, BASE + PMD / 2, Madv::PageOut).unwrap();
        let faults = (k.mm(mm).min_flt, k.mm(mm).maj_flt);
        k.do_madvise(mm, BASE, BASE + PMD, Madv::Collapse).unwrap();
        assert_clean(&k);
        assert_eq!(k.page_kind(mm, BASE), Some(PageKind::Order(9)));
        // Sixteen whole 64K folios came back, one major each.
        assert_eq!(k.stat.mthp(4, MthpStat::Swpin), 16);
        assert_eq!(k.stat.event(VmEvent::Pswpin), 256);
        assert_eq!(k.stat.event(VmEvent::PgMajFault), 16);
        assert_eq!((k.mm(mm).min_flt, k.mm(mm).maj_flt), faults);
        assert_eq!((k.mm(mm).rss_swap, k.swap.as_ref().unwrap().inuse_pages), (0, 0));
    }

    /// Pages shared with a child after fork are mapped read-only: 6.18 collapses them
    /// anyway; 6.12 fails the scan with SCAN_PAGE_RO and leaves the ptes as they were.
    #[test]
    fn collapse_ro_refuse_leaves_a_range_with_no_writable_pte_uncollapsed() {
        for refuse in [false, true] {
            let (mut k, mm) = boot(MachineConfig::default(), &[]);
            k.collapse_ro_refuse = refuse;
            k.do_mmap(mm, BASE, PMD, rw()).unwrap();
            for a in (BASE..BASE + 16 * K4).step_by(K4 as usize) {
                user_access(&mut k, mm, 0, a, true).unwrap();
            }
            let _child = k.dup_mmap(mm).unwrap();
            k.do_madvise(mm, BASE, BASE + PMD, Madv::Collapse).unwrap();
            assert_clean(&k);
            let (collapsed, kind) = if refuse {
                (0, PageKind::Order(0))
            } else {
                (1, PageKind::Order(9))
            };
            assert_eq!(k.stat.event(VmEvent::ThpCollapseAlloc), collapsed, "refuse {refuse}");
            assert_eq!(k.page_kind(mm, BASE), Some(kind));
        }
    }
    /// A MADV_HUGEPAGE range of `pages` written base pages from its start, the
    /// region made MADV_HUGEPAGE after the faults (order 0), on a kernel with
    /// `khugepaged_mthp` as given.
    fn khugepaged_range(
        mthp: bool,
        knobs: &[(&str, &str)],
        pages: u64,
    ) -> (crate::mm::Kernel, crate::mm::mm_types::MmId) {
        let (mut k, mm) = boot(MachineConfig::default(), knobs);
        k.khugepaged_mthp = mthp;
        k.do_mmap(mm, BASE, PMD, rw() | VmFlags::NOHUGEPAGE).unwrap();
        for a in (BASE..BASE + pages * K4).step_by(K4 as usize) {
            user_access(&mut k, mm, 0, a, true).unwrap();
        }
        k.do_madvise(mm, BASE, BASE + PMD, Madv::HugePage).unwrap();
        (k, mm)
    }

    #[test]
    fn madvise_hugepage_registers_the_mm_once_and_exit_unregisters_it() {
        let (mut k, mm) = khugepaged_range(false, &[], 16);
        k.do_madvise(mm, BASE, BASE + PMD, Madv::HugePage).unwrap();
        assert_eq!(k.khugepaged_mm, vec![mm]);
        let child = k.dup_mmap(mm).unwrap();
        assert_eq!(k.khugepaged_mm, vec![mm, child]);
        k.exit_mmap(child);
        assert_eq!(k.khugepaged_mm, vec![mm]);
    }

    /// MADV_HUGEPAGE registers the mm for a VMA with an anon_vma only: not before its
    /// first fault (the guest runner's anchor faults a page in for this).
    #[test]
    fn madvise_hugepage_registers_only_a_vma_with_an_anon_vma() {
        let (mut k, mm) = boot(MachineConfig::default(), &[]);
        k.do_mmap(mm, BASE, PMD, rw()).unwrap();
        k.do_madvise(mm, BASE, BASE + PMD, Madv::HugePage).unwrap();
        assert!(k.khugepaged_mm.is_empty());
        let (k, mm) = khugepaged_range(false, &[], 1);
        assert_eq!(k.khugepaged_mm, vec![mm]);
    }

    /// With the PMD size off and 64K on madvise, only 7.2+'s khugepaged (mTHP
    /// collapse) takes the mm: before, khugepaged_enter_vma wants the PMD size enabled.
    #[test]
    fn registration_wants_the_pmd_size_before_khugepaged_mthp() {
        let knobs = [
            ("hugepages-2048kB/enabled", "never"),
            ("hugepages-64kB/enabled", "madvise"),
        ];
        for mthp in [false, true] {
            let (k, mm) = khugepaged_range(mthp, &knobs, 16);
            assert_eq!(k.khugepaged_mm, if mthp { vec![mm] } else { vec![] }, "mthp {mthp}");
        }
    }

    /// 448 pages and 64 none ptes: within max_ptes_none 511, not within 63.
    #[test]
    fn khugepaged_collapses_within_max_ptes_none_only() {
        for (max, collapsed) in [("511", true), ("63", false)] {
            let (mut k, mm) = khugepaged_range(false, &[("khugepaged/max_ptes_none", max)], 448);
            k.khugepaged_do_scan().unwrap();
            assert_clean(&k);
            let kind = if collapsed {
                PageKind::Order(9)
            } else {
                PageKind::Order(0)
            };
            assert_eq!(k.page_kind(mm, BASE), Some(kind), "max {max}");
            assert_eq!(k.stat.event(VmEvent::ThpCollapseAlloc), collapsed as i64);
            assert_eq!(k.stat.event(VmEvent::ThpScanExceedNonePte), !collapsed as i64);
            assert_eq!(
                (k.khugepaged_pages_collapsed, k.khugepaged_full_scans),
                (collapsed as u64, 1)
            );
            if collapsed {
                assert_eq!(k.mm(mm).rss_anon, 512);
            }
        }
    }

    /// A range nobody made MADV_HUGEPAGE (enabled=madvise) is not scanned.
    #[test]
    fn khugepaged_skips_a_range_its_knobs_do_not_allow() {
        let (mut k, mm) = boot(MachineConfig::default(), &[]);
        k.do_mmap(mm, BASE, PMD, rw()).unwrap();
        k.do_mmap(mm, BASE + PMD, PMD, rw() | VmFlags::HUGEPAGE).unwrap();
        user_access(&mut k, mm, 0, BASE, true).unwrap();
        k.do_madvise(mm, BASE + PMD, BASE + 2 * PMD, Madv::HugePage).unwrap();
        k.khugepaged_do_scan().unwrap();
        assert_eq!(k.page_kind(mm, BASE), Some(PageKind::Order(0)));
        assert_eq!(k.stat.event(VmEvent::ThpCollapseAlloc), 0);
    }

    /// 7.2+: with only 64K enabled, each 64K block with a present pte becomes a 64K
    /// folio; a second scan allocates a folio for each block again and flushes the
    /// pmd's range, then finds it mapped by a folio that large
    /// (SCAN_PTE_MAPPED_HUGEPAGE) and frees it.
    #[test]
    fn khugepaged_mthp_collapses_each_occupied_64k_block_and_rescans_them_for_nothing() {
        let knobs = [
            ("hugepages-2048kB/enabled", "never"),
            ("hugepages-64kB/enabled", "madvise"),
        ];
        let (mut k, mm) = boot(MachineConfig::default(), &knobs);
        k.khugepaged_mthp = true;
        k.do_mmap(mm, BASE, PMD, rw() | VmFlags::NOHUGEPAGE).unwrap();
        for a in (BASE..BASE + PMD / 2).step_by(16 * K4 as usize) {
            user_access(&mut k, mm, 0, a, true).unwrap();
        }
        k.do_madvise(mm, BASE, BASE + PMD, Madv::HugePage).unwrap();
        k.khugepaged_do_scan().unwrap();
        assert_clean(&k);
        assert_eq!(k.stat.mthp(4, MthpStat::CollapseAlloc), 16);
        assert_eq!(k.stat.mthp(4, MthpStat::NrAnon), 16);
        assert_eq!(k.page_kind(mm, BASE + 15 * K4), Some(PageKind::Order(4)));
        assert_eq!(k.page_kind(mm, BASE + PMD / 2), None);
        let tlbi = k.arch.hw.ev.get(crate::hw::Event::TlbiTotal);
        k.khugepaged_do_scan().unwrap();
        assert_clean(&k);
        assert_eq!(k.stat.mthp(4, MthpStat::CollapseAlloc), 32);
        assert_eq!(k.stat.mthp(4, MthpStat::NrAnon), 16);
        assert_eq!(k.arch.hw.ev.get(crate::hw::Event::TlbiTotal) - tlbi, 16);
        assert_eq!(k.khugepaged_pages_collapsed, 1);
    }
}
