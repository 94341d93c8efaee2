//! Seed 004's measured instruction counts: `scripts/seed004-insns --check` re-measures
//! the contpte_ptep_get variants under qemu-aarch64 and must reproduce the committed
//! data/seed004-ptep-get-insns.json (GCC) and data/seed004-ptep-get-insns-clang.json. Skipped, with the reason printed, where the cross
//! toolchain or QEMU is missing: the script would install them, and a test must not.

use std::path::Path;
use std::process::Command;

fn on_path(cmd: &str) -> bool {
    std::env::var_os("PATH")
        .map(|p| std::env::split_paths(&p).any(|d| d.join(cmd).is_file()))
        .unwrap_or(false)
}

#[test]
fn committed_counts_match_a_fresh_measurement() {
    let missing: Vec<&str> = ["qemu-aarch64", "aarch64-linux-gnu-gcc", "gcc", "clang"]
        .into_iter()
        .filter(|c| !on_path(c))
        .chain((!Path::new("/usr/aarch64-linux-gnu/lib/libc.a").exists()).then_some("libc6-dev-arm64-cross"))
        .collect();
    if !missing.is_empty() {
        println!("SKIP seed004_insns: missing {}", missing.join(", "));
        return;
    }
    let root = Path::new(env!("CARGO_MANIFEST_DIR"));
    let out = Command::new(root.join("scripts/seed004-insns"))
        .arg("--check")
        .current_dir(root)
        .output()
        .expect("run scripts/seed004-insns");
    assert!(
        out.status.success(),
        "scripts/seed004-insns --check failed ({}):\n{}{}",
        out.status,
        String::from_utf8_lossy(&out.stdout),
        String::from_utf8_lossy(&out.stderr)
    );
}
