//! `--target qemu-arm64`: one batched boot of Linux 6.12 (4K pages) under QEMU runs a
//! few validation workloads; faults and layouts are checked against the model, and the
//! TLBI, DSB and kernel-function counts against what this kernel is known to do.
//! Skipped when scripts/setup-qemu has not been run (tests install nothing).

use foliolab::native::qemu::{self, Target};
use foliolab::report::Report;
use foliolab::sim::{self, Variants};
use foliolab::workload::parse_file;

const WORKLOADS: &[&str] = &[
    "tests/qemu/munmap_64m_64k.wl",
    "tests/validation/mthp_64k_aligned.wl",
    "tests/validation/fork_cow.wl",
];

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
        let model = sim::run(w, &Variants::default()).unwrap();
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
    let model = sim::run(&ws[0], &Variants::default()).unwrap();
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
