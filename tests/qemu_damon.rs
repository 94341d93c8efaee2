//! DAMON_STAT stays off in the guests. Debian's 7.x kernels start it at boot: its
//! kdamond samples random physical pages, each under a folio reference
//! (mm/damon/ops-common.c, damon_get_folio) and the anon_vma's read lock. On the 7.2
//! guest it held the reference of `fork_pmd_thp`'s THP across the parent's last
//! write (its rmap walk had woken the exiting child, which preempted it), so the
//! write copied a page the kernel reuses otherwise; whether it did depended on the
//! boot's random numbers. The guest's kernel command line turns it off
//! (`damon_stat.enabled=N`, src/native/qemu): kdamond must not run in any window,
//! the idle one after the last op included (where it ran on every boot before).
//! Each target is skipped when scripts/setup-qemu has not set it up (7.0 and 7.2 only
//! with `--all`, which CI does not run).

use foliolab::cmd::validate::{compare, table, target_variants};
use foliolab::native::qemu::{self, Target};
use foliolab::sim;
use foliolab::workload::parse_file;

#[test]
fn kdamond_never_runs_in_the_guests_and_fork_pmd_thp_reuses() {
    if std::env::var("FOLIOLAB_QEMU_INSNS").is_ok_and(|v| v == "off") {
        println!("SKIP: FOLIOLAB_QEMU_INSNS=off counts no kernel functions");
        return;
    }
    let w = parse_file("tests/validation/fork_pmd_thp.wl").unwrap();
    for target in [Target::QemuArm64_73, Target::QemuArm64_72, Target::QemuArm64_70] {
        if let Some(why) = qemu::missing(target) {
            println!("SKIP {target:?}: {why} (scripts/setup-qemu; --all for 7.0 and 7.2)");
            continue;
        }
        let batch = qemu::run_batch(target, std::slice::from_ref(&w)).unwrap();
        let guest = batch.reports[0].as_ref().unwrap_or_else(|e| panic!("{target:?}: {e}"));
        let idle = &guest.background.as_ref().expect("an idle window").counters;
        let damon: Vec<&String> = guest
            .counters
            .keys()
            .chain(idle.keys())
            .filter(|k| k.starts_with("kernel.insns.kdamond") || k.starts_with("kernel.insns.damon_"))
            .collect();
        assert!(damon.is_empty(), "{target:?}: kdamond ran: {damon:?}");
        let v = target_variants(target, None, &[]).unwrap();
        let model = qemu::as_guest_measures(sim::run(&w, &v).unwrap(), &w, &v).unwrap();
        let c = compare(&model, guest);
        assert!(c.ok(), "{target:?}\n{}", table(&c));
    }
}
