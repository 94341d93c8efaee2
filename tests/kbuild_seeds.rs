//! Seed 003 on its own code: 6.12 built from source as it is (after the seed's
//! change) and with `tools/kernel/patches/seed003-before.patch` (before it: each new
//! linear-map table fixmapped twice), booted with 1G of RAM. The guest's map_mem must
//! be the model's on both sides, counter for counter, and the before side must issue
//! more TLBIs, one per table. A one-file patch on the tree tests/kbuild.rs built: an
//! incremental build and two boots. Skipped when scripts/setup-kbuild or
//! scripts/setup-qemu has not been run.

use std::process::Command;

const FOLIOLAB: &str = env!("CARGO_BIN_EXE_foliolab");

fn foliolab(args: &[&str]) -> serde_json::Value {
    let out = Command::new(FOLIOLAB).arg("--no-store").args(args).output().unwrap();
    assert!(
        out.status.success(),
        "foliolab {}: {}",
        args.join(" "),
        String::from_utf8_lossy(&out.stderr)
    );
    serde_json::from_slice(&out.stdout).unwrap()
}

#[test]
fn seed003_before_fixmaps_each_table_twice_on_the_built_kernel_as_in_the_model() {
    let name = "seed003_before_fixmaps_each_table_twice_on_the_built_kernel_as_in_the_model";
    if let Some(why) = foliolab::kbuild::missing("6.12", foliolab::kbuild::Compiler::Gcc) {
        println!("SKIP {name}: {why}");
        return;
    }
    if let Some(why) = foliolab::native::qemu::missing(foliolab::native::qemu::Target::QemuArm64) {
        println!("SKIP {name}: {why}");
        return;
    }
    let build = |patch: &[&str]| -> String {
        let mut args = vec!["kernel", "build", "--source", "6.12", "--json"];
        args.extend(patch);
        foliolab(&args)["key"].as_str().unwrap().to_string()
    };
    let after = build(&[]);
    let before = build(&["--patch", "tools/kernel/patches/seed003-before.patch"]);
    let boot = |key: &str, set: &[&str]| -> serde_json::Value {
        let mut args = vec!["boot", "--ram", "1G", "--image", key, "--json"];
        args.extend(set);
        let v = foliolab(&args);
        assert_eq!(v["agree"], true, "{key} {set:?}: the model and the guest differ: {v}");
        v
    };
    let b = boot(&before, &["--set", "pgtable-fixmap=alloc-and-populate"]);
    let a = boot(&after, &[]);
    let tlbi = |v: &serde_json::Value| v["guest"]["counters"]["arch.tlbi.total"].as_i64().unwrap();
    // The patch's second fixmap per table: more TLBIs before than after (how many
    // more is the model's count, checked by `agree` above).
    assert!(tlbi(&a) > 0, "{a}");
    assert!(tlbi(&b) > tlbi(&a), "before {} after {}", tlbi(&b), tlbi(&a));
}
