//! Bad command lines and workloads end with one clear error line and exit status 2,
//! never a panic, a hang or a host-memory blow-up.

use std::process::{Command, Output};

fn foliolab(args: &[&str]) -> Output {
    Command::new(env!("CARGO_BIN_EXE_foliolab"))
        .args(args)
        .output()
        .expect("run foliolab")
}

/// The first line on stderr of a run that must fail with exit status 2.
#[track_caller]
fn error_line(args: &[&str]) -> String {
    let out = foliolab(args);
    let stderr = String::from_utf8_lossy(&out.stderr);
    assert_eq!(out.status.code(), Some(2), "{args:?}: {stderr}");
    stderr.lines().next().unwrap_or("").to_string()
}

/// A workload file in cargo's scratch directory for integration tests.
fn workload(name: &str, bytes: &[u8]) -> String {
    let path = std::path::Path::new(env!("CARGO_TARGET_TMPDIR")).join(name);
    std::fs::write(&path, bytes).unwrap();
    path.to_str().unwrap().to_string()
}

#[test]
fn ram_beyond_the_linear_map_is_refused_by_boot_and_run_alike() {
    for ram in ["256T", "257T", "0xfffffffffffff000"] {
        assert_eq!(
            error_line(&["boot", "--ram", ram]),
            format!(
                "error: invalid value '{ram}' for '--ram <RAM>': ram {ram}: expected a size from 64M to 128T (the linear map of a 48-bit VA)"
            )
        );
        assert_eq!(
            error_line(&["run", "workloads/seed000-munmap-64k.wl", "--set", &format!("ram={ram}")]),
            format!("foliolab: invalid value '{ram}' for variant 'ram' (a size from 64M to 128T, e.g. 16G or 1T)")
        );
    }
}

#[test]
fn a_linear_map_too_large_to_store_is_refused_before_it_is_built() {
    assert_eq!(
        error_line(&["boot", "--ram", "100T"]),
        "foliolab: boot --ram 100T: the linear map needs up to 52531409 page tables of 4K, more than the \
         model's table storage holds (2^32 descriptors); use rodata=off or a larger granule"
    );
}

#[test]
fn a_run_that_cannot_fit_in_host_memory_is_refused_naming_both_sizes() {
    // 1000 regions of 32G in four processes: 125T, so 128T of RAM could all be mapped.
    let mut src = String::from("fork a\nfork b\nfork c\n");
    for i in 0..1000 {
        src += &format!("mmap r{i} 32G\n");
    }
    let path = workload("huge.wl", src.as_bytes());
    let line = error_line(&["run", &path, "--set", "ram=128T"]);
    assert!(
        line.starts_with(&format!("foliolab: running {path} needs up to ")),
        "{line}"
    );
    assert!(
        line.contains(" of host memory, but only ") && line.ends_with("(MemAvailable in /proc/meminfo)"),
        "{line}"
    );
}

#[test]
fn a_repeated_set_key_is_refused() {
    assert_eq!(
        error_line(&[
            "run",
            "workloads/seed000-munmap-64k.wl",
            "--set",
            "zap=per-pte",
            "--set",
            "zap=batched"
        ]),
        "foliolab: --set zap: given more than once"
    );
    assert_eq!(
        error_line(&["boot", "--ram", "1G", "--set", "rodata=off", "--set", "rodata=on"]),
        "foliolab: --set rodata: given more than once"
    );
}

#[test]
fn help_lists_the_set_keys_with_defaults() {
    let out = foliolab(&["run", "--help"]);
    let help = String::from_utf8(out.stdout).unwrap();
    assert!(
        help.contains("  zap         default batched     per-pte|batched\n"),
        "{help}"
    );
    assert!(
        help.contains("  ram         default 16G         a size from 64M to 128T"),
        "{help}"
    );
    let out = foliolab(&["boot", "--help"]);
    let help = String::from_utf8(out.stdout).unwrap();
    assert!(
        help.contains("  rodata           default full  full|on|off\n"),
        "{help}"
    );
}
