//! khugepaged's scan (the `khugepaged` op) against real kernels: every workload of
//! workloads/khugepaged/ on the 6.12, 6.12-16K, 7.0, 7.2, 7.3 and 7.3-16K guests equals the model
//! under the guest's release's preset (faults, layouts, TLBIs, DSBs, ISBs and the
//! collapse and scan counters), or does not apply there for the reason named. On 7.3
//! a MADV_HUGEPAGE range of base pages collapses to a PMD THP and a 64K-only setting
//! collapses each occupied 64K block to a 64K folio (7.2's mTHP collapse), a second
//! scan allocating and flushing for each block again; on 6.12 that 64K-only setting
//! stops the thread (it collapses to the PMD size only), so the op does not apply; with
//! 16K pages only the 32M workload fits a PMD, and the others' scans collapse nothing
//! on either side. The 7.0 guest (no mTHP collapse yet, and no zram) is 6.12's case,
//! the 7.2 guest 7.3's: the two tell `khugepaged-mthp` apart.
//! Each target is skipped when scripts/setup-qemu has not set it up (7.0 and 7.2 only
//! with `--all`, which CI does not run).

use foliolab::cmd::validate::{compare, table, target_variants};
use foliolab::native::qemu::{self, Target};
use foliolab::sim;
use foliolab::workload::{parse_file, Workload};

const WORKLOADS: [&str; 6] = [
    "collapse",
    "collapse_32m",
    "max_ptes_none",
    "mthp_64k",
    "shared",
    "swap",
];

fn counter(r: &foliolab::report::Report, key: &str) -> i64 {
    r.counters.get(key).copied().unwrap_or_else(|| panic!("no {key}"))
}

#[test]
fn khugepaged_scans_on_the_guests_equal_the_models() {
    // Per target: the workloads that collapse a range, and those that do not apply.
    let cases: [(Target, &[&str], &[&str]); 6] = [
        (
            Target::QemuArm64_73,
            &["collapse", "collapse_32m", "max_ptes_none", "mthp_64k", "swap"],
            &[],
        ),
        (
            Target::QemuArm64,
            &["collapse", "collapse_32m", "max_ptes_none", "swap"],
            &["mthp_64k"],
        ),
        // 7.2's mTHP collapse: the 7.2 guest collapses as 7.3's does, the 7.0 guest
        // (no zram there, so no swap) as 6.12's (set up by `scripts/setup-qemu --all`).
        (
            Target::QemuArm64_72,
            &["collapse", "collapse_32m", "max_ptes_none", "mthp_64k", "swap"],
            &[],
        ),
        (
            Target::QemuArm64_70,
            &["collapse", "collapse_32m", "max_ptes_none"],
            &["mthp_64k", "swap"],
        ),
        (Target::QemuArm64_73_16k, &["collapse_32m"], &[]),
        (Target::QemuArm64_16k, &["collapse_32m"], &[]),
    ];
    for (target, collapsing, not_applicable) in cases {
        if let Some(why) = qemu::missing(target) {
            println!("SKIP {target:?}: {why} (scripts/setup-qemu; --all for 7.0 and 7.2)");
            continue;
        }
        let ws: Vec<Workload> = WORKLOADS
            .iter()
            .map(|n| parse_file(&format!("workloads/khugepaged/{n}.wl")).unwrap())
            .collect();
        let v = target_variants(target, None, &[]).unwrap();
        let batch = qemu::run_batch(target, &ws).unwrap();
        for ((w, name), guest) in ws.iter().zip(WORKLOADS).zip(&batch.reports) {
            if not_applicable.contains(&name) {
                let e = guest.as_ref().expect_err(&w.path);
                assert!(qemu::not_applicable(e).is_some(), "{target:?} {}: {e}", w.path);
                continue;
            }
            let guest = guest.as_ref().unwrap_or_else(|e| panic!("{target:?} {}: {e}", w.path));
            let model = qemu::as_guest_measures(sim::run(w, &v).unwrap(), w, &v).unwrap();
            let c = compare(&model, guest);
            assert!(c.ok(), "{target:?} {}\n{}", w.path, table(&c));
            // Collapse allocations of the PMD size and of 64K (a stat 6.12 does not have).
            let collapsed = counter(guest, "vmstat.thp_collapse_alloc")
                + guest.counters.get("mthp.64kB.collapse_alloc").copied().unwrap_or(0);
            assert_eq!(collapsed > 0, collapsing.contains(&name), "{target:?} {}", w.path);
            if name == "mthp_64k" && collapsed > 0 {
                assert_eq!(counter(guest, "mthp.64kB.collapse_alloc"), 32, "{target:?}");
                assert_eq!(counter(guest, "mthp.64kB.nr_anon"), 16, "{target:?}");
            }
        }
    }
}
