//! `--target qemu-x86_64`: Debian's Linux 6.18 x86-64 (the host's release) under QEMU
//! TCG, judged as the host is (no arm64 keys), every count exact, with the x86 TLB work
//! the plugin counts (INVLPG, INVPCID, CR3 and CR4 writes) and kernel instructions per
//! function. Skipped when `scripts/setup-qemu --x86_64` has not been run.

use foliolab::cmd::validate::{compare, table, target_variants};
use foliolab::native::qemu::{self, Target, INSNS_KEY};
use foliolab::report::{Counters, Report};
use foliolab::sim;
use foliolab::workload::parse_file;

#[test]
fn qemu_x86_64_guest_agrees_with_the_model_and_counts_its_tlb_work() {
    if let Some(why) = qemu::missing(Target::QemuX86_64) {
        println!("SKIP qemu_x86_64_guest_agrees_with_the_model_and_counts_its_tlb_work: {why}");
        return;
    }
    let paths = ["tests/validation/fork_cow.wl", "tests/qemu/munmap_64m_64k.wl"];
    let ws: Vec<_> = paths.iter().map(|p| parse_file(p).unwrap()).collect();
    let batch = qemu::run_batch(Target::QemuX86_64, &ws).unwrap();
    let guest: Vec<Report> = batch.reports.into_iter().map(|r| r.unwrap()).collect();
    assert!(batch.map_mem.is_none(), "x86-64 has no map_mem window");
    let v = target_variants(Target::QemuX86_64, None, &[]).unwrap();
    for (w, g) in ws.iter().zip(&guest) {
        assert_eq!(g.source, "qemu-x86_64");
        // Judged as the host is: the model's arm64 TLB keys are the model's only.
        assert!(
            !g.counters
                .keys()
                .any(|k| k.starts_with("arch.tlbi") || k.starts_with("arch.dsb")),
            "{}: arm64 keys on x86-64",
            w.path
        );
        for k in [
            "arch.x86.invlpg",
            "arch.x86.invpcid",
            "arch.x86.cr3_write",
            "arch.x86.cr4_write",
        ] {
            assert!(g.counters.contains_key(k), "{}: no {k}", w.path);
        }
        // Instructions per function sum to the window's total.
        let per_fn: i64 = g
            .counters
            .iter()
            .filter(|(k, _)| qemu::insns_function(k).is_some())
            .map(|(_, n)| n)
            .sum();
        assert_eq!(per_fn, g.counters[INSNS_KEY], "{}", w.path);
        assert!(g.counters[INSNS_KEY] > 0, "{}", w.path);
        let model = qemu::as_guest_measures(sim::run(w, &v).unwrap(), w, &v).unwrap();
        let c = compare(&model, g);
        assert!(c.ok(), "{}", table(&c));
    }
    // 64 MiB of 64K folios, a write per page, then munmap: 16,384 pages are past
    // tlb_single_page_flush_ceiling (33), so flush_tlb_mm_range flushes the whole mm
    // once, by a CR3 write (flush_tlb_local), and invalidates no page by INVLPG.
    let phase = |label: &str| -> &Counters { &guest[1].phases.iter().find(|p| p.label == label).unwrap().counters };
    assert_eq!(phase("faults")["proc.main.minflt"], 1024);
    assert_eq!(phase("faults")["arch.x86.cr3_write"], 0);
    assert_eq!(phase("munmap")["arch.x86.cr3_write"], 1);
    assert_eq!(phase("munmap")["arch.x86.invlpg"], 0);
    assert_eq!(phase("munmap")["kernel.folio_remove_rmap_ptes"], 1024);
}
