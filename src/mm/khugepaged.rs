//! mm/khugepaged.c, the MADV_COLLAPSE half: collapse the pte-mapped pages under a pmd
//! into a new PMD-mapped THP, swapping in what is swapped out first. MADV_COLLAPSE
//! ignores the sysfs knobs (but not VM_NOHUGEPAGE) and khugepaged's max_ptes_none /
//! max_ptes_swap / max_ptes_shared limits.

use super::folio::PageFlags;
use super::huge_memory::map_anon_folio_pmd_nopf;
use super::memory::VmFault;
use super::mm_types::{MmId, VmFlags, Vma};
use super::mmap::VmaError;
use super::vmstat::VmEvent;
use super::Kernel;
use crate::arch::arm64::pgtable::pmd_trans_huge;
use crate::arch::arm64::tlbflush::flush_tlb_range;
use crate::hw::{Desc, DescKind, Pfn};

/// The scan results the model distinguishes (enum scan_result); a success carries
/// the swap ptes found (`unmapped`).
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
enum Scan {
    Succeed(usize),
    PmdMapped,
    Fail,
}

impl Kernel {
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
                if let Scan::Succeed(unmapped) = self.hpage_collapse_scan_pmd(mm, addr) {
                    self.collapse_huge_page(mm, vma, addr, unmapped);
                }
            }
            addr += pmd_size;
        }
        Ok(())
    }

    /// hpage_collapse_scan_pmd: a pte table whose mapped pages are anon folios with no
    /// references beyond their mappings and the swap cache's (folio_expected_ref_count),
    /// and any number of swap ptes. 6.18 no longer needs a writable pte; with
    /// `collapse_ro_refuse` (before "mm: drop all references of writable and
    /// SCAN_PAGE_RO", 6.18) a range none of whose pages is mapped writable fails
    /// (SCAN_PAGE_RO): khugepaged would otherwise make a read-only range writable.
    fn hpage_collapse_scan_pmd(&mut self, mm: MmId, haddr: u64) -> Scan {
        let g = self.arch.granule();
        let Some(pmd) = self.pmd_offset(mm, haddr) else {
            return Scan::Fail;
        };
        let d = self.pxd_get(2, pmd);
        if pmd_trans_huge(d) {
            return Scan::PmdMapped;
        }
        if !matches!(d.kind(2, g), DescKind::Table(_)) {
            return Scan::Fail;
        }
        let ptep = self.pte_offset_map(pmd, haddr).expect("a pte table");
        let amm = self.arch_mm(mm);
        let mut writable = false;
        let mut unmapped = 0;
        for i in 0..1usize << g.pmd_order() {
            let pte = self.arch.ptep_get(amm, ptep.add(i));
            if pte.is_swap_pte() {
                unmapped += 1;
                continue;
            }
            if pte.pte_none() || self.is_zero_pfn(pte.pte_pfn(g)) {
                continue;
            }
            writable |= pte.pte_write();
            let folio = self.memmap.folio_of(pte.pte_pfn(g));
            let f = self.memmap.page(folio).flags;
            let cache_refs = if f.contains(PageFlags::SWAPCACHE) {
                self.memmap.folio_nr_pages(folio) as i32
            } else {
                0
            };
            if !f.contains(PageFlags::ANON)
                || self.memmap.folio_ref_count(folio) != self.memmap.folio_mapcount(folio) + cache_refs
            {
                return Scan::Fail;
            }
        }
        if self.collapse_ro_refuse && !writable {
            return Scan::Fail;
        }
        Scan::Succeed(unmapped)
    }

    /// __collapse_huge_page_swapin: do_swap_page (a read, not a fault: no task fault
    /// counts) for each swap pte of the range, in address order; a large or readahead
    /// swap-in maps later ones on the way. False when a swap-in ran out of memory.
    fn __collapse_huge_page_swapin(&mut self, mm: MmId, vma: &Vma, haddr: u64) -> bool {
        let g = self.arch.granule();
        let pmd = self.pmd_offset(mm, haddr).expect("scanned pmd");
        let ptep = self.pte_offset_map(pmd, haddr).expect("scanned pte table");
        let amm = self.arch_mm(mm);
        for i in 0..1usize << g.pmd_order() {
            let pte = self.arch.ptep_get_lockless(amm, ptep.add(i));
            if !pte.is_swap_pte() {
                continue;
            }
            let addr = haddr + i as u64 * g.page_size();
            if self.do_swap_page(mm, vma, pmd, ptep.add(i), addr, false, pte) == VmFault::Oom {
                return false;
            }
        }
        true
    }

    /// collapse_huge_page: allocate the THP, swap in the `unmapped` swap ptes,
    /// pmdp_collapse_flush, copy and unmap the old pages
    /// (__collapse_huge_page_copy_succeeded: a folio's ptes at a time since
    /// 4ea3594a4741, 6.17; one at a time with `collapse_copy_per_pte`; each old folio
    /// then leaves the swap cache if nothing holds its slots), deposit the emptied pte
    /// table and map the THP.
    fn collapse_huge_page(&mut self, mm: MmId, vma: &Vma, haddr: u64, unmapped: usize) {
        let g = self.arch.granule();
        let ps = g.page_size();
        let Some(folio) = self.folio_alloc(g.pmd_order()) else {
            return;
        };
        self.stat.count_vm_event(VmEvent::ThpCollapseAlloc);
        // alloc_charge_folio: SCAN_CGROUP_CHARGE_FAIL.
        if !self.mem_cgroup_charge(folio, true) {
            self.folio_put(folio);
            return;
        }
        if unmapped > 0 && !self.__collapse_huge_page_swapin(mm, vma, haddr) {
            self.folio_put(folio);
            return;
        }
        let pmd = self.pmd_offset(mm, haddr).expect("scanned pmd");
        let ptep = self.pte_offset_map(pmd, haddr).expect("scanned pte table");
        let table = self.arch.hw.mem.table_pfn(ptep.table);
        self.pxd_set(2, haddr, pmd, Desc::ZERO);
        let asid = self.mm(mm).asid;
        flush_tlb_range(&mut self.arch.hw, asid, haddr, haddr + g.pmd_size());
        let amm = self.arch_mm(mm);
        let nr_ptes = 1usize << g.pmd_order();
        // __collapse_huge_page_isolate checks every pte again, and
        // __collapse_huge_page_copy reads every pte for the page to copy (the model
        // copies in the loop below): two ptep_get per pte while the blocks are still
        // folded (contpte_ptep_get), in 6.12 and 6.18 alike.
        for _ in 0..2 {
            for i in 0..nr_ptes {
                self.arch.ptep_get(amm, ptep.add(i));
            }
        }
        let mut i = 0;
        while i < nr_ptes {
            let addr = haddr + i as u64 * ps;
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
            // __collapse_huge_page_copy: the THP's pages take these pages' contents.
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
        self.mm_mut(mm).deposited.insert(haddr, table);
        map_anon_folio_pmd_nopf(self, mm, vma, folio, pmd, haddr);
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
}
