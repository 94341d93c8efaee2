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
    let r: serde_json::Value = serde_json::from_str(&run_ok(&["replay", "--json", "--no-store", trc_s])).unwrap();
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
