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

use super::contpte_insns::{Call, MEASURED_CONT_PTES};
use super::pgtable::{Arch, ArchMm, PgProt, Pte, PtePtr, PtepGetVariant};
use super::tlbflush;
use crate::hw::{Desc, Event, Pfn};
use crate::kcount::KernelEvent;

/// contpte_align_down: the first pte of the block holding `ptep`.
#[inline]
fn align_down(arch: &Arch, ptep: PtePtr) -> PtePtr {
    ptep.align_down(arch.granule().cont_ptes())
}

/// contpte_convert: repaint the whole block with `pte` (CONT set or cleared), with
/// break-before-make: clear every entry gathering A/D, TLBI the block, set them all.
pub fn contpte_convert(arch: &mut Arch, mm: ArchMm, addr: u64, ptep: PtePtr, pte: Pte) {
    let g = arch.granule();
    let n = g.cont_ptes();
    let start_addr = addr & !(g.cont_pte_size() - 1);
    let start = align_down(arch, ptep);
    arch.hw.ev.inc(Event::ContpteConvert);
    arch.kc.inc(KernelEvent::ContpteConvert);
    let ps = g.page_size();
    let pte = arch.__clear_ptes_gathering(start_addr, start, n, pte);
    // The TLBI is elided on BBML2_NOABORT CPUs since 83bbd6be7d17 (6.17).
    if !(arch.hw.cfg.features.bbml2 && arch.bbml2_elide) {
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
/// The header's inline wrapper: the call into __contpte_try_unfold is a real one
/// (`kernel.__contpte_try_unfold`); contpte.c's own callers reach the same work with
/// it inlined (`unfold`), as the 6.12 guest's kernel image shows.
#[inline]
pub fn contpte_try_unfold(arch: &mut Arch, mm: ArchMm, addr: u64, ptep: PtePtr) {
    if arch.__ptep_get(ptep).pte_valid_cont() {
        arch.kc.inc(KernelEvent::ContpteTryUnfold);
    }
    unfold(arch, mm, addr, ptep);
}

/// contpte_try_unfold's work, inlined into contpte.c's callers.
#[inline]
pub fn unfold(arch: &mut Arch, mm: ArchMm, addr: u64, ptep: PtePtr) {
    let pte = arch.__ptep_get(ptep);
    if pte.pte_valid_cont() && mm.user {
        arch.hw.ev.inc(Event::ContpteUnfold);
        contpte_convert(arch, mm, addr, ptep, pte.pte_mknoncont());
    }
}

/// contpte_try_unfold_partial: unfold only the blocks that [addr, addr+nr) covers in
/// part, at its start and at its end.
pub fn contpte_try_unfold_partial(arch: &mut Arch, mm: ArchMm, addr: u64, ptep: PtePtr, nr: usize) {
    arch.kc.inc(KernelEvent::ContpteTryUnfoldPartial);
    let g = arch.granule();
    let n = g.cont_ptes();
    let ps = g.page_size();
    if ptep.index & (n - 1) != 0 {
        unfold(arch, mm, addr, ptep);
    }
    let last = ptep.add(nr - 1);
    if (last.index + 1) & (n - 1) != 0 {
        unfold(arch, mm, addr + (nr as u64 - 1) * ps, last);
    }
}

/// contpte_set_ptes: map `nr` pages; chunks whose VA range and PA are CONT_PTE_SIZE
/// aligned get PTE_CONT.
pub fn contpte_set_ptes(arch: &mut Arch, addr: u64, ptep: PtePtr, pte: Pte, nr: usize) {
    arch.kc.inc(KernelEvent::ContpteSetPtes);
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
    if !palign || !pte.pte_valid() || pte.pte_cont() || pte.pte_special() {
        return;
    }
    __contpte_try_fold(arch, mm, addr, ptep, pte, folio);
}

fn __contpte_try_fold(arch: &mut Arch, mm: ArchMm, addr: u64, ptep: PtePtr, pte: Pte, folio: Option<(Pfn, u64)>) {
    arch.kc.inc(KernelEvent::ContpteTryFold);
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

/// contpte_ptep_test_and_clear_young: clear young on every entry of the block holding
/// `ptep`, without unfolding it; whether any was young.
pub fn contpte_ptep_test_and_clear_young(arch: &mut Arch, addr: u64, ptep: PtePtr) -> bool {
    let g = arch.granule();
    let n = g.cont_ptes();
    let first = ptep.align_down(n);
    let start = addr & !(g.cont_pte_size() - 1);
    let mut young = false;
    for i in 0..n {
        young |= arch.__ptep_test_and_clear_young(start + i as u64 * g.page_size(), first.add(i));
    }
    young
}

/// contpte_ptep_clear_flush_young: as above, then, if any was young, flush the whole
/// block without waiting for completion (a stale young entry only misleads aging).
pub fn contpte_ptep_clear_flush_young(arch: &mut Arch, mm: ArchMm, addr: u64, ptep: PtePtr) -> bool {
    let young = contpte_ptep_test_and_clear_young(arch, addr, ptep);
    if young {
        let g = arch.granule();
        let s = addr & !(g.cont_pte_size() - 1);
        tlbflush::flush_tlb_range_nosync(&mut arch.hw, mm.asid, s, s + g.cont_pte_size(), g.page_size(), true);
    }
    young
}

/// contpte_ptep_get_lockless: the block's young and dirty bits gathered from all its
/// ptes, for a reader without the PTL (its retry when the block changes under it
/// cannot happen in the sequential model). A function of its own, not counted as
/// contpte_ptep_get.
pub fn contpte_ptep_get_lockless(arch: &mut Arch, ptep: PtePtr, mut orig: Pte) -> Pte {
    let start = align_down(arch, ptep);
    for i in 0..arch.granule().cont_ptes() {
        let p = arch.__ptep_get(start.add(i));
        if p.pte_dirty() {
            orig = orig.pte_mkdirty();
        }
        if p.pte_young() {
            orig = orig.pte_mkyoung();
        }
    }
    orig
}

/// contpte_ptep_get: gather young and dirty over the block, in the variant chosen.
/// With 16-entry blocks (4K granule) the instructions the call executes are counted
/// from seed 004's table measured for the chosen compiler (`contpte_insns`), and
/// the call's outcome is kept by the block's state (`contpte_insns::Memo`).
pub fn contpte_ptep_get(arch: &mut Arch, ptep: PtePtr, orig: Pte) -> Pte {
    let n = arch.granule().cont_ptes();
    let start = align_down(arch, ptep);
    arch.hw.ev.inc(Event::ContptePtepGet);
    arch.kc.inc(KernelEvent::ContptePtepGet);
    let variant = arch.ptep_get;
    if n != MEASURED_CONT_PTES {
        let before = arch.hw.ev.get(Event::PteRead);
        let (orig, _) = scan(variant, n, orig, |i| arch.__ptep_get(start.add(i)));
        let reads = arch.hw.ev.get(Event::PteRead) - before;
        arch.hw.ev.add(Event::ContptePtepGetReads, reads);
        return orig;
    }
    // The block as the loop finds it (nothing writes it during the call), read again
    // only when a descriptor may have changed since the last call on it; the reads the
    // loop makes are counted from its outcome.
    let mem = &arch.hw.mem;
    let at = Some((start, mem.desc_gen()));
    let out = arch.ptep_get_insn_memo.call(arch.ptep_get_cc, variant, orig, at, || {
        let block = &mem.table(start.table)[start.index..start.index + MEASURED_CONT_PTES];
        std::array::from_fn(|i| Pte(Desc(block[i])))
    });
    arch.hw.ev.add(Event::PteRead, u64::from(out.reads));
    arch.hw.ev.add(Event::ContptePtepGetReads, u64::from(out.reads));
    match out.insns {
        Some(c) => arch.kc.add(KernelEvent::ContptePtepGetInsns, u64::from(c)),
        None => arch.kc.inc(KernelEvent::ContptePtepGetInsnsUnmeasured),
    }
    out.apply(orig)
}

/// contpte_ptep_get's loop in variant `v` over the `n` ptes `read` returns: orig_pte
/// with the block's young and dirty gathered, and what the loop's branches tested
/// (`Call`, which the measured instruction counts are looked up by).
pub fn scan(v: PtepGetVariant, n: usize, orig: Pte, read: impl FnMut(usize) -> Pte) -> (Pte, Call) {
    match v {
        PtepGetVariant::FullScan => full_scan(n, orig, read),
        // Upstream's early exit (commit 093ae7a033cf) is seed 004's modification 2.
        PtepGetVariant::EarlyExit | PtepGetVariant::Mod2 => mod2_scan(n, orig, read),
        PtepGetVariant::Mod1 => mod1_scan(n, orig, read),
    }
}

/// The original: every pte read, whatever the block holds.
#[inline]
fn full_scan(n: usize, mut orig: Pte, mut read: impl FnMut(usize) -> Pte) -> (Pte, Call) {
    let mut c = Call::default();
    for i in 0..n {
        let p = read(i);
        c.read(i, p);
        if p.pte_dirty() {
            orig = c.mkdirty(orig);
        }
        if p.pte_young() {
            orig = c.mkyoung(orig);
        }
    }
    (orig, c)
}

/// Seed 004's modification 2 (and upstream's early exit): find the first young or
/// dirty pte, then hunt only for the other bit.
#[inline]
fn mod2_scan(n: usize, mut orig: Pte, mut read: impl FnMut(usize) -> Pte) -> (Pte, Call) {
    let mut c = Call::default();
    let mut i = 0;
    while i < n {
        let p = read(i);
        c.read(i, p);
        if p.pte_dirty() {
            orig = c.mkdirty(orig);
            // Re-reads entry i: it may be young too.
            while i < n {
                let q = read(i);
                c.read(i, q);
                if q.pte_young() {
                    orig = c.mkyoung(orig);
                    break;
                }
                i += 1;
            }
            break;
        }
        if p.pte_young() {
            orig = c.mkyoung(orig);
            i += 1;
            while i < n {
                let q = read(i);
                c.read(i, q);
                if q.pte_dirty() {
                    orig = c.mkdirty(orig);
                    break;
                }
                i += 1;
            }
            break;
        }
        i += 1;
    }
    (orig, c)
}

/// Seed 004's modification 1: one loop, stopping once orig_pte is both young and dirty.
#[inline]
fn mod1_scan(n: usize, mut orig: Pte, mut read: impl FnMut(usize) -> Pte) -> (Pte, Call) {
    let mut c = Call::default();
    for i in 0..n {
        let p = read(i);
        c.read(i, p);
        if p.pte_dirty() {
            orig = c.mkdirty(orig);
            c.test_young(orig);
            if orig.pte_young() {
                break;
            }
        }
        if p.pte_young() {
            orig = c.mkyoung(orig);
            c.test_dirty(orig);
            if orig.pte_dirty() {
                break;
            }
        }
    }
    (orig, c)
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::arch::arm64::pgtable::{ArchMm, PgProt, PtepGetVariant};
    use crate::hw::{Event, Granule, Machine, MachineConfig, Pfn, VirtAddr};

    const USER: ArchMm = ArchMm { asid: 7, user: true };
    const VA: u64 = 0x2000_0000_0000;

    /// A machine with a pte table for VA, ready for set_ptes.
    fn setup(g: Granule) -> (Arch, PtePtr) {
        let mut hw = Machine::new(MachineConfig {
            granule: g,
            ram_bytes: 4 << 30,
            ncpus: 2,
            ..MachineConfig::default()
        });
        hw.set_checks(true);
        let mut pfn = 64u64;
        let root = hw.mem.materialize_table(Pfn(pfn));
        let mut cur = root;
        for level in g.start_level()..3 {
            pfn += 1;
            let next = hw.mem.materialize_table(Pfn(pfn));
            hw.mem
                .write(cur, g.index(VA, level), crate::hw::Desc::table(Pfn(pfn).to_phys(g)));
            cur = next;
        }
        hw.switch_mm(0, Pfn(64).to_phys(g), USER.asid);
        (
            Arch::new(hw),
            PtePtr {
                table: cur,
                index: g.index(VA, 3),
            },
        )
    }

    fn pte(g: Granule, pfn: u64) -> Pte {
        Pte::pfn_pte(Pfn(pfn), PgProt::READONLY, g).pte_mkdirty().pte_mkwrite()
    }

    /// Clearing part of a folded block goes through contpte_try_unfold_partial, which
    /// converts the block itself: the guest counts no __contpte_try_unfold there (it is
    /// inlined into contpte.c's callers); a single pte's clear does count one.
    #[test]
    fn a_partial_unfold_counts_no_entry_to_contpte_try_unfold() {
        let g = Granule::K4;
        let (mut arch, ptep) = setup(g);
        arch.set_ptes(USER, VA, ptep, pte(g, 1024), g.cont_ptes(), None);
        arch.clear_full_ptes(USER, VA, ptep, 4, false);
        let got = |a: &Arch| {
            (
                a.kc.get(KernelEvent::ContpteTryUnfoldPartial),
                a.kc.get(KernelEvent::ContpteConvert),
                a.kc.get(KernelEvent::ContpteTryUnfold),
            )
        };
        assert_eq!(got(&arch), (1, 1, 0));
        let (mut arch, ptep) = setup(g);
        arch.set_ptes(USER, VA, ptep, pte(g, 1024), g.cont_ptes(), None);
        arch.ptep_get_and_clear(USER, VA, ptep);
        assert_eq!(got(&arch), (0, 1, 1));
    }

    /// Map one block with single set_ptes calls, the last entry last; `tweak` may
    /// change the pte of entry i. Returns whether the block ended up folded.
    fn map_block(
        g: Granule,
        mm: ArchMm,
        base_pfn: u64,
        folio: Option<(Pfn, u64)>,
        tweak: impl Fn(usize, Pte) -> Option<Pte>,
    ) -> bool {
        let (mut arch, ptep) = setup(g);
        let n = g.cont_ptes();
        for i in 0..n {
            let Some(p) = tweak(i, pte(g, base_pfn + i as u64)) else {
                continue;
            };
            arch.set_ptes(mm, VA + i as u64 * g.page_size(), ptep.add(i), p, 1, folio);
        }
        let folded = (0..n).all(|i| arch.__ptep_get(ptep.add(i)).pte_cont());
        assert_eq!(folded, arch.hw.ev.get(Event::ContpteFold) == 1);
        assert!(arch.hw.take_violations().is_empty());
        folded
    }

    const GRANULES: [Granule; 3] = [Granule::K4, Granule::K16, Granule::K64];

    #[test]
    fn a_block_folds_when_every_condition_holds() {
        for g in GRANULES {
            let n = g.cont_ptes() as u64;
            assert!(
                map_block(g, USER, 4 * n, Some((Pfn(4 * n), n)), |_, p| Some(p)),
                "{g:?}"
            );
        }
    }

    #[test]
    fn each_violated_condition_prevents_the_fold() {
        for g in GRANULES {
            let n = g.cont_ptes() as u64;
            let base = 4 * n;
            let whole = Some((Pfn(base), n));
            let last = n as usize - 1;
            // Kernel mm.
            assert!(
                !map_block(g, ArchMm { asid: 0, user: false }, base, whole, |_, p| Some(p)),
                "{g:?} kernel"
            );
            // Physically misaligned.
            assert!(
                !map_block(g, USER, base + 1, Some((Pfn(base + 1), n)), |_, p| Some(p)),
                "{g:?} palign"
            );
            // The folio does not cover the block.
            assert!(
                !map_block(g, USER, base, Some((Pfn(base), n / 2)), |_, p| Some(p)),
                "{g:?} folio"
            );
            // One entry missing.
            assert!(
                !map_block(g, USER, base, whole, |i, p| (i != 3).then_some(p)),
                "{g:?} none"
            );
            // Pfns not consecutive.
            assert!(
                !map_block(g, USER, base, whole, |i, p| Some(if i == 3 {
                    p.pte_advance_pfn(1, g)
                } else {
                    p
                })),
                "{g:?} pfn"
            );
            // A different prot (write-protected) on one entry.
            assert!(
                !map_block(g, USER, base, whole, |i, p| Some(if i == 2 {
                    p.pte_wrprotect()
                } else {
                    p
                })),
                "{g:?} prot"
            );
            // Special mappings never fold.
            assert!(
                !map_block(g, USER, base, whole, |_, p| Some(p.pte_mkspecial())),
                "{g:?} special"
            );
            // Young and dirty may differ: still folds.
            assert!(
                map_block(g, USER, base, whole, |i, p| Some(if i == 5 {
                    p.pte_mkold().pte_mkclean()
                } else {
                    p
                })),
                "{g:?} a/d"
            );
            // Folding is attempted only when the last entry of the block is set.
            let (mut arch, ptep) = setup(g);
            arch.set_ptes(
                USER,
                VA + last as u64 * g.page_size(),
                ptep.add(last),
                pte(g, base + last as u64),
                1,
                whole,
            );
            for i in 0..last {
                arch.set_ptes(
                    USER,
                    VA + i as u64 * g.page_size(),
                    ptep.add(i),
                    pte(g, base + i as u64),
                    1,
                    whole,
                );
            }
            assert_eq!(arch.hw.ev.get(Event::ContpteFold), 0, "{g:?} order");
        }
    }

    #[test]
    fn set_ptes_sets_cont_only_on_aligned_chunks() {
        for g in GRANULES {
            let n = g.cont_ptes();
            let (mut arch, ptep) = setup(g);
            // Start one page into a block: the first partial chunk and the tail stay non-cont.
            let start = ptep.add(1);
            arch.set_ptes(USER, VA + g.page_size(), start, pte(g, 4 * n as u64 + 1), 2 * n, None);
            let cont: Vec<bool> = (1..2 * n + 1)
                .map(|i| arch.__ptep_get(ptep.add(i)).pte_cont())
                .collect();
            assert!(cont[..n - 1].iter().all(|c| !c), "{g:?}");
            assert!(cont[n - 1..2 * n - 1].iter().all(|c| *c), "{g:?}");
            assert!(!cont[2 * n - 1], "{g:?}");
        }
    }

    #[test]
    fn unfold_and_refold_go_through_break_before_make() {
        for g in GRANULES {
            let n = g.cont_ptes();
            let (mut arch, ptep) = setup(g);
            arch.set_ptes(USER, VA, ptep, pte(g, 4 * n as u64), n, None);
            // Fill the TLB with the contiguous entry, then clear one pte: the block unfolds.
            arch.hw.access(0, VirtAddr(VA), false).unwrap();
            arch.ptep_get_and_clear(USER, VA + 2 * g.page_size(), ptep.add(2));
            assert_eq!(arch.hw.ev.get(Event::ContpteUnfold), 1);
            assert_eq!(arch.hw.ev.get(Event::TlbiVale1is), n as u64);
            assert!(!arch.__ptep_get(ptep.add(0)).pte_cont());
            for i in 0..n {
                arch.hw.access(0, VirtAddr(VA + i as u64 * g.page_size()), false).ok();
            }
            assert!(arch.hw.take_violations().is_empty(), "{g:?}");
        }
    }

    #[test]
    fn bbml2_elides_the_tlbi_of_a_convert() {
        let g = Granule::K4;
        let (mut arch, ptep) = setup(g);
        arch.hw.cfg.features.bbml2 = true;
        arch.set_ptes(USER, VA, ptep, pte(g, 64), 16, None);
        arch.hw.access(0, VirtAddr(VA), false).unwrap();
        arch.ptep_get_and_clear(USER, VA, ptep);
        assert_eq!(arch.hw.ev.get(Event::ContpteConvert), 1);
        assert_eq!(arch.hw.ev.get(Event::TlbiTotal), 0);
        assert!(arch.hw.take_violations().is_empty());
    }

    #[test]
    fn a_kernel_before_6_17_flushes_a_convert_even_on_a_bbml2_cpu() {
        let g = Granule::K4;
        let (mut arch, ptep) = setup(g);
        arch.hw.cfg.features.bbml2 = true;
        arch.bbml2_elide = false;
        arch.set_ptes(USER, VA, ptep, pte(g, 64), 16, None);
        arch.ptep_get_and_clear(USER, VA, ptep);
        assert_eq!(arch.hw.ev.get(Event::ContpteConvert), 1);
        assert!(arch.hw.ev.get(Event::TlbiTotal) > 0);
        assert!(arch.hw.take_violations().is_empty());
    }

    #[test]
    fn a_convert_that_skips_the_tlbi_without_bbml2_is_caught() {
        let g = Granule::K4;
        let (mut arch, ptep) = setup(g);
        arch.set_ptes(USER, VA, ptep, pte(g, 64).pte_mknoncont(), 1, None);
        for i in 1..16 {
            arch.set_ptes(USER, VA + i * 4096, ptep.add(i as usize), pte(g, 64 + i), 1, None);
        }
        // The pages are cached as separate entries.
        for i in 0..16 {
            arch.hw.access(0, VirtAddr(VA + i * 4096), false).unwrap();
        }
        // The injected bug: contpte_convert's repaint without the TLBI.
        for i in 0..16 {
            arch.__ptep_get_and_clear(VA + i as u64 * 4096, ptep.add(i));
        }
        arch.__set_ptes(VA, ptep, pte(g, 64).pte_mkcont(), 16);
        arch.hw.access(0, VirtAddr(VA + 4096), false).ok();
        let v = arch.hw.take_violations();
        use crate::hw::check::Violation;
        assert!(
            v.iter()
                .any(|x| matches!(x, Violation::BreakBeforeMake { .. } | Violation::TlbConflict { .. })),
            "the checker must see the stale per-page entries: {v:?}"
        );
    }

    #[test]
    fn ptep_get_gathers_young_and_dirty_from_the_whole_block() {
        let g = Granule::K4;
        let (mut arch, ptep) = setup(g);
        let clean = pte(g, 64).pte_mkold().pte_mkclean();
        arch.set_ptes(USER, VA, ptep, clean, 16, None);
        let p = arch.ptep_get(USER, ptep);
        assert!(!p.pte_young() && !p.pte_dirty());
        // Hardware sets AF on the 8th entry only.
        let e = arch.__ptep_get(ptep.add(7));
        arch.__set_pte(VA + 7 * 4096, ptep.add(7), e.pte_mkyoung());
        assert!(arch.ptep_get(USER, ptep).pte_young());
    }

    /// Seed 004's three scenarios: pte reads per contpte_ptep_get call, per variant.
    /// Scenario 1: all 16 young and dirty; 2: only the 8th young, none dirty; 3: none.
    #[test]
    fn ptep_get_reads_per_call_in_seed_004s_scenarios() {
        let g = Granule::K4;
        let variants = [
            PtepGetVariant::FullScan,
            PtepGetVariant::EarlyExit,
            PtepGetVariant::Mod1,
            PtepGetVariant::Mod2,
        ];
        // Per scenario, pte i's (young, dirty).
        type Flags = fn(usize) -> (bool, bool);
        let scenarios: [(&str, Flags); 3] = [
            ("all young+dirty", |_| (true, true)),
            ("8th young only", |i| (i == 7, false)),
            ("none", |_| (false, false)),
        ];
        let mut table = Vec::new();
        for (name, state) in scenarios {
            let mut row = Vec::new();
            for v in variants {
                let (mut arch, ptep) = setup(g);
                arch.ptep_get = v;
                let clean = pte(g, 64).pte_mkold().pte_mkclean();
                arch.set_ptes(USER, VA, ptep, clean, 16, None);
                for i in 0..16 {
                    let (young, dirty) = state(i);
                    let mut e = arch.__ptep_get(ptep.add(i));
                    if young {
                        e = e.pte_mkyoung();
                    }
                    if dirty {
                        e = e.pte_mkdirty();
                    }
                    arch.__set_pte(VA + i as u64 * 4096, ptep.add(i), e);
                }
                let got = arch.ptep_get(USER, ptep);
                let want_young = (0..16).any(|i| state(i).0);
                let want_dirty = (0..16).any(|i| state(i).1);
                assert_eq!(
                    (got.pte_young(), got.pte_dirty()),
                    (want_young, want_dirty),
                    "{name} {v:?}"
                );
                row.push(arch.hw.ev.get(Event::ContptePtepGetReads));
            }
            table.push((name, row));
        }
        for (name, row) in &table {
            println!(
                "{name:<16} full-scan {:>2}  early-exit {:>2}  mod1 {:>2}  mod2 {:>2}",
                row[0], row[1], row[2], row[3]
            );
        }
        assert_eq!(table[0].1, vec![16, 2, 1, 2]);
        assert_eq!(table[1].1, vec![16, 16, 16, 16]);
        assert_eq!(table[2].1, vec![16, 16, 16, 16]);
    }

    #[test]
    fn clearing_young_and_dirty_widens_to_whole_blocks_without_unfolding() {
        let g = Granule::K4;
        let (mut arch, ptep) = setup(g);
        arch.set_ptes(USER, VA, ptep, pte(g, 64), 32, None);
        // Two entries in the middle of the first block: the whole block is cleared.
        arch.clear_young_dirty_ptes(USER, VA + 4 * 4096, ptep.add(4), 2, true, true);
        assert_eq!(arch.hw.ev.get(Event::ContpteUnfold), 0);
        for i in 0..16 {
            let p = arch.__ptep_get(ptep.add(i));
            assert!(p.pte_cont() && !p.pte_young() && !p.pte_dirty(), "entry {i}");
        }
        assert!(arch.__ptep_get(ptep.add(16)).pte_young());
    }

    #[test]
    fn test_and_clear_young_covers_the_block_and_flush_young_flushes_it() {
        let g = Granule::K4;
        let (mut arch, ptep) = setup(g);
        let old = pte(g, 64).pte_mkold();
        arch.set_ptes(USER, VA, ptep, old, 16, None);
        assert!(!arch.ptep_test_and_clear_young(USER, VA + 4096, ptep.add(1)));
        let e = arch.__ptep_get(ptep.add(9));
        arch.__set_pte(VA + 9 * 4096, ptep.add(9), e.pte_mkyoung());
        assert!(arch.ptep_clear_flush_young(USER, VA, ptep));
        assert!(!arch.ptep_get(USER, ptep).pte_young());
        // One flush of the whole block, no completion barrier (nosync).
        assert_eq!(arch.hw.ev.get(Event::TlbiVale1is), 16);
        assert_eq!(arch.hw.ev.get(Event::DsbIsh), 0);
        assert_eq!(arch.hw.ev.get(Event::ContpteUnfold), 0);
    }
}
