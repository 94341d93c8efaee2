//! Kernels built from source (`foliolab kernel build`) and run under QEMU (`ab`):
//! Debian's 6.12 source with gcc and 4K pages, unpatched and with a patch of ours
//! that adds one flush per anonymous fault. The second build of the same inputs is a
//! cache hit; a patch that does not apply is exit 2 naming it, with nothing cached;
//! the patched kernel shows exactly one more TLBI VALE1IS per fault; and two boots of
//! one built kernel agree on every counter. Skipped when scripts/setup-kbuild (the
//! source, the compilers) or scripts/setup-qemu has not been run.

use std::process::{Command, Output};

const FOLIOLAB: &str = env!("CARGO_BIN_EXE_foliolab");

fn foliolab(args: &[&str]) -> Output {
    Command::new(FOLIOLAB).arg("--no-store").args(args).output().unwrap()
}

/// Why a 6.12 kernel cannot be built here, if it cannot.
fn cannot_build() -> Option<String> {
    foliolab::kbuild::missing("6.12", foliolab::kbuild::Compiler::Gcc)
}

/// `kernel build --source 6.12 ARGS --json`'s `(key, build_s, cached)`.
fn build(args: &[&str]) -> (String, f64, bool) {
    let mut all = vec!["kernel", "build", "--source", "6.12", "--json"];
    all.extend(args);
    let out = foliolab(&all);
    assert!(out.status.success(), "{}", String::from_utf8_lossy(&out.stderr));
    let v: serde_json::Value = serde_json::from_slice(&out.stdout).unwrap();
    (
        v["key"].as_str().unwrap().to_string(),
        v["build_s"].as_f64().unwrap(),
        v["cached"].as_bool().unwrap(),
    )
}

fn entries() -> Vec<String> {
    std::fs::read_dir(foliolab::kbuild::kernels_dir())
        .map(|rd| {
            rd.flatten()
                .map(|e| e.file_name().to_string_lossy().into_owned())
                .collect()
        })
        .unwrap_or_default()
}

#[test]
fn a_second_build_is_a_cache_hit_and_a_bad_patch_caches_nothing() {
    if let Some(why) = cannot_build() {
        println!("SKIP a_second_build_is_a_cache_hit_and_a_bad_patch_caches_nothing: {why}");
        return;
    }
    let (key, _, _) = build(&[]);
    let (again, secs, cached) = build(&[]);
    assert_eq!(again, key);
    assert!(cached, "the same inputs built again");
    assert!(secs < 1.0, "a cache hit took {secs} s");
    let before = entries();
    let out = foliolab(&[
        "kernel",
        "build",
        "--source",
        "6.12",
        "--patch",
        "tests/kernel/does-not-apply.patch",
    ]);
    assert_eq!(out.status.code(), Some(2));
    let err = String::from_utf8_lossy(&out.stderr);
    assert!(
        err.contains("patch tests/kernel/does-not-apply.patch does not apply"),
        "{err}"
    );
    assert_eq!(entries(), before, "a failed build left something in the cache");
    // The tree is clean again: the unpatched build is still a hit, and the patched
    // one builds from the same tree.
    assert!(build(&[]).2);
}

#[test]
fn one_flush_per_anonymous_fault_is_one_tlbi_per_fault_and_boots_repeat_exactly() {
    if let Some(why) = cannot_build() {
        println!("SKIP one_flush_per_anonymous_fault_is_one_tlbi_per_fault_and_boots_repeat_exactly: {why}");
        return;
    }
    if let Some(why) = foliolab::native::qemu::missing(foliolab::native::qemu::Target::QemuArm64) {
        println!("SKIP one_flush_per_anonymous_fault_is_one_tlbi_per_fault_and_boots_repeat_exactly: {why}");
        return;
    }
    let (base, ..) = build(&[]);
    let (patched, ..) = build(&["--patch", "tests/kernel/flush-per-anon-fault.patch"]);
    assert_ne!(base, patched);
    let out = foliolab(&[
        "ab",
        "tests/kernel/anon_faults.wl",
        "--image",
        &base,
        "--image",
        &base,
        "--image",
        &patched,
        "--json",
    ]);
    assert!(out.status.success(), "{}", String::from_utf8_lossy(&out.stderr));
    let v: serde_json::Value = serde_json::from_slice(&out.stdout).unwrap();
    let table = &v["workloads"][0];
    assert_eq!(table["errors"], serde_json::json!({}));
    let row = |section: &str, counter: &str| -> Vec<i64> {
        let s = table["sections"]
            .as_array()
            .unwrap()
            .iter()
            .find(|s| s["label"] == section)
            .unwrap_or_else(|| panic!("no section {section}: {table}"));
        let r = s["rows"]
            .as_array()
            .unwrap()
            .iter()
            .find(|r| r["counter"] == counter)
            .unwrap_or_else(|| panic!("{section}: no row {counter}: {table}"));
        r["values"]
            .as_array()
            .unwrap()
            .iter()
            .map(|x| x.as_i64().unwrap())
            .collect()
    };
    // Only rows that differ are listed: every one must be the patch's, never a
    // difference between the two boots of the same kernel.
    for s in table["sections"].as_array().unwrap() {
        for r in s["rows"].as_array().unwrap() {
            let v = r["values"].as_array().unwrap();
            assert_eq!(
                v[0], v[1],
                "two boots of {base} differ: {} {}",
                s["label"], r["counter"]
            );
        }
    }
    // flush_tlb_page: DSB ISHST, TLBI VALE1IS, DSB ISH, once per fault.
    for key in ["arch.dsb.ishst", "arch.dsb.ish"] {
        let v = row("phase faults", key);
        assert_eq!(v[2] - v[0], 2560, "{key}: {v:?}");
    }
    let tlbi = row("phase faults", "arch.tlbi.vale1is");
    assert_eq!(tlbi[2] - tlbi[0], 2560, "one TLBI per fault: {tlbi:?}");
    assert_eq!(
        row("phase faults", "arch.tlbi.total")[2] - row("phase faults", "arch.tlbi.total")[0],
        2560
    );
}
