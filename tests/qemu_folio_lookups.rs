//! The folio lookups that mprotect's pte batching added (cac1db8c3aad, 6.17), counted
//! on real kernels: with `vm_normal_page` probed (FOLIOLAB_QEMU_FUNCTIONS), the 6.12
//! and 7.3 guests' (4K and 16K) calls in `mprotect_lookups.wl`'s mprotects equal the model's
//! `kernel.change_pte_range.folio_lookups` under each release's preset (80: 6.16 and
//! older look a page up only to make it writable, one pte at a time; 40: 6.17 on look
//! up every batch's folio, both ways; 16 with 16K pages, where a 64K folio is four
//! ptes). The workload's other counters agree too. Likewise mremap's batching
//! (f822a9a81a31 with 0b5be138ce00, 6.17): `vm_normal_folio` probed, the guests' calls
//! while `mremap_64k_move.wl` moves 256K of 64K folios there and back equal the model's
//! `kernel.move_ptes.folio_lookups` (none on 6.12, which moves pte by pte; one per
//! contpte block on 7.3; none with 16K pages, where a 64K folio is no contpte block),
//! and every mremap validation workload agrees on every counter.
//! Skipped when scripts/setup-qemu has not been run.

use foliolab::cmd::validate::{compare, table, target_variants};
use foliolab::native::qemu::{self, Target};
use foliolab::sim;
use foliolab::workload::parse_file;

/// The probed functions, the same for both tests of this file (the variable reaches
/// no other file's guests).
fn probe() {
    std::env::set_var("FOLIOLAB_QEMU_FUNCTIONS", "vm_normal_page,vm_normal_folio");
}

/// The sum of `key` over the phases `labels` of `r` (a model's report leaves zeros
/// out; 7.3's non-zero count checks the key's name).
fn in_phases(r: &foliolab::report::Report, labels: &[&str], key: &str) -> i64 {
    r.phases
        .iter()
        .filter(|p| labels.contains(&p.label.as_str()))
        .map(|p| p.counters.get(key).copied().unwrap_or(0))
        .sum()
}

#[test]
fn mremap_agrees_on_every_guest_and_its_folio_lookups_equal_the_models() {
    probe();
    let paths = [
        "tests/validation/mremap_64k_move.wl",
        "tests/validation/mremap_order0_grow.wl",
        "tests/validation/mremap_pmd_thp.wl",
        "tests/validation/mremap_shrink_split.wl",
    ];
    let ws: Vec<_> = paths.iter().map(|p| parse_file(p).unwrap()).collect();
    for (target, want) in [
        (Target::QemuArm64, 0),
        (Target::QemuArm64_16k, 0),
        (Target::QemuArm64_73, 8),
        (Target::QemuArm64_73_16k, 0),
    ] {
        if let Some(why) = qemu::missing(target) {
            println!("SKIP {target:?}: {why}");
            continue;
        }
        let runner = std::fs::read(qemu::cache_dir().join("runner")).unwrap();
        if !runner
            .windows(b"%llx %llx %llx %llx".len())
            .any(|w| w == b"%llx %llx %llx %llx")
        {
            println!("SKIP {target:?}: the cached runner predates mremap (run scripts/setup-qemu)");
            continue;
        }
        let v = target_variants(target, None, &[]).unwrap();
        let batch = qemu::run_batch(target, &ws).unwrap();
        for (w, g) in ws.iter().zip(&batch.reports) {
            let model = qemu::as_guest_measures(sim::run(w, &v).unwrap(), w, &v).unwrap();
            let guest = g.as_ref().unwrap_or_else(|e| panic!("{target:?} {}: {e}", w.path));
            let c = compare(&model, guest);
            assert!(c.ok(), "{target:?}\n{}", table(&c));
            if w.path.ends_with("mremap_64k_move.wl") {
                let moves = ["move", "back"];
                let lookups = in_phases(&model, &moves, "kernel.move_ptes.folio_lookups");
                assert_eq!(lookups, want, "{target:?}: the model");
                assert_eq!(
                    in_phases(guest, &moves, "kernel.vm_normal_folio"),
                    lookups,
                    "{target:?}: the guest"
                );
            }
        }
    }
}

#[test]
fn mprotects_folio_lookups_on_6_12_and_7_3_equal_the_models() {
    probe();
    let w = parse_file("tests/validation/mprotect_lookups.wl").unwrap();
    for (target, want) in [
        (Target::QemuArm64, 80),
        (Target::QemuArm64_73, 40),
        (Target::QemuArm64_73_16k, 16),
    ] {
        if let Some(why) = qemu::missing(target) {
            println!("SKIP {target:?}: {why}");
            continue;
        }
        let v = target_variants(target, None, &[]).unwrap();
        let model = qemu::as_guest_measures(sim::run(&w, &v).unwrap(), &w, &v).unwrap();
        let batch = qemu::run_batch(target, std::slice::from_ref(&w)).unwrap();
        let guest = batch.reports[0].as_ref().unwrap();
        let c = compare(&model, guest);
        assert!(c.ok(), "{target:?}\n{}", table(&c));
        let measured = |r: &foliolab::report::Report, key: &str| {
            let p = r.phases.iter().find(|p| p.label == "measured").unwrap();
            p.counters
                .get(key)
                .copied()
                .unwrap_or_else(|| panic!("{target:?}: no {key}"))
        };
        let lookups = measured(&model, "kernel.change_pte_range.folio_lookups");
        assert_eq!(lookups, want, "{target:?}: the model");
        assert_eq!(
            measured(guest, "kernel.vm_normal_page"),
            lookups,
            "{target:?}: the guest"
        );
    }
}
