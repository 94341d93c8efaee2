//! The `--kernel` presets on the model alone: each 6.1 behaviour the 6.1 guest showed
//! (tests/qemu_kernels.rs checks them against the guest itself), as counts that differ
//! from 6.12's for the same workload.

use foliolab::report::Report;
use foliolab::sim::kernels::{with_preset, Release, Scope};
use foliolab::sim::{self, Variants};
use foliolab::workload::parse_file;

fn run(kernel: Release, path: &str) -> Report {
    // The QEMU guests' machine: range TLBIs.
    let sets = with_preset(kernel, Scope::Run, &["tlbi-range=on".into()]);
    sim::run(&parse_file(path).unwrap(), &Variants::from_sets(&sets).unwrap()).unwrap()
}

/// `path` under the 6.1 preset and under 6.12's.
fn both(path: &str) -> (Report, Report) {
    (run(OLD, path), run(NEW, path))
}

fn count(r: &Report, key: &str) -> i64 {
    r.counters.get(key).copied().unwrap_or(0)
}

fn in_phase(r: &Report, label: &str, key: &str) -> i64 {
    let p = r.phases.iter().find(|p| p.label == label).expect("the phase");
    p.counters.get(key).copied().unwrap_or(0)
}

const OLD: Release = Release(6, 1);
const NEW: Release = Release(6, 12);

#[test]
fn mprotect_leaves_a_thp_read_only_before_6_2_so_writes_fault() {
    let (old, new) = both("tests/validation/mprotect_whole_pmd.wl");
    assert_eq!(
        (count(&old, "proc.main.minflt"), count(&new, "proc.main.minflt")),
        (4, 2)
    );
    // Each reuse fault invalidates the stale read-only entry.
    assert_eq!(count(&old, "arch.tlbi.vale1is") - count(&new, "arch.tlbi.vale1is"), 2);
}

#[test]
fn pageout_of_a_young_thp_invalidates_it_and_a_freezing_split_queues_it_before_6_9() {
    let (old, new) = both("tests/validation/pageout_pmd.wl");
    assert_eq!(count(&old, "arch.tlbi.rvae1is"), 4);
    assert_eq!(count(&new, "arch.tlbi.rvae1is"), 2);
    assert_eq!(count(&old, "vmstat.thp_deferred_split_page"), 2);
    assert_eq!(count(&new, "vmstat.thp_deferred_split_page"), 0);
}

#[test]
fn a_split_keeps_zero_filled_pages_before_6_12() {
    let (old, new) = both("tests/validation/free_split_zero_pages.wl");
    assert_eq!(count(&old, "proc.main.minflt"), 1);
    assert!(count(&new, "proc.main.minflt") > 1);
    let zero = |r: &Report| {
        r.layout["main/buf"]
            .iter()
            .any(|run| format!("{:?}", run.kind).contains("Zero"))
    };
    assert!(!zero(&old) && zero(&new));
}

#[test]
fn reclaim_waits_per_page_before_6_6() {
    let w = "workloads/kernels/seed001-pageout-order0.wl";
    let (old, new) = both(w);
    let pages = in_phase(&old, "pageout", "vmstat.pglazyfreed");
    assert_eq!(pages, 4096);
    assert_eq!(in_phase(&old, "pageout", "arch.dsb.ish"), pages);
    assert_eq!(in_phase(&old, "pageout", "arch.tlbi.vale1is"), pages);
    assert!(in_phase(&new, "pageout", "arch.dsb.ish") * 20 < pages);
}

#[test]
fn a_range_flush_that_falls_back_to_the_whole_asid_waits_once_before_6_9() {
    let w = "workloads/kernels/seed000-thp-munmap.wl";
    let (old, split) = (
        run(OLD, w),
        sim::run(
            &parse_file(w).unwrap(),
            &Variants::from_sets(&with_preset(
                OLD,
                Scope::Run,
                &["tlbi-range=on".into(), "flush-range-nosync=split".into()],
            ))
            .unwrap(),
        )
        .unwrap(),
    );
    assert_eq!(count(&old, "arch.tlbi.aside1is"), 1);
    assert_eq!(count(&split, "arch.dsb.ish") - count(&old, "arch.dsb.ish"), 1);
}

#[test]
fn before_6_8_rmap_removal_is_a_call_per_page() {
    let w = "workloads/kernels/seed000-thp-munmap.wl";
    let (old, new) = both(w);
    // Four pte-mapped THPs of 511 pages each, munmapped: as the guests count them.
    assert_eq!(in_phase(&old, "munmap", "kernel.page_remove_rmap"), 2044);
    assert_eq!(in_phase(&old, "munmap", "kernel.folio_remove_rmap_ptes"), 0);
    assert_eq!(in_phase(&new, "munmap", "kernel.folio_remove_rmap_ptes"), 8);
    assert_eq!(in_phase(&new, "munmap", "kernel.page_remove_rmap"), 0);
}

/// swap-cache: every suite workload that swaps, under each preset, with the swap cache
/// as an XArray and as the swap table. The two differ only in the structure's own
/// work (its nodes and its lock): every count a kernel reports, and the cache's
/// lookups, additions, deletions and slot entries, are the same.
#[test]
fn the_swap_table_changes_only_the_swap_caches_own_work() {
    let own = [
        "kernel.swap_cache.xa_nodes",
        "kernel.swap_cache.xa_lock",
        "kernel.swap_cache.cluster_lock",
    ];
    let mut swapping = 0;
    let mut dir: Vec<_> = std::fs::read_dir("tests/validation")
        .unwrap()
        .map(|e| e.unwrap().path())
        .collect();
    dir.sort();
    for path in dir.iter().filter(|p| p.extension().is_some_and(|e| e == "wl")) {
        let text = std::fs::read_to_string(path).unwrap();
        if !text.lines().any(|l| l.starts_with("swapon")) {
            continue;
        }
        swapping += 1;
        let w = parse_file(path.to_str().unwrap()).unwrap();
        for kernel in [Release(6, 12), Release(6, 18), Release(7, 3)] {
            let report = |cache: &str| {
                let sets = with_preset(
                    kernel,
                    Scope::Run,
                    &["tlbi-range=on".into(), format!("swap-cache={cache}")],
                );
                sim::run(&w, &Variants::from_sets(&sets).unwrap()).unwrap()
            };
            let (xa, table) = (report("xarray"), report("table"));
            let at = format!("{} on {kernel}", path.display());
            let lock = |r: &Report| count(r, "kernel.swap_cache.xa_lock") + count(r, "kernel.swap_cache.cluster_lock");
            assert_eq!(lock(&xa), lock(&table), "{at}: a lock per store either way");
            assert_eq!(count(&table, "kernel.swap_cache.xa_nodes"), 0, "{at}");
            assert!(count(&xa, "kernel.swap_cache.xa_nodes") > 0, "{at}: no XArray walk");
            let rest = |r: &Report| {
                let mut c = r.counters.clone();
                c.retain(|k, _| !own.contains(&k.as_str()));
                c
            };
            assert_eq!(rest(&xa), rest(&table), "{at}");
        }
    }
    assert!(swapping >= 20, "only {swapping} swap workloads found");
}

/// The swap cache's calls on `swap_fork_child`, phase by phase (start, child, parent),
/// as the guests' function entries counted them: on 6.12 every lookup is a
/// `__filemap_get_folio` (0, 69, 32), additions `add_to_swap_cache` (32, 32, 0),
/// deletions `__delete_from_swap_cache` (32, 0, 0); on 7.3 lookups are
/// `swap_cache_get_folio` (0, 64, 32: swapin_sync looks again after do_swap_page's
/// miss) and deletions `__swap_cache_del_folio` (32, 0, 32).
#[test]
fn the_swap_caches_calls_are_the_guests_phase_by_phase() {
    let w = "tests/validation/swap_fork_child.wl";
    let phases = |r: &Report, key: &str| ["start", "child", "parent"].map(|p| in_phase(r, p, key));
    let old = run(Release(6, 12), w);
    assert_eq!(phases(&old, "kernel.swap_cache_get_folio"), [0, 69, 32]);
    assert_eq!(phases(&old, "kernel.swap_cache_add_folio"), [32, 32, 0]);
    assert_eq!(phases(&old, "kernel.swap_cache_del_folio"), [32, 0, 0]);
    let new = run(Release(7, 3), w);
    assert_eq!(phases(&new, "kernel.swap_cache_get_folio"), [0, 64, 32]);
    assert_eq!(phases(&new, "kernel.swap_cache_del_folio"), [32, 0, 32]);
}
