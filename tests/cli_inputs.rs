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

/// The workload file written from `bytes`, and the error line `foliolab run` gives for it.
#[track_caller]
fn run_error(name: &str, bytes: &[u8]) -> (String, String) {
    let path = workload(name, bytes);
    let line = error_line(&["run", &path]);
    (path, line)
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
        line.contains(" of host memory, more than the ") && line.contains(" it may use (MemAvailable "),
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
    // A key's line: its name, `default`, the default, the values (columns aligned).
    let line = |cmd: &str, key: &str| -> Vec<String> {
        let out = foliolab(&[cmd, "--help"]);
        let help = String::from_utf8(out.stdout).unwrap();
        let l = help
            .lines()
            .find(|l| l.starts_with(&format!("  {key} ")))
            .unwrap_or_else(|| panic!("{cmd} --help has no {key} line:\n{help}"));
        l.split_whitespace().map(str::to_string).collect()
    };
    assert_eq!(line("run", "zap"), ["zap", "default", "batched", "per-pte|batched"]);
    assert_eq!(&line("run", "ram")[..4], ["ram", "default", "16G", "a"]);
    assert_eq!(line("boot", "rodata"), ["rodata", "default", "full", "full|on|off"]);
    let out = foliolab(&["run", "--help"]);
    let help = String::from_utf8(out.stdout).unwrap();
    let keys = help.split("--set keys (KEY=VALUE):").nth(1).expect("the keys' section");
    let cols: Vec<usize> = keys
        .lines()
        .filter(|l| l.starts_with("  ") && l.contains(" default "))
        .map(|l| l.find(" default ").unwrap())
        .collect();
    assert!(cols.len() > 20 && cols.windows(2).all(|w| w[0] == w[1]), "{help}");
}

#[test]
fn repeat_nested_beyond_the_limit_is_refused_at_its_line() {
    let src = "repeat 1\n".repeat(8000) + "shrink\n" + &"end\n".repeat(8000);
    let path = workload("deep.wl", src.as_bytes());
    let msg = format!("{path}:65:1: repeat nested more than 64 deep");
    assert_eq!(error_line(&["run", &path]), format!("foliolab: {msg}"));
    // validate checks every workload before it runs anything: bad input is exit 2.
    assert_eq!(error_line(&["validate", &path]), format!("foliolab: {msg}"));
    let ok = "repeat 1\n".repeat(64) + "mmap a 4K\ntouch a\nmunmap a\n" + &"end\n".repeat(64);
    let path = workload("deep-ok.wl", ok.as_bytes());
    assert!(foliolab(&["run", &path]).status.success());
}

#[test]
fn an_invalid_utf8_byte_is_reported_where_it_is() {
    let (path, line) = run_error("latin1.wl", b"mmap a 4K\n# caf\xe9 au lait\ntouch a\n");
    assert_eq!(line, format!("foliolab: {path}:2:6: invalid UTF-8 (byte 0xe9)"));
}

#[test]
fn a_leading_byte_order_mark_is_skipped() {
    let path = workload("bom.wl", b"\xef\xbb\xbfmmap a 4K\ntouch a\n");
    let out = foliolab(&["run", &path]);
    assert!(out.status.success(), "{}", String::from_utf8_lossy(&out.stderr));
}

#[test]
fn a_megabyte_token_is_echoed_cut() {
    let src = format!("mmap a 4K\ntouch a 0 4K {}\n", "y".repeat(1 << 20));
    let (path, line) = run_error("long.wl", src.as_bytes());
    assert_eq!(
        line,
        format!(
            "foliolab: {path}:2:14: unexpected '{}… (1048576 bytes)' (expected read, write or stride=S)",
            "y".repeat(40)
        )
    );
}

#[test]
fn a_hole_left_by_munmap_is_called_not_mapped() {
    let (path, line) = run_error("hole.wl", b"mmap a 64K\nmunmap a 16K 4K\ntouch a\n");
    assert_eq!(
        line,
        format!("foliolab: {path}:3:7: touch reaches 16K of region 'a', which is not mapped")
    );
}

#[test]
fn an_endless_input_stops_at_the_size_limit() {
    assert_eq!(
        error_line(&["run", "/dev/zero"]),
        "foliolab: /dev/zero:1:1: larger than the 16.0 MiB this input may be"
    );
}

#[test]
fn a_workload_can_come_from_a_fifo() {
    let fifo = std::path::Path::new(env!("CARGO_TARGET_TMPDIR")).join(format!("fifo-{}.wl", std::process::id()));
    let _ = std::fs::remove_file(&fifo);
    let c = std::ffi::CString::new(fifo.to_str().unwrap()).unwrap();
    // SAFETY: c is a valid NUL-terminated path for the duration of the call.
    assert_eq!(unsafe { libc::mkfifo(c.as_ptr(), 0o600) }, 0);
    let writer = {
        let fifo = fifo.clone();
        std::thread::spawn(move || std::fs::write(fifo, "mmap a 4K\ntouch a\n").unwrap())
    };
    let out = foliolab(&["run", fifo.to_str().unwrap(), "--json"]);
    writer.join().unwrap();
    std::fs::remove_file(&fifo).unwrap();
    assert!(out.status.success(), "{}", String::from_utf8_lossy(&out.stderr));
}

#[test]
fn each_runs_every_value_side_by_side() {
    let out = foliolab(&[
        "run",
        "workloads/seed000-munmap-64k.wl",
        "--each",
        "zap=per-pte,batched",
    ]);
    let text = String::from_utf8(out.stdout).unwrap();
    assert!(out.status.success());
    assert!(text.starts_with("zap: seed 000: zap_pte_range clears"), "{text}");
    assert!(text.contains("  arch.tlbi.vale1is "), "{text}");
    assert!(text.contains("0 (-100.00%)\n"), "{text}");
    let out = foliolab(&[
        "run",
        "workloads/seed000-munmap-64k.wl",
        "--each",
        "zap=per-pte,batched",
        "--json",
    ]);
    let json: serde_json::Value = serde_json::from_slice(&out.stdout).unwrap();
    assert_eq!(json["runs"][1]["variants"]["zap"], "batched");
    assert_eq!(
        error_line(&[
            "run",
            "workloads/seed000-munmap-64k.wl",
            "--each",
            "zap=per-pte,batched",
            "--set",
            "zap=batched"
        ]),
        "foliolab: --each zap: also given with --set"
    );
    assert_eq!(
        error_line(&["run", "workloads/seed000-munmap-64k.wl", "--each", "zap=per-pte"]),
        "foliolab: --each zap=per-pte: expected at least two values"
    );
}

#[test]
fn no_progress_is_drawn_on_a_stderr_that_is_no_terminal() {
    let path = workload("steps.wl", b"mmap a 64K\nrepeat 200000\n  touch a 0 4K\nend\n");
    let out = foliolab(&["run", &path]);
    assert!(out.status.success());
    assert_eq!(String::from_utf8_lossy(&out.stderr), "");
}

#[test]
fn an_unknown_kernel_preset_is_refused_naming_the_known_ones() {
    for cmd in [
        &["run", "workloads/mthp-fault-64k.wl"][..],
        &["boot", "--ram", "1G"],
        &["reproduce", "003"],
    ] {
        let mut args = cmd.to_vec();
        args.extend(["--kernel", "5.15"]);
        let line = error_line(&args);
        assert!(line.contains("5.15") && line.contains("6.1, 6.12, 6.18"), "{line}");
    }
}

#[test]
fn a_knob_the_presets_kernel_lacks_is_an_error_at_its_line() {
    let line = error_line(&["run", "--kernel", "6.1", "workloads/mthp-fault-64k.wl"]);
    assert!(
        line.contains("mthp-fault-64k.wl:2:1: no such knob in this kernel: hugepages-64kB/enabled"),
        "{line}"
    );
    let path = workload("underused.wl", b"set shrink_underused 0\n");
    let line = error_line(&["run", "--kernel", "6.1", &path]);
    assert!(
        line.contains("underused.wl:1:1: no such knob") && line.contains("dafff3f4c850"),
        "{line}"
    );
    // A --set of the key wins over the preset.
    let out = foliolab(&[
        "run",
        "--kernel",
        "6.1",
        "--set",
        "mthp=on",
        "workloads/mthp-fault-64k.wl",
    ]);
    assert!(out.status.success(), "{}", String::from_utf8_lossy(&out.stderr));
}

#[test]
fn kernels_lists_each_change_with_its_commit_and_value_per_preset() {
    let out = foliolab(&["kernels"]);
    assert!(out.status.success());
    let text = String::from_utf8(out.stdout).unwrap();
    let zap = text.lines().find(|l| l.starts_with("zap ")).expect("a zap row");
    let cols: Vec<&str> = zap.split_whitespace().collect();
    assert_eq!(
        &cols[..10],
        [
            "zap",
            "per-pte",
            "batched",
            "batched",
            "batched",
            "batched",
            "batched",
            "batched",
            "6.9",
            "10ebac4f95e7"
        ],
        "{zap}"
    );
    let json = foliolab(&["kernels", "--json"]);
    let v: serde_json::Value = serde_json::from_slice(&json.stdout).unwrap();
    assert_eq!(
        v["kernels"],
        serde_json::json!(["6.1", "6.12", "6.18", "7.0", "7.1", "7.2", "7.3"])
    );
    // The preset `--kernel` unset takes: the newest validated release.
    assert_eq!(v["default"], "7.3");
    assert!(v["changes"]
        .as_array()
        .unwrap()
        .iter()
        .any(|c| c["key"] == "pgtable-fixmap" && c["scope"] == "boot"));
}

#[test]
fn boot_under_the_6_1_preset_remaps_per_contiguous_block() {
    let out = foliolab(&["boot", "--ram", "1G", "--kernel", "6.1"]);
    let text = String::from_utf8(out.stdout).unwrap();
    assert!(text.contains("pgtable-fixmap=per-cont-block"), "{text}");
    let out = foliolab(&["boot", "--ram", "1G", "--kernel", "6.12"]);
    assert!(String::from_utf8(out.stdout).unwrap().contains("pgtable-fixmap=once"));
}

#[test]
fn each_kernel_puts_the_releases_side_by_side() {
    let out = foliolab(&[
        "--no-store",
        "run",
        "tests/validation/mprotect_whole_pmd.wl",
        "--each",
        "kernel=6.1,6.12",
    ]);
    let text = String::from_utf8(out.stdout).unwrap();
    assert!(out.status.success(), "{}", String::from_utf8_lossy(&out.stderr));
    let faults = text
        .lines()
        .find(|l| l.trim_start().starts_with("proc.main.minflt"))
        .expect(&text);
    assert_eq!(
        faults.split_whitespace().take(3).collect::<Vec<_>>(),
        ["proc.main.minflt", "4", "2"]
    );
    for bad in [
        &["--each", "kernel=6.1,6.1"][..],
        &["--each", "kernel=6.1,5.4"],
        &["--kernel", "6.1", "--each", "kernel=6.1,6.12"],
    ] {
        let mut args = vec!["run", "tests/validation/mprotect_whole_pmd.wl"];
        args.extend_from_slice(bad);
        error_line(&args);
    }
}

#[test]
fn a_file_that_is_not_a_trace_is_refused_by_replay() {
    let path = workload("not-a-trace.trc", b"mmap buf 1M\ntouch buf\n");
    assert_eq!(
        error_line(&["replay", &path]),
        format!("foliolab: {path}: not a foliolab trace (no FOLIOTRC magic)")
    );
    assert!(error_line(&["replay", "/nonexistent/t.trc"]).contains("/nonexistent/t.trc: No such file"));
}

#[test]
fn a_trace_cut_short_is_refused_at_the_record_it_stops_in() {
    let trace = std::path::Path::new(env!("CARGO_MANIFEST_DIR")).join("data/sqlite3-cc-O2.trc");
    let bytes = std::fs::read(trace).unwrap();
    let path = workload("cut.trc", &bytes[..bytes.len() / 2]);
    let line = error_line(&["replay", "--no-store", &path]);
    assert!(
        line.starts_with(&format!("foliolab: {path}: record ")) && line.contains("cut short"),
        "{line}"
    );
    // A flipped byte in the compressed body is an error too, never a panic.
    let mut bad = bytes.clone();
    let at = bad.len() / 3;
    bad[at] ^= 0xff;
    let path = workload("flipped.trc", &bad);
    assert!(error_line(&["replay", "--no-store", &path]).starts_with(&format!("foliolab: {path}: ")));
}

#[test]
fn replay_refuses_a_knob_the_model_lacks() {
    let trace = std::path::Path::new(env!("CARGO_MANIFEST_DIR")).join("data/sqlite3-cc-O2.trc");
    let line = error_line(&[
        "replay",
        "--no-store",
        trace.to_str().unwrap(),
        "--thp",
        "hugepages-48kB/enabled=always",
    ]);
    assert!(line.contains("THP knob hugepages-48kB/enabled=always"), "{line}");
    assert!(error_line(&["replay", trace.to_str().unwrap(), "--thp", "enabled"]).contains("expected KNOB=VALUE"));
}

#[test]
fn record_of_a_missing_program_is_a_clear_error() {
    // SAFETY: geteuid has no preconditions.
    if unsafe { libc::geteuid() } != 0 {
        println!("SKIP record_of_a_missing_program_is_a_clear_error: not root");
        return;
    }
    let out = workload("missing.trc", b"");
    let line = error_line(&["record", "-o", &out, "--", "/nonexistent/program"]);
    assert_eq!(
        line,
        "foliolab: record: /nonexistent/program: No such file or directory (os error 2)"
    );
    assert!(
        !std::path::Path::new(&out).exists(),
        "a failed recording leaves no trace file"
    );
}

#[test]
fn replay_each_thp_puts_the_settings_side_by_side() {
    let trace = std::path::Path::new(env!("CARGO_MANIFEST_DIR")).join("data/sqlite3-cc-O2.trc");
    let trace = trace.to_str().unwrap();
    let out = foliolab(&["replay", "--no-store", trace, "--each", "thp=off,64K"]);
    assert!(out.status.success(), "{}", String::from_utf8_lossy(&out.stderr));
    let text = String::from_utf8(out.stdout).unwrap();
    let faults = text
        .lines()
        .find(|l| l.trim_start().starts_with("model.faults"))
        .unwrap();
    // The reference build: 105093 anonymous faults with order-0 folios, 23575 with 64K.
    let cells: Vec<&str> = faults.split_whitespace().collect();
    assert_eq!(cells[..3], ["model.faults", "105093", "23575"], "{faults}");
    assert!(error_line(&["replay", trace, "--each", "thp=off,48K"]).contains("no 48kB size here"));
    assert!(error_line(&["replay", trace, "--each", "thp=64K"]).contains("expected at least two values"));
}

#[test]
fn a_memlimit_after_an_mmap_or_a_second_one_is_refused_at_its_line() {
    let (path, line) = run_error("late-memlimit.wl", b"mmap buf 1M\nmemlimit 8M\n");
    assert_eq!(
        line,
        format!(
            "foliolab: {path}:2:1: memlimit must come before any mmap or fork (line 1), so all the workload's memory is charged"
        )
    );
    let (path, line) = run_error("two-memlimits.wl", b"memlimit 8M\nmemlimit 8M\n");
    assert_eq!(
        line,
        format!("foliolab: {path}:2:1: a memory limit is already set (memlimit at line 1)")
    );
    let (path, line) = run_error("odd-memlimit.wl", b"memlimit 5000\n");
    assert_eq!(
        line,
        format!("foliolab: {path}:1:1: a memory limit must be a nonzero multiple of 4K")
    );
}

#[test]
fn a_second_swapon_or_one_too_small_is_refused_at_its_line() {
    let (path, line) = run_error("two-swapons.wl", b"swapon 64M\nmmap buf 1M\nswapon 64M\n");
    assert_eq!(
        line,
        format!("foliolab: {path}:3:1: a swap device is already on (swapon at line 1)")
    );
    let (path, line) = run_error("tiny-swap.wl", b"swapon 4K\n");
    assert_eq!(
        line,
        format!("foliolab: {path}:1:1: a swap device needs a header page and a slot (8K at least)")
    );
}

#[test]
fn a_migrate_to_a_node_the_machine_lacks_is_refused_with_its_position() {
    let (path, line) = run_error("migrate-node.wl", b"mmap a 64K\ntouch a\nmigrate a 0 16K node=1\n");
    assert_eq!(
        line,
        format!("foliolab: {path}:3:17: node 1: the machine has 1 NUMA node(s) (set more with --set nodes=N)")
    );
    assert_eq!(
        error_line(&["run", &path, "--set", "nodes=65"]),
        "foliolab: invalid value '65' for variant 'nodes' (1..=64)"
    );
    let out = foliolab(&["run", &path, "--set", "nodes=2", "--no-store"]);
    assert!(out.status.success(), "{}", String::from_utf8_lossy(&out.stderr));
}
