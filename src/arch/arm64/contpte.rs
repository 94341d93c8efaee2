//! arch/arm64/mm/contpte.c: transparent contiguous-bit mappings for user memory.
//!
//! ```text
//!  one 64K contpte block (4K granule, CONT_PTES = 16), 16-aligned in VA and PA:
//!  +------+------+------+-- ... --+------+
//!  | pte0 | pte1 | pte2 |         | pte15|   every entry valid, CONT set, PFNs
//!  +------+------+------+-- ... --+------+   consecutive, same prot; A/D of the
//!  \__________ one TLB entry ___________/    block = OR over the entries
//! ```
//! Changing CONT on live entries needs break-before-make (contpte_convert), except
//! on BBML2_NOABORT systems, where the TLBI is elided.

use super::pgtable::{Arch, ArchMm, PgProt, Pte, PtePtr, PtepGetVariant};
use super::tlbflush;
use crate::hw::{Event, Pfn};

/// contpte_align_down: the first pte of the block holding `ptep`.
#[inline]
fn align_down(arch: &Arch, ptep: PtePtr) -> PtePtr {
    let n = arch.granule().cont_ptes();
    PtePtr {
        table: ptep.table,
        index: ptep.index & !(n - 1),
    }
}

/// contpte_convert: repaint the whole block with `pte` (CONT set or cleared), with
/// break-before-make: clear every entry gathering A/D, TLBI the block, set them all.
pub fn contpte_convert(arch: &mut Arch, mm: ArchMm, addr: u64, ptep: PtePtr, mut pte: Pte) {
    let g = arch.granule();
    let n = g.cont_ptes();
    let start_addr = addr & !(g.cont_pte_size() - 1);
    let start = align_down(arch, ptep);
    arch.hw.ev.inc(Event::ContpteConvert);
    let ps = g.page_size();
    for i in 0..n {
        let old = arch.__ptep_get_and_clear(start_addr + i as u64 * ps, start.add(i));
        if old.pte_dirty() {
            pte = pte.pte_mkdirty();
        }
        if old.pte_young() {
            pte = pte.pte_mkyoung();
        }
    }
    if !arch.hw.cfg.features.bbml2 {
        tlbflush::__flush_tlb_range(
            &mut arch.hw,
            mm.asid,
            start_addr,
            start_addr + g.cont_pte_size(),
            ps,
            true,
        );
    }
    // The block's first pfn: `pte` may describe any entry of the block.
    let first = Pte::pfn_pte(Pfn(pte.pte_pfn(g).0 & !(n as u64 - 1)), pte.pte_pgprot(), g);
    arch.__set_ptes(start_addr, start, first, n);
}

/// contpte_try_unfold: if `ptep` is in a contpte block, repaint the block without CONT.
#[inline]
pub fn contpte_try_unfold(arch: &mut Arch, mm: ArchMm, addr: u64, ptep: PtePtr) {
    let pte = arch.__ptep_get(ptep);
    if pte.pte_valid_cont() && mm.user {
        arch.hw.ev.inc(Event::ContpteUnfold);
        contpte_convert(arch, mm, addr, ptep, pte.pte_mknoncont());
    }
}

/// contpte_try_unfold_partial: unfold only the blocks that [addr, addr+nr) covers in
/// part, at its start and at its end.
pub fn contpte_try_unfold_partial(arch: &mut Arch, mm: ArchMm, addr: u64, ptep: PtePtr, nr: usize) {
    let g = arch.granule();
    let n = g.cont_ptes();
    let ps = g.page_size();
    if ptep.index & (n - 1) != 0 {
        contpte_try_unfold(arch, mm, addr, ptep);
    }
    let last = ptep.add(nr - 1);
    if (last.index + 1) & (n - 1) != 0 {
        contpte_try_unfold(arch, mm, addr + (nr as u64 - 1) * ps, last);
    }
}

/// contpte_set_ptes: map `nr` pages; chunks whose VA range and PA are CONT_PTE_SIZE
/// aligned get PTE_CONT.
pub fn contpte_set_ptes(arch: &mut Arch, addr: u64, ptep: PtePtr, pte: Pte, nr: usize) {
    let g = arch.granule();
    let ps = g.page_size();
    let cont_size = g.cont_pte_size();
    let end = addr + nr as u64 * ps;
    let prot: PgProt = pte.pte_pgprot();
    let mut pfn = pte.pte_pfn(g);
    let (mut addr, mut ptep) = (addr, ptep);
    while addr != end {
        let next = ((addr + cont_size) & !(cont_size - 1)).min(end);
        let chunk = ((next - addr) / ps) as usize;
        let mut p = Pte::pfn_pte(pfn, prot, g);
        p = if (addr | next | pfn.to_phys(g).0) & (cont_size - 1) == 0 {
            p.pte_mkcont()
        } else {
            p.pte_mknoncont()
        };
        arch.__set_ptes(addr, ptep, p, chunk);
        addr = next;
        ptep = ptep.add(chunk);
        pfn = Pfn(pfn.0 + chunk as u64);
    }
}

/// contpte_try_fold: called by set_ptes(nr == 1) after the store. Folds when this is
/// the last pte of a block, VA and PA aligned, and the whole block maps one folio
/// (`folio`: head pfn and size) with consecutive pfns and the same prot.
pub fn contpte_try_fold(arch: &mut Arch, mm: ArchMm, addr: u64, ptep: PtePtr, pte: Pte, folio: Option<(Pfn, u64)>) {
    let g = arch.granule();
    let mask = g.cont_ptes() as u64 - 1;
    let valign = (addr >> g.page_shift()) & mask == mask;
    if !valign {
        return;
    }
    let palign = pte.pte_pfn(g).0 & mask == mask;
    if !(palign && pte.pte_valid() && !pte.pte_cont() && !pte.pte_special()) {
        return;
    }
    __contpte_try_fold(arch, mm, addr, ptep, pte, folio);
}

fn __contpte_try_fold(arch: &mut Arch, mm: ArchMm, addr: u64, ptep: PtePtr, pte: Pte, folio: Option<(Pfn, u64)>) {
    if !mm.user {
        return;
    }
    let g = arch.granule();
    let n = g.cont_ptes() as u64;
    let Some((head, nr)) = folio else { return };
    let pfn = pte.pte_pfn(g).0;
    let block_pfn = pfn & !(n - 1);
    // The folio must cover the whole block (equivalently in VA: pfn offset == VA offset).
    if head.0 > block_pfn || head.0 + nr < block_pfn + n {
        return;
    }
    let prot = pte.pte_mkclean().pte_mkold().pte_pgprot();
    let mut expected = Pte::pfn_pte(Pfn(block_pfn), prot, g);
    let start = align_down(arch, ptep);
    for i in 0..n as usize {
        let sub = arch.__ptep_get(start.add(i)).pte_mkclean().pte_mkold();
        if !sub.pte_same(expected) {
            return;
        }
        expected = expected.pte_advance_pfn(1, g);
    }
    arch.hw.ev.inc(Event::ContpteFold);
    contpte_convert(arch, mm, addr, ptep, pte.pte_mkcont());
}

/// contpte_ptep_get: gather young and dirty over the block, in the variant chosen.
pub fn contpte_ptep_get(arch: &mut Arch, ptep: PtePtr, mut orig: Pte) -> Pte {
    let n = arch.granule().cont_ptes();
    let start = align_down(arch, ptep);
    arch.hw.ev.inc(Event::ContptePtepGet);
    let before = arch.hw.ev.get(Event::PteRead);
    match arch.ptep_get {
        PtepGetVariant::FullScan => {
            for i in 0..n {
                let p = arch.__ptep_get(start.add(i));
                if p.pte_dirty() {
                    orig = orig.pte_mkdirty();
                }
                if p.pte_young() {
                    orig = orig.pte_mkyoung();
                }
            }
        }
        // Upstream's early exit (commit 093ae7a033cf) is seed 004's modification 2.
        PtepGetVariant::EarlyExit | PtepGetVariant::Mod2 => {
            let mut i = 0;
            while i < n {
                let p = arch.__ptep_get(start.add(i));
                if p.pte_dirty() {
                    orig = orig.pte_mkdirty();
                    // Re-reads entry i: it may be young too.
                    while i < n {
                        if arch.__ptep_get(start.add(i)).pte_young() {
                            orig = orig.pte_mkyoung();
                            break;
                        }
                        i += 1;
                    }
                    break;
                }
                if p.pte_young() {
                    orig = orig.pte_mkyoung();
                    i += 1;
                    while i < n {
                        if arch.__ptep_get(start.add(i)).pte_dirty() {
                            orig = orig.pte_mkdirty();
                            break;
                        }
                        i += 1;
                    }
                    break;
                }
                i += 1;
            }
        }
        PtepGetVariant::Mod1 => {
            for i in 0..n {
                let p = arch.__ptep_get(start.add(i));
                if p.pte_dirty() {
                    orig = orig.pte_mkdirty();
                    if orig.pte_young() {
                        break;
                    }
                }
                if p.pte_young() {
                    orig = orig.pte_mkyoung();
                    if orig.pte_dirty() {
                        break;
                    }
                }
            }
        }
    }
    let reads = arch.hw.ev.get(Event::PteRead) - before;
    arch.hw.ev.add(Event::ContptePtepGetReads, reads);
    orig
}
