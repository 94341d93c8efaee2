//! mm/mmap.c + mm/vma.c: creating, splitting, merging and unmapping VMAs.

use super::huge_memory::split_huge_pmd_address;
use super::mm_types::{MmId, VmFlags, Vma};
use super::Kernel;
use crate::kcount::KernelEvent;

/// Why a VMA operation failed (the errno the syscall would return).
#[derive(Clone, Copy, Debug, PartialEq, Eq, thiserror::Error)]
pub enum VmaError {
    #[error("EEXIST: range already mapped")]
    Exists,
    #[error("ENOMEM: range not mapped")]
    NotMapped,
    /// EINVAL, with the kernel's reason (the errno alone does not tell which check).
    #[error("EINVAL: {0}")]
    Invalid(&'static str),
    #[error("ENOMEM: out of memory")]
    NoMem,
}

impl Kernel {
    /// mmap(MAP_PRIVATE | MAP_ANONYMOUS | MAP_FIXED_NOREPLACE).
    pub fn do_mmap(&mut self, mm: MmId, addr: u64, len: u64, flags: VmFlags) -> Result<(), VmaError> {
        let end = addr + len;
        if !self.mm(mm).vmas_in(addr, end).is_empty() {
            return Err(VmaError::Exists);
        }
        let shift = self.arch.granule().page_shift();
        let mut pgoff = addr >> shift;
        let mut flags = flags | VmFlags::MAYREAD | VmFlags::MAYWRITE;
        // MAP_SHARED|MAP_ANONYMOUS: shmem_zero_setup gives the VMA an inode of its
        // size, mapped from index 0.
        let file = flags.contains(VmFlags::SHARED).then(|| {
            flags |= VmFlags::MAYSHARE;
            pgoff = 0;
            self.shmem_zero_setup(len >> shift)
        });
        // vm_area_alloc (SLAB_ACCOUNT).
        self.obj_cgroup_charge(super::memcontrol::VM_AREA_STRUCT_SIZE);
        self.mm_mut(mm).vmas_mut().insert(
            addr,
            Vma {
                start: addr,
                end,
                flags,
                anon_vma: None,
                pgoff,
                swap_readahead_info: 0,
                file,
            },
        );
        Ok(())
    }

    /// __split_vma: cut the VMA containing `at` in two, splitting a huge pmd across `at`.
    fn split_vma(&mut self, mm: MmId, at: u64) {
        let Some(vma) = self.mm(mm).find_vma(at) else {
            return;
        };
        if vma.start == at {
            return;
        }
        split_huge_pmd_address(self, mm, &vma, at);
        let shift = self.arch.granule().page_shift();
        let m = self.mm_mut(mm);
        m.vmas_mut().get_mut(&vma.start).unwrap().end = at;
        m.vmas_mut().insert(
            at,
            Vma {
                start: at,
                end: vma.end,
                pgoff: vma.pgoff + ((at - vma.start) >> shift),
                ..vma
            },
        );
    }

    /// Merge VMAs around [start, end) with equal flags and compatible anon_vmas
    /// (is_mergeable_anon_vma) into their neighbours (what vma_modify's merge achieves).
    pub fn merge_around(&mut self, mm: MmId, start: u64, end: u64) {
        let m = self.mm(mm).vmas();
        let from = m.range(..start).next_back().map(|(s, _)| *s).unwrap_or(start);
        self.merge_from(mm, from, end);
    }

    /// Merge the VMAs starting in [from, end] as `merge_around` does, none below
    /// `from`: brk's heap never merges with what lies under mm->start_brk
    /// (vma_prev_limit in sys_brk).
    pub fn merge_from(&mut self, mm: MmId, from: u64, end: u64) {
        let shift = self.arch.granule().page_shift();
        let m = self.mm_mut(mm).vmas_mut();
        let keys: Vec<u64> = m.range(from..=end).map(|(s, _)| *s).collect();
        let mut cur: Option<u64> = None;
        for k in keys {
            if let Some(c) = cur {
                let (ce, cf, ca) = (m[&c].end, m[&c].flags, m[&c].anon_vma);
                let next = m[&k];
                let anon_ok = ca.is_none() || next.anon_vma.is_none() || ca == next.anon_vma;
                let pgoff_ok = m[&c].pgoff + ((ce - c) >> shift) == next.pgoff;
                let file_ok = m[&c].file == next.file;
                if ce == next.start && cf == next.flags && anon_ok && pgoff_ok && file_ok {
                    m.remove(&k);
                    let cur = m.get_mut(&c).unwrap();
                    cur.end = next.end;
                    cur.anon_vma = ca.or(next.anon_vma);
                    continue;
                }
            }
            cur = Some(k);
        }
    }

    /// vma_modify_flags over [start, end): split at the edges, change flags, merge.
    pub fn vma_modify_flags(
        &mut self,
        mm: MmId,
        start: u64,
        end: u64,
        f: impl Fn(VmFlags) -> VmFlags,
    ) -> Result<(), VmaError> {
        if !self.range_fully_mapped(mm, start, end) {
            return Err(VmaError::NotMapped);
        }
        self.split_vma(mm, start);
        self.split_vma(mm, end);
        let m = self.mm_mut(mm).vmas_mut();
        let keys: Vec<u64> = m.range(start..end).map(|(s, _)| *s).collect();
        for k in keys {
            let v = m.get_mut(&k).unwrap();
            v.flags = f(v.flags);
        }
        self.merge_around(mm, start, end);
        Ok(())
    }

    /// Whether [start, end) is covered by VMAs without holes.
    pub fn range_fully_mapped(&self, mm: MmId, start: u64, end: u64) -> bool {
        let mut at = start;
        for v in self.mm(mm).vmas_in(start, end) {
            if v.start > at {
                return false;
            }
            at = v.end;
        }
        at >= end
    }

    /// do_vmi_munmap: split at the edges, detach the VMAs, zap them with one
    /// mmu_gather and free the page tables no neighbour needs.
    pub fn do_munmap(&mut self, mm: MmId, start: u64, end: u64) {
        if self.mm(mm).vmas_in(start, end).is_empty() {
            return;
        }
        self.split_vma(mm, start);
        self.split_vma(mm, end);
        let vmas = self.mm(mm).vmas_in(start, end);
        for v in &vmas {
            self.mm_mut(mm).vmas_mut().remove(&v.start);
        }
        let (prev, next) = self.mm(mm).gap_around(start, end);
        let mut tlb = self.tlb_gather_mmu(mm, false);
        self.unmap_vmas(&mut tlb, mm, &vmas, start, end);
        self.free_pgtables(&mut tlb, mm, &vmas, prev.unwrap_or(0), next.unwrap_or(0));
        self.tlb_finish_mmu(tlb);
        self.shmem_release(vmas.iter().filter_map(|v| v.file));
    }

    /// exit_mmap: zap every VMA under a fullmm mmu_gather, free all page tables, then
    /// the pgd (mmdrop); the mm is gone afterwards.
    pub fn exit_mmap(&mut self, mm: MmId) {
        self.arch.kc.inc(KernelEvent::ExitMmap);
        // A batched flush still owed (fork copies tlb_flush_batched): the first zap's
        // flush_tlb_batched_pending flushes the whole mm. Counted on its own because a
        // guest's exit twin, forked just before, owes and does the same.
        if self.mm(mm).tlb_flush_pending != self.mm(mm).tlb_flush_done {
            self.arch.kc.inc(KernelEvent::ExitMmapBatchedPending);
        }
        self.khugepaged_exit(mm);
        let vmas: Vec<Vma> = std::mem::take(self.mm_mut(mm).vmas_mut()).into_values().collect();
        let mut tlb = self.tlb_gather_mmu(mm, true);
        self.unmap_vmas(&mut tlb, mm, &vmas, 0, u64::MAX);
        self.free_pgtables(&mut tlb, mm, &vmas, 0, 0);
        self.tlb_finish_mmu(tlb);
        let pgd = self.mm(mm).pgd;
        self.pgtable_free(pgd);
        self.mms[mm] = None;
        self.shmem_release(vmas.iter().filter_map(|v| v.file));
    }

    /// __mm_populate / populate_vma_page_range: fault in [start, end) as GUP would,
    /// writing for private writable VMAs (a shared one is read in: FOLL_WRITE only for
    /// VM_WRITE without VM_SHARED). Pages already mapped suitably are skipped.
    pub fn mm_populate(&mut self, mm: MmId, start: u64, end: u64) -> Result<(), super::memory::FaultError> {
        for vma in self.mm(mm).vmas_in(start, end) {
            let write = vma.flags & (VmFlags::WRITE | VmFlags::SHARED) == VmFlags::WRITE;
            let mut addr = start.max(vma.start);
            let e = end.min(vma.end);
            while addr < e {
                let step = self.follow_page(mm, addr, write);
                match step {
                    Some(n) => addr += n,
                    None => self.handle_mm_fault(mm, addr, write)?,
                }
            }
        }
        Ok(())
    }

    /// follow_page_mask: if `addr` is mapped well enough for GUP, how far to advance.
    fn follow_page(&mut self, mm: MmId, addr: u64, write: bool) -> Option<u64> {
        let g = self.arch.granule();
        let pmd = self.pmd_offset(mm, addr)?;
        let d = self.pxd_get(2, pmd);
        if crate::arch::arm64::pgtable::pmd_trans_huge(d) {
            let p = crate::arch::arm64::pgtable::Pte(d);
            if write && !p.pte_write() {
                return None;
            }
            return Some(g.pmd_size() - (addr & (g.pmd_size() - 1)));
        }
        let ptep = self.pte_offset_map(pmd, addr)?;
        let amm = self.arch_mm(mm);
        let pte = self.arch.ptep_get(amm, ptep);
        if !pte.pte_present() || (write && !pte.pte_write()) {
            return None;
        }
        Some(g.page_size() - (addr & (g.page_size() - 1)))
    }
}
