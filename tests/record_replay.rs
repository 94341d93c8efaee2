//! `foliolab record`, `replay` and `predict` on this host, with a test program that
//! makes every address-space operation the recorder knows (tests/programs/mmops.c).
//! Recording needs root (tracepoints, tracefs); `predict` also needs writable THP knobs.

use std::path::{Path, PathBuf};
use std::process::Command;

const THP: &str = "/sys/kernel/mm/transparent_hugepage";

fn bin() -> &'static str {
    env!("CARGO_BIN_EXE_foliolab")
}

fn skip_unless_root() -> Option<String> {
    // SAFETY: geteuid has no preconditions.
    (unsafe { libc::geteuid() } != 0).then(|| "not root: recording opens tracepoint events".to_string())
}

/// Held by every test that writes the host's THP knobs: one reads them before and
/// after its own run, and another's run between would move them.
static KNOBS: std::sync::Mutex<()> = std::sync::Mutex::new(());

fn skip_unless_knobs() -> Option<String> {
    skip_unless_root().or_else(|| {
        let probe = Path::new(THP).join("hugepages-64kB/enabled");
        std::fs::OpenOptions::new()
            .write(true)
            .open(&probe)
            .err()
            .map(|e| format!("{} not writable: {e}", probe.display()))
    })
}

/// A fresh directory for one test, with the test program built in it (cc is what
/// rusqlite's bundled SQLite is built with, so every build machine has it).
fn workdir(test: &str) -> (PathBuf, PathBuf) {
    let dir = std::env::temp_dir().join(format!("foliolab-{test}-{}", std::process::id()));
    let _ = std::fs::remove_dir_all(&dir);
    std::fs::create_dir_all(&dir).unwrap();
    let exe = dir.join("mmops");
    let src = Path::new(env!("CARGO_MANIFEST_DIR")).join("tests/programs/mmops.c");
    let out = Command::new("cc")
        .args(["-O1", "-pthread", "-o"])
        .arg(&exe)
        .arg(&src)
        .output()
        .expect("cc");
    assert!(out.status.success(), "{}", String::from_utf8_lossy(&out.stderr));
    (dir, exe)
}

/// The preset of the kernel the traces are recorded on: a replay checked against the
/// recorded faults models that release, not the default (a newer one).
fn host_kernel() -> String {
    foliolab::sim::kernels::host_release().to_string()
}

fn run_ok(args: &[&str]) -> String {
    let out = Command::new(bin()).args(args).output().unwrap();
    assert!(
        out.status.success(),
        "foliolab {}: {}",
        args.join(" "),
        String::from_utf8_lossy(&out.stderr)
    );
    String::from_utf8(out.stdout).unwrap()
}

#[test]
fn a_recorded_program_replays_fault_for_fault() {
    if let Some(why) = skip_unless_root() {
        println!("SKIP a_recorded_program_replays_fault_for_fault: {why}");
        return;
    }
    let (dir, exe) = workdir("replay");
    let trc = dir.join("mmops.trc");
    let (trc_s, exe_s) = (trc.to_str().unwrap(), exe.to_str().unwrap());
    run_ok(&["record", "--no-aslr", "-o", trc_s, "--", exe_s]);
    let text = run_ok(&["replay", "--print", trc_s]);
    // The CLONE_VM child of posix_spawn shares the mm; the fork child does not.
    assert!(
        text.lines().any(|l| l == "p0 fork p1" || l.ends_with(" p0 fork p1")),
        "{text}"
    );
    assert!(text.lines().any(|l| l.ends_with(" p0 fork p2 share-mm")), "{text}");
    assert!(text.lines().any(|l| l.ends_with(" p2 exec true")), "{text}");
    assert!(
        text.contains(" mremap ") && text.contains(" advice=4") && text.contains(" brk-map "),
        "{text}"
    );
    assert!(
        text.contains(" write kernel"),
        "read(2) into a fresh buffer faults in the kernel: {text}"
    );
    let host = host_kernel();
    let r: serde_json::Value =
        serde_json::from_str(&run_ok(&["replay", "--json", "--no-store", "--kernel", &host, trc_s])).unwrap();
    let procs = r["processes"].as_array().unwrap();
    let comms: Vec<&str> = procs.iter().map(|p| p["comm"].as_str().unwrap()).collect();
    assert_eq!(comms, ["mmops", "mmops", "true"]);
    for p in procs {
        assert_eq!(p["unmapped_faults"], 0, "{p}");
        assert_eq!(
            p["model_faults"], p["anon_faults"],
            "recorded with large folios off: {p}"
        );
    }
    // The fork child's copy-on-write faults on half of the 1M region: 128 pages.
    assert!(procs[1]["model_faults"].as_u64().unwrap() >= 128, "{}", procs[1]);
    let _ = std::fs::remove_dir_all(&dir);
}

#[test]
fn predictions_under_mthp_equal_the_host_per_process() {
    if let Some(why) = skip_unless_knobs() {
        println!("SKIP predictions_under_mthp_equal_the_host_per_process: {why}");
        return;
    }
    let _knobs = KNOBS.lock().unwrap_or_else(|e| e.into_inner());
    let (dir, exe) = workdir("predict");
    let before: Vec<String> = ["enabled", "hugepages-16kB/enabled", "hugepages-64kB/enabled"]
        .iter()
        .map(|k| std::fs::read_to_string(Path::new(THP).join(k)).unwrap())
        .collect();
    let out = run_ok(&[
        "predict",
        "--json",
        "--mthp",
        "64K",
        "--mthp",
        "16K+64K",
        "--dir",
        dir.to_str().unwrap(),
        "--",
        exe.to_str().unwrap(),
    ]);
    let after: Vec<String> = ["enabled", "hugepages-16kB/enabled", "hugepages-64kB/enabled"]
        .iter()
        .map(|k| std::fs::read_to_string(Path::new(THP).join(k)).unwrap())
        .collect();
    assert_eq!(before, after, "the knobs were not restored");
    let r: serde_json::Value = serde_json::from_str(&out).unwrap();
    let settings: Vec<&str> = r["outcomes"]
        .as_array()
        .unwrap()
        .iter()
        .map(|o| o["setting"].as_str().unwrap())
        .collect();
    assert_eq!(settings, ["off", "64K", "16K+64K"]);
    for o in r["outcomes"].as_array().unwrap() {
        let (pred, meas) = (o["predicted"].as_array().unwrap(), o["measured"].as_array().unwrap());
        assert_eq!(pred.len(), meas.len(), "{o}");
        for (p, m) in pred.iter().zip(meas) {
            assert_eq!(p["model_faults"], m["anon_faults"], "{}: {p} against {m}", o["setting"]);
        }
        if o["setting"] == "off" {
            continue;
        }
        // Large folios must have changed something, or the check says nothing.
        let faults: u64 = pred.iter().map(|p| p["model_faults"].as_u64().unwrap()).sum();
        let recorded: u64 = pred.iter().map(|p| p["anon_faults"].as_u64().unwrap()).sum();
        assert!(faults * 2 < recorded, "{}: {faults} of {recorded}", o["setting"]);
    }
    let _ = std::fs::remove_dir_all(&dir);
}

#[test]
fn ctrl_c_ends_the_program_and_the_trace_is_still_complete() {
    use std::os::unix::process::CommandExt;
    if let Some(why) = skip_unless_root() {
        println!("SKIP ctrl_c_ends_the_program_and_the_trace_is_still_complete: {why}");
        return;
    }
    let dir = std::env::temp_dir().join(format!("foliolab-sigint-{}", std::process::id()));
    std::fs::create_dir_all(&dir).unwrap();
    let trc = dir.join("sleep.trc");
    // Its own process group, as a terminal's foreground job: Ctrl-C reaches every member.
    let mut rec = Command::new(bin())
        .args(["record", "-o", trc.to_str().unwrap(), "--", "sleep", "30"])
        .process_group(0)
        .spawn()
        .unwrap();
    // Signal once the program has exec'd (the recording is on by then: it starts at
    // the exec): a child of the recorder whose comm is sleep.
    let start = std::time::Instant::now();
    let execd = || {
        std::fs::read_dir("/proc").unwrap().flatten().any(|e| {
            let stat = std::fs::read_to_string(e.path().join("stat")).unwrap_or_default();
            // pid (comm) state ppid ...
            stat.contains("(sleep) ")
                && stat.rsplit(") ").next().and_then(|r| r.split_whitespace().nth(1)) == Some(&rec.id().to_string())
        })
    };
    while !execd() {
        assert!(start.elapsed().as_secs() < 20, "the program never started");
        std::thread::sleep(std::time::Duration::from_millis(10));
    }
    // SAFETY: signalling the recorder's own process group.
    assert_eq!(unsafe { libc::kill(-(rec.id() as i32), libc::SIGINT) }, 0);
    assert!(rec.wait().unwrap().success(), "the recorder must finish the trace");
    let text = run_ok(&["replay", "--print", trc.to_str().unwrap()]);
    let end = text.lines().last().unwrap();
    assert!(end.starts_with("end ") && end.contains("\"status\":130"), "{end}");
    assert!(text.contains(" exec sleep"), "{text}");
    let _ = std::fs::remove_dir_all(&dir);
}

/// Builds `tests/programs/<name>.c` into `dir`.
fn build(dir: &Path, name: &str) -> PathBuf {
    let exe = dir.join(name);
    let src = Path::new(env!("CARGO_MANIFEST_DIR")).join(format!("tests/programs/{name}.c"));
    let out = Command::new("cc")
        .args(["-O1", "-o"])
        .arg(&exe)
        .arg(&src)
        .output()
        .expect("cc");
    assert!(out.status.success(), "{}", String::from_utf8_lossy(&out.stderr));
    exe
}

/// Issue 33, defect 1: a write to mmap(PROT_WRITE) memory, and to memory mprotect made
/// write-only, replays as one fault each (it panicked: arm64 maps write-only as
/// read-write, the model mapped it inaccessible).
#[test]
fn writes_to_write_only_memory_replay_fault_for_fault() {
    if let Some(why) = skip_unless_root() {
        println!("SKIP writes_to_write_only_memory_replay_fault_for_fault: {why}");
        return;
    }
    let (dir, _) = workdir("writeonly");
    let exe = build(&dir, "writeonly");
    let trc = dir.join("w.trc");
    run_ok(&[
        "record",
        "--no-aslr",
        "-o",
        trc.to_str().unwrap(),
        "--",
        exe.to_str().unwrap(),
    ]);
    let r: serde_json::Value = serde_json::from_str(&run_ok(&[
        "replay",
        "--json",
        "--no-store",
        "--kernel",
        &host_kernel(),
        trc.to_str().unwrap(),
    ]))
    .unwrap();
    assert_eq!(r["counters"]["model.segv"], 0, "{r}");
    for p in r["processes"].as_array().unwrap() {
        assert_eq!(p["model_faults"], p["anon_faults"], "{p}");
    }
    let _ = std::fs::remove_dir_all(&dir);
}

/// Issue 33, defect 16: a 32-bit program's syscalls would be read with x86_64 numbers;
/// it is refused by name. The program: brk(0) and exit through int 0x80, assembled
/// and linked here (binutils, no 32-bit libc needed).
#[test]
fn a_32_bit_program_is_refused_by_name() {
    if let Some(why) = skip_unless_root() {
        println!("SKIP a_32_bit_program_is_refused_by_name: {why}");
        return;
    }
    let (dir, _) = workdir("ia32");
    let (src, obj, exe) = (dir.join("t.s"), dir.join("t.o"), dir.join("ia32prog"));
    std::fs::write(
        &src,
        ".globl _start\n_start:\n movl $45, %eax\n xorl %ebx, %ebx\n int $0x80\n movl $1, %eax\n xorl %ebx, %ebx\n int $0x80\n",
    )
    .unwrap();
    let ok = |c: &mut Command| c.status().is_ok_and(|s| s.success());
    if !ok(Command::new("as").arg("--32").arg("-o").arg(&obj).arg(&src))
        || !ok(Command::new("ld").args(["-m", "elf_i386", "-o"]).arg(&exe).arg(&obj))
        || !ok(&mut Command::new(&exe))
    {
        println!("SKIP a_32_bit_program_is_refused_by_name: cannot build or run an ia32 program here");
        let _ = std::fs::remove_dir_all(&dir);
        return;
    }
    let trc = dir.join("t.trc");
    let out = Command::new(bin())
        .args(["record", "-o", trc.to_str().unwrap(), "--"])
        .arg(&exe)
        .output()
        .unwrap();
    let err = String::from_utf8_lossy(&out.stderr);
    assert!(!out.status.success(), "{err}");
    assert!(
        err.contains("ia32prog") && err.contains("32-bit (ia32) program"),
        "{err}"
    );
    assert!(!trc.exists(), "no trace is kept");
    let _ = std::fs::remove_dir_all(&dir);
}

/// Issue 33, defect 18: a child the program does not wait for is still running at its
/// exit; the recording says so, and so does every replay of it.
#[test]
fn children_still_running_at_exit_are_noted() {
    if let Some(why) = skip_unless_root() {
        println!("SKIP children_still_running_at_exit_are_noted: {why}");
        return;
    }
    let (dir, _) = workdir("running");
    let trc = dir.join("r.trc");
    let out = Command::new(bin())
        .args([
            "record",
            "-o",
            trc.to_str().unwrap(),
            "--",
            "sh",
            "-c",
            "sleep 1 & exit 0",
        ])
        .output()
        .unwrap();
    let err = String::from_utf8_lossy(&out.stderr);
    assert!(out.status.success(), "{err}");
    assert!(err.contains("note: 1 of its processes were still running"), "{err}");
    let text = run_ok(&["replay", "--no-store", trc.to_str().unwrap()]);
    assert!(
        text.contains("1 processes were still running when the recorded program exited"),
        "{text}"
    );
    let _ = std::fs::remove_dir_all(&dir);
}

/// Issue 33, defect 15: recorders started together, with no tracefs mounted, each
/// mount their own where no other sees it (one used to read another's as it went),
/// and leave the mounts as they found them. Run in a mount namespace of the test's
/// own with tracefs unmounted.
#[test]
fn concurrent_records_without_tracefs_mounted_all_succeed_and_leave_no_mount() {
    if let Some(why) = skip_unless_root() {
        println!("SKIP concurrent_records_without_tracefs_mounted_all_succeed_and_leave_no_mount: {why}");
        return;
    }
    if Command::new("unshare").arg("--version").output().is_err() {
        println!("SKIP concurrent_records_without_tracefs_mounted_all_succeed_and_leave_no_mount: no unshare(1)");
        return;
    }
    let (dir, _) = workdir("concurrent-records");
    let script = format!(
        "set -e
         for m in $(awk '$3 == \"tracefs\" {{ print $2 }}' /proc/mounts | sort -r); do umount \"$m\"; done
         for i in $(seq 1 16); do {bin} record -o {dir}/t$i.trc -- true 2>{dir}/e$i & done
         fails=0; for j in $(jobs -p); do wait $j || fails=$((fails+1)); done
         echo fails=$fails
         echo tracefs=$(awk '$3 == \"tracefs\"' /proc/mounts | wc -l)
         echo dirs=$(ls -d ${{TMPDIR:-/tmp}}/foliolab-tracefs-* 2>/dev/null | wc -l)",
        bin = bin(),
        dir = dir.display()
    );
    let out = Command::new("unshare")
        .args(["--mount", "--propagation", "private", "sh", "-c", &script])
        .output()
        .unwrap();
    let text = String::from_utf8_lossy(&out.stdout);
    let errs: String = (1..=16)
        .map(|i| std::fs::read_to_string(dir.join(format!("e{i}"))).unwrap_or_default())
        .filter(|e| !e.contains("recorded"))
        .collect();
    assert!(
        text.contains("fails=0") && text.contains("tracefs=0") && text.contains("dirs=0"),
        "{text}{}{errs}",
        String::from_utf8_lossy(&out.stderr)
    );
    let _ = std::fs::remove_dir_all(&dir);
}

/// Issue 33, defect 17: a knob changed during a measured run (here by the program
/// itself, as any process outside foliolab could) spoils the run, and predict says so
/// instead of reporting it.
#[test]
fn predict_refuses_a_run_whose_knobs_moved_under_it() {
    if let Some(why) = skip_unless_knobs() {
        println!("SKIP predict_refuses_a_run_whose_knobs_moved_under_it: {why}");
        return;
    }
    let _knobs = KNOBS.lock().unwrap_or_else(|e| e.into_inner());
    let (dir, _) = workdir("spoiled");
    let knob = Path::new(THP).join("hugepages-64kB/enabled");
    let before = std::fs::read_to_string(&knob).unwrap();
    // Flips the knob only when it finds 64K on: the recording with every size off is
    // left alone, the run measured under 64K spoiled.
    let flip = format!(
        "grep -q '\\[always\\]' {k} && echo never > {k}; exit 0",
        k = knob.display()
    );
    let out = Command::new(bin())
        .args([
            "predict",
            "--mthp",
            "64K",
            "--dir",
            dir.to_str().unwrap(),
            "--",
            "sh",
            "-c",
            &flip,
        ])
        .output()
        .unwrap();
    let err = String::from_utf8_lossy(&out.stderr);
    assert!(!out.status.success(), "{err}");
    assert!(
        err.contains("measured under 64K is spoiled") && err.contains("hugepages-64kB/enabled is never, not always"),
        "{err}"
    );
    assert_eq!(
        std::fs::read_to_string(&knob).unwrap(),
        before,
        "the knobs were not restored"
    );
    let _ = std::fs::remove_dir_all(&dir);
}
