//! A binary built for this machine's CPU (`.cargo/config.toml`) run on a CPU without its
//! features: QEMU's user-mode emulator presents an older CPU model's CPUID, and the
//! binary must name a missing feature and exit 2, not die of SIGILL.

use std::process::Command;

#[test]
fn on_a_cpu_without_its_features_the_binary_says_which_and_exits_2() {
    if !cfg!(target_feature = "avx") {
        println!("SKIP: built for a CPU without AVX (RUSTFLAGS or a baseline target), no older model to try");
        return;
    }
    let Ok(out) = Command::new("qemu-x86_64")
        .args(["-cpu", "Westmere", env!("CARGO_BIN_EXE_foliolab"), "--version"])
        .output()
    else {
        println!("SKIP: no qemu-x86_64 (apt-get install qemu-user)");
        return;
    };
    let err = String::from_utf8_lossy(&out.stderr);
    assert_eq!(out.status.code(), Some(2), "{err}");
    // Westmere has SSE4.2 and POPCNT, no AVX: AVX2 where the build has it, the first
    // of the list the build has and the model lacks elsewhere.
    let named = err
        .strip_prefix("foliolab: this binary was built for a CPU with ")
        .and_then(|r| r.split_once(" (target-cpu=native"))
        .map(|(f, _)| f);
    assert!(matches!(named, Some("avx2" | "bmi2" | "bmi1" | "fma" | "avx")), "{err}");
    if cfg!(target_feature = "avx2") {
        assert_eq!(named, Some("avx2"));
    }
    assert!(out.stdout.is_empty(), "the command did not run");
}
