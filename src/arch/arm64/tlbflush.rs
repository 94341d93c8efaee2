//! arch/arm64/include/asm/tlbflush.h: the kernel's TLB maintenance sequences, built
//! from the machine's TLBI and barrier instructions.

use super::pgtable::Pte;
use crate::hw::machine::tlbi_range_pages;
use crate::hw::{Asid, LocalTlbi, Machine, Tlbi, VirtAddr};

/// Under KPTI the user half of an address space has its own ASID (bit 0 set on
/// hardware); user TLBIs are issued for both.
pub const USER_ASID_FLAG: Asid = 1 << 15;

/// MAX_TLBI_RANGE_PAGES: the largest range one set of range ops may cover.
pub const MAX_TLBI_RANGE_PAGES: u64 = tlbi_range_pages(3, 31);

/// MAX_DVM_OPS: without range ops, larger ranges flush the whole ASID instead.
pub fn max_dvm_ops(m: &Machine) -> u64 {
    m.granule().ptrs_per_table() as u64
}

/// Which flavour of by-VA TLBI a range flush uses.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum TlbiOp {
    /// VAE1IS / RVAE1IS: all levels (tables were freed).
    Vae1is,
    /// VALE1IS / RVALE1IS: last level only.
    Vale1is,
    /// VAALE1IS / RVAALE1IS: any ASID, last level (kernel mappings).
    Vaale1is,
}

fn single(op: TlbiOp, asid: Asid, va: VirtAddr) -> Tlbi {
    match op {
        TlbiOp::Vae1is => Tlbi::Vae1is { asid, va },
        TlbiOp::Vale1is => Tlbi::Vale1is { asid, va },
        TlbiOp::Vaale1is => Tlbi::Vaale1is { va },
    }
}

fn ranged(op: TlbiOp, asid: Asid, base: VirtAddr, scale: u8, num: u8) -> Tlbi {
    match op {
        TlbiOp::Vae1is => Tlbi::Rvae1is { asid, base, scale, num },
        TlbiOp::Vale1is => Tlbi::Rvale1is { asid, base, scale, num },
        TlbiOp::Vaale1is => Tlbi::Rvaale1is { base, scale, num },
    }
}

/// __TLBI_RANGE_NUM: the `num` operand for `pages` at `scale`, or None if < 0.
pub fn tlbi_range_num(pages: u64, scale: u8) -> Option<u8> {
    let p = pages.min(tlbi_range_pages(scale, 31));
    let n = (p >> (5 * scale as u32 + 1)) as i64 - 1;
    (n >= 0).then_some(n as u8)
}

/// The operands __flush_tlb_range_op issues for `pages` pages from page number
/// `start_page` with range ops: scale from 3 down to 0, then single ops for what is
/// left. With LPA2 a range op's base address is in 64K units, so each op starting off
/// a 64K boundary is a single one (`align`: pages per 64K with LPA2, else 1). Returns
/// (page offset, Some((scale, num))) for range ops and (page offset, None) for single ops.
pub fn range_op_plan(
    mut pages: u64,
    stride_pages: u64,
    range: bool,
    start_page: u64,
    align: u64,
) -> Vec<(u64, Option<(u8, u8)>)> {
    let mut out = Vec::new();
    let mut at = 0u64;
    let mut scale: i32 = 3;
    while pages > 0 {
        if !range || pages == 1 || !(start_page + at).is_multiple_of(align) {
            out.push((at, None));
            at += stride_pages;
            pages = pages.saturating_sub(stride_pages);
            continue;
        }
        if let Some(num) = tlbi_range_num(pages, scale as u8) {
            out.push((at, Some((scale as u8, num))));
            let n = tlbi_range_pages(scale as u8, num);
            at += n;
            pages -= n;
        }
        scale -= 1;
        // __flush_tlb_range_op can only get here with pages == 0 or an odd page left
        // once scale 0 has been used.
        if scale < 0 && pages > 0 {
            scale = 0;
        }
    }
    out
}

/// __flush_tlb_range_op: issue the TLBIs for [start, start + pages pages); with
/// `local`, the non-broadcast VALE1/RVALE1 on that CPU instead of `op`.
#[allow(clippy::too_many_arguments)]
fn flush_tlb_range_op(
    m: &mut Machine,
    op: TlbiOp,
    start: u64,
    pages: u64,
    stride: u64,
    asid: Asid,
    user: bool,
    local: Option<usize>,
) {
    let ps = m.granule().page_shift();
    let range = m.cfg.features.tlbi_range;
    let align = if m.cfg.features.lpa2 {
        (64 << 10 >> ps).max(1)
    } else {
        1
    };
    for (off, r) in range_op_plan(pages, stride >> ps, range, start >> ps, align) {
        let va = VirtAddr(start + (off << ps));
        if let Some(cpu) = local {
            for asid in [asid, asid | USER_ASID_FLAG].into_iter().take(1 + user as usize) {
                m.tlbi_local_nosync(
                    cpu,
                    match r {
                        None => LocalTlbi::Vale1 { asid, va },
                        Some((scale, num)) => LocalTlbi::Rvale1 {
                            asid,
                            base: va,
                            scale,
                            num,
                        },
                    },
                );
            }
            continue;
        }
        let ops = match r {
            None => [single(op, asid, va), single(op, asid | USER_ASID_FLAG, va)],
            Some((scale, num)) => [
                ranged(op, asid, va, scale, num),
                ranged(op, asid | USER_ASID_FLAG, va, scale, num),
            ],
        };
        m.tlbi(ops[0]);
        if user {
            m.tlbi(ops[1]);
        }
    }
}

fn kpti(m: &Machine) -> bool {
    m.cfg.features.kpti
}

/// [start, end) rounded out to `stride`: its start and its number of pages.
fn stride_range(m: &Machine, start: u64, end: u64, stride: u64) -> (u64, u64) {
    let start = start & !(stride - 1);
    let end = (end + stride - 1) & !(stride - 1);
    (start, (end - start) >> m.granule().page_shift())
}

/// __flush_tlb_range_limit_excess: too many pages for TLBIs (MAX_DVM_OPS strides
/// without range ops), so the whole ASID is flushed instead.
fn range_limit_excess(m: &Machine, pages: u64, stride: u64) -> bool {
    let stride_pages = stride >> m.granule().page_shift();
    (!m.cfg.features.tlbi_range && pages >= max_dvm_ops(m) * stride_pages) || pages > MAX_TLBI_RANGE_PAGES
}

/// __flush_tlb_range_nosync: DSB ISHST then the TLBIs, without waiting for them.
/// True when the range was too large and flush_tlb_mm (which waits) did it instead.
pub fn flush_tlb_range_nosync(
    m: &mut Machine,
    asid: Asid,
    start: u64,
    end: u64,
    stride: u64,
    last_level: bool,
) -> bool {
    let (start, pages) = stride_range(m, start, end, stride);
    if range_limit_excess(m, pages, stride) {
        flush_tlb_mm(m, asid);
        return true;
    }
    m.dsb_ishst();
    let op = if last_level { TlbiOp::Vale1is } else { TlbiOp::Vae1is };
    let user = kpti(m);
    flush_tlb_range_op(m, op, start, pages, stride, asid, user, None);
    false
}

/// __flush_tlb_range(TLBF_NOWALKCACHE | TLBF_NOBROADCAST), 7.x's flush of the stale
/// read-only entry a write fault leaves on its own CPU (cb1fa2e99955, 6.19): DSB
/// NSHST, VALE1 (RVALE1) on `cpu` only, DSB NSH. Another CPU's stale entry costs it a
/// spurious fault instead (`flush_tlb_fix_spurious_fault`). A range too large for
/// TLBIs still flushes the whole ASID everywhere.
pub fn flush_tlb_range_local(m: &mut Machine, cpu: usize, asid: Asid, start: u64, end: u64, stride: u64) {
    let (start, pages) = stride_range(m, start, end, stride);
    if range_limit_excess(m, pages, stride) {
        flush_tlb_mm(m, asid);
        return;
    }
    m.dsb_nshst();
    let user = kpti(m);
    flush_tlb_range_op(m, TlbiOp::Vale1is, start, pages, stride, asid, user, Some(cpu));
    m.dsb_nsh(cpu);
}

/// __flush_tlb_range: the nosync flush followed by DSB ISH (6.9+, even after a
/// flush_tlb_mm fallback).
pub fn __flush_tlb_range(m: &mut Machine, asid: Asid, start: u64, end: u64, stride: u64, last_level: bool) {
    flush_tlb_range_nosync(m, asid, start, end, stride, last_level);
    tlbi_sync_s1ish(m);
}

/// __flush_tlb_range as before d9d8dc2bd3fb (6.9): one function, which returned
/// right after a flush_tlb_mm fallback, so without a second DSB ISH.
pub fn __flush_tlb_range_unsplit(m: &mut Machine, asid: Asid, start: u64, end: u64, stride: u64, last_level: bool) {
    if !flush_tlb_range_nosync(m, asid, start, end, stride, last_level) {
        tlbi_sync_s1ish(m);
    }
}

/// flush_tlb_range: page stride, all levels.
pub fn flush_tlb_range(m: &mut Machine, asid: Asid, start: u64, end: u64) {
    let ps = m.granule().page_size();
    __flush_tlb_range(m, asid, start, end, ps, false);
}

/// flush_tlb_mm: DSB ISHST; TLBI ASIDE1IS (+user); DSB ISH.
pub fn flush_tlb_mm(m: &mut Machine, asid: Asid) {
    m.dsb_ishst();
    m.tlbi(Tlbi::Aside1is { asid });
    if kpti(m) {
        m.tlbi(Tlbi::Aside1is {
            asid: asid | USER_ASID_FLAG,
        });
    }
    tlbi_sync_s1ish(m);
}

/// flush_tlb_page_nosync: DSB ISHST; TLBI VALE1IS (+user).
pub fn flush_tlb_page_nosync(m: &mut Machine, asid: Asid, va: u64) {
    m.dsb_ishst();
    m.tlbi(Tlbi::Vale1is { asid, va: VirtAddr(va) });
    if kpti(m) {
        m.tlbi(Tlbi::Vale1is {
            asid: asid | USER_ASID_FLAG,
            va: VirtAddr(va),
        });
    }
}

/// flush_tlb_page: the nosync form followed by DSB ISH.
pub fn flush_tlb_page(m: &mut Machine, asid: Asid, va: u64) {
    flush_tlb_page_nosync(m, asid, va);
    tlbi_sync_s1ish(m);
}

/// flush_tlb_all: DSB ISHST; TLBI VMALLE1IS; DSB ISH; ISB.
pub fn flush_tlb_all(m: &mut Machine) {
    m.dsb_ishst();
    m.tlbi(Tlbi::Vmalle1is);
    tlbi_sync_s1ish(m);
    m.isb();
}

/// flush_tlb_kernel_range: per-page TLBI VAALE1IS, or everything past MAX_DVM_OPS.
pub fn flush_tlb_kernel_range(m: &mut Machine, start: u64, end: u64) {
    let ps = m.granule().page_size();
    if end - start > max_dvm_ops(m) * ps {
        flush_tlb_all(m);
        return;
    }
    m.dsb_ishst();
    let mut va = start & !(ps - 1);
    while va < end {
        m.tlbi(Tlbi::Vaale1is { va: VirtAddr(va) });
        va += ps;
    }
    tlbi_sync_s1ish(m);
    m.isb();
}

/// arch_tlbbatch_add_pending (seed 001): issue the TLBIs of an unmapped range without
/// waiting; arch_tlbbatch_flush's DSB completes them all at once.
pub fn arch_tlbbatch_add_pending(m: &mut Machine, asid: Asid, start: u64, end: u64) {
    let ps = m.granule().page_size();
    flush_tlb_range_nosync(m, asid, start, end, ps, true);
}

/// arch_tlbbatch_flush: the TLBIs were issued as they were queued; one DSB ISH waits
/// for every one of them.
pub fn arch_tlbbatch_flush(m: &mut Machine) {
    tlbi_sync_s1ish(m);
}

/// __tlbi_sync_s1ish: the DSB ISH that completes broadcast TLBIs, and on a CPU with
/// a "Broken broadcast TLBI completion" erratum (ARM64_WORKAROUND_REPEAT_TLBI_SYNC,
/// chosen by MIDR) one more TLBI VALE1IS of address 0 in ASID 0, and DSB ISH.
pub fn tlbi_sync_s1ish(m: &mut Machine) {
    m.dsb_ish();
    if super::cpufeature::repeat_tlbi_sync(&m.cfg.features) {
        m.tlbi(Tlbi::Vale1is {
            asid: 0,
            va: VirtAddr(0),
        });
        m.dsb_ish();
    }
}

/// arch_flush_tlb_batched_pending: flush_tlb_mm. The TLBIs pending for this mm may
/// have been issued by another CPU, whose completion a DSB here does not guarantee, so
/// the whole ASID is invalidated (commit 4b634918384c "arm64/mm: Close theoretical
/// race where stale TLB entry remains valid", v6.16, backported to stable; it replaced
/// the dsb(ish) that seed 001's series, 43b3dfdd0455, introduced).
pub fn arch_flush_tlb_batched_pending(m: &mut Machine, asid: Asid) {
    flush_tlb_mm(m, asid);
}

/// pte_needs_flush: the generic one (6.18) flushes every change of a present pte;
/// arm64's own (`elide`, 6.19, c320dbb7c80d "arm64/mm: Elide TLB flush in certain pte
/// protection transitions") only a valid pte whose hardware-visible bits changed.
pub fn pte_needs_flush(old: Pte, new: Pte, elide: bool) -> bool {
    const SWBITS: u64 = (1 << 63) | (0xf << 55);
    !elide || (old.pte_valid() && (old.raw() ^ new.raw()) & !SWBITS != 0)
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::hw::{Event, MachineConfig};

    fn covered(plan: &[(u64, Option<(u8, u8)>)]) -> u64 {
        plan.iter()
            .map(|(_, r)| r.map_or(1, |(s, n)| tlbi_range_pages(s, n)))
            .sum()
    }

    /// pte_modify keeps PTE_CONT, as the kernel's does (the bit is outside its mask),
    /// so a contpte pte given its own protections again needs no flush when elided.
    #[test]
    fn an_unchanged_contpte_pte_needs_a_flush_only_without_elision() {
        use crate::arch::arm64::pgtable::{PgProt, Pte};
        use crate::hw::{Granule, Pfn};
        let old = Pte::pfn_pte(Pfn(16), PgProt::READONLY, Granule::K4)
            .pte_mkyoung()
            .pte_mkcont();
        let new = old.pte_modify(PgProt::READONLY);
        assert!(new.pte_valid_cont());
        assert!(!pte_needs_flush(old, new, true));
        assert!(pte_needs_flush(old, new, false));
        assert!(pte_needs_flush(old, old.pte_modify(PgProt::NONE), true));
    }

    #[test]
    fn range_decomposition_covers_exactly_the_pages() {
        for pages in [
            1u64,
            2,
            3,
            16,
            17,
            63,
            64,
            65,
            512,
            513,
            2047,
            262_144,
            MAX_TLBI_RANGE_PAGES,
        ] {
            let plan = range_op_plan(pages, 1, true, 0, 1);
            assert_eq!(covered(&plan), pages, "pages={pages}");
            // Contiguous and ascending.
            let mut at = 0;
            for (off, r) in &plan {
                assert_eq!(*off, at);
                at += r.map_or(1, |(s, n)| tlbi_range_pages(s, n));
            }
            // At most one op per scale plus one single op for an odd page.
            assert!(plan.len() <= 5, "pages={pages}: {plan:?}");
        }
    }

    /// With LPA2 the guest's 6.12 kernel flushed 20 pages from 0x35000 as 11 single
    /// ops up to the 64K boundary, one 8-page range and one last single page.
    #[test]
    fn lpa2_ranges_start_on_64k_boundaries() {
        let plan = range_op_plan(20, 1, true, 0x35, 16);
        assert_eq!(plan.iter().filter(|(_, r)| r.is_none()).count(), 12, "{plan:?}");
        assert_eq!(plan.iter().filter(|(_, r)| r.is_some()).count(), 1, "{plan:?}");
        assert_eq!(covered(&plan), 20);
        assert_eq!(
            range_op_plan(20, 1, true, 0x35, 1).len(),
            1,
            "without LPA2: one range op"
        );
    }

    #[test]
    fn range_decomposition_examples() {
        assert_eq!(range_op_plan(16, 1, true, 0, 1), vec![(0, Some((0, 7)))]);
        assert_eq!(range_op_plan(17, 1, true, 0, 1), vec![(0, Some((0, 7))), (16, None)]);
        // 512 pages: scale 1 covers 64 per num step -> num 7.
        assert_eq!(range_op_plan(512, 1, true, 0, 1), vec![(0, Some((1, 7)))]);
        assert_eq!(range_op_plan(3, 1, false, 0, 1).len(), 3);
    }

    #[test]
    fn flush_range_without_tlbirange_uses_one_op_per_page() {
        let mut m = Machine::new(MachineConfig::default());
        __flush_tlb_range(&mut m, 5, 0x10000, 0x20000, 4096, true);
        assert_eq!(m.ev.get(Event::TlbiVale1is), 16);
        assert_eq!(m.ev.get(Event::DsbIshst), 1);
        assert_eq!(m.ev.get(Event::DsbIsh), 1);
    }

    #[test]
    fn kpti_doubles_user_tlbis() {
        let mut cfg = MachineConfig::default();
        cfg.features.kpti = true;
        let mut m = Machine::new(cfg);
        __flush_tlb_range(&mut m, 5, 0x10000, 0x20000, 4096, true);
        assert_eq!(m.ev.get(Event::TlbiVale1is), 32);
        flush_tlb_mm(&mut m, 5);
        assert_eq!(m.ev.get(Event::TlbiAside1is), 2);
    }

    /// On a CPU with erratum 4118414 (Neoverse N1) every completed broadcast flush
    /// ends with one more TLBI VALE1IS and DSB ISH, once per flush, not per TLBI;
    /// the local flush of a write fault is left alone.
    #[test]
    fn a_repeat_tlbi_cpu_repeats_each_completion_once() {
        let run = |midr: u32| {
            let mut cfg = MachineConfig::default();
            cfg.features.midr = midr;
            let mut m = Machine::new(cfg);
            __flush_tlb_range(&mut m, 5, 0x10000, 0x20000, 4096, true);
            flush_tlb_mm(&mut m, 5);
            flush_tlb_range_local(&mut m, 0, 5, 0x10000, 0x11000, 4096);
            [Event::TlbiVale1is, Event::DsbIsh, Event::TlbiAside1is, Event::DsbNsh].map(|e| m.ev.get(e))
        };
        assert_eq!(run(0), [16, 2, 1, 1]);
        let n1 = crate::hw::cpu::by_name("neoverse-n1").unwrap().midr;
        assert_eq!(run(n1), [18, 4, 1, 1]);
    }

    #[test]
    fn tlbirange_collapses_a_block_to_one_op() {
        let mut cfg = MachineConfig::default();
        cfg.features.tlbi_range = true;
        let mut m = Machine::new(cfg);
        __flush_tlb_range(&mut m, 5, 0x10000, 0x20000, 4096, true);
        assert_eq!(m.ev.get(Event::TlbiRvale1is), 1);
        assert_eq!(m.ev.get(Event::TlbiTotal), 1);
    }

    #[test]
    fn large_ranges_fall_back_to_flush_tlb_mm() {
        let mut m = Machine::new(MachineConfig::default());
        __flush_tlb_range(&mut m, 5, 0, 512 * 4096, 4096, true);
        assert_eq!(m.ev.get(Event::TlbiAside1is), 1);
        assert_eq!(m.ev.get(Event::TlbiVale1is), 0);
        let mut m = Machine::new(MachineConfig::default());
        __flush_tlb_range(&mut m, 5, 0, 511 * 4096, 4096, true);
        assert_eq!(m.ev.get(Event::TlbiVale1is), 511);
    }

    #[test]
    fn flush_tlb_batched_pending_invalidates_the_whole_asid() {
        let mut m = Machine::new(MachineConfig::default());
        arch_flush_tlb_batched_pending(&mut m, 5);
        assert_eq!(m.ev.get(Event::DsbIshst), 1);
        assert_eq!(m.ev.get(Event::TlbiAside1is), 1);
        assert_eq!(m.ev.get(Event::DsbIsh), 1);
    }

    #[test]
    fn kernel_range_flush_has_isb() {
        let mut m = Machine::new(MachineConfig::default());
        flush_tlb_kernel_range(&mut m, 0xffff_0000_0000_0000, 0xffff_0000_0000_1000);
        assert_eq!(m.ev.get(Event::TlbiVaale1is), 1);
        assert_eq!(m.ev.get(Event::Isb), 1);
    }
}
