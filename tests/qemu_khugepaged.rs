//! khugepaged's scan (the `khugepaged` op) against real kernels: on the 7.3 guest a
//! MADV_HUGEPAGE range of base pages collapses to a PMD THP and a 64K-only setting
//! collapses each occupied 64K block to a 64K folio (7.2's mTHP collapse), a second
//! scan allocating and flushing for each block again; on the 6.12 guest the PMD
//! collapse and the max_ptes_none limit; on the 7.3 16K guest one 32M collapse. Each
//! equals the model under the guest's release's preset: faults, layouts, TLBIs, DSBs,
//! ISBs and the collapse counters.
//! Skipped when scripts/setup-qemu has not been run.

use foliolab::cmd::validate::{compare, table, target_variants};
use foliolab::native::qemu::{self, Target};
use foliolab::sim;
use foliolab::workload::{parse_file, Workload};

fn counter(r: &foliolab::report::Report, key: &str) -> i64 {
    r.counters.get(key).copied().unwrap_or_else(|| panic!("no {key}"))
}

#[test]
fn khugepaged_scans_on_the_guests_equal_the_models() {
    let cases: [(Target, &[&str]); 3] = [
        (Target::QemuArm64_73, &["collapse", "mthp_64k"]),
        (Target::QemuArm64, &["collapse", "max_ptes_none"]),
        (Target::QemuArm64_73_16k, &["collapse_32m"]),
    ];
    for (target, names) in cases {
        if let Some(why) = qemu::missing(target) {
            println!("SKIP {target:?}: {why}");
            continue;
        }
        let ws: Vec<Workload> = names
            .iter()
            .map(|n| parse_file(&format!("workloads/khugepaged/{n}.wl")).unwrap())
            .collect();
        let v = target_variants(target, None, &[]).unwrap();
        let batch = qemu::run_batch(target, &ws).unwrap();
        for (w, guest) in ws.iter().zip(&batch.reports) {
            let guest = guest.as_ref().unwrap_or_else(|e| panic!("{target:?} {}: {e}", w.path));
            let model = qemu::as_guest_measures(sim::run(w, &v).unwrap(), w, &v).unwrap();
            let c = compare(&model, guest);
            assert!(c.ok(), "{target:?} {}\n{}", w.path, table(&c));
            if w.path.ends_with("mthp_64k.wl") {
                assert_eq!(counter(guest, "mthp.64kB.collapse_alloc"), 32, "{target:?}");
                assert_eq!(counter(guest, "mthp.64kB.nr_anon"), 16, "{target:?}");
            } else {
                assert!(counter(guest, "vmstat.thp_collapse_alloc") > 0, "{target:?} {}", w.path);
            }
        }
    }
}
