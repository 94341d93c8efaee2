//! The folio lookups that mprotect's pte batching added (cac1db8c3aad, 6.17), counted
//! on real kernels: with `vm_normal_page` probed (FOLIOLAB_QEMU_FUNCTIONS), the 6.12
//! and 7.3 guests' (4K and 16K) calls in `mprotect_lookups.wl`'s mprotects equal the model's
//! `kernel.change_pte_range.folio_lookups` under each release's preset (80: 6.16 and
//! older look a page up only to make it writable, one pte at a time; 40: 6.17 on look
//! up every batch's folio, both ways; 16 with 16K pages, where a 64K folio is four
//! ptes). The workload's other counters agree too.
//! Skipped when scripts/setup-qemu has not been run.

use foliolab::cmd::validate::{compare, table, target_variants};
use foliolab::native::qemu::{self, Target};
use foliolab::sim;
use foliolab::workload::parse_file;

#[test]
fn mprotects_folio_lookups_on_6_12_and_7_3_equal_the_models() {
    // This file's only test, so the variable reaches no other test's guest.
    std::env::set_var("FOLIOLAB_QEMU_FUNCTIONS", "vm_normal_page");
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
