//! mm/memory.c: the fault path (handle_mm_fault, do_anonymous_page with mTHP order
//! selection, do_wp_page) and the zap path (unmap_page_range .. zap_pte_range with
//! mmu_gather), plus free_pgtables.

use super::folio::PageFlags;
use super::huge_memory;
use super::mm_types::{MmId, VmFlags, Vma};
use super::mmu_gather::MmuGather;
use super::pgtable::PmdPtr;
use super::swapfile::SwapInfo;
use super::vmstat::{MthpStat, VmEvent};
use super::{Kernel, ZapVariant};
use crate::arch::arm64::pgtable::pmd_trans_huge;
use crate::arch::arm64::pgtable::{ArchMm, PgProt, Pte, PtePtr};
use crate::hw::{DescKind, Event, Pfn};
use crate::kcount::KernelEvent;

bitflags::bitflags! {
    /// fpb_t: what folio_pte_batch_flags respects or merges (young and dirty are
    /// otherwise ignored, and so is write unless respected).
    #[derive(Clone, Copy, Debug, PartialEq, Eq)]
    pub struct Fpb: u8 {
        const RESPECT_WRITE = 1 << 0;
        const MERGE_WRITE = 1 << 1;
        const MERGE_YOUNG_DIRTY = 1 << 2;
    }
}

/// Why a fault could not be handled.
#[derive(Clone, Copy, Debug, PartialEq, Eq, thiserror::Error)]
pub enum FaultError {
    #[error("SIGSEGV: no VMA or access not permitted at {0:#x}")]
    Segv(u64),
    #[error("out of memory at {0:#x}")]
    Oom(u64),
}

/// vm_fault_t, reduced to what the anonymous paths return.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum VmFault {
    Done,
    /// Done, after reading the page from the swap device (VM_FAULT_MAJOR).
    Major,
    Fallback,
    Oom,
}

/// The vm_page_prot of a VMA: a private one's is read-only until written (CoW).
/// arm64's protection_map gives VM_WRITE without VM_READ PAGE_READONLY too: its
/// stage 1 permissions have no write-only encoding, so a write-only mapping is
/// readable, and the write fault makes its pte read-write as for PROT_READ|PROT_WRITE.
pub fn vm_page_prot(vma: &Vma) -> PgProt {
    // A shared writable mapping needs no write fault (shmem asks for no writenotify):
    // PAGE_SHARED, writable-clean until the hardware sets it dirty.
    if vma.flags.contains(VmFlags::SHARED | VmFlags::WRITE) {
        return PgProt::SHARED;
    }
    if vma.flags.intersects(VmFlags::READ | VmFlags::WRITE) {
        PgProt::READONLY
    } else {
        PgProt::NONE
    }
}

/// fault_around_bytes' default: do_read_fault maps up to 64 KiB of cached pages.
const FAULT_AROUND_BYTES: u64 = 64 << 10;

/// What a first-touch stream's last anonymous write fault found on its way
/// (`Kernel::handle_mm_fault_stream`): the VMA, as the tree held it when that fault
/// began, and the pmd and pte table, for the addresses both cover.
#[derive(Clone, Copy, Debug)]
pub struct FaultRun {
    vma: Vma,
    pmd: PmdPtr,
    table: crate::hw::TableId,
    /// The addresses the VMA and the pte table both cover.
    lo: u64,
    hi: u64,
    /// The VMA tree's sequence and the upper tables' generation then.
    vma_seq: u64,
    upper_gen: u64,
}

impl Kernel {
    /// handle_mm_fault with arm64's do_page_fault access checks in front and
    /// mm_account_fault behind (pgfault and the task's min_flt or maj_flt).
    pub fn handle_mm_fault(&mut self, mm: MmId, addr: u64, write: bool) -> Result<(), FaultError> {
        self.handle_mm_fault_remembering(mm, addr, write, None)
    }

    /// handle_mm_fault for a first-touch stream, fault after fault in one mm: where the
    /// last one's `run` still holds (no VMA changed and no table above level 3 was
    /// written since, `addr` in the same VMA and pte table), a write to a none pte goes
    /// to do_anonymous_page from its pte, with the reads handle_mm_fault makes on its
    /// way there counted, instead of finding the VMA and walking to the pte again.
    /// Anything else takes the whole path, which remembers what its fault found.
    #[inline]
    pub fn handle_mm_fault_stream(
        &mut self,
        run: &mut Option<FaultRun>,
        mm: MmId,
        addr: u64,
        write: bool,
    ) -> Result<(), FaultError> {
        if let Some(r) = *run {
            if write
                && (r.lo..r.hi).contains(&addr)
                && self.arch.hw.mem.upper_gen() == r.upper_gen
                && self.mm(mm).vma_seq() == r.vma_seq
            {
                let ptep = PtePtr {
                    table: r.table,
                    index: self.arch.granule().index(addr, 3),
                };
                if Pte(self.arch.hw.mem.read(ptep.table, ptep.index)).pte_none() {
                    self.arch.kc.inc(KernelEvent::HandleMmFault);
                    self.count_anon_write_walk();
                    let ret = self.do_anonymous_write(mm, &r.vma, r.pmd, addr, Some(ptep));
                    return self.mm_account_fault(mm, addr, ret);
                }
            }
        }
        self.handle_mm_fault_remembering(mm, addr, write, Some(run))
    }

    /// handle_mm_fault, leaving in `run` (when given) what its fault found when it was
    /// an anonymous write to a none pte (`anon_write_to_none_pte`), None otherwise.
    #[inline(always)]
    fn handle_mm_fault_remembering(
        &mut self,
        mm: MmId,
        addr: u64,
        write: bool,
        run: Option<&mut Option<FaultRun>>,
    ) -> Result<(), FaultError> {
        self.arch.kc.inc(KernelEvent::HandleMmFault);
        let Some(vma) = self.mm(mm).find_vma(addr) else {
            return Err(FaultError::Segv(addr));
        };
        // arm64's do_page_fault: a read is allowed by VM_READ or VM_WRITE ("write
        // implies read"), a write only by VM_WRITE.
        let allowed = if write {
            VmFlags::WRITE
        } else {
            VmFlags::READ | VmFlags::WRITE
        };
        if !vma.flags.intersects(allowed) {
            return Err(FaultError::Segv(addr));
        }
        let ret = match self.anon_write_to_none_pte(mm, &vma, addr, write) {
            Some((pmd, ptep)) => {
                // Taken before the fault: one that changes the VMA (its first gives
                // it an anon_vma) or an upper table leaves a run that no longer holds.
                if let Some(run) = run {
                    *run = Some(self.fault_run(mm, &vma, addr, pmd, ptep));
                }
                self.do_anonymous_write(mm, &vma, pmd, addr, Some(ptep))
            }
            None => {
                if let Some(run) = run {
                    *run = None;
                }
                self.__handle_mm_fault(mm, &vma, addr, write)
            }
        };
        self.mm_account_fault(mm, addr, ret)
    }

    /// What an anonymous write fault at `addr` found on its way (`vma`, and `pmd` to
    /// `ptep`), for the faults after it: the addresses the VMA and the pte table both
    /// cover, as the VMA tree and the upper tables stand now.
    #[inline(never)]
    fn fault_run(&self, mm: MmId, vma: &Vma, addr: u64, pmd: PmdPtr, ptep: PtePtr) -> FaultRun {
        let g = self.arch.granule();
        let table_lo = addr & !(g.pmd_size() - 1);
        FaultRun {
            vma: *vma,
            pmd,
            table: ptep.table,
            lo: vma.start.max(table_lo),
            hi: vma.end.min(table_lo + g.pmd_size()),
            vma_seq: self.mm(mm).vma_seq(),
            upper_gen: self.arch.hw.mem.upper_gen(),
        }
    }

    /// mm_account_fault: pgfault, and the task's min_flt or maj_flt.
    #[inline(always)]
    fn mm_account_fault(&mut self, mm: MmId, addr: u64, ret: VmFault) -> Result<(), FaultError> {
        self.stat.count_vm_event(VmEvent::PgFault);
        match ret {
            VmFault::Oom => Err(FaultError::Oom(addr)),
            VmFault::Major => {
                self.mm_mut(mm).maj_flt += 1;
                Ok(())
            }
            _ => {
                self.mm_mut(mm).min_flt += 1;
                if self.inject_extra_fault {
                    self.inject_extra_fault = false;
                    self.mm_mut(mm).min_flt += 1;
                    self.stat.count_vm_event(VmEvent::PgFault);
                }
                Ok(())
            }
        }
    }

    /// Where `__handle_mm_fault` is bound for do_anonymous_page's write (a write to a
    /// none pte of an existing pte table in a private VMA; the pmd is a table, so no
    /// PMD THP): the pmd and pte, with the reads the walk there makes counted
    /// (pmd_alloc's upper levels, the pmd read twice, the pte once), as
    /// `do_anonymous_write` then goes on from them, to an order-0 folio or an mTHP one
    /// (alloc_anon_folio). A fault per page of an order-0 touch, or per folio of an
    /// mTHP one, takes this path, which finds the tables through the walk's memo
    /// instead of walking to them four times. None, counting nothing, elsewhere.
    #[inline]
    fn anon_write_to_none_pte(&mut self, mm: MmId, vma: &Vma, addr: u64, write: bool) -> Option<(PmdPtr, PtePtr)> {
        let g = self.arch.granule();
        if !write || vma.is_shmem() {
            return None;
        }
        #[cfg(test)]
        if tests::GENERAL_FAULTS_ONLY.get() {
            return None;
        }
        let pmd = self.pmd_if_remembered(mm, addr)?;
        let d = self.arch.hw.mem.read(pmd.table, pmd.index);
        if !d.is_table(2) {
            return None;
        }
        let ptep = PtePtr {
            table: self.table_of(2, d),
            index: g.index(addr, 3),
        };
        if !Pte(self.arch.hw.mem.read(ptep.table, ptep.index)).pte_none() {
            return None;
        }
        self.count_anon_write_walk();
        Some((pmd, ptep))
    }

    /// The reads the walk to an anonymous write's none pte makes (pmd_alloc's upper
    /// levels, the pmd read twice, the pte once), for a fault that found the pte
    /// without them.
    #[inline(always)]
    fn count_anon_write_walk(&mut self) {
        self.count_upper_reads(self.arch.granule());
        #[cfg(test)]
        tests::SHORTCUTS_TAKEN.set(tests::SHORTCUTS_TAKEN.get() + 1);
        let ev = &mut self.arch.hw.ev;
        // __handle_mm_fault's pmdp_get, handle_pte_fault's pte_offset_map and ptep_get.
        ev.add(Event::PmdRead, 2);
        ev.inc(Event::PteRead);
    }

    fn __handle_mm_fault(&mut self, mm: MmId, vma: &Vma, addr: u64, write: bool) -> VmFault {
        let g = self.arch.granule();
        let Some(pmd) = self.pmd_alloc(mm, addr) else {
            return VmFault::Oom;
        };
        let pmdval = self.pxd_get(2, pmd);
        let pmd_order = g.pmd_order();
        if pmdval.is_none() {
            if !vma.is_shmem() && self.thp_vma_allowable_orders(vma) & (1 << pmd_order) != 0 {
                let ret = huge_memory::do_huge_pmd_anonymous_page(self, mm, vma, pmd, addr, write);
                if ret != VmFault::Fallback {
                    return ret;
                }
            }
        } else if pmd_trans_huge(pmdval) {
            if write && !Pte(pmdval).pte_write() {
                let ret = huge_memory::do_huge_pmd_wp_page(self, mm, vma, pmd, addr);
                if ret != VmFault::Fallback {
                    return ret;
                }
            } else {
                return VmFault::Done;
            }
        }
        self.handle_pte_fault(mm, vma, pmd, addr, write)
    }

    /// thp_vma_allowable_orders for the fault path (sysfs enforced).
    pub fn thp_vma_allowable_orders(&self, vma: &Vma) -> u64 {
        self.knobs.allowable_orders(
            vma.flags.contains(VmFlags::HUGEPAGE),
            vma.flags.contains(VmFlags::NOHUGEPAGE),
        )
    }

    /// thp_vma_suitable_orders: drop orders whose aligned range around `addr` leaves the VMA.
    pub fn thp_vma_suitable_orders(&self, vma: &Vma, addr: u64, mut orders: u64) -> u64 {
        let ps = self.arch.granule().page_size();
        let mut o = orders;
        while o != 0 {
            let order = 63 - o.leading_zeros();
            o &= !(1 << order);
            let size = ps << order;
            let haddr = addr & !(size - 1);
            if haddr < vma.start || haddr + size > vma.end {
                orders &= !(1 << order);
            }
        }
        orders
    }

    fn handle_pte_fault(&mut self, mm: MmId, vma: &Vma, pmd: PmdPtr, addr: u64, write: bool) -> VmFault {
        let amm = self.arch_mm(mm);
        let pte = self.pte_offset_map(pmd, addr);
        let orig = match pte {
            Some(p) => self.arch.ptep_get(amm, p),
            None => Pte::NONE,
        };
        if orig.pte_none() {
            if vma.is_shmem() {
                return self.do_fault(mm, vma, pmd, addr, write);
            }
            return self.do_anonymous_page(mm, vma, pmd, addr, write);
        }
        let ptep = pte.unwrap();
        if orig.is_swap_pte() {
            return self.do_swap_page(mm, vma, pmd, ptep, addr, write, orig);
        }
        // Under the PTL: the pte must not have changed.
        let cur = self.arch.ptep_get(amm, ptep);
        if !cur.pte_same(orig) {
            return VmFault::Done;
        }
        let mut entry = orig;
        if write {
            if !entry.pte_write() {
                return self.do_wp_page(mm, vma, ptep, addr, orig);
            }
            entry = entry.pte_mkdirty();
        }
        entry = entry.pte_mkyoung();
        if !self.arch.ptep_set_access_flags(amm, addr, ptep, entry, write) && write {
            self.arch.flush_tlb_fix_spurious_fault(amm, addr);
        }
        VmFault::Done
    }

    /// do_swap_page on a zram-like (SWP_SYNCHRONOUS_IO) device. A folio still in the
    /// swap cache is mapped without I/O (a minor fault; a readahead hit). Otherwise a
    /// slot only this pte holds skips the swap cache: a folio of the largest order
    /// alloc_swap_folio allows is read and the slots freed at once; a slot a forked mm
    /// still shares is read through the swap cache with readahead (swapin_readahead),
    /// and stays cached while a pte holds it. Either read is a major fault. The pte is
    /// writable (in a VM_WRITE VMA, read faults too, 6.12+) when the page is certainly
    /// this mm's: read without the cache, exclusive by its swap pte, or freed from the
    /// cache by a write fault (should_try_to_free_swap); else a write goes on to
    /// do_wp_page. A read counts PGMAJFAULT here, also for a swap-in outside a fault
    /// (khugepaged's); the task's maj_flt is mm_account_fault's. From 7.0 every slot,
    /// shared or not, is read by swapin_sync instead, into a swap-cache folio as large
    /// as the ptes allow; a large cached folio is mapped whole where its ptes still
    /// hold its slots (swap_cache_map_range), else the faulting page alone.
    #[allow(clippy::too_many_arguments)]
    pub fn do_swap_page(
        &mut self,
        mm: MmId,
        vma: &Vma,
        pmd: PmdPtr,
        ptep: PtePtr,
        addr: u64,
        write: bool,
        orig: Pte,
    ) -> VmFault {
        let g = self.arch.granule();
        let ps = g.page_size();
        let addr = addr & !(ps - 1);
        let offset = orig.pte_swp_offset();
        self.anon_vma_prepare(mm, vma);
        let cached = self.swap_cache_get_folio(offset);
        if let Some(folio) = cached {
            self.swap_update_readahead(folio, mm, vma, addr);
        }
        let shared = self
            .swap
            .as_ref()
            .expect("a swap pte without a swap device")
            .swap_count(offset)
            > 1;
        let (folio, swapcache, ret) = match cached {
            Some(folio) => (folio, true, VmFault::Done),
            None if self.swapin_sync_cache => match self.swapin_sync(mm, vma, ptep, addr, orig) {
                Some(folio) => (folio, true, VmFault::Major),
                None => return VmFault::Oom,
            },
            None if !shared => match self.alloc_swap_folio(mm, vma, ptep, addr, orig) {
                Some(folio) => (folio, false, VmFault::Major),
                None => return VmFault::Oom,
            },
            None => match self.swap_vma_readahead(mm, vma, pmd, offset, addr) {
                Some(folio) => (folio, true, VmFault::Major),
                None => return VmFault::Oom,
            },
        };
        if ret == VmFault::Major {
            self.stat.count_vm_event(VmEvent::PgMajFault);
        }
        let folio_nr = self.memmap.folio_nr_pages(folio);
        let (page, nr, start) = if !swapcache {
            let start = addr & !((ps << folio_nr.trailing_zeros()) - 1);
            let first = offset - ((addr - start) >> g.page_shift());
            self.swap_read_folio(folio, first);
            (folio, folio_nr, start)
        } else {
            self.swap_cache_map_range(mm, vma, ptep, addr, folio, orig)
        };
        let first = offset - ((addr - start) >> g.page_shift());
        // A pte of a swap-cache folio is exclusive if its swap pte was; a folio read
        // without the cache is this mm's alone.
        let exclusive = !swapcache || orig.pte_swp_exclusive();
        let si = self.swap.as_mut().expect("checked");
        for i in 0..nr {
            si.swap_entry_put(first + i);
        }
        if self.should_try_to_free_swap(folio, vma, write) {
            self.folio_free_swap(folio);
        }
        let m = self.mm_mut(mm);
        m.rss_anon += nr as i64;
        m.rss_swap -= nr as i64;
        let amm = self.arch_mm(mm);
        let mut pte = Pte::pfn_pte(page, vm_page_prot(vma), g).pte_mkyoung();
        // Up to 6.19 a folio nobody else holds is reused too; by 7.3 only an exclusive
        // one is, the rest left to do_wp_page.
        let reuse = exclusive || (!self.swapin_sync_cache && self.memmap.folio_ref_count(folio) == 1);
        let mut wp = write;
        // An exclusive folio is mapped writable on a read fault too since c18160dba5ff
        // (6.11); before, only on a write fault, and a later write takes a fault.
        if reuse && vma.flags.contains(VmFlags::WRITE) && (write || !self.swapin_write_fault_only) {
            pte = pte.pte_mkwrite();
            if write {
                pte = pte.pte_mkdirty();
                wp = false;
            }
        }
        self.folio_ref_add(folio, nr as i32 - 1);
        if self.memmap.folio_test(folio, PageFlags::ANON) {
            self.folio_add_anon_rmap_ptes(folio, page, nr, mm, reuse);
        } else {
            self.folio_add_new_anon_rmap(folio, mm, start, false);
            if !swapcache {
                // folio_add_lru_vma: a swap-cache folio joined the LRU when it was read.
                self.folio_add_lru(folio);
            }
            if !reuse {
                for i in 0..nr {
                    self.memmap
                        .page_mut(Pfn(folio.0 + i))
                        .flags
                        .remove(PageFlags::ANON_EXCLUSIVE);
                }
            }
        }
        let first_ptep = PtePtr {
            table: ptep.table,
            index: ptep.index - ((addr - start) / ps) as usize,
        };
        self.arch
            .set_ptes(amm, start, first_ptep, pte, nr as usize, Some((folio, folio_nr)));
        if wp && self.do_wp_page(mm, vma, ptep, addr, pte) == VmFault::Oom {
            return VmFault::Oom;
        }
        ret
    }

    /// should_try_to_free_swap: after a swap-in from the cache, whether to drop the
    /// folio from it now (folio_free_swap does only once no pte holds its slots): always
    /// on a synchronous device since ab08be8dc96a (7.0), the model's only kind; before,
    /// when swap is full, the VMA or folio is mlocked, or a write fault holds the only
    /// references besides the cache's (then it may be reused).
    fn should_try_to_free_swap(&self, folio: Pfn, vma: &Vma, write: bool) -> bool {
        if !self.memmap.folio_test(folio, PageFlags::SWAPCACHE) {
            return false;
        }
        if self.swapin_sync_cache {
            return true;
        }
        let si = self.swap.as_ref().expect("a swap cache without a device");
        if si.vm_swap_full() || vma.flags.contains(VmFlags::LOCKED) || self.memmap.folio_test(folio, PageFlags::MLOCKED)
        {
            return true;
        }
        let nr = self.memmap.folio_nr_pages(folio) as i32;
        write && self.memmap.folio_ref_count(folio) == 1 + nr
    }

    /// alloc_swap_folio: a folio for the skip-swapcache path, of the largest order
    /// swapin_orders leaves that can be allocated, else order 0. None when out of memory.
    fn alloc_swap_folio(&mut self, mm: MmId, vma: &Vma, ptep: PtePtr, addr: u64, orig: Pte) -> Option<Pfn> {
        let orders = self.swapin_orders(mm, vma, ptep, addr, orig, true);
        self.swapin_folio_alloc(orders, |_, _| true)
    }

    /// The largest of `orders` (a bitmask) that `fits` and can be allocated and
    /// charged, swpin_fallback counted for each that cannot (swpin_fallback_charge too
    /// when the charge fails), else order 0. None when out of memory.
    fn swapin_folio_alloc(&mut self, mut orders: u64, fits: impl Fn(&Kernel, u32) -> bool) -> Option<Pfn> {
        while orders != 0 {
            let order = 63 - orders.leading_zeros();
            orders &= !(1 << order);
            if fits(self, order) {
                if let Some(f) = self.folio_alloc(order) {
                    // mem_cgroup_swapin_charge_folio with the mTHP gfp: no reclaim.
                    if self.mem_cgroup_charge(f, false) {
                        return Some(f);
                    }
                    self.stat.count_mthp_stat(order, MthpStat::SwpinFallbackCharge);
                    self.folio_put(f);
                }
            }
            self.stat.count_mthp_stat(order, MthpStat::SwpinFallback);
        }
        let f = self.folio_alloc(0)?;
        if self.mem_cgroup_charge(f, true) {
            return Some(f);
        }
        self.folio_put(f);
        None
    }

    /// swapin_sync (7.0+): a slot not in the swap cache is read into it, in a folio of
    /// the largest order thp_swapin_suitable_orders allows (the ptes alone: whether a
    /// fork shares the slots does not matter) whose aligned slots __swap_cache_add_check
    /// finds all held, none cached and alike in the zeromap (swpin_fallback for each
    /// order that is not), else order 0. None when out of memory.
    fn swapin_sync(&mut self, mm: MmId, vma: &Vma, ptep: PtePtr, addr: u64, orig: Pte) -> Option<Pfn> {
        let offset = orig.pte_swp_offset();
        // swapin_sync looks the slot up again before it allocates (7.3: its
        // swap_cache_get_folio loop, 64 lookups for 32 swap-ins on the 7.3 guest's
        // swap_fork_child); do_swap_page's miss just before means nothing is found.
        let again = self.swap_cache_lookup(offset);
        debug_assert!(again.is_none(), "slot {offset} cached since do_swap_page looked");
        let orders = self.swapin_orders(mm, vma, ptep, addr, orig, false);
        let folio = self.swapin_folio_alloc(orders, |k, order| {
            let first = offset & !((1u64 << order) - 1);
            let si = k.swap.as_ref().expect("a swap pte without a swap device");
            let zero = si.is_zero(offset);
            (first..first + (1 << order)).all(|s| si.swap_count(s) > 0 && !si.has_cache(s) && si.is_zero(s) == zero)
        })?;
        let nr = self.memmap.folio_nr_pages(folio);
        let first = offset & !(nr - 1);
        let si = self.swap.as_mut().expect("checked");
        for s in first..first + nr {
            si.swapcache_prepare(s);
        }
        self.memmap.folio_set(folio, PageFlags::SWAPBACKED);
        self.swap_cache_add_folio(folio, first);
        self.folio_add_lru(folio);
        self.swap_read_folio(folio, first);
        Some(folio)
    }

    /// The pages of a swap-cache folio do_swap_page maps at `addr`: the whole folio
    /// (its first page, count and address) when it is large and its range lies in the
    /// VMA and the page table with every pte a swap entry of its next slot alike the
    /// faulting one, else the faulting page alone.
    fn swap_cache_map_range(
        &mut self,
        mm: MmId,
        vma: &Vma,
        ptep: PtePtr,
        addr: u64,
        folio: Pfn,
        orig: Pte,
    ) -> (Pfn, u64, u64) {
        let g = self.arch.granule();
        let ps = g.page_size();
        let nr = self.memmap.folio_nr_pages(folio);
        let offset = orig.pte_swp_offset();
        let slot = self
            .swap
            .as_ref()
            .and_then(|si| si.cache.swap_of(folio))
            .expect("a folio in the swap cache");
        let idx = offset - slot;
        let page = Pfn(folio.0 + idx);
        if nr == 1 {
            return (page, 1, addr);
        }
        let start = addr - idx * ps;
        let pmd_size = ps << g.pmd_order();
        let pmd_start = addr & !(pmd_size - 1);
        if start < pmd_start.max(vma.start) || start + nr * ps > (pmd_start + pmd_size).min(vma.end) {
            return (page, 1, addr);
        }
        let base = PtePtr {
            table: ptep.table,
            index: ptep.index - idx as usize,
        };
        if self.swap_pte_batch(mm, base, nr, slot, orig, |_, _| true) {
            (folio, nr, start)
        } else {
            (page, 1, addr)
        }
    }

    /// swap_pte_batch over `nr` ptes from `base`: each a swap entry of the slot after
    /// the last from `first`, exclusive as `orig` is, and its slot `slot_ok` (checked
    /// pte by pte, the reads stopping at the first that fails).
    fn swap_pte_batch(
        &mut self,
        mm: MmId,
        base: PtePtr,
        nr: u64,
        first: u64,
        orig: Pte,
        slot_ok: impl Fn(&SwapInfo, u64) -> bool,
    ) -> bool {
        let amm = self.arch_mm(mm);
        let si = self.swap.as_ref().expect("a swap pte without a swap device");
        let arch = &mut self.arch;
        (0..nr).all(|i| {
            let p = arch.ptep_get(amm, base.add(i as usize));
            p.is_swap_pte()
                && p.pte_swp_offset() == first + i
                && p.pte_swp_exclusive() == orig.pte_swp_exclusive()
                && slot_ok(si, first + i)
        })
    }

    /// alloc_swap_folio's choice of orders (242d12c98174, 6.12): those allowed below
    /// PMD order and suitable for the VMA, whose slot lines up with the address
    /// (thp_swap_suitable_orders), from the highest down to the first whose range
    /// can_swapin_thp: every pte a swap entry of the next slot with the same bits and,
    /// with `slots` (up to 6.19; 7.0's swapin_sync checks those as it adds the folio
    /// to the swap cache), the slots alike in the zeromap and none in the swap cache
    /// (non_swapcache_batch). The orders left, as a bitmask.
    fn swapin_orders(&mut self, mm: MmId, vma: &Vma, ptep: PtePtr, addr: u64, orig: Pte, slots: bool) -> u64 {
        let g = self.arch.granule();
        let ps = g.page_size();
        let below_pmd = (1u64 << g.pmd_order()) - 1;
        let mut orders = self.thp_vma_allowable_orders(vma) & below_pmd;
        orders = self.thp_vma_suitable_orders(vma, addr, orders);
        let offset = orig.pte_swp_offset();
        let vpn = addr >> g.page_shift();
        // thp_swap_suitable_orders: the slot's place in a run matches the page's.
        for o in 1..g.pmd_order() {
            if vpn % (1 << o) != offset % (1 << o) {
                orders &= !(1u64 << o);
            }
        }
        while orders != 0 {
            let order = 63 - orders.leading_zeros();
            let nr = 1u64 << order;
            let start = addr & !((ps << order) - 1);
            let first = offset - (addr - start) / ps;
            let base = ptep.align_down(nr as usize);
            let zero = self.swap.as_ref().expect("checked").is_zero(first);
            if self.swap_pte_batch(mm, base, nr, first, orig, |si, s| {
                !slots || (si.is_zero(s) == zero && !si.has_cache(s))
            }) {
                return orders;
            }
            orders &= !(1 << order);
        }
        0
    }

    /// pte_range_none: every pte of [ptep, ptep + nr) is none.
    fn pte_range_none(&mut self, mm: MmId, ptep: PtePtr, nr: usize) -> bool {
        let none = self.arch.ptes_none_prefix(ptep, nr);
        if none < nr {
            // The first pte that is not none, read as ptep_get reads it (a contpte
            // block's read gathers the block), and what it says is no longer needed.
            let amm = self.arch_mm(mm);
            let _ = self.arch.ptep_get(amm, ptep.add(none));
        }
        none == nr
    }

    /// alloc_anon_folio: the largest allowed, suitable order whose aligned range is all
    /// none and can be allocated; order 0 otherwise. Returns (folio, order) or None (OOM).
    #[inline]
    fn alloc_anon_folio(&mut self, mm: MmId, vma: &Vma, pmd: PmdPtr, addr: u64) -> Option<(Pfn, u32)> {
        let g = self.arch.granule();
        let ps = g.page_size();
        let below_pmd = (1u64 << g.pmd_order()) - 1;
        let mut orders = self.thp_vma_allowable_orders(vma) & below_pmd;
        orders = self.thp_vma_suitable_orders(vma, addr, orders);
        if orders != 0 {
            let base = self.pte_offset_map(pmd, addr & !(g.pmd_size() - 1)).expect("pte table");
            // Highest order whose aligned range is entirely none; lower ones then are too.
            while orders != 0 {
                let order = 63 - orders.leading_zeros();
                let a = addr & !((ps << order) - 1);
                let first = base.add(g.index(a, 3));
                if self.pte_range_none(mm, first, 1 << order) {
                    break;
                }
                orders &= !(1 << order);
            }
            while orders != 0 {
                let order = 63 - orders.leading_zeros();
                if let Some(f) = self.folio_alloc(order) {
                    // The mTHP gfp (GFP_TRANSHUGE_LIGHT under the default defrag)
                    // cannot reclaim: over the cgroup's limit the charge fails.
                    if self.mem_cgroup_charge(f, false) {
                        // vma_alloc_zeroed_movable_folio / folio_zero_user.
                        self.arch.clear_pages(1 << order);
                        return Some((f, order));
                    }
                    self.stat.count_mthp_stat(order, MthpStat::AnonFaultFallbackCharge);
                    self.folio_put(f);
                }
                self.stat.count_mthp_stat(order, MthpStat::AnonFaultFallback);
                orders &= !(1 << order);
            }
        }
        let f = self.folio_alloc(0)?;
        if !self.mem_cgroup_charge(f, true) {
            self.folio_put(f);
            return None;
        }
        self.arch.clear_pages(1);
        Some((f, 0))
    }

    /// do_anonymous_page: zero page for reads, a new (possibly large) folio for writes.
    fn do_anonymous_page(&mut self, mm: MmId, vma: &Vma, pmd: PmdPtr, addr: u64, write: bool) -> VmFault {
        self.arch.kc.inc(KernelEvent::DoAnonymousPage);
        let g = self.arch.granule();
        let ps = g.page_size();
        let amm = self.arch_mm(mm);
        if !self.pte_alloc(mm, pmd, addr) {
            return VmFault::Oom;
        }
        let prot = vm_page_prot(vma);
        if !write {
            let entry = Pte::pfn_pte(self.zero_pfn, prot, g).pte_mkspecial();
            let ptep = self.pte_offset_map(pmd, addr).unwrap();
            if !self.arch.ptep_get(amm, ptep).pte_none() {
                return VmFault::Done;
            }
            self.arch.set_ptes(amm, addr & !(ps - 1), ptep, entry, 1, None);
            return VmFault::Done;
        }
        self.do_anonymous_write(mm, vma, pmd, addr, None)
    }

    /// do_anonymous_page's write fault once pte_alloc has the table: a new folio mapped
    /// at `addr`. `known` is `addr`'s pte when the caller has it (the table's entry
    /// read again then is only counted). Inline into its two callers: the order-0 fault
    /// of a touch comes here for every page.
    #[inline(always)]
    fn do_anonymous_write(&mut self, mm: MmId, vma: &Vma, pmd: PmdPtr, addr: u64, known: Option<PtePtr>) -> VmFault {
        let amm = self.arch_mm(mm);
        let ps = self.arch.granule().page_size();
        if known.is_some() {
            // do_anonymous_page's start, to the point the general path reaches here.
            self.arch.kc.inc(KernelEvent::DoAnonymousPage);
            // pte_alloc's pmdp_get: the table is there.
            self.arch.hw.ev.inc(Event::PmdRead);
        }
        self.anon_vma_prepare(mm, vma);
        let Some((folio, order)) = self.alloc_anon_folio(mm, vma, pmd, addr) else {
            return VmFault::Oom;
        };
        let nr = 1usize << order;
        let start = addr & !((ps << order) - 1);
        let ptep = match known {
            Some(p) if nr == 1 => {
                self.arch.hw.ev.inc(Event::PmdRead);
                p
            }
            // The folio's first pte, in the table `p` is in (nothing since the caller
            // found it writes a pmd that points at a table: reclaim frees none).
            Some(p) => {
                self.arch.hw.ev.inc(Event::PmdRead);
                PtePtr {
                    table: p.table,
                    index: self.arch.granule().index(start, 3),
                }
            }
            None => self.pte_offset_map(pmd, start).unwrap(),
        };
        // Under the PTL: the range must still be none.
        let raced = if nr == 1 {
            !self.arch.ptep_get(amm, ptep).pte_none()
        } else {
            !self.pte_range_none(mm, ptep, nr)
        };
        if raced {
            self.folio_put(folio);
            return VmFault::Done;
        }
        // map_anon_folio_pte_pf
        self.mm_mut(mm).rss_anon += nr as i64;
        self.stat.count_mthp_stat(order, MthpStat::AnonFaultAlloc);
        self.map_anon_folio_pte_nopf(mm, vma, folio, order, ptep, start);
        VmFault::Done
    }

    /// map_anon_folio_pte_nopf: map a new exclusive anon folio of `order` by its ptes
    /// from `start` (a fault, or a khugepaged mTHP collapse), writable and dirty in a
    /// writable VMA. Inline: its callers are the fault and a collapse, and the fault
    /// takes it for every page of an order-0 touch. The order is the caller's, who
    /// allocated the folio, rather than read again from its head page (folio_nr_pages).
    #[inline(always)]
    pub fn map_anon_folio_pte_nopf(&mut self, mm: MmId, vma: &Vma, folio: Pfn, order: u32, ptep: PtePtr, start: u64) {
        debug_assert_eq!(order, self.memmap.folio_order(folio));
        let nr = 1usize << order;
        let mut entry = Pte::pfn_pte(folio, vm_page_prot(vma), self.arch.granule());
        if vma.flags.contains(VmFlags::WRITE) {
            entry = entry.pte_mkdirty().pte_mkwrite();
        }
        self.folio_ref_add(folio, nr as i32 - 1);
        self.folio_add_new_anon_rmap(folio, mm, start, false);
        self.folio_add_lru(folio);
        let amm = self.arch_mm(mm);
        self.arch
            .set_ptes(amm, start, ptep, entry, nr, Some((folio, nr as u64)));
    }

    /// do_fault for a shared file (shmem) VMA: a read maps what the page cache holds
    /// around the address first (do_read_fault), a write faults its page in and dirties
    /// it (do_shared_fault). Private file mappings are not modeled. The pte table
    /// comes only when a pte is to be set: a PMD-sized folio on a none pmd is mapped
    /// by the pmd (the table __do_fault preallocates then is freed unused; not
    /// modeled, it touches no page table).
    fn do_fault(&mut self, mm: MmId, vma: &Vma, pmd: PmdPtr, addr: u64, write: bool) -> VmFault {
        if write {
            self.do_shared_fault(mm, vma, pmd, addr)
        } else {
            self.do_read_fault(mm, vma, pmd, addr)
        }
    }

    /// do_read_fault: do_fault_around (fault_around_bytes, 64K: the aligned block of
    /// 16 ptes around the address, clamped to the VMA and the page table) maps the
    /// cached pages; if that mapped the faulting one, done; else ->fault.
    fn do_read_fault(&mut self, mm: MmId, vma: &Vma, pmd: PmdPtr, addr: u64) -> VmFault {
        self.arch.kc.inc(KernelEvent::DoReadFault);
        let g = self.arch.granule();
        let shift = g.page_shift();
        let nr_pages = (FAULT_AROUND_BYTES >> shift).max(1);
        // secretmem_vm_ops has no map_pages: no fault-around.
        if nr_pages > 1 && !self.vma_is_secretmem(vma) {
            let pte_off = g.index(addr, 3) as u64;
            let pgoff = vma.linear_page_index(addr, shift);
            let vma_off = pgoff - vma.pgoff;
            let from_pte = (pte_off & !(nr_pages - 1)).max(pte_off - pte_off.min(vma_off));
            let vma_pages = vma.len() >> shift;
            let ptrs = g.entries_at(3) as u64;
            let to_pte = (from_pte + nr_pages).min(ptrs).min(pte_off + vma_pages - vma_off) - 1;
            if self.filemap_map_pages(mm, vma, pmd, addr, pgoff + from_pte - pte_off, pgoff + to_pte - pte_off) {
                return VmFault::Done;
            }
        }
        self.__do_fault_finish(mm, vma, pmd, addr, false)
    }

    /// do_shared_fault: ->fault, finish_fault, then fault_dirty_shared_page.
    fn do_shared_fault(&mut self, mm: MmId, vma: &Vma, pmd: PmdPtr, addr: u64) -> VmFault {
        self.arch.kc.inc(KernelEvent::DoSharedFault);
        self.__do_fault_finish(mm, vma, pmd, addr, true)
    }

    /// __do_fault (shmem_fault) then finish_fault: a large folio is mapped whole when
    /// it lies within the VMA and this page table and all its ptes are none (6.10+,
    /// the shmem case of finish_fault), else the page alone unless its pte changed
    /// meanwhile.
    fn __do_fault_finish(&mut self, mm: MmId, vma: &Vma, pmd: PmdPtr, addr: u64, write: bool) -> VmFault {
        let g = self.arch.granule();
        let ps = g.page_size();
        let index = vma.linear_page_index(addr, g.page_shift());
        let fault = if self.vma_is_secretmem(vma) {
            // vmf_can_call_fault: no map_pages, so the fault taken under the per-VMA
            // lock ends in VM_FAULT_RETRY and arm64's do_page_fault runs
            // handle_mm_fault again under mmap_lock (one minflt all the same).
            self.arch.kc.inc(KernelEvent::HandleMmFault);
            self.secretmem_fault(vma, index)
        } else {
            self.shmem_fault(vma, addr, index)
        };
        let (folio, page, ret) = match fault {
            Ok(r) => r,
            Err(e) => return e,
        };
        // finish_fault on a none pmd: a PMD-sized folio by its pmd, else a pte table.
        if self.pxd_get(2, pmd).is_none() {
            if huge_memory::do_set_pmd(self, mm, vma, pmd, addr, folio, write) == VmFault::Done {
                if write {
                    self.memmap.folio_set(folio, PageFlags::DIRTY);
                }
                return ret;
            }
            if !self.pte_alloc(mm, pmd, addr) {
                self.folio_put(folio);
                return VmFault::Oom;
            }
        }
        let amm = self.arch_mm(mm);
        let addr = addr & !(ps - 1);
        let mut nr = self.memmap.folio_nr_pages(folio);
        let mut start = (addr, page);
        if nr > 1 {
            let idx = page.0 - folio.0;
            let vma_off = index - vma.pgoff;
            let pte_off = g.index(addr, 3) as u64;
            let fits = vma_off >= idx
                && vma_off + (nr - idx) <= vma.len() >> g.page_shift()
                && pte_off >= idx
                && pte_off + (nr - idx) <= g.entries_at(3) as u64;
            if fits {
                start = (addr - idx * ps, folio);
                let first = self.pte_offset_map(pmd, start.0).expect("do_fault allocated the table");
                if !(0..nr).all(|i| self.arch.ptep_get(amm, first.add(i as usize)).pte_none()) {
                    // needs_fallback: the page alone, after a fresh look-up.
                    nr = 1;
                    start = (addr, page);
                }
            } else {
                nr = 1;
            }
        }
        let ptep = self.pte_offset_map(pmd, start.0).expect("do_fault allocated the table");
        if nr == 1 && !self.arch.ptep_get(amm, ptep).pte_none() {
            self.folio_put(folio);
            return ret;
        }
        self.folio_ref_add(folio, nr as i32 - 1);
        self.set_pte_range(mm, vma, folio, start.1, nr, ptep, start.0, write, false);
        self.mm_mut(mm).rss_shmem += nr as i64;
        if write {
            // fault_dirty_shared_page: folio_mark_dirty.
            self.memmap.folio_set(folio, PageFlags::DIRTY);
        }
        ret
    }

    /// do_wp_page for private anon memory: reuse an exclusive page (or a folio that
    /// turns out to be exclusive to this mm), else copy one page.
    fn do_wp_page(&mut self, mm: MmId, vma: &Vma, ptep: PtePtr, addr: u64, orig: Pte) -> VmFault {
        self.arch.kc.inc(KernelEvent::DoWpPage);
        let g = self.arch.granule();
        let pfn = orig.pte_pfn(g);
        if !self.is_zero_pfn(pfn) {
            let folio = self.memmap.folio_of(pfn);
            if self.memmap.folio_test(folio, PageFlags::ANON)
                && (self.memmap.page(pfn).flags.contains(PageFlags::ANON_EXCLUSIVE)
                    || self.wp_can_reuse_anon_folio(folio))
            {
                self.memmap.page_mut(pfn).flags.insert(PageFlags::ANON_EXCLUSIVE);
                // wp_page_reuse: make it writable and dirty in place.
                let amm = self.arch_mm(mm);
                let entry = orig.pte_mkyoung().pte_mkdirty().pte_mkwrite();
                self.arch.ptep_set_access_flags(amm, addr, ptep, entry, true);
                return VmFault::Done;
            }
        }
        // The copy pins the old folio (folio_get; wp_page_copy's last folio_put drops
        // it): reclaim run by the copy's allocation (kswapd, direct reclaim) then sees
        // an extra reference and maps a lazyfree folio back instead of discarding it
        // from under the fault.
        let old = (!self.is_zero_pfn(pfn)).then(|| self.memmap.folio_of(pfn));
        if let Some(old) = old {
            self.folio_ref_add(old, 1);
        }
        let ret = self.wp_page_copy(mm, vma, ptep, addr, orig);
        if let Some(old) = old {
            self.folio_put(old);
        }
        ret
    }

    /// wp_can_reuse_anon_folio: a small folio when ours is its only reference (once
    /// out of the swap cache); a large
    /// one (__wp_can_reuse_large_anon_folio, 6.15+) when more than one page is mapped,
    /// only by this mm, and every reference is a mapping.
    ///
    /// With `cow_reuse_order0` a large folio is never reused here: before 1da190f4d0a6
    /// ("mm: Copy-on-Write (COW) reuse support for PTE-mapped THP", v6.15, which needs
    /// the per-folio MM owner tracking of CONFIG_MM_ID) the kernel could not tell that
    /// all mappings of a large folio are in one mm, so wp_can_reuse_anon_folio returned
    /// false for any large folio. Only a page still PageAnonExclusive (never shared by
    /// fork, which clears it on every page it shares) is reused; every other write copies
    /// one page, and the old folio goes partially mapped onto the deferred split queue.
    /// A PMD-mapped THP is unaffected (do_huge_pmd_wp_page reuses it when the pmd is its
    /// only reference, else splits the pmd and comes back here through the ptes).
    fn wp_can_reuse_anon_folio(&mut self, folio: Pfn) -> bool {
        if self.memmap.folio_order(folio) == 0 {
            // The swap cache's reference may go with it, if no pte holds its slot.
            let swapcache = self.memmap.folio_test(folio, PageFlags::SWAPCACHE);
            if self.memmap.folio_ref_count(folio) > 1 + swapcache as i32 {
                return false;
            }
            if swapcache {
                self.folio_free_swap(folio);
            }
            return self.memmap.folio_ref_count(folio) == 1;
        }
        if self.cow_reuse_order0 {
            return false;
        }
        let mapcount = self.memmap.folio_mapcount(folio);
        mapcount > 1
            && !self.memmap.folio_test(folio, PageFlags::MAYBE_SHARED)
            && mapcount == self.memmap.folio_ref_count(folio)
    }

    /// wp_page_copy: a new order-0 folio replaces the pte (ptep_clear_flush first).
    fn wp_page_copy(&mut self, mm: MmId, vma: &Vma, ptep: PtePtr, addr: u64, orig: Pte) -> VmFault {
        let g = self.arch.granule();
        let ps = g.page_size();
        let amm = self.arch_mm(mm);
        let addr = addr & !(ps - 1);
        self.anon_vma_prepare(mm, vma);
        let Some(new) = self.folio_alloc(0) else {
            return VmFault::Oom;
        };
        if !self.mem_cgroup_charge(new, true) {
            self.folio_put(new);
            return VmFault::Oom;
        }
        if !self.arch.ptep_get(amm, ptep).pte_same(orig) {
            self.folio_put(new);
            return VmFault::Done;
        }
        let old_pfn = orig.pte_pfn(g);
        let old = (!self.is_zero_pfn(old_pfn)).then(|| self.memmap.folio_of(old_pfn));
        // A zero page is replaced by a zeroed page, anything else by a copy.
        if old.is_none() {
            self.mm_mut(mm).rss_anon += 1;
            self.arch.clear_pages(1);
        } else {
            self.arch.copy_pages(1);
        }
        let mut entry = Pte::pfn_pte(new, vm_page_prot(vma), g);
        if vma.flags.contains(VmFlags::WRITE) {
            entry = entry.pte_mkdirty().pte_mkwrite();
        }
        self.arch.ptep_clear_flush(amm, addr, ptep);
        // The copy (__wp_page_copy_user) carries the old page's contents.
        self.memmap.page_mut(new).nonzero = !self.is_zero_pfn(old_pfn) && self.memmap.page(old_pfn).nonzero;
        self.folio_add_new_anon_rmap(new, mm, addr, false);
        self.folio_add_lru(new);
        self.arch.set_ptes(amm, addr, ptep, entry, 1, Some((new, 1)));
        if let Some(old) = old {
            self.folio_remove_rmap_ptes(old, old_pfn, 1, mm);
            self.free_swap_cache(old);
            self.folio_put(old);
        }
        VmFault::Done
    }

    // ---- zap ---------------------------------------------------------------

    /// unmap_page_range: zap [addr, end) of one VMA, then flush at the VMA's end.
    pub fn unmap_page_range(&mut self, tlb: &mut MmuGather, mm: MmId, vma: &Vma, addr: u64, end: u64) {
        let g = self.arch.granule();
        let pmd_size = g.pmd_size();
        self.walk_pmd_range(mm, addr, end, |k, pmd, d, addr, next| {
            if pmd_trans_huge(d) {
                if next - addr != pmd_size {
                    huge_memory::__split_huge_pmd(k, mm, vma, pmd, addr);
                    // A file pmd is zapped whole by its split: no table is left.
                    if !k.pxd_get(2, pmd).is_none() {
                        k.zap_pte_range(tlb, mm, vma, pmd, addr, next);
                    }
                } else {
                    huge_memory::zap_huge_pmd(k, tlb, mm, pmd, addr);
                }
            } else if !d.is_none() {
                k.zap_pte_range(tlb, mm, vma, pmd, addr, next);
            }
            true
        });
        self.tlb_end_vma(tlb);
    }

    /// zap_pte_range: clear the ptes of [addr, end) under one pmd, flushing and
    /// freeing whenever the gather fills.
    fn zap_pte_range(&mut self, tlb: &mut MmuGather, mm: MmId, vma: &Vma, pmd: PmdPtr, addr: u64, end: u64) {
        let ps = self.arch.granule().page_size();
        let amm = self.arch_mm(mm);
        self.arch.kc.inc(KernelEvent::ZapPteRange);
        let mut addr = addr;
        loop {
            let Some(start_pte) = self.pte_offset_map(pmd, addr) else {
                return;
            };
            self.flush_tlb_batched_pending(mm);
            let mut pte = start_pte;
            let mut force_flush = false;
            let mut rss = 0i64;
            while addr != end {
                let (nr, full) = match self.zap {
                    ZapVariant::Batched => self.do_zap_pte_range(tlb, mm, amm, vma, pte, addr, end, &mut rss),
                    ZapVariant::PerPte => self.zap_one_pte(tlb, mm, amm, pte, addr, &mut rss),
                };
                self.arch.kc.inc(KernelEvent::ZapPteRangeLoops);
                self.arch.kc.add(KernelEvent::ZapPteRangePtes, nr as u64);
                pte = pte.add(nr);
                addr += nr as u64 * ps;
                if full {
                    force_flush = true;
                    break;
                }
            }
            self.mm_mut(mm).rss_anon += rss;
            // A dirty file pte forces the flush too (delayed rmap), without a break.
            let force_flush = force_flush || tlb.delayed_rmap();
            if force_flush {
                self.tlb_flush_mmu_tlbonly(tlb);
            }
            self.tlb_flush_rmaps(tlb, mm);
            if force_flush {
                self.tlb_flush_mmu(tlb);
            }
            if addr == end {
                return;
            }
        }
    }

    /// The pre-seed-000 loop body: one pte, one rmap, one gather slot.
    fn zap_one_pte(
        &mut self,
        tlb: &mut MmuGather,
        mm: MmId,
        amm: ArchMm,
        pte: PtePtr,
        addr: u64,
        rss: &mut i64,
    ) -> (usize, bool) {
        let g = self.arch.granule();
        let ptent = self.arch.ptep_get(amm, pte);
        if ptent.pte_none() {
            return (1, false);
        }
        if ptent.is_swap_pte() {
            return (self.zap_swap_ptes(mm, amm, pte, ptent, addr, 1), false);
        }
        let ptent = self.arch.ptep_get_and_clear(amm, addr, pte);
        tlb.remove_tlb_entries(addr, 1, g.page_size());
        let pfn = ptent.pte_pfn(g);
        if self.is_zero_pfn(pfn) {
            return (1, false);
        }
        let folio = self.memmap.folio_of(pfn);
        let delay_rmap = if self.shmem.folio_inode(folio).is_some() {
            self.zap_file_ptes(mm, folio, ptent, 1)
        } else {
            *rss -= 1;
            false
        };
        if !delay_rmap {
            self.folio_remove_rmap_ptes(folio, pfn, 1, mm);
        }
        (1, self.__tlb_remove_folio_pages(tlb, folio, 1, delay_rmap))
    }

    /// zap_present_folio_ptes' part for a file folio, given its cleared ptes' merged
    /// bits: a dirty pte dirties the folio and delays its rmap removal until the TLB
    /// is flushed (tlb_delay_rmap, which makes the zap flush before it drops the page
    /// table lock); MM_SHMEMPAGES drops. Whether the rmap is delayed.
    fn zap_file_ptes(&mut self, mm: MmId, folio: Pfn, ptent: Pte, nr: usize) -> bool {
        self.mm_mut(mm).rss_shmem -= nr as i64;
        if !ptent.pte_dirty() {
            return false;
        }
        self.memmap.folio_set(folio, PageFlags::DIRTY);
        true
    }

    /// zap_nonpresent_ptes for swap entries: swap_pte_batch (consecutive slots, the
    /// same exclusive bit), free_swap_and_cache_nr, clear_not_present_full_ptes. No
    /// TLB work: nothing was cached for a non-present pte. Returns the ptes cleared.
    fn zap_swap_ptes(&mut self, mm: MmId, amm: ArchMm, ptep: PtePtr, first: Pte, addr: u64, max_nr: usize) -> usize {
        let ps = self.arch.granule().page_size();
        let offset = first.pte_swp_offset();
        let mut nr = 1;
        while nr < max_nr {
            let p = self.arch.ptep_get(amm, ptep.add(nr));
            if !p.is_swap_pte()
                || p.pte_swp_offset() != offset + nr as u64
                || p.pte_swp_exclusive() != first.pte_swp_exclusive()
            {
                break;
            }
            nr += 1;
        }
        self.free_swap_and_cache_nr(offset, nr as u64);
        self.mm_mut(mm).rss_swap -= nr as i64;
        for i in 0..nr {
            self.arch.__set_pte(addr + i as u64 * ps, ptep.add(i), Pte::NONE);
        }
        nr
    }

    /// do_zap_pte_range: skip a run of none ptes, then zap one present batch.
    #[allow(clippy::too_many_arguments)]
    fn do_zap_pte_range(
        &mut self,
        tlb: &mut MmuGather,
        mm: MmId,
        amm: ArchMm,
        vma: &Vma,
        pte: PtePtr,
        addr: u64,
        end: u64,
        rss: &mut i64,
    ) -> (usize, bool) {
        let ps = self.arch.granule().page_size();
        let mut max_nr = ((end - addr) / ps) as usize;
        let mut ptent = self.arch.ptep_get(amm, pte);
        let mut skipped = 0;
        if ptent.pte_none() {
            skipped = 1;
            while skipped < max_nr {
                ptent = self.arch.ptep_get(amm, pte.add(skipped));
                if !ptent.pte_none() {
                    break;
                }
                skipped += 1;
            }
            max_nr -= skipped;
            if max_nr == 0 {
                return (skipped, false);
            }
        }
        if ptent.is_swap_pte() {
            let at = addr + skipped as u64 * ps;
            let nr = self.zap_swap_ptes(mm, amm, pte.add(skipped), ptent, at, max_nr);
            return (skipped + nr, false);
        }
        let (nr, full) = self.zap_present_ptes(
            tlb,
            mm,
            amm,
            vma,
            pte.add(skipped),
            ptent,
            max_nr,
            addr + skipped as u64 * ps,
            rss,
        );
        (skipped + nr, full)
    }

    /// zap_present_ptes: the zero page one pte at a time; a large folio in one batch.
    #[allow(clippy::too_many_arguments)]
    fn zap_present_ptes(
        &mut self,
        tlb: &mut MmuGather,
        mm: MmId,
        amm: ArchMm,
        _vma: &Vma,
        pte: PtePtr,
        ptent: Pte,
        max_nr: usize,
        addr: u64,
        rss: &mut i64,
    ) -> (usize, bool) {
        let g = self.arch.granule();
        let pfn = ptent.pte_pfn(g);
        self.arch.kc.inc(KernelEvent::ZapPresentPtes);
        if self.is_zero_pfn(pfn) {
            self.arch.kc.inc(KernelEvent::ZapPresentPtesPtes);
            self.arch.ptep_get_and_clear(amm, addr, pte);
            tlb.remove_tlb_entries(addr, 1, g.page_size());
            return (1, false);
        }
        let folio = self.memmap.folio_of(pfn);
        let nr = if self.memmap.folio_order(folio) > 0 && max_nr != 1 {
            self.folio_pte_batch(mm, folio, pte, ptent, max_nr)
        } else {
            1
        };
        self.arch.kc.add(KernelEvent::ZapPresentPtesPtes, nr as u64);
        let delay_rmap = if self.shmem.folio_inode(folio).is_some() {
            let ptent = self.arch.get_and_clear_full_ptes(amm, addr, pte, nr, tlb.fullmm);
            self.zap_file_ptes(mm, folio, ptent, nr)
        } else {
            // Anon folios: clear without gathering A/D (clear_full_ptes).
            self.arch.clear_full_ptes(amm, addr, pte, nr, tlb.fullmm);
            *rss -= nr as i64;
            false
        };
        tlb.remove_tlb_entries(addr, nr as u64, g.page_size());
        if !delay_rmap {
            self.folio_remove_rmap_ptes(folio, pfn, nr as u64, mm);
        }
        let full = self.__tlb_remove_folio_pages(tlb, folio, nr as u32, delay_rmap);
        if nr == 1 && !delay_rmap && !full && max_nr > 1 && self.memmap.folio_order(folio) == 0 {
            #[cfg(test)]
            if tests::ZAP_ONE_PTE_AN_ITERATION.get() {
                return (nr, full);
            }
            let ps = g.page_size();
            let (more, full) = self.zap_order0_anon_run(tlb, mm, amm, pte.add(1), addr + ps, max_nr - 1, rss);
            return (1 + more, full);
        }
        (nr, full)
    }

    /// The ptes after an order-0 anon folio's, up to `max_nr`, each mapping another
    /// (present, not the zero page, no contpte bit) until the gather fills: zapped as
    /// zap_pte_range's loop zaps them one an iteration (each pte read, cleared, its
    /// rmap removed, its gather slot taken, in order), the counts of those iterations
    /// added once. Every order-0 page of an unmap goes this way, a pte table's worth
    /// at a time. Returns the ptes zapped and whether the gather filled.
    #[allow(clippy::too_many_arguments)]
    fn zap_order0_anon_run(
        &mut self,
        tlb: &mut MmuGather,
        mm: MmId,
        amm: ArchMm,
        pte: PtePtr,
        addr: u64,
        max_nr: usize,
        rss: &mut i64,
    ) -> (usize, bool) {
        let g = self.arch.granule();
        let ps = g.page_size();
        let (mut n, mut full) = (0, false);
        while n < max_nr && !full {
            let ptep = pte.add(n);
            // Looked at uncounted first: a pte the run leaves is read (and counted) by
            // the loop's next iteration.
            let p = Pte(self.arch.hw.mem.read(ptep.table, ptep.index));
            if p.pte_none() || p.is_swap_pte() || p.pte_valid_cont() {
                break;
            }
            let pfn = p.pte_pfn(g);
            if self.is_zero_pfn(pfn) {
                break;
            }
            let folio = self.memmap.folio_of(pfn);
            if self.memmap.folio_order(folio) != 0 || self.shmem.folio_inode(folio).is_some() {
                break;
            }
            // do_zap_pte_range's ptep_get (a plain read: no contpte bit), then
            // zap_present_ptes' clear, rmap and gather slot for one pte.
            self.arch.__ptep_get(ptep);
            self.arch
                .clear_full_ptes(amm, addr + n as u64 * ps, ptep, 1, tlb.fullmm);
            self.folio_remove_rmap_ptes(folio, pfn, 1, mm);
            full = tlb.remove_folio_pages(folio, 1, false);
            n += 1;
        }
        #[cfg(test)]
        tests::ZAP_RUN_PTES.set(tests::ZAP_RUN_PTES.get() + n as u64);
        if n > 0 {
            *rss -= n as i64;
            tlb.remove_tlb_entries(addr, n as u64, ps);
            let kc = &mut self.arch.kc;
            kc.add(KernelEvent::TlbRemoveFolioPages, n as u64);
            kc.add(KernelEvent::ZapPresentPtes, n as u64);
            kc.add(KernelEvent::ZapPresentPtesPtes, n as u64);
            // zap_pte_range counts the pte of every iteration, these with the first's.
            kc.add(KernelEvent::ZapPteRangeLoops, n as u64);
        }
        (n, full)
    }

    /// folio_pte_batch: how many ptes from `pte` map consecutive pages of `folio` with
    /// the same bits, ignoring young, dirty and write; steps over contpte blocks with
    /// pte_batch_hint.
    pub fn folio_pte_batch(&mut self, mm: MmId, folio: Pfn, ptep: PtePtr, pte: Pte, max_nr: usize) -> usize {
        self.folio_pte_batch_flags(mm, folio, ptep, pte, max_nr, Fpb::empty()).0
    }

    /// folio_pte_batch_flags: the batch and its first pte, with the write (young and
    /// dirty) bits of any pte of the batch merged in as `flags` ask.
    pub fn folio_pte_batch_flags(
        &mut self,
        mm: MmId,
        folio: Pfn,
        ptep: PtePtr,
        pte: Pte,
        max_nr: usize,
        flags: Fpb,
    ) -> (usize, Pte) {
        let g = self.arch.granule();
        let amm = self.arch_mm(mm);
        let folio_end = folio.0 + self.memmap.folio_nr_pages(folio);
        let max_nr = max_nr.min((folio_end - pte.pte_pfn(g).0) as usize);
        let clear_ignored = |p: Pte| {
            let p = p.pte_mkclean().pte_mkold();
            if flags.contains(Fpb::RESPECT_WRITE) {
                p
            } else {
                p.pte_wrprotect()
            }
        };
        let mut merged = pte;
        let mut nr = self.arch.pte_batch_hint(ptep, pte);
        let mut expected = clear_ignored(pte.pte_advance_pfn(nr as u64, g));
        while nr < max_nr {
            // One step of the loop: a pte (or, through pte_batch_hint, a contpte
            // block) read and compared; its instructions are the step's cost.
            self.arch.kc.inc(KernelEvent::FolioPteBatchReads);
            let p = self.arch.ptep_get(amm, ptep.add(nr));
            if !clear_ignored(p).pte_same(expected) {
                break;
            }
            if flags.contains(Fpb::MERGE_WRITE) && p.pte_write() && !merged.pte_write() {
                merged = merged.pte_mkwrite();
            }
            if flags.contains(Fpb::MERGE_YOUNG_DIRTY) {
                if p.pte_young() {
                    merged = merged.pte_mkyoung();
                }
                if p.pte_dirty() {
                    merged = merged.pte_mkdirty();
                }
            }
            let cur = self.arch.pte_batch_hint(ptep.add(nr), p);
            expected = expected.pte_advance_pfn(cur as u64, g);
            nr += cur;
        }
        (nr.min(max_nr), merged)
    }

    /// unmap_vmas: zap [start, end) across the VMAs given.
    pub fn unmap_vmas(&mut self, tlb: &mut MmuGather, mm: MmId, vmas: &[Vma], start: u64, end: u64) {
        for vma in vmas {
            let s = start.max(vma.start);
            let e = end.min(vma.end);
            if s < e {
                self.unmap_page_range(tlb, mm, vma, s, e);
            }
        }
    }

    /// free_pgtables: free the page tables of the unmapped VMAs that no neighbour
    /// shares, between `floor` and `ceiling` (the neighbours' edges; 0 = none).
    pub fn free_pgtables(&mut self, tlb: &mut MmuGather, mm: MmId, vmas: &[Vma], floor: u64, ceiling: u64) {
        for (i, v) in vmas.iter().enumerate() {
            let next_start = vmas.get(i + 1).map(|n| n.start).unwrap_or(ceiling);
            self.free_pgd_range(tlb, mm, v.start, v.end, floor, next_start);
        }
    }

    /// free_pgd_range: the kernel's floor/ceiling rules, level by level.
    pub fn free_pgd_range(&mut self, tlb: &mut MmuGather, mm: MmId, addr: u64, end: u64, floor: u64, ceiling: u64) {
        let g = self.arch.granule();
        let pmd_mask = !(g.pmd_size() - 1);
        let mut addr = addr & pmd_mask;
        if addr < floor {
            addr = addr.wrapping_add(g.pmd_size());
            if addr == 0 {
                return;
            }
        }
        let mut ceiling = ceiling;
        if ceiling != 0 {
            ceiling &= pmd_mask;
            if ceiling == 0 {
                return;
            }
        }
        let mut end = end;
        if end.wrapping_sub(1) > ceiling.wrapping_sub(1) {
            end -= g.pmd_size();
        }
        if addr > end.wrapping_sub(1) {
            return;
        }
        let pgd_table = self.mm(mm).pgd_table;
        self.free_level(tlb, mm, g.start_level(), pgd_table, addr, end, floor, ceiling);
    }

    /// Free tables below the table at `level` covering [addr, end): a table one level
    /// down goes when its whole span lies within [floor, ceiling).
    #[allow(clippy::too_many_arguments)]
    fn free_level(
        &mut self,
        tlb: &mut MmuGather,
        mm: MmId,
        level: u8,
        table: crate::hw::TableId,
        addr: u64,
        end: u64,
        floor: u64,
        ceiling: u64,
    ) {
        let g = self.arch.granule();
        let span = 1u64 << g.level_shift(level);
        let mut a = addr;
        while a < end {
            let next = ((a + span) & !(span - 1)).min(end);
            let p = PmdPtr {
                table,
                index: g.index(a, level),
            };
            let d = self.pxd_get(level, p);
            if let DescKind::Table(_) = d.kind(level, g) {
                let child = self.table_of(level, d);
                let child_pfn = self.arch.hw.mem.table_pfn(child);
                if level == 2 {
                    // free_pte_range.
                    self.pxd_set(2, a, p, crate::hw::Desc::ZERO);
                    tlb.flush_pmd_range(a, g.page_size());
                    tlb.freed_tables = true;
                    self.tlb_remove_table(tlb, child_pfn);
                    self.mm_mut(mm).nr_ptes -= 1;
                } else {
                    self.free_level(tlb, mm, level + 1, child, a, next, floor, ceiling);
                    // free_pmd_range's tail: the child table goes if its span starts
                    // at or above floor and the range ends at or below ceiling (both
                    // rounded to the span); nothing else can live between them.
                    let start = a & !(span - 1);
                    let c = ceiling & !(span - 1);
                    let inside =
                        start >= floor && (ceiling == 0 || (c != 0 && next.wrapping_sub(1) <= c.wrapping_sub(1)));
                    if inside {
                        self.pxd_set(level, a, p, crate::hw::Desc::ZERO);
                        // pmd_free_tlb / pud_free_tlb take the freed table's span
                        // start (free_pmd_range's `start &= PUD_MASK`): the flush
                        // range reaches down to it.
                        tlb.flush_pud_range(start, g.page_size());
                        if level + 1 == 2 {
                            self.mm_mut(mm).nr_pmds -= 1;
                        }
                        tlb.freed_tables = true;
                        self.tlb_remove_table(tlb, child_pfn);
                    }
                }
            }
            a = next;
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::hw::MachineConfig;
    use crate::mm::madvise::Madv;
    use crate::report::PageKind;
    use crate::sim::tests::{assert_clean, boot_with};
    use crate::sim::user_access;

    const BASE: u64 = 0x1000_0000_0000;
    const K4: u64 = 4096;

    thread_local! {
        /// Set: every fault takes `__handle_mm_fault` (the shortcut's reference).
        pub(super) static GENERAL_FAULTS_ONLY: std::cell::Cell<bool> = const { std::cell::Cell::new(false) };
        /// Faults that took `anon_write_to_none_pte`'s shortcut on this thread.
        pub(super) static SHORTCUTS_TAKEN: std::cell::Cell<u64> = const { std::cell::Cell::new(0) };
        /// Set: the zap takes every order-0 pte in a loop iteration of its own
        /// (`zap_order0_anon_run`'s reference).
        pub(super) static ZAP_ONE_PTE_AN_ITERATION: std::cell::Cell<bool> = const { std::cell::Cell::new(false) };
        /// Ptes `zap_order0_anon_run` zapped on this thread.
        pub(super) static ZAP_RUN_PTES: std::cell::Cell<u64> = const { std::cell::Cell::new(0) };
    }

    /// One step of `shortcut_case`: (op, region slot, first page, pages, arg).
    type Step = (u8, u64, u64, u64, u8);

    /// Run `steps` on a fresh kernel, every fault by the general path when `general`:
    /// its counters, each region's pages (kind and frame) and the shortcuts taken.
    fn shortcut_case(steps: &[Step], general: bool) -> (crate::report::Counters, Vec<Option<(PageKind, Pfn)>>, u64) {
        GENERAL_FAULTS_ONLY.set(general);
        SHORTCUTS_TAKEN.set(0);
        let (mut k, mm) = boot_with(MachineConfig::default(), &[]);
        let slot = |s: u64| BASE + s * (64 << 20);
        let mut live = [0u64; 3];
        for &(op, s, first, pages, arg) in steps {
            let (s, start) = (s % 3, slot(s % 3));
            match op % 6 {
                0 if live[s as usize] == 0 => {
                    let mut flags = rw();
                    flags.set(VmFlags::NOHUGEPAGE, arg % 3 == 1);
                    flags.set(VmFlags::HUGEPAGE, arg % 3 == 2);
                    k.do_mmap(mm, start, pages * K4, flags).unwrap();
                    live[s as usize] = pages;
                }
                1 | 2 if live[s as usize] > 0 => {
                    let n = live[s as usize];
                    let (first, write) = (first % n, op % 6 == 1 || arg % 2 == 0);
                    for p in first..(first + pages).min(n) {
                        user_access(&mut k, mm, 0, start + p * K4, write).unwrap();
                    }
                }
                3 if live[s as usize] > 0 => {
                    let n = live[s as usize];
                    let first = first % n;
                    let len = pages.min(n - first) * K4;
                    let advice = [Madv::DontNeed, Madv::Free, Madv::PageOut][arg as usize % 3];
                    // Refused advice (PageOut without swap) is an outcome both runs share.
                    let _ = k.do_madvise(mm, start + first * K4, start + first * K4 + len, advice);
                }
                4 => {
                    let size = ["hugepages-64kB/enabled", "hugepages-16kB/enabled", "enabled"][arg as usize % 3];
                    k.knobs
                        .set(size, ["always", "never", "madvise"][pages as usize % 3])
                        .unwrap();
                }
                5 if live[s as usize] > 0 => {
                    k.do_munmap(mm, start, start + live[s as usize] * K4);
                    live[s as usize] = 0;
                }
                _ => {}
            }
        }
        assert_clean(&k);
        let mut c = crate::report::Counters::new();
        crate::sim::kernel_counters(&k, &mut c);
        c.insert("min_flt".into(), k.mm(mm).min_flt as i64);
        let pages = (0..3)
            .flat_map(|s| (0..live[s as usize]).map(move |p| slot(s) + p * K4))
            .map(|a| Some((k.page_kind(mm, a)?, k.page_table_pfn(mm, a)?)))
            .collect();
        (c, pages, SHORTCUTS_TAKEN.get())
    }

    proptest::proptest! {
        #![proptest_config(proptest::test_runner::Config { cases: 64, ..Default::default() })]
        /// The anonymous write fault's shortcut leaves every counter, page and frame as
        /// the general fault path does, over mixed mappings, THP and mTHP settings (so
        /// order-0 and mTHP folios, and mTHP faults falling back to order 0), reads,
        /// writes, madvise and munmap.
        #[test]
        fn the_anon_write_fault_shortcut_leaves_what_the_general_path_does(
            steps in proptest::collection::vec((0..6u8, 0..3u64, 0..600u64, 1..600u64, 0..6u8), 1..24)
        ) {
            let (c, pages, _) = shortcut_case(&steps, true);
            let (fc, fpages, _) = shortcut_case(&steps, false);
            proptest::prop_assert_eq!(c, fc);
            proptest::prop_assert_eq!(pages, fpages);
        }
    }

    /// `shortcut_case` (the fault shortcut taken) with every order-0 pte zapped in
    /// a loop iteration of its own when `one_by_one`, and the number of ptes zapped in
    /// runs.
    fn zap_case(steps: &[Step], one_by_one: bool) -> (crate::report::Counters, Vec<Option<(PageKind, Pfn)>>, u64) {
        ZAP_ONE_PTE_AN_ITERATION.set(one_by_one);
        ZAP_RUN_PTES.set(0);
        let (c, pages, _) = shortcut_case(steps, false);
        ZAP_ONE_PTE_AN_ITERATION.set(false);
        (c, pages, ZAP_RUN_PTES.get())
    }

    proptest::proptest! {
        #![proptest_config(proptest::test_runner::Config { cases: 64, ..Default::default() })]
        /// A run of order-0 ptes zapped at once leaves every counter, page and frame
        /// (the frees' order shows in the frames later faults get) as the loop one
        /// pte an iteration does, over zero-page reads, mTHP, swap entries, madvise
        /// and munmap.
        #[test]
        fn a_zapped_run_of_order0_ptes_leaves_what_one_an_iteration_does(
            steps in proptest::collection::vec((0..6u8, 0..3u64, 0..600u64, 1..600u64, 0..6u8), 1..24)
        ) {
            let (c, pages, _) = zap_case(&steps, true);
            let (rc, rpages, _) = zap_case(&steps, false);
            proptest::prop_assert_eq!(c, rc);
            proptest::prop_assert_eq!(pages, rpages);
        }
    }

    #[test]
    fn a_zapped_run_stops_where_the_gather_fills_as_one_pte_an_iteration_does() {
        // 20,000 written pages (more than a gather holds, so it fills mid-table), a
        // hole and zero-page reads among them, unmapped whole, then faulted again.
        let steps = [
            (0, 0, 0, 20_000, 1),
            (1, 0, 0, 20_000, 0),
            (3, 0, 5_000, 40, 0),
            (2, 0, 5_010, 20, 1),
            (5, 0, 0, 0, 0),
            (0, 0, 0, 20_000, 1),
            (1, 0, 0, 20_000, 0),
        ];
        let (c, pages, in_runs) = zap_case(&steps, false);
        // All but the first of each run (a run ends at the hole, the zero pages, a
        // table's end and the gather's fills).
        assert!(in_runs > 19_800, "{in_runs}");
        assert!(c["kernel.zap_pte_range.loops"] > 20_000, "{c:?}");
        assert_eq!((c, pages, 0), zap_case(&steps, true));
    }

    #[test]
    fn a_touch_of_an_order0_region_takes_the_shortcut_for_all_but_two_faults_a_table() {
        // 1024 pages over two pte tables: the first fault of each allocates it, and its
        // pmd's write makes the second walk there again before the path is remembered.
        let steps = [(0, 0, 0, 1024, 1), (1, 0, 0, 1024, 0)];
        let (c, pages, taken) = shortcut_case(&steps, false);
        assert_eq!(taken, 1020);
        assert_eq!((c, pages), {
            let (c, p, taken) = shortcut_case(&steps, true);
            assert_eq!(taken, 0);
            (c, p)
        });
    }

    #[test]
    fn a_touch_of_a_64k_region_takes_the_shortcut_for_all_but_two_faults_a_table() {
        // hugepages-64kB=always: 1024 pages in 64 folios over two pte tables.
        let steps = [(4, 0, 0, 0, 0), (0, 0, 0, 1024, 0), (1, 0, 0, 1024, 0)];
        let (c, pages, taken) = shortcut_case(&steps, false);
        assert_eq!((c["mthp.64kB.anon_fault_alloc"], c["min_flt"]), (64, 64));
        assert_eq!(taken, 60);
        assert_eq!((c, pages), {
            let (c, p, taken) = shortcut_case(&steps, true);
            assert_eq!(taken, 0);
            (c, p)
        });
    }

    fn rw() -> VmFlags {
        VmFlags::READ | VmFlags::WRITE
    }

    fn write(k: &mut Kernel, mm: MmId, start: u64, len: u64) {
        for a in (start..start + len).step_by(K4 as usize) {
            user_access(k, mm, 0, a, true).unwrap();
        }
    }

    /// 64K mTHP written, forked, and the child gone: the parent maps the folio alone,
    /// every page of it no longer PageAnonExclusive.
    fn formerly_shared_64k(order0: bool) -> (Kernel, MmId) {
        let (mut k, mm) = boot_with(MachineConfig::default(), &[("hugepages-64kB/enabled", "always")]);
        k.cow_reuse_order0 = order0;
        k.do_mmap(mm, BASE, 64 << 10, rw()).unwrap();
        write(&mut k, mm, BASE, 64 << 10);
        let child = k.dup_mmap(mm).unwrap();
        k.exit_mmap(child);
        assert_clean(&k);
        (k, mm)
    }

    #[test]
    fn by_default_a_large_folio_the_mm_maps_alone_after_fork_is_reused_on_write() {
        let (mut k, mm) = formerly_shared_64k(false);
        let head = k.page_table_pfn(mm, BASE).unwrap();
        let rmaps = k.arch.kc.get(KernelEvent::FolioRemoveRmapPtes);
        write(&mut k, mm, BASE, 64 << 10);
        assert_clean(&k);
        assert_eq!(k.page_table_pfn(mm, BASE), Some(head));
        assert!((0..16).all(|i| k.page_kind(mm, BASE + i * K4) == Some(PageKind::Order(4))));
        assert_eq!(k.arch.kc.get(KernelEvent::FolioRemoveRmapPtes), rmaps);
        assert_eq!(k.stat.mthp(4, MthpStat::NrAnon), 1);
    }

    /// 6.12 (cow-reuse=order0): each write copies its page, the first one leaves the
    /// folio partially mapped (deferred split), the last one frees it.
    #[test]
    fn with_order0_cow_reuse_each_write_to_a_formerly_shared_large_folio_copies_a_page() {
        let (mut k, mm) = formerly_shared_64k(true);
        let rmaps = k.arch.kc.get(KernelEvent::FolioRemoveRmapPtes);
        write(&mut k, mm, BASE, K4);
        assert_clean(&k);
        assert_eq!(k.page_kind(mm, BASE), Some(PageKind::Order(0)));
        assert_eq!(k.page_kind(mm, BASE + K4), Some(PageKind::Order(4)));
        assert_eq!(k.stat.mthp(4, MthpStat::SplitDeferred), 1);
        write(&mut k, mm, BASE + K4, 60 << 10);
        assert_clean(&k);
        assert!((0..16).all(|i| k.page_kind(mm, BASE + i * K4) == Some(PageKind::Order(0))));
        assert_eq!(k.arch.kc.get(KernelEvent::FolioRemoveRmapPtes) - rmaps, 16);
        assert_eq!(k.stat.mthp(4, MthpStat::NrAnon), 0);
    }

    /// Without fork the pages stay PageAnonExclusive: a write after mprotect(r) then
    /// mprotect(rw) reuses the large folio under either setting.
    #[test]
    fn with_order0_cow_reuse_a_page_still_anon_exclusive_is_reused() {
        let (mut k, mm) = boot_with(MachineConfig::default(), &[("hugepages-64kB/enabled", "always")]);
        k.cow_reuse_order0 = true;
        k.do_mmap(mm, BASE, 64 << 10, rw()).unwrap();
        write(&mut k, mm, BASE, 64 << 10);
        k.do_mprotect(mm, BASE, BASE + (64 << 10), VmFlags::READ).unwrap();
        k.do_mprotect(mm, BASE, BASE + (64 << 10), rw()).unwrap();
        write(&mut k, mm, BASE, 64 << 10);
        assert_clean(&k);
        assert!((0..16).all(|i| k.page_kind(mm, BASE + i * K4) == Some(PageKind::Order(4))));
    }

    /// mmap(PROT_WRITE) then a write, a read, and mprotect(PROT_WRITE) over a
    /// read-write mapping: arm64 maps write-only as read-write, one fault per page.
    #[test]
    fn a_write_only_mapping_faults_once_per_page_and_is_readable() {
        let (mut k, mm) = boot_with(MachineConfig::default(), &[]);
        k.do_mmap(mm, BASE, 2 * K4, VmFlags::WRITE).unwrap();
        user_access(&mut k, mm, 0, BASE, true).unwrap();
        user_access(&mut k, mm, 0, BASE, false).unwrap();
        user_access(&mut k, mm, 0, BASE + K4, false).unwrap();
        user_access(&mut k, mm, 0, BASE + K4, true).unwrap();
        assert_eq!(k.mm(mm).min_flt, 3, "write, read (zero page), write (CoW of it)");
        k.do_mmap(mm, BASE + 2 * K4, K4, rw()).unwrap();
        write(&mut k, mm, BASE + 2 * K4, K4);
        k.do_mprotect(mm, BASE + 2 * K4, BASE + 3 * K4, VmFlags::WRITE).unwrap();
        write(&mut k, mm, BASE + 2 * K4, K4);
        user_access(&mut k, mm, 0, BASE + 2 * K4, false).unwrap();
        assert_eq!(k.mm(mm).min_flt, 4);
        assert_clean(&k);
    }

    /// swap_fork_64k_cached.wl: the child reads the first page of a 64K folio whose
    /// slots it shares. Up to 6.19 (sync-swapin=bypass) that is order 0 through the swap
    /// cache; with the child gone the parent's slots have count 1 again, but five of the
    /// first folio's are still cached: a fault there reads order 0, one in an uncached
    /// folio reads it whole. From 7.0 (cache) swapin_sync reads the whole folio into the
    /// cache for the child, where the parent's fault finds it and maps all 16 pages
    /// without I/O, then frees the cache.
    #[test]
    fn a_large_swap_in_for_shared_slots_is_cached_whole_from_7_0() {
        for (cache, first_kind, swpin, majors) in [(false, PageKind::Order(0), 1, 2), (true, PageKind::Order(4), 2, 1)]
        {
            let (mut k, mm) = boot_with(MachineConfig::default(), &[("hugepages-64kB/enabled", "always")]);
            k.swapin_sync_cache = cache;
            k.sys_swapon(64 << 20).unwrap();
            k.do_mmap(mm, BASE, 256 << 10, rw()).unwrap();
            write(&mut k, mm, BASE, 256 << 10);
            k.do_madvise(mm, BASE, BASE + (256 << 10), crate::mm::madvise::Madv::PageOut)
                .unwrap();
            let child = k.dup_mmap(mm).unwrap();
            k.switch_mm(1, child);
            user_access(&mut k, child, 1, BASE, false).unwrap();
            let tail = if cache { PageKind::Order(4) } else { PageKind::Swap };
            assert_eq!(k.page_kind(child, BASE + 15 * K4), Some(tail), "cache={cache}");
            k.exit_mmap(child);
            assert_clean(&k);
            assert_eq!(k.swap.as_ref().unwrap().cache.iter().count(), if cache { 1 } else { 5 });
            let majors0 = k.mm(mm).maj_flt;
            user_access(&mut k, mm, 0, BASE + 8 * K4, false).unwrap();
            user_access(&mut k, mm, 0, BASE + (64 << 10), false).unwrap();
            assert_clean(&k);
            assert_eq!(k.page_kind(mm, BASE + 8 * K4), Some(first_kind), "cache={cache}");
            assert_eq!(
                k.page_kind(mm, BASE),
                Some(if cache { first_kind } else { PageKind::Swap })
            );
            assert_eq!(k.page_kind(mm, BASE + (64 << 10)), Some(PageKind::Order(4)));
            assert_eq!(k.stat.mthp(4, MthpStat::Swpin), swpin, "cache={cache}");
            assert_eq!(k.mm(mm).maj_flt - majors0, majors, "cache={cache}");
        }
    }

    /// fork_pmd_thp.wl: both pmds of a forked PMD THP are split by the first writes;
    /// once the child has gone, the parent's next write reuses the pte-mapped folio
    /// (6.15+) or copies the page (cow-reuse=order0, 6.12).
    #[test]
    fn with_order0_cow_reuse_a_formerly_shared_pte_mapped_thp_copies_after_the_child_exits() {
        for order0 in [false, true] {
            let (mut k, mm) = boot_with(MachineConfig::default(), &[]);
            k.cow_reuse_order0 = order0;
            k.do_mmap(mm, BASE, 2 << 20, rw() | VmFlags::HUGEPAGE).unwrap();
            write(&mut k, mm, BASE, K4);
            let child = k.dup_mmap(mm).unwrap();
            k.switch_mm(1, child);
            user_access(&mut k, child, 1, BASE + K4, true).unwrap();
            write(&mut k, mm, BASE + 2 * K4, K4);
            k.exit_mmap(child);
            assert_clean(&k);
            assert_eq!(k.page_kind(mm, BASE + 2 * K4), Some(PageKind::Order(0)));
            write(&mut k, mm, BASE + 3 * K4, K4);
            assert_clean(&k);
            let want = if order0 { PageKind::Order(0) } else { PageKind::Order(9) };
            assert_eq!(k.page_kind(mm, BASE + 3 * K4), Some(want), "order0={order0}");
        }
    }
}
