//! Two boots of the same guest kernel measure the same thing, bit for bit: the TCG
//! plugin's whole output (every window's TLBIs, barriers, entries and instructions,
//! `kernel.insns` per function and `user.insns`, and the boot's map_mem window) and
//! the guest's console (the runner's results) are byte-identical. Debian's 6.12
//! (`--target qemu-arm64`), and 6.12 built from source when it can be built. Skipped
//! when scripts/setup-qemu (or, for the built kernel, scripts/setup-kbuild) has not
//! been run.

use std::path::{Path, PathBuf};
use std::process::Command;

const FOLIOLAB: &str = env!("CARGO_BIN_EXE_foliolab");
/// Windows with faults, swap-out to zram and swap-in, fork and copy-on-write: long
/// enough for timer interrupts and the scheduler to run inside them.
const WORKLOADS: &[&str] = &[
    "workloads/kernels/seed001-swap-loop.wl",
    "tests/validation/fork_write_both.wl",
];

/// One boot of `args`' kernel running WORKLOADS: the plugin's output and the console.
fn boot(args: &[&str], name: &str) -> (String, String) {
    let tmp = std::env::temp_dir().join(format!("foliolab-repeat-{}-{name}", std::process::id()));
    let _ = std::fs::remove_dir_all(&tmp);
    std::fs::create_dir_all(&tmp).unwrap();
    let out = Command::new(FOLIOLAB)
        .args(["--no-store", "native", "--target", "qemu-arm64", "--json"])
        .args(args)
        .args(WORKLOADS)
        // The runner keeps its batch directory (counts, console) under TMPDIR.
        .env("FOLIOLAB_QEMU_KEEP", "1")
        .env("TMPDIR", &tmp)
        .output()
        .unwrap();
    assert!(out.status.success(), "{}", String::from_utf8_lossy(&out.stderr));
    let batch: Vec<PathBuf> = std::fs::read_dir(&tmp)
        .unwrap()
        .flatten()
        .map(|e| e.path())
        .filter(|p| p.join("counts").is_file())
        .collect();
    assert_eq!(batch.len(), 1, "one boot, one batch directory: {batch:?}");
    let read = |p: &Path| std::fs::read_to_string(p).unwrap();
    let got = (read(&batch[0].join("counts")), read(&batch[0].join("console")));
    std::fs::remove_dir_all(&tmp).unwrap();
    got
}

/// Boots `args`' kernel twice and compares everything the plugin and the runner wrote.
fn boots_repeat_exactly(args: &[&str], name: &str) {
    let (counts, console) = boot(args, &format!("{name}-1"));
    // Not vacuous: instructions were counted in windows and at boot.
    assert!(counts.lines().any(|l| l.starts_with("boot insns ")), "{counts}");
    assert!(counts.lines().any(|l| l.contains(" user.insns - ")), "{counts}");
    assert!(counts.lines().filter(|l| l.ends_with(" end")).count() > 20, "{counts}");
    let (counts2, console2) = boot(args, &format!("{name}-2"));
    if let Some((i, (a, b))) = counts
        .lines()
        .zip(counts2.lines())
        .enumerate()
        .find(|(_, (a, b))| a != b)
    {
        panic!(
            "{name}: the plugin's output differs at line {}: {a:?} then {b:?}",
            i + 1
        );
    }
    assert_eq!(
        counts.len(),
        counts2.len(),
        "{name}: the plugin's output differs in length"
    );
    assert_eq!(console, console2, "{name}: the consoles differ");
}

#[test]
fn two_boots_of_debians_6_12_give_byte_identical_counts() {
    if let Some(why) = foliolab::native::qemu::missing(foliolab::native::qemu::Target::QemuArm64) {
        println!("SKIP two_boots_of_debians_6_12_give_byte_identical_counts: {why}");
        return;
    }
    boots_repeat_exactly(&[], "debian");
}

#[test]
fn two_boots_of_a_built_6_12_give_byte_identical_counts() {
    if let Some(why) = foliolab::cmd::seeds::built_missing() {
        println!("SKIP two_boots_of_a_built_6_12_give_byte_identical_counts: {why}");
        return;
    }
    let out = Command::new(FOLIOLAB)
        .args(["--no-store", "kernel", "build", "--source", "6.12", "--json"])
        .output()
        .unwrap();
    assert!(out.status.success(), "{}", String::from_utf8_lossy(&out.stderr));
    let v: serde_json::Value = serde_json::from_slice(&out.stdout).unwrap();
    boots_repeat_exactly(&["--image", v["key"].as_str().unwrap()], "built");
}
