//! Kernel presets against real kernels: Debian's 6.1 arm64 kernel under QEMU runs the
//! validation workloads that apply to it (no mTHP knobs) and must agree with the
//! model's `--kernel 6.1` preset on every counter it measures; and `validate --seeds`
//! shows each seed's before (6.1) and after (6.12) on the real kernels, every count
//! equal to the model's presets (seed 003's map_mem at boot included). Skipped when scripts/setup-qemu has not been run.

use foliolab::cmd::seeds::{self, Seeds};
use foliolab::cmd::validate::{compare, table, target_variants};
use foliolab::native::qemu::{self, Target};
use foliolab::sim;
use foliolab::workload::parse_file;

/// Suite workloads that apply to 6.1 (all of them agree with its preset): THP faults,
/// splits, collapse, the huge zero page, fork of a PMD THP, MADV_FREE and reclaim,
/// mprotect, order-0 zap, order-0 swap on zram with the swap cache and readahead
/// after fork (6.1 maps a read swap-in read-only: `swapin-write`).
const AGREE_61: &[&str] = &[
    "tests/validation/collapse_base_pages.wl",
    "tests/validation/collapse_zero_and_shared.wl",
    "tests/validation/fork_pmd_thp.wl",
    "tests/validation/free_pageout_pmd.wl",
    "tests/validation/huge_zero_then_write.wl",
    "tests/validation/pmd_dontneed_half.wl",
    "tests/validation/pmd_partial_munmap.wl",
    "tests/validation/shrink_pmd_munmap.wl",
    "workloads/seed000-munmap-order0.wl",
    "tests/validation/swap_order0.wl",
    "tests/validation/swap_free.wl",
    "tests/validation/swap_mprotect.wl",
    "tests/validation/swap_mlock.wl",
    "tests/validation/swap_cache_write_after_read.wl",
    "tests/validation/swap_fork_both.wl",
    "tests/validation/swap_fork_child.wl",
    "tests/validation/swap_fork_descending.wl",
    "tests/validation/swap_fork_free_cached.wl",
    "tests/validation/swap_fork_pageout_again.wl",
    "tests/validation/swap_fork_stride.wl",
    "tests/validation/swap_full_reuse.wl",
    "tests/validation/collapse_swapped.wl",
    "tests/validation/collapse_swapped_shared.wl",
    // Each of these needs one of the 6.1 variants (`foliolab kernels`):
    "tests/validation/free_split_zero_pages.wl",
    "tests/validation/free_pmd_partial.wl",
    "tests/validation/free_write_pageout_pmd.wl",
    "tests/validation/mprotect_whole_pmd.wl",
    "tests/validation/pageout_order0.wl",
    "tests/validation/pageout_pmd.wl",
    "tests/validation/pageout_pmd_partial.wl",
    "tests/validation/shrink_pmd_sparse.wl",
];

#[test]
fn where_6_1_behaves_as_its_preset_every_counter_agrees() {
    if let Some(why) = qemu::missing(Target::QemuArm64_61) {
        println!("SKIP where_6_1_behaves_as_its_preset_every_counter_agrees: {why}");
        return;
    }
    let ws: Vec<_> = AGREE_61.iter().map(|p| parse_file(p).unwrap()).collect();
    let v = target_variants(Target::QemuArm64_61, None, &[]).unwrap();
    assert_eq!(v.get("zap"), "per-pte");
    let batch = qemu::run_batch(Target::QemuArm64_61, &ws).unwrap();
    for (w, g) in ws.iter().zip(batch.reports) {
        let m = qemu::as_guest_measures(sim::run(w, &v).unwrap(), w, &v).unwrap();
        let c = compare(&m, &g.unwrap_or_else(|e| panic!("{}: {e}", w.path)));
        assert!(c.ok(), "{}", table(&c));
        // The 6.12-only functions are left out, not compared as zeros.
        assert!(
            c.not_compared.contains_key("kernel.folio_remove_rmap_ptes"),
            "{}",
            table(&c)
        );
    }
    // With 6.12's zero-page remap on split, the model's layout no longer matches 6.1's.
    let split = parse_file("tests/validation/free_split_zero_pages.wl").unwrap();
    let v612 = target_variants(Target::QemuArm64_61, None, &["split-zeropage=on".into()]).unwrap();
    let batch = qemu::run_batch(Target::QemuArm64_61, std::slice::from_ref(&split)).unwrap();
    let m = qemu::as_guest_measures(sim::run(&split, &v612).unwrap(), &split, &v612).unwrap();
    let c = compare(&m, batch.reports[0].as_ref().unwrap());
    assert_eq!(c.layout_mismatches.len(), 1, "{}", table(&c));
}

fn cells<'s>(s: &'s Seeds, experiment: &str, counter: &str) -> &'s [seeds::Cell] {
    &s.rows
        .iter()
        .find(|r| r.experiment.starts_with(experiment) && r.counter == counter)
        .unwrap_or_else(|| panic!("no row {experiment} {counter}"))
        .cells
}

#[test]
fn each_seeds_before_and_after_on_6_1_and_6_12() {
    if let Some(why) = seeds::missing() {
        println!("SKIP each_seeds_before_and_after_on_6_1_and_6_12: {why}");
        return;
    }
    let s = seeds::run().unwrap();
    let text = seeds::text(&s);
    // Every count of both kernels equals its preset's, every workload agrees.
    for r in &s.rows {
        for c in &r.cells {
            assert_eq!(
                c.guest, c.model,
                "{} {} on {}\n{text}",
                r.experiment, r.counter, c.kernel
            );
        }
    }
    assert!(s.ok(), "{text}");
    // Seed 001: 6.1 flushes and waits per page reclaimed; 6.12 waits once per batch.
    let [old, new] = cells(&s, "seed001-pageout-order0", "arch.dsb.ish") else {
        panic!()
    };
    let pages = cells(&s, "seed001-pageout-order0", "vmstat.pglazyfreed")[0]
        .guest
        .unwrap();
    assert_eq!(pages, 4096, "{text}");
    assert_eq!(old.guest, Some(pages), "{text}");
    assert!(new.guest.unwrap() * 20 < pages, "{text}");
    // Seed 002: 64K folios take a sixteenth of the faults, on 6.12; 6.1 has no knob.
    let faults = cells(&s, "seed002-fault-64k", "proc.main.minflt");
    assert_eq!((faults[0].guest, faults[1].guest), (None, Some(256)), "{text}");
    // Seed 003: the guest's map_mem, 6.1 against 6.12: at least 16 TLBIs per table
    // before the fixmap series, about one after.
    let [old, new] = cells(&s, "boot 2G", "arch.tlbi.total") else {
        panic!()
    };
    assert!(old.guest.unwrap() > 16 * new.guest.unwrap(), "{text}");
    assert_eq!((old.guest, new.guest), (Some(33534), Some(1021)), "{text}");
    // Seed 004 has no Debian kernel with the change: 6.12 is the before side.
    assert!(cells(&s, "seed004-mlock", "kernel.contpte_ptep_get")[1].guest.unwrap() > 0);
}

/// Suite workloads on Debian's 7.3.4 that show what changed since 6.18: mprotect of
/// PROT_NONE ptes and pmds back to rw (`prot-flush`: an invalid-to-valid change needs
/// no flush), and write faults that reuse a page or a PMD THP after fork or make a
/// clean pte dirty (`wp-flush`: the stale read-only entry is flushed on the faulting
/// CPU alone; `contpte-access`: no gathered contpte_ptep_get); with controls that 6.18 and 7.3 do alike (mTHP faults, partial
/// MADV_DONTNEED one page at a time, pageout, contpte blocks unfolded and refolded by
/// mprotect: QEMU's CPU has no BBML2, so each contpte_convert keeps its TLBI); and
/// swap-ins on zram of slots a fork shares, which 7.0+ reads through the swap cache
/// without readahead, a 64K folio whole (`sync-swapin`).
const AGREE_73: &[&str] = &[
    "tests/validation/contpte_refold_64k.wl",
    "tests/validation/mprotect_none_rw.wl",
    "tests/validation/mprotect_whole_pmd.wl",
    "tests/validation/fork_cow.wl",
    "tests/validation/fork_pmd_thp.wl",
    "tests/validation/dontneed_step_64k.wl",
    "tests/validation/mthp_64k_aligned.wl",
    "tests/validation/pageout_64k.wl",
    "tests/validation/swap_fork_64k.wl",
    "tests/validation/swap_fork_64k_cached.wl",
];

/// The 16K-page guest's share of them (the others' ranges are not in 16K units).
const AGREE_73_16K: &[&str] = &[
    "workloads/contpte-refold-16k.wl",
    "tests/validation/mprotect_whole_pmd.wl",
    "tests/validation/fork_cow.wl",
    "tests/validation/mthp_64k_aligned.wl",
    "tests/qemu/16k/mprotect_none_rw.wl",
    "tests/validation/swap_fork_64k.wl",
];

#[test]
fn where_7_3_behaves_as_its_preset_every_counter_agrees_and_6_18_does_not() {
    use foliolab::sim::kernels::Release;
    for (target, paths) in [
        (Target::QemuArm64_73, AGREE_73),
        (Target::QemuArm64_73_16k, AGREE_73_16K),
    ] {
        if let Some(why) = qemu::missing(target) {
            println!("SKIP where_7_3_behaves_as_its_preset_every_counter_agrees_and_6_18_does_not ({target:?}): {why}");
            continue;
        }
        let ws: Vec<_> = paths.iter().map(|p| parse_file(p).unwrap()).collect();
        let v = target_variants(target, None, &[]).unwrap();
        assert_eq!(
            (v.get("wp-flush"), v.get("prot-flush"), v.get("contpte-access")),
            ("local", "elide", "raw")
        );
        let v618 = target_variants(target, Some(Release(6, 18)), &[]).unwrap();
        let batch = qemu::run_batch(target, &ws).unwrap();
        let mut told_apart = Vec::new();
        for (w, g) in ws.iter().zip(batch.reports) {
            let g = g.unwrap_or_else(|e| panic!("{}: {e}", w.path));
            let m = qemu::as_guest_measures(sim::run(w, &v).unwrap(), w, &v).unwrap();
            let c = compare(&m, &g);
            assert!(c.ok(), "{target:?}: {}", table(&c));
            let old = qemu::as_guest_measures(sim::run(w, &v618).unwrap(), w, &v618).unwrap();
            if !compare(&old, &g).ok() {
                told_apart.push(w.path.clone());
            }
        }
        // The 6.18 preset fails where a 6.19 or 7.0 change shows, and only there.
        for p in [
            "mprotect_whole_pmd.wl",
            "fork_cow.wl",
            "mprotect_none_rw.wl",
            "swap_fork_64k.wl",
        ] {
            assert!(
                told_apart.iter().any(|t| t.ends_with(p)),
                "{target:?}: 6.18 agrees on {p}"
            );
        }
        assert!(
            !told_apart.iter().any(|t| t.ends_with("mthp_64k_aligned.wl")),
            "{target:?}: {told_apart:?}"
        );
    }
}

/// A workload whose result line is long: 600 ops, each with a delta per counter.
const LONG_RESULT: &str = "mmap buf 64K\nrepeat 300\ntouch buf\nmadvise buf 0 64K dontneed\nend\n";

/// The last workload's result reaches the host however long it is: a console write
/// returns once the guest's tty holds the bytes, and powering off discards what the
/// UART has not sent yet, so the runner drains the console first. Without that, a
/// batch ending in such a line ended with QEMU's status 0, the line cut short by
/// "reboot: Power down" and no END line (7.3 with 16K pages, whose tty buffer is a
/// 16K page).
#[test]
fn a_long_last_result_reaches_the_host_before_the_guest_powers_off() {
    let w = foliolab::workload::parse_str("long_result.wl", LONG_RESULT).unwrap();
    for target in [Target::QemuArm64_73_16k, Target::QemuArm64_73] {
        if let Some(why) = qemu::missing(target) {
            println!("SKIP a_long_last_result_reaches_the_host_before_the_guest_powers_off ({target:?}): {why}");
            continue;
        }
        let batch = qemu::run_batch(target, std::slice::from_ref(&w)).unwrap_or_else(|e| panic!("{target:?}: {e}"));
        let r = batch.reports[0].as_ref().unwrap();
        let pages = (64 << 10) / target.granule().page_size() as i64;
        assert_eq!(r.counters["proc.main.minflt"], 300 * pages, "{target:?}");
    }
}
