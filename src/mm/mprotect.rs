//! mm/mprotect.c: mprotect_fixup and change_protection.

use super::huge_memory::{__split_huge_pmd, change_huge_pmd};
use super::memory::{vm_page_prot, Fpb};
use super::mm_types::{MmId, VmFlags, Vma};
use super::mmap::VmaError;
use super::mmu_gather::MmuGather;
use super::pgtable::PmdPtr;
use super::Kernel;
use crate::arch::arm64::pgtable::pmd_trans_huge;
use crate::arch::arm64::pgtable::{PgProt, Pte, PtePtr};
use crate::arch::arm64::tlbflush::pte_needs_flush;
use crate::hw::Pfn;
use crate::kcount::KernelEvent;

/// What one committed run of ptes needs: where, the old and new values of its first
/// pte, and the folio it maps.
struct Commit {
    addr: u64,
    ptep: PtePtr,
    old: Pte,
    new: Pte,
    folio: Option<(Pfn, u64)>,
}

impl Kernel {
    /// do_mprotect_pkey: `prot` is VM_READ / VM_WRITE. VMAs whose flags change are
    /// split, merged and get their ptes changed, under one mmu_gather.
    pub fn do_mprotect(&mut self, mm: MmId, start: u64, end: u64, prot: VmFlags) -> Result<(), VmaError> {
        if !self.range_fully_mapped(mm, start, end) {
            return Err(VmaError::NotMapped);
        }
        let rw = VmFlags::READ | VmFlags::WRITE;
        let changed: Vec<(u64, u64)> = self
            .mm(mm)
            .vmas_in(start, end)
            .iter()
            .filter(|v| v.flags & rw != prot)
            .map(|v| (v.start.max(start), v.end.min(end)))
            .collect();
        self.vma_modify_flags(mm, start, end, |f| (f - rw) | prot)?;
        let mut tlb = self.tlb_gather_mmu(mm, false);
        for (s, e) in changed {
            let vma = self.mm(mm).find_vma(s).expect("the VMA just changed");
            self.change_protection(&mut tlb, mm, &vma, s, e);
        }
        self.tlb_finish_mmu(tlb);
        Ok(())
    }

    /// change_protection over [start, end) of one VMA, pmd by pmd. A whole huge pmd is
    /// changed in place, except to PROT_NONE, where the model splits it first (a
    /// present-invalid block has no place in its pmd walkers; the layout is the same).
    fn change_protection(&mut self, tlb: &mut MmuGather, mm: MmId, vma: &Vma, start: u64, end: u64) {
        let g = self.arch.granule();
        let pmd_size = g.pmd_size();
        self.walk_pmd_range(mm, start, end, |k, pmd, d, addr, next| {
            if pmd_trans_huge(d) {
                if next - addr == pmd_size {
                    change_huge_pmd(k, tlb, mm, vma, pmd, addr);
                } else {
                    __split_huge_pmd(k, mm, vma, pmd, addr);
                    k.change_pte_range(tlb, mm, vma, pmd, addr, next);
                }
            } else if !d.is_none() {
                k.change_pte_range(tlb, mm, vma, pmd, addr, next);
            }
            true
        });
        self.tlb_end_vma(tlb);
    }

    /// change_pte_range: per folio batch (respecting the write bit),
    /// modify_prot_start_ptes, pte_modify, then commit; in a writable private VMA the
    /// runs of exclusive anon pages get write permission back at once.
    /// With `mprotect_per_pte` (Linux 6.16 and older) each pte alone: change_pte_one.
    fn change_pte_range(&mut self, tlb: &mut MmuGather, mm: MmId, vma: &Vma, pmd: PmdPtr, addr: u64, end: u64) {
        let g = self.arch.granule();
        let ps = g.page_size();
        let amm = self.arch_mm(mm);
        let newprot = vm_page_prot(vma);
        let try_writable = vma.flags.contains(VmFlags::WRITE);
        let Some(mut ptep) = self.pte_offset_map(pmd, addr) else {
            return;
        };
        self.flush_tlb_batched_pending(mm);
        let mut addr = addr;
        self.arch.kc.add(KernelEvent::ChangePteRangePtes, (end - addr) / ps);
        while addr < end {
            let oldpte = self.arch.ptep_get(amm, ptep);
            if !oldpte.pte_present() {
                ptep = ptep.add(1);
                addr += ps;
                continue;
            }
            let pfn = oldpte.pte_pfn(g);
            let folio = (!self.is_zero_pfn(pfn)).then(|| self.memmap.folio_of(pfn));
            if self.mprotect_per_pte {
                let folio = folio.map(|f| (f, self.memmap.folio_nr_pages(f)));
                self.change_pte_one(tlb, mm, addr, ptep, newprot, try_writable, folio);
                ptep = ptep.add(1);
                addr += ps;
                continue;
            }
            // vm_normal_page and page_folio for every batch (cac1db8c3aad), where 6.16
            // looked the page up only to make it writable.
            if folio.is_some() {
                self.arch.kc.inc(KernelEvent::ChangePteRangeFolioLookups);
            }
            let max_nr = ((end - addr) / ps) as usize;
            let nr = match folio {
                Some(f) if self.memmap.folio_order(f) > 0 && max_nr > 1 => {
                    self.folio_pte_batch_flags(mm, f, ptep, oldpte, max_nr, Fpb::RESPECT_WRITE)
                        .0
                }
                _ => 1,
            };
            let old = self.arch.get_and_clear_full_ptes(amm, addr, ptep, nr, false);
            let new = old.pte_modify(newprot);
            let c = Commit {
                addr,
                ptep,
                old,
                new,
                folio: folio.map(|f| (f, self.memmap.folio_nr_pages(f))),
            };
            // can_change_private_pte_writable: not PROT_NONE, an exclusive anon page.
            if try_writable && !new.pte_write() && new.pte_valid() && folio.is_some() {
                self.commit_anon_folio_batch(tlb, mm, &c, pfn, nr);
            } else {
                self.prot_commit_flush_ptes(tlb, mm, &c, 0, nr, false);
            }
            ptep = ptep.add(nr);
            addr += nr as u64 * ps;
        }
    }

    /// The body of change_pte_range for one present pte before cac1db8c3aad "mm:
    /// optimize mprotect() by PTE batching" and 7efa1cd5f89b "arm64: add batched
    /// versions of ptep_modify_prot_start/commit" (6.17), kept for
    /// `mprotect-batch=per-pte` (Linux 6.12): ptep_modify_prot_start is
    /// ptep_get_and_clear, which unfolds the contpte block of the pte (one
    /// contpte_convert per block the range touches), and ptep_modify_prot_commit is
    /// set_pte_at, whose contpte_try_fold converts the block back on its last pte
    /// when all of it maps one folio alike (never for PROT_NONE: not valid). Each
    /// changed pte is flushed through the mmu_gather on its own.
    #[allow(clippy::too_many_arguments)]
    fn change_pte_one(
        &mut self,
        tlb: &mut MmuGather,
        mm: MmId,
        addr: u64,
        ptep: PtePtr,
        newprot: PgProt,
        try_writable: bool,
        folio: Option<(Pfn, u64)>,
    ) {
        let g = self.arch.granule();
        let amm = self.arch_mm(mm);
        // ptep_modify_prot_start.
        let old = self.arch.ptep_get_and_clear(amm, addr, ptep);
        let mut new = old.pte_modify(newprot);
        // can_change_pte_writable: not PROT_NONE, an exclusive anon page (before
        // d84887739d5c, 6.2, a dirty one only), found with vm_normal_page.
        let lookup = try_writable
            && !new.pte_write()
            && new.pte_valid()
            && (!self.mprotect_mkwrite_dirty_pte_only || old.pte_dirty())
            && folio.is_some();
        if lookup {
            self.arch.kc.inc(KernelEvent::ChangePteRangeFolioLookups);
        }
        if lookup
            && self
                .memmap
                .page(old.pte_pfn(g))
                .flags
                .contains(super::folio::PageFlags::ANON_EXCLUSIVE)
        {
            new = new.pte_mkwrite();
        }
        // ptep_modify_prot_commit: set_pte_at.
        self.arch.set_ptes(amm, addr, ptep, new, 1, folio);
        if pte_needs_flush(old, new, self.prot_flush_elide) {
            tlb.remove_tlb_entries(addr, 1, g.page_size());
        }
    }

    /// commit_anon_folio_batch: commit the batch in runs of equal PageAnonExclusive,
    /// the exclusive runs writable.
    fn commit_anon_folio_batch(&mut self, tlb: &mut MmuGather, mm: MmId, c: &Commit, page: Pfn, nr: usize) {
        let exclusive = |k: &Kernel, i: usize| {
            k.memmap
                .page(Pfn(page.0 + i as u64))
                .flags
                .contains(super::folio::PageFlags::ANON_EXCLUSIVE)
        };
        let mut idx = 0;
        while idx < nr {
            let first = exclusive(self, idx);
            let mut len = 1;
            while idx + len < nr && exclusive(self, idx + len) == first {
                len += 1;
            }
            self.prot_commit_flush_ptes(tlb, mm, c, idx, len, first);
            idx += len;
        }
    }

    /// prot_commit_flush_ptes: modify_prot_commit_ptes (set_ptes) for `len` ptes from
    /// `idx`, and a TLB flush of them if permissions were lost.
    fn prot_commit_flush_ptes(
        &mut self,
        tlb: &mut MmuGather,
        mm: MmId,
        c: &Commit,
        idx: usize,
        len: usize,
        write: bool,
    ) {
        let g = self.arch.granule();
        let ps = g.page_size();
        let amm = self.arch_mm(mm);
        let old = c.old.pte_advance_pfn(idx as u64, g);
        let mut new = c.new.pte_advance_pfn(idx as u64, g);
        if write {
            new = new.pte_mkwrite();
        }
        let addr = c.addr + idx as u64 * ps;
        self.arch.set_ptes(amm, addr, c.ptep.add(idx), new, len, c.folio);
        if pte_needs_flush(old, new, self.prot_flush_elide) {
            tlb.remove_tlb_entries(addr, len as u64, ps);
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::hw::{Event, MachineConfig};
    use crate::kcount::KernelEvent;
    use crate::sim::tests::{assert_clean, boot_with};
    use crate::sim::user_access;

    const BASE: u64 = 0x1000_0000_0000;
    const K4: u64 = 4096;

    /// 64K mTHP on a machine with TLBI range ops.
    fn boot(per_pte: bool) -> (Kernel, MmId) {
        let mut cfg = MachineConfig::default();
        cfg.features.tlbi_range = true;
        let (mut k, mm) = boot_with(cfg, &[("hugepages-64kB/enabled", "always")]);
        k.mprotect_per_pte = per_pte;
        (k, mm)
    }

    /// 256K of written 64K folios (four contpte blocks), mprotect'ed PROT_NONE and
    /// back to read-write; returns the contpte_converts and TLBIs of each mprotect.
    fn none_then_rw(per_pte: bool) -> [(u64, u64); 2] {
        let (mut k, mm) = boot(per_pte);
        let len = 256 << 10;
        k.do_mmap(mm, BASE, len, VmFlags::READ | VmFlags::WRITE).unwrap();
        for a in (BASE..BASE + len).step_by(K4 as usize) {
            user_access(&mut k, mm, 0, a, true).unwrap();
        }
        let mut out = [(0, 0); 2];
        for (i, prot) in [VmFlags::empty(), VmFlags::READ | VmFlags::WRITE]
            .into_iter()
            .enumerate()
        {
            let ev = k.arch.hw.ev.clone();
            k.do_mprotect(mm, BASE, BASE + len, prot).unwrap();
            assert_clean(&k);
            let d = |e| k.arch.hw.ev.get(e) - ev.get(e);
            out[i] = (d(Event::ContpteConvert), d(Event::TlbiTotal));
        }
        // Written again without faults: the pages stayed exclusive and writable.
        let flt = k.mm(mm).min_flt;
        for a in (BASE..BASE + len).step_by(K4 as usize) {
            user_access(&mut k, mm, 0, a, true).unwrap();
        }
        assert_eq!(k.mm(mm).min_flt, flt);
        // Every block is contiguous again.
        let pmd = k.pmd_offset(mm, BASE).unwrap();
        let ptep = k.pte_offset_map(pmd, BASE).unwrap();
        assert!((0..64).all(|i| k.arch.__ptep_get(ptep.add(i)).pte_valid_cont()));
        out
    }

    /// After a fork the ptes are read-only already: mprotect to read-only and back
    /// (mprotect_after_fork) leaves every hardware bit as it was, so arm64's
    /// pte_needs_flush (prot-flush=elide) skips the flush that the generic one issues
    /// for each batch, even though the batch was read from a folded contpte block.
    #[test]
    fn mprotect_of_forked_contpte_blocks_to_the_same_protection_needs_no_flush_when_elided() {
        for (elide, tlbis) in [(false, [1, 1]), (true, [0, 0])] {
            let (mut k, mm) = boot(false);
            k.prot_flush_elide = elide;
            let len = 256 << 10;
            k.do_mmap(mm, BASE, len, VmFlags::READ | VmFlags::WRITE).unwrap();
            for a in (BASE..BASE + len).step_by(K4 as usize) {
                user_access(&mut k, mm, 0, a, true).unwrap();
            }
            k.dup_mmap(mm).unwrap();
            let mut got = [0; 2];
            for (i, prot) in [VmFlags::READ, VmFlags::READ | VmFlags::WRITE].into_iter().enumerate() {
                let ev = k.arch.hw.ev.clone();
                k.do_mprotect(mm, BASE, BASE + len, prot).unwrap();
                assert_clean(&k);
                got[i] = k.arch.hw.ev.get(Event::TlbiTotal) - ev.get(Event::TlbiTotal);
            }
            assert_eq!(got, tlbis, "elide={elide}");
        }
    }

    #[test]
    fn batched_mprotect_changes_whole_contpte_blocks_without_converting_them() {
        // One range flush per mprotect, no unfold, no refold.
        assert_eq!(none_then_rw(false), [(0, 1), (0, 1)]);
    }

    /// Linux 6.12: each block is unfolded by its first pte going PROT_NONE (one
    /// convert each) and refolded by its last pte going back to read-write.
    #[test]
    fn per_pte_mprotect_unfolds_each_block_and_refolds_it_on_its_last_pte() {
        assert_eq!(none_then_rw(true), [(4, 4 + 1), (4, 4 + 1)]);
    }

    /// A read-only range starting and ending inside 64K folios (mprotect_split_rw):
    /// per pte, every block touched is unfolded, and the whole blocks inside the
    /// range fold again read-only; batched, only the two partial blocks unfold.
    #[test]
    fn per_pte_mprotect_refolds_the_whole_blocks_of_a_partial_range() {
        for (per_pte, converts, folds) in [(false, 2, 0), (true, 4 + 2, 2)] {
            let (mut k, mm) = boot(per_pte);
            let len = 1 << 20;
            k.do_mmap(mm, BASE, len, VmFlags::READ | VmFlags::WRITE).unwrap();
            for a in (BASE..BASE + len).step_by(K4 as usize) {
                user_access(&mut k, mm, 0, a, true).unwrap();
            }
            let (ev, kc) = (k.arch.hw.ev.clone(), k.arch.kc.clone());
            k.do_mprotect(mm, BASE + (100 << 10), BASE + (300 << 10), VmFlags::READ)
                .unwrap();
            assert_clean(&k);
            assert_eq!(
                k.arch.hw.ev.get(Event::ContpteConvert) - ev.get(Event::ContpteConvert),
                converts
            );
            assert_eq!(k.arch.hw.ev.get(Event::ContpteFold) - ev.get(Event::ContpteFold), folds);
            let dk = |e| k.arch.kc.get(e) - kc.get(e);
            assert_eq!(dk(KernelEvent::ContpteTryUnfoldPartial) == 0, per_pte);
        }
    }
}
