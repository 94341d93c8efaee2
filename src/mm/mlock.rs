//! mm/mlock.c: mlock/munlock. Changing VM_LOCKED walks the range's ptes
//! (mlock_pte_range, one ptep_get per folio batch plus folio_mlock_step's), and
//! mlock then populates the range through GUP (one ptep_get per page). With contpte
//! every such ptep_get gathers a block: seed 004's benchmark.

use super::folio::PageFlags;
use super::mm_types::{MmId, VmFlags};
use super::mmap::VmaError;
use super::Kernel;
use crate::arch::arm64::pgtable::pmd_trans_huge;
use crate::arch::arm64::pgtable::{ArchMm, Pte, PtePtr};
use crate::hw::Pfn;

impl Kernel {
    /// mlock(2): lock, then populate (faults count like any GUP fault).
    pub fn do_mlock(&mut self, mm: MmId, start: u64, end: u64) -> Result<(), VmaError> {
        self.apply_vma_lock_flags(mm, start, end, true)?;
        self.mm_populate(mm, start, end).map_err(|_| VmaError::NoMem)
    }

    /// munlock(2).
    pub fn do_munlock(&mut self, mm: MmId, start: u64, end: u64) -> Result<(), VmaError> {
        self.apply_vma_lock_flags(mm, start, end, false)
    }

    /// apply_vma_lock_flags + mlock_fixup: change VM_LOCKED and walk the ptes of the
    /// parts whose lock state changed.
    fn apply_vma_lock_flags(&mut self, mm: MmId, start: u64, end: u64, lock: bool) -> Result<(), VmaError> {
        if !self.range_fully_mapped(mm, start, end) {
            return Err(VmaError::NoMem);
        }
        let changed: Vec<(u64, u64)> = self
            .mm(mm)
            .vmas_in(start, end)
            .iter()
            .filter(|v| v.flags.contains(VmFlags::LOCKED) != lock)
            .map(|v| (v.start.max(start), v.end.min(end)))
            .collect();
        self.vma_modify_flags(mm, start, end, |f| {
            if lock {
                f | VmFlags::LOCKED
            } else {
                f - VmFlags::LOCKED
            }
        })?;
        for (s, e) in changed {
            self.mlock_vma_pages_range(mm, s, e, lock);
        }
        Ok(())
    }

    /// mlock_vma_pages_range: walk [start, end) with mlock_pte_range.
    fn mlock_vma_pages_range(&mut self, mm: MmId, start: u64, end: u64, lock: bool) {
        let g = self.arch.granule();
        self.walk_pmd_range(mm, start, end, |k, pmd, d, addr, next| {
            if pmd_trans_huge(d) {
                let folio = d.pfn(g);
                if k.huge_zero_folio != Some(folio) {
                    k.mlock_folio(folio, lock);
                }
            } else if let Some(ptep) = k.pte_offset_map(pmd, addr) {
                k.mlock_pte_range(mm, ptep, addr, next, lock);
            }
            true
        });
    }

    /// mlock_pte_range: one ptep_get per folio batch, plus folio_mlock_step's.
    fn mlock_pte_range(&mut self, mm: MmId, mut ptep: PtePtr, mut addr: u64, next: u64, lock: bool) {
        let g = self.arch.granule();
        let amm = self.arch_mm(mm);
        while addr < next {
            let ptent = self.arch.ptep_get(amm, ptep);
            let mut step = 1;
            if ptent.pte_present() && !self.is_zero_pfn(ptent.pte_pfn(g)) {
                let pfn = ptent.pte_pfn(g);
                let folio = self.memmap.folio_of(pfn);
                if self.memmap.folio_order(folio) > 0 {
                    // folio_mlock_step: its own ptep_get, then folio_pte_batch.
                    let p: Pte = self.arch.ptep_get(amm, ptep);
                    let count = ((next - addr) / g.page_size()) as usize;
                    step = if self.mlock_walk_per_pte {
                        self.mlock_step_per_pte(amm, folio, ptep, p, count)
                    } else {
                        self.folio_pte_batch(mm, folio, ptep, p, count)
                    };
                }
                // allow_mlock_munlock: a large folio only when wholly inside the range.
                let whole = self.memmap.folio_order(folio) == 0 || step as u64 == self.memmap.folio_nr_pages(folio);
                if whole {
                    self.mlock_folio(folio, lock);
                }
            }
            ptep = ptep.add(step);
            addr += step as u64 * g.page_size();
        }
    }

    /// 6.6's folio_mlock_step loop: from `first`'s page to the folio's end (at most
    /// `max` ptes), a ptep_get of every pte, stopping at one that is not present or
    /// maps another folio.
    fn mlock_step_per_pte(&mut self, amm: ArchMm, folio: Pfn, ptep: PtePtr, first: Pte, max: usize) -> usize {
        let g = self.arch.granule();
        let (start, nr) = (folio.0, self.memmap.folio_nr_pages(folio));
        let count = ((start + nr - first.pte_pfn(g).0) as usize).min(max);
        (0..count)
            .position(|i| {
                let p = self.arch.ptep_get(amm, ptep.add(i));
                !p.pte_present() || p.pte_pfn(g).0.wrapping_sub(start) >= nr
            })
            .unwrap_or(count)
    }

    /// mlock_folio / munlock_folio.
    fn mlock_folio(&mut self, folio: crate::hw::Pfn, lock: bool) {
        if lock {
            self.memmap.folio_set(folio, PageFlags::MLOCKED);
        } else {
            self.memmap.folio_clear(folio, PageFlags::MLOCKED);
        }
    }
}
