//! `--target qemu-arm64` and `qemu-arm64-16k`: batched boots of Linux 6.12 under QEMU
//! run validation workloads. Where 6.12 and the model (6.18) behave alike, every
//! counter the guest measures (faults, layouts, vmstat and mTHP counters, TLBI by kind,
//! DSB, ISB, kernel-function entries) must equal the model's; the model broken by one
//! fault must fail; and the counts are checked against what this kernel is known to
//! do. Skipped when scripts/setup-qemu has not been run (tests install nothing).

use foliolab::cmd::validate::{compare, table, target_variants};
use foliolab::native::qemu::{self, Target};
use foliolab::report::Report;
use foliolab::sim::kernels::{with_preset, Release, Scope};
use foliolab::sim::{self, Variants};
use foliolab::workload::parse_file;

const WORKLOADS: &[&str] = &[
    "tests/qemu/munmap_64m_64k.wl",
    "tests/validation/mthp_64k_aligned.wl",
    "tests/validation/fork_cow.wl",
];

/// The model as these tests were checked with: 6.18's preset (the default is newer).
fn model_618() -> Variants {
    Variants::from_sets(&with_preset(Release(6, 18), Scope::Run, &[])).unwrap()
}

fn phase(r: &Report, label: &str, key: &str) -> i64 {
    let p = r.phases.iter().find(|p| p.label == label).expect("the phase");
    p.counters
        .get(key)
        .copied()
        .unwrap_or_else(|| panic!("{label}: no {key}"))
}

#[test]
fn qemu_arm64_guest_agrees_with_the_model_and_the_measured_counts() {
    if let Some(why) = qemu::missing(Target::QemuArm64) {
        println!("SKIP qemu_arm64_guest_agrees_with_the_model_and_the_measured_counts: {why}");
        return;
    }
    let ws: Vec<_> = WORKLOADS.iter().map(|p| parse_file(p).unwrap()).collect();
    let batch = qemu::run_batch(Target::QemuArm64, &ws).unwrap();
    let guest: Vec<Report> = batch.reports.into_iter().map(|r| r.unwrap()).collect();
    for (w, g) in ws.iter().zip(&guest) {
        let model = sim::run(w, &model_618()).unwrap();
        assert!(g.diagnostics.is_empty(), "{}: {:?}", w.path, g.diagnostics);
        assert_eq!(g.source, "qemu-arm64");
        for (k, v) in model.counters.iter().filter(|(k, _)| k.starts_with("proc.")) {
            assert_eq!(g.counters.get(k), Some(v), "{}: {k}", w.path);
        }
        // 6.12 copies a written large anon folio that fork shared to order-0 pages
        // even after the child is gone (reusing it exclusively came later), so
        // fork_cow's first 64K is base pages there; the model follows newer kernels.
        if w.path.ends_with("fork_cow.wl") {
            let runs = serde_json::to_string(&g.layout["main/buf"]).unwrap();
            assert_eq!(runs, "[[0,16,0],[16,240,4]]");
        } else {
            assert_eq!(g.layout, model.layout, "{}", w.path);
        }
    }
    // The measurement: 64 MiB of 64K folios, a write per page, then munmap.
    let r = &guest[0];
    assert_eq!(phase(r, "faults", "proc.main.minflt"), 1024);
    assert_eq!(phase(r, "faults", "kernel.contpte_set_ptes"), 1024);
    assert_eq!(phase(r, "faults", "arch.tlbi.total"), 0);
    // One DSB ISHST per page table installed: 32 PTE tables (pmd_install), and the PMD
    // and PUD tables of the region's fresh 64 GiB slot (__pmd_alloc, __pud_alloc).
    assert_eq!(phase(r, "faults", "arch.dsb.ishst"), 34);
    // The model installs the same tables with the same barriers (set_pmd/set_pud of a
    // table descriptor: DSB ISHST + ISB).
    let model = sim::run(&ws[0], &model_618()).unwrap();
    for key in ["arch.dsb.ishst", "arch.isb"] {
        assert_eq!(phase(&model, "faults", key), phase(r, "faults", key), "{key}");
    }
    assert_eq!(phase(r, "munmap", "arch.tlbi.rvae1is"), 1);
    assert_eq!(phase(r, "munmap", "arch.tlbi.rvale1is"), 1);
    assert_eq!(phase(r, "munmap", "arch.tlbi.total"), 2);
    for f in [
        "contpte_clear_full_ptes",
        "contpte_try_unfold_partial",
        "folio_remove_rmap_ptes",
    ] {
        assert_eq!(phase(r, "munmap", &format!("kernel.{f}")), 1024, "{f}");
    }
    // fork_cow's child exits in "child-writes": its window less its twin's. A twin
    // that held pipes the worker does not would release them at its exit, and those
    // functions would go negative (-376 in __fput before the twin closed them first).
    let exits = &guest[2]
        .phases
        .iter()
        .find(|p| p.label == "child-writes")
        .unwrap()
        .counters;
    for (f, n) in insns(exits, &["__fput", "pipe_release", "free_pipe_info", "evict"]) {
        assert!(
            n >= 0,
            "kernel.insns.{f} = {n}: the twin tore down files the worker did not"
        );
    }
}

#[test]
fn a_missing_setup_is_exit_2_naming_the_script() {
    let out = std::process::Command::new(env!("CARGO_BIN_EXE_foliolab"))
        .args([
            "native",
            "--target",
            "qemu-arm64-16k",
            "tests/validation/mthp_64k_aligned.wl",
        ])
        .env("FOLIOLAB_QEMU_CACHE", "/nonexistent/foliolab-qemu")
        .output()
        .unwrap();
    assert_eq!(out.status.code(), Some(2));
    let err = String::from_utf8_lossy(&out.stderr);
    assert!(err.contains("scripts/setup-qemu"), "{err}");
}

/// Workloads on which the model, with the target's variants (Linux 6.12's behaviour
/// where it differs from 6.18's), does what the guest does, op for op: an mTHP fault
/// path, fork with copy-on-write and its runner twins, 6.12's copy of a formerly
/// shared 64K folio, MADV_DONTNEED of partial blocks (LPA2 range TLBIs), a freed pud
/// table (set_p4d's barriers), MADV_PAGEOUT of order-0 and 64K folios (split,
/// deferred flush), a PMD split, 6.12's per-pte mprotect, and a region hole.
const AGREE_4K: &[&str] = &[
    "tests/validation/mthp_64k_aligned.wl",
    "tests/validation/fork_both_live.wl",
    "tests/validation/fork_read_zero.wl",
    "tests/validation/fork_cow.wl",
    "tests/validation/mprotect_none_rw.wl",
    "tests/validation/mthp_64k_dontneed_alone.wl",
    "tests/validation/repeat_map_touch_unmap.wl",
    "tests/validation/pageout_order0.wl",
    "tests/validation/pageout_64k.wl",
    "tests/validation/pmd_dontneed_half.wl",
    "tests/validation/vma_edge_hole.wl",
];

/// The same with 16K pages (64K folios are order 2; no 64K contpte blocks), with
/// suite workloads adapted to the page size (`tests/qemu/16k/`).
const AGREE_16K: &[&str] = &[
    "tests/validation/mthp_64k_aligned.wl",
    "tests/validation/fork_both_live.wl",
    "tests/validation/fork_read_zero.wl",
    "tests/qemu/16k/exit_many.wl",
    "tests/qemu/16k/mprotect_none_rw.wl",
];

/// Boots `target` once for `paths`, and compares each with the model as validate does:
/// the target's variants, the per-mm work of forks and exits left out.
fn guest_against_model(target: Target, paths: &[&str], extra: &[&str]) -> Vec<foliolab::cmd::validate::Comparison> {
    let ws: Vec<_> = paths.iter().map(|p| parse_file(p).unwrap()).collect();
    let extra: Vec<String> = extra.iter().map(|s| s.to_string()).collect();
    let v = target_variants(target, None, &extra).unwrap();
    let batch = qemu::run_batch(target, &ws).unwrap();
    ws.iter()
        .zip(batch.reports)
        .map(|(w, g)| {
            let m = qemu::as_guest_measures(sim::run(w, &v).unwrap(), w, &v).unwrap();
            compare(&m, &g.unwrap_or_else(|e| panic!("{}: {e}", w.path)))
        })
        .collect()
}

#[test]
fn where_6_12_behaves_as_the_model_every_counter_agrees_4k() {
    if let Some(why) = qemu::missing(Target::QemuArm64) {
        println!("SKIP where_6_12_behaves_as_the_model_every_counter_agrees_4k: {why}");
        return;
    }
    let cs = guest_against_model(Target::QemuArm64, AGREE_4K, &[]);
    for c in &cs {
        assert!(c.ok(), "{}", table(c));
        let judged = c
            .rows
            .iter()
            .filter(|r| r.rule == foliolab::cmd::validate::Rule::Exact)
            .count();
        assert!(judged > 50, "{}: only {judged} counters judged exactly", c.workload);
        for key in ["arch.dsb.ish", "arch.dsb.ishst", "arch.isb", "kernel.handle_mm_fault"] {
            assert!(
                c.rows.iter().any(|r| r.counter == key),
                "{}: {key} not compared",
                c.workload
            );
        }
    }
}

/// The model with 6.18's copy-on-write (reusing a large folio the mm maps alone) is
/// told apart from 6.12 by the guest: the layout and the rmap calls differ.
#[test]
fn the_guest_tells_6_18_cow_reuse_from_6_12() {
    if let Some(why) = qemu::missing(Target::QemuArm64) {
        println!("SKIP the_guest_tells_6_18_cow_reuse_from_6_12: {why}");
        return;
    }
    let cs = guest_against_model(
        Target::QemuArm64,
        &["tests/validation/fork_cow.wl"],
        &["cow-reuse=large"],
    );
    let cow = &cs[0];
    assert!(!cow.ok(), "{}", table(cow));
    assert_eq!(cow.layout_mismatches.len(), 1, "{}", table(cow));
    assert!(
        cow.rows
            .iter()
            .any(|r| r.counter == "kernel.folio_remove_rmap_ptes" && !r.ok),
        "{}",
        table(cow)
    );
}

#[test]
fn where_6_12_behaves_as_the_model_every_counter_agrees_16k() {
    if let Some(why) = qemu::missing(Target::QemuArm64_16k) {
        println!("SKIP where_6_12_behaves_as_the_model_every_counter_agrees_16k: {why}");
        return;
    }
    for c in guest_against_model(Target::QemuArm64_16k, AGREE_16K, &[]) {
        assert!(c.ok(), "{}", table(&c));
    }
}

/// Swap on the guest's zram: order-0 and 64K swap-out and swap-in, MADV_FREE,
/// mprotect and mlock of swapped memory, a partial pageout of 64K folios, slots shared
/// by fork read through the swap cache with readahead, and MADV_COLLAPSE swapping in,
/// each agreeing with the model on every counter and the layout (with 16K pages a 64K
/// folio is split before swap-out: arm64 has THP_SWAP only with 4K pages).
const AGREE_SWAP_16K: &[&str] = &[
    "tests/validation/swap_order0.wl",
    "tests/validation/swap_64k.wl",
    "tests/validation/swap_free.wl",
    "tests/validation/swap_mprotect.wl",
    "tests/validation/swap_dontneed_partial.wl",
    "tests/validation/swap_mlock.wl",
    "tests/validation/swap_fork_child.wl",
    "tests/validation/swap_fork_both.wl",
    "tests/validation/swap_fork_64k.wl",
    "tests/validation/swap_fork_stride.wl",
    "tests/validation/swap_fork_pageout_again.wl",
    "tests/validation/collapse_swapped.wl",
    "tests/validation/collapse_swapped_64k.wl",
    "tests/validation/collapse_swapped_shared.wl",
];

/// With 4K pages, also those whose ranges are not in 16K units.
const AGREE_SWAP_4K_ONLY: &[&str] = &[
    "tests/validation/swap_cache_write_after_read.wl",
    "tests/validation/swap_fork_64k_cached.wl",
    "tests/validation/swap_fork_descending.wl",
    "tests/validation/swap_fork_free_cached.wl",
    "tests/validation/swap_full_reuse.wl",
];

#[test]
fn swap_on_zram_agrees_with_the_model_with_4k_and_16k_pages() {
    let all: Vec<&str> = AGREE_SWAP_16K.iter().chain(AGREE_SWAP_4K_ONLY).copied().collect();
    for (target, paths) in [(Target::QemuArm64, &all[..]), (Target::QemuArm64_16k, AGREE_SWAP_16K)] {
        if let Some(why) = qemu::missing(target) {
            println!("SKIP swap_on_zram_agrees_with_the_model_with_4k_and_16k_pages ({target:?}): {why}");
            continue;
        }
        for c in guest_against_model(target, paths, &[]) {
            assert!(c.ok(), "{target:?}: {}", table(&c));
            for key in ["vmstat.pswpout", "vmstat.pswpin", "vmstat.pgmajfault"] {
                assert!(
                    c.rows.iter().any(|r| r.counter == key),
                    "{}: {key} not compared",
                    c.workload
                );
            }
        }
    }
}

/// 6.18's swap allocator (a nonfull cluster before a free one) and its split (tail
/// pages queued in address order) give order-0 swap-out other slots than 6.12's: with
/// 16K pages, where a 64K folio is split before swap-out, 6.12 swaps the folios back
/// in whole and the model with 6.18's behaviour does not.
#[test]
fn the_16k_guest_tells_6_18_swap_slots_from_6_12() {
    if let Some(why) = qemu::missing(Target::QemuArm64_16k) {
        println!("SKIP the_16k_guest_tells_6_18_swap_slots_from_6_12: {why}");
        return;
    }
    let cs = guest_against_model(
        Target::QemuArm64_16k,
        &["tests/validation/swap_64k.wl"],
        &["swap-alloc=nonfull-first", "split-list=in-order"],
    );
    let c = &cs[0];
    assert!(!c.ok(), "{}", table(c));
    assert!(
        c.rows.iter().any(|r| r.counter == "vmstat.pgmajfault" && !r.ok),
        "{}",
        table(c)
    );
}

/// A model broken by one fault fails against the guest, on the per-process count and
/// the global one.
#[test]
fn a_model_one_fault_off_fails_against_the_guest() {
    if let Some(why) = qemu::missing(Target::QemuArm64) {
        println!("SKIP a_model_one_fault_off_fails_against_the_guest: {why}");
        return;
    }
    let cs = guest_against_model(
        Target::QemuArm64,
        &["tests/validation/mthp_64k_aligned.wl"],
        &["inject=extra-fault"],
    );
    let bad: Vec<&str> = cs[0]
        .rows
        .iter()
        .filter(|r| !r.ok)
        .map(|r| r.counter.as_str())
        .collect();
    assert!(
        bad.contains(&"proc.main.minflt") && bad.contains(&"vmstat.pgfault"),
        "{}",
        table(&cs[0])
    );
}

/// Migration to node 1 of a two-node guest: 64 MiB of order-0 pages (one DSB per
/// batch of 512), of 64K folios (each in its own move_pages batch, its contpte block
/// unfolded and refolded) and PMD-mapped THPs, one split first: every counter agrees,
/// the migration ones included.
#[test]
fn migration_between_two_guest_nodes_agrees_with_the_model() {
    if let Some(why) = qemu::missing(Target::QemuArm64) {
        println!("SKIP migration_between_two_guest_nodes_agrees_with_the_model: {why}");
        return;
    }
    let runner = std::fs::read(qemu::cache_dir().join("runner")).unwrap();
    if !runner.windows(b"migrate".len()).any(|w| w == b"migrate") {
        println!("SKIP migration_between_two_guest_nodes_agrees_with_the_model: the cached runner predates migrate (run scripts/setup-qemu)");
        return;
    }
    let paths = [
        "workloads/seed001-migrate-order0.wl",
        "workloads/seed001-migrate-64k.wl",
        "tests/qemu/migrate_thp.wl",
    ];
    let cs = guest_against_model(Target::QemuArm64, &paths, &["nodes=2"]);
    for (c, (key, want)) in cs.iter().zip([
        ("arch.dsb.ish", 32),
        ("kernel.contpte_ptep_get", 19456),
        ("vmstat.thp_migration_split", 1),
    ]) {
        assert!(c.ok(), "{}", table(c));
        let row = c.rows.iter().find(|r| r.counter == key).expect(key);
        assert_eq!(row.host, want, "{}: {key}", c.workload);
        assert!(c.rows.iter().any(|r| r.counter == "vmstat.pgmigrate_success"));
    }
}

/// The instructions `c` counts in each of `functions`.
fn insns(c: &foliolab::report::Counters, functions: &[&str]) -> Vec<(String, i64)> {
    functions
        .iter()
        .map(|f| (f.to_string(), c.get(&format!("kernel.insns.{f}")).copied().unwrap_or(0)))
        .collect()
}

/// `c`'s per-function instructions, summed: the window's `kernel.insns`.
fn sum_per_function(c: &foliolab::report::Counters) -> i64 {
    c.iter()
        .filter(|(k, _)| qemu::insns_function(k).is_some())
        .map(|(_, v)| v)
        .sum()
}

/// Instructions per kernel function: a fault workload's windows count instructions in
/// do_anonymous_page, the functions' counts sum to each window's total, and two boots
/// count the same, phase for phase, in every function (the timer tick's and the
/// scheduler's inside a window included: `-icount sleep=off` and `-seed`).
#[test]
fn instructions_per_kernel_function_are_the_same_on_every_boot() {
    if let Some(why) = qemu::missing(Target::QemuArm64) {
        println!("SKIP instructions_per_kernel_function_are_the_same_on_every_boot: {why}");
        return;
    }
    let ws = vec![parse_file("tests/qemu/munmap_64m_64k.wl").unwrap()];
    let boot = || {
        let b = qemu::run_batch(Target::QemuArm64, &ws).unwrap();
        let r = b.reports.into_iter().next().unwrap().unwrap();
        (r, b.map_mem.expect("map_mem's window"))
    };
    let (a, map_a) = boot();
    let (b, map_b) = boot();
    assert_eq!(a.phases.len(), b.phases.len());
    for (pa, pb) in a.phases.iter().zip(&b.phases) {
        assert_eq!(
            sum_per_function(&pa.counters),
            pa.counters["kernel.insns"],
            "phase {}",
            pa.label
        );
        assert_eq!(pa.counters, pb.counters, "phase {}", pa.label);
    }
    assert_eq!(sum_per_function(&map_a.counters), map_a.counters["kernel.insns"]);
    assert_eq!(sum_per_function(&map_b.counters), map_b.counters["kernel.insns"]);
    assert!(map_a.counters["kernel.insns"] > 0);
    let faults = &a.phases.iter().find(|p| p.label == "faults").unwrap().counters;
    assert_eq!(faults["kernel.do_anonymous_page"], 1024);
    assert!(faults["kernel.insns.do_anonymous_page"] > 0);
    // The touch loop's stores, one per page, run in user mode.
    assert!(faults["user.insns"] >= 16384, "{}", faults["user.insns"]);
}

/// Seed 004's benchmark (tools/seed004/bench.c, built by scripts/setup-qemu) as a
/// program of the runner's: two loops of each scenario, its four windows, its
/// contpte_ptep_get calls counted with their instructions, the same on two boots.
#[test]
fn seed004_benchmark_runs_in_the_guest_with_its_instructions() {
    let bench = qemu::cache_dir().join("seed004");
    if let Some(why) = qemu::missing(Target::QemuArm64)
        .or_else(|| (!bench.is_file()).then(|| format!("{} is missing (run scripts/setup-qemu)", bench.display())))
    {
        println!("SKIP seed004_benchmark_runs_in_the_guest_with_its_instructions: {why}");
        return;
    }
    let programs: Vec<qemu::Program> = (1..=3)
        .map(|s| qemu::Program {
            path: bench.clone(),
            args: vec![s.to_string(), "2".into()],
        })
        .collect();
    let guest = Target::QemuArm64.guest_kernel().unwrap();
    let a = qemu::run_programs(&guest, &programs).unwrap();
    let b = qemu::run_programs(&guest, &programs).unwrap();
    for (ra, rb) in a.iter().zip(&b) {
        assert_eq!(ra.status, 0, "{}", ra.program);
        assert_eq!(ra.windows.len(), 4, "{}", ra.program);
        for (wa, wb) in ra.windows.iter().zip(&rb.windows) {
            let mine = ["contpte_ptep_get", "follow_page_pte", "__get_user_pages"];
            assert_eq!(insns(wa, &mine), insns(wb, &mine), "{}", ra.program);
            assert_eq!(
                wa.get("kernel.contpte_ptep_get"),
                wb.get("kernel.contpte_ptep_get"),
                "{}",
                ra.program
            );
            assert_eq!(sum_per_function(wa), wa["kernel.insns"], "{}", ra.program);
        }
        // One loop's mlock and munlock walk every one of the 4096 contpte blocks.
        let lp = &ra.windows[2];
        assert!(lp["kernel.contpte_ptep_get"] >= 2 * 4096, "{}", ra.program);
        assert!(lp["kernel.insns.contpte_ptep_get"] > 0, "{}", ra.program);
    }
}

/// A foliolab killed while its guest boots takes the guest with it: no QEMU runs on
/// (busy on a CPU until its batch would have ended) once the process that started it
/// is gone.
#[test]
fn a_killed_run_leaves_no_guest_running() {
    if let Some(why) = qemu::missing(Target::QemuArm64) {
        println!("SKIP a_killed_run_leaves_no_guest_running: {why}");
        return;
    }
    let mut run = std::process::Command::new(env!("CARGO_BIN_EXE_foliolab"))
        .args([
            "--no-store",
            "validate",
            "--target",
            "qemu-arm64",
            "tests/validation/fork_cow.wl",
        ])
        .stdout(std::process::Stdio::null())
        .stderr(std::process::Stdio::null())
        .spawn()
        .unwrap();
    let parent = run.id().to_string();
    // The guest: a process whose parent is the run (field 4 of /proc/PID/stat).
    let child_of_run = || {
        std::fs::read_dir("/proc")
            .unwrap()
            .filter_map(|e| e.ok())
            .find_map(|e| {
                let stat = std::fs::read_to_string(e.path().join("stat")).ok()?;
                let (comm, rest) = stat.rsplit_once(')')?;
                let ppid = rest.split_whitespace().nth(1)?;
                (ppid == parent && comm.contains("qemu-system")).then(|| e.path())
            })
    };
    let start = std::time::Instant::now();
    let guest = loop {
        if let Some(g) = child_of_run() {
            break g;
        }
        assert!(
            run.try_wait().unwrap().is_none(),
            "the run ended before its guest was seen"
        );
        assert!(
            start.elapsed() < std::time::Duration::from_secs(60),
            "no guest started in 60 s"
        );
        std::thread::sleep(std::time::Duration::from_millis(20));
    };
    run.kill().unwrap();
    run.wait().unwrap();
    // SIGKILL from the kernel at the parent's exit: the guest is dead (gone, or a
    // zombie until init reaps it) at once; a guest left running boots on for seconds.
    std::thread::sleep(std::time::Duration::from_millis(500));
    let state = std::fs::read_to_string(guest.join("stat")).ok().and_then(|s| {
        s.rsplit_once(')')
            .map(|(_, r)| r.split_whitespace().next().unwrap_or("").to_string())
    });
    assert!(
        matches!(state.as_deref(), None | Some("Z")),
        "{} still runs (state {state:?}) after the run that started it was killed",
        guest.display()
    );
}
