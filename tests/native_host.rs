//! `foliolab native` on this host: known fault counts, knob restore on SIGTERM, two
//! runs at once, and refusal of bad workloads. foliolab serializes its own knob writers
//! (a host-wide flock); the tests here also hold KNOB_LOCK, so that a test's before and
//! after snapshots of the knobs never see another test's run.

use std::path::{Path, PathBuf};
use std::process::{Command, Stdio};
use std::time::{Duration, Instant};

const THP: &str = "/sys/kernel/mm/transparent_hugepage";
static KNOB_LOCK: std::sync::Mutex<()> = std::sync::Mutex::new(());

fn bin() -> &'static str {
    env!("CARGO_BIN_EXE_foliolab")
}

/// Every workload of the validation suite, sorted.
fn suite_workloads() -> Vec<PathBuf> {
    let mut paths: Vec<PathBuf> = std::fs::read_dir(suite(""))
        .unwrap()
        .map(|e| e.unwrap().path())
        .filter(|p| p.extension().is_some_and(|e| e == "wl"))
        .collect();
    paths.sort();
    paths
}

fn suite(name: &str) -> PathBuf {
    Path::new(env!("CARGO_MANIFEST_DIR"))
        .join("tests/validation")
        .join(name)
}

/// Every knob the runner touches, with its current sysfs text.
fn knob_snapshot() -> Vec<(String, String)> {
    let mut knobs = vec![
        "enabled".to_string(),
        "defrag".into(),
        "use_zero_page".into(),
        "shrink_underused".into(),
    ];
    knobs.push("khugepaged/max_ptes_none".into());
    for kb in [16, 32, 64, 128, 256, 512, 1024, 2048] {
        knobs.push(format!("hugepages-{kb}kB/enabled"));
    }
    knobs
        .into_iter()
        .map(|k| {
            (
                k.clone(),
                std::fs::read_to_string(Path::new(THP).join(&k)).unwrap_or_default(),
            )
        })
        .collect()
}

/// Why the host cannot run these tests, if it cannot.
fn skip_reason() -> Option<String> {
    // SAFETY: geteuid has no preconditions.
    if unsafe { libc::geteuid() } != 0 {
        return Some("not root: the THP knobs and kpageflags need root".into());
    }
    let probe = Path::new(THP).join("hugepages-64kB/enabled");
    match std::fs::OpenOptions::new().write(true).open(&probe) {
        Ok(_) => None,
        Err(e) => Some(format!("{} not writable: {e}", probe.display())),
    }
}

/// Serializes knob-reading tests in this process (test binaries run one at a time).
fn knob_lock() -> std::sync::MutexGuard<'static, ()> {
    KNOB_LOCK.lock().unwrap_or_else(|e| e.into_inner())
}

/// One `foliolab native --json` run; a sound run has no diagnostics.
fn native_json(wl: &Path) -> serde_json::Value {
    let out = Command::new(bin()).args(["native", "--json"]).arg(wl).output().unwrap();
    assert!(out.status.success(), "{}", String::from_utf8_lossy(&out.stderr));
    let r: serde_json::Value = serde_json::from_slice(&out.stdout).unwrap();
    assert!(r.get("diagnostics").is_none(), "{}: {}", wl.display(), r["diagnostics"]);
    if let Some(notes) = r.get("runner_notes") {
        println!("{}: runner faults the kernel explains: {notes}", wl.display());
    }
    r
}

fn retouch_faults(r: &serde_json::Value) -> serde_json::Value {
    r["phases"]
        .as_array()
        .unwrap()
        .iter()
        .find(|p| p["label"] == "retouch")
        .unwrap()["counters"]["proc.main.minflt"]
        .clone()
}

#[test]
fn known_fault_counts_on_this_host() {
    if let Some(why) = skip_reason() {
        eprintln!("SKIP known_fault_counts_on_this_host: {why}");
        return;
    }
    let _lock = knob_lock();
    let before = knob_snapshot();
    let r = native_json(&suite("mthp_64k_aligned.wl"));
    assert_eq!(r["counters"]["proc.main.minflt"], 1024);
    assert_eq!(r["layout"]["main/buf"], serde_json::json!([[0, 16384, 4]]));
    let r = native_json(&suite("mthp_16k_64k_skew4k.wl"));
    assert_eq!(r["counters"]["proc.main.minflt"], 1030);
    let r = native_json(&suite("mthp_64k_dontneed_retouch.wl"));
    assert_eq!(retouch_faults(&r), 8);
    assert_eq!(r["phases"][0]["label"], "start");
    let r = native_json(&suite("fork_cow.wl"));
    assert_eq!(r["counters"]["proc.child.minflt"], 16);
    // The child reads its own code lazily after fork unless the runner warms it: its
    // first op used to take one fault on the binary's .rodata.
    let r = native_json(&suite("fork_read_zero.wl"));
    assert_eq!(r["counters"]["proc.child.minflt"], 16);
    assert_eq!(r["source"], "host");
    assert_eq!(knob_snapshot(), before, "knobs restored after normal runs");
}

/// Runs `foliolab native WL`, waits until `started` (`what`, for the message), lets it
/// run a little, sends SIGTERM, and checks that the signal ended it.
fn sigterm_once(wl: &Path, what: &str, started: impl Fn() -> bool) {
    let mut child = Command::new(bin())
        .arg("native")
        .arg(wl)
        .stdout(Stdio::null())
        .spawn()
        .unwrap();
    let start = Instant::now();
    while !started() {
        assert!(start.elapsed() < Duration::from_secs(30), "the run never {what}");
        std::thread::sleep(Duration::from_millis(20));
    }
    std::thread::sleep(Duration::from_millis(300));
    assert!(
        child.try_wait().unwrap().is_none(),
        "the workload ended before the signal"
    );
    // SAFETY: signalling a child we spawned.
    unsafe { libc::kill(child.id() as i32, libc::SIGTERM) };
    let status = child.wait().unwrap();
    assert_eq!(
        std::os::unix::process::ExitStatusExt::signal(&status),
        Some(libc::SIGTERM)
    );
}

#[test]
fn sigterm_mid_run_restores_every_knob() {
    if let Some(why) = skip_reason() {
        eprintln!("SKIP sigterm_mid_run_restores_every_knob: {why}");
        return;
    }
    let _lock = knob_lock();
    let before = knob_snapshot();
    let wl = std::env::temp_dir().join(format!("foliolab-long-{}.wl", std::process::id()));
    std::fs::write(
        &wl,
        "set enabled always\nset hugepages-64kB/enabled always\nset defrag never\nmmap buf 64M\n\
         repeat 1000000\n  touch buf\n  madvise buf 0 64M dontneed\nend\n",
    )
    .unwrap();
    sigterm_once(&wl, "set its knobs", || {
        !std::fs::read_to_string(Path::new(THP).join("hugepages-64kB/enabled"))
            .unwrap()
            .contains("[never]")
    });
    std::fs::remove_file(&wl).unwrap();
    assert_eq!(knob_snapshot(), before);
}

#[test]
fn bad_workloads_are_refused_before_anything_runs() {
    let _lock = knob_lock();
    let dir = std::env::temp_dir().join(format!("foliolab-bad-{}", std::process::id()));
    std::fs::create_dir_all(&dir).unwrap();
    for (src, at) in [
        (
            "set hugepages-64kB/enabled always\nmmap a 64K\ntouch b\n",
            "bad.wl:3:7: region 'b' is not mapped",
        ),
        (
            "set hugepages-64kB/enabled sometimes\n",
            "bad.wl:1:28: invalid value 'sometimes'",
        ),
        (
            "mmap a 64K\nrepeat 2\n  touch a\n",
            "bad.wl:2:1: 'repeat' without a matching 'end'",
        ),
    ] {
        let wl = dir.join("bad.wl");
        std::fs::write(&wl, src).unwrap();
        let before = knob_snapshot();
        let out = Command::new(bin()).arg("native").arg(&wl).output().unwrap();
        let err = String::from_utf8_lossy(&out.stderr);
        assert!(!out.status.success());
        assert!(err.contains(at), "{err}");
        assert!(out.stdout.is_empty());
        assert_eq!(knob_snapshot(), before, "nothing was written");
    }
    std::fs::remove_dir_all(&dir).unwrap();
}

/// The suite's saved host results parse and name the workload they came from.
#[test]
fn suite_has_host_results() {
    let mut n = 0;
    for e in std::fs::read_dir(suite("")).unwrap() {
        let p = e.unwrap().path();
        if p.extension().is_some_and(|x| x == "wl") {
            foliolab::workload::parse_file(p.to_str().unwrap()).unwrap();
            let json = p.with_extension("host.json");
            let r: serde_json::Value = serde_json::from_str(&std::fs::read_to_string(&json).unwrap()).unwrap();
            assert_eq!(r["source"], "host", "{}", json.display());
            n += 1;
        }
    }
    assert!(n >= 40, "{n} workloads");
}

/// A run parks khugepaged: its timer (scan_sleep_millisecs, 10 s by default) would
/// otherwise wake it mid-run and let it collapse a workload's pte-mapped range into a
/// new THP, which the model (no khugepaged) never does. Over longer than the host's
/// own timer, with this process on khugepaged's list, the thread must not run once.
#[test]
fn khugepaged_never_wakes_while_a_run_holds_the_knobs() {
    use foliolab::native::khugepaged::{thread_runs, Registration, PARK};
    if let Some(why) = skip_reason() {
        println!("SKIP khugepaged_never_wakes_while_a_run_holds_the_knobs: {why}");
        return;
    }
    let _lock = knob_lock();
    let knob = |k: &str| {
        std::fs::read_to_string(Path::new(THP).join(k))
            .unwrap()
            .trim()
            .to_string()
    };
    let found: Vec<String> = PARK.iter().map(|(k, _)| knob(k)).collect();
    let timer_ms: u64 = found[0].parse().unwrap();
    let guard = foliolab::native::KnobGuard::arm(THP.as_ref(), foliolab::native::KNOB_LOCK.as_ref()).unwrap();
    for (k, v) in PARK {
        assert_eq!(knob(k), v, "{k} parked");
    }
    // This process on the list, as a workload's is, so the thread sleeps on its timer.
    let own = Registration::new().unwrap();
    own.register();
    let runs = thread_runs().expect("khugepaged exists under the spec's default knobs");
    let window = Duration::from_millis(timer_ms.min(20_000) + 2_000);
    std::thread::sleep(window);
    assert_eq!(
        thread_runs(),
        Some(runs),
        "khugepaged ran within {window:?} of a parked run (the host's timer is {timer_ms} ms)"
    );
    drop(guard);
    let back: Vec<String> = PARK.iter().map(|(k, _)| knob(k)).collect();
    assert_eq!(back, found, "the sleep knobs are put back");
}

/// The whole validation suite, model against the live host, each workload run once:
/// per-process faults and layouts must agree exactly (global counters are left to
/// `foliolab validate`, since other processes move them); and a model broken by one
/// fault (`inject=extra-fault`), compared with the same host runs, fails on every
/// workload, on one per-process counter, by that one fault. The host runs once for
/// both: it is the oracle, and a second pass of it would check nothing more.
#[test]
fn the_whole_suite_agrees_with_the_live_host_and_a_model_one_fault_off_does_not() {
    if let Some(why) = skip_reason() {
        println!("SKIP the_whole_suite_agrees_with_the_live_host_and_a_model_one_fault_off_does_not: {why}");
        return;
    }
    let _lock = knob_lock();
    let paths = suite_workloads();
    let mut failed = Vec::new();
    // The host's own release's preset (6.18 here), as `validate` uses.
    let host_variants = |sets: &[String]| {
        foliolab::cmd::validate::target_variants(foliolab::native::qemu::Target::Host, None, sets).unwrap()
    };
    let (v, broken) = (host_variants(&[]), host_variants(&["inject=extra-fault".into()]));
    for p in &paths {
        let w = foliolab::workload::parse_file(p.to_str().unwrap()).unwrap();
        let host: foliolab::report::Report = serde_json::from_value(native_json(p)).unwrap();
        let model = foliolab::sim::run(&w, &v).unwrap_or_else(|e| panic!("{e}"));
        let m = foliolab::cmd::validate::compare(&model, &host).exact_mismatches();
        if !m.is_empty() {
            failed.push(format!("{}: {}", p.display(), m.join("; ")));
        }
        let model = foliolab::sim::run(&w, &broken).unwrap_or_else(|e| panic!("{e}"));
        let off: Vec<(String, i64)> = foliolab::cmd::validate::compare(&model, &host)
            .rows
            .into_iter()
            .filter(|r| {
                matches!(r.rule, foliolab::cmd::validate::Rule::Exact) && r.counter.starts_with("proc.") && !r.ok
            })
            .map(|r| (r.counter, r.diff))
            .collect();
        if !matches!(off.as_slice(), [(_, -1)]) {
            failed.push(format!(
                "{} with inject=extra-fault: {off:?}, not one counter one fault off",
                p.display()
            ));
        }
    }
    println!(
        "live suite: {} agree, {} disagree",
        paths.len() - failed.len(),
        failed.len()
    );
    assert!(failed.is_empty(), "{}", failed.join("\n"));
}

/// Two runs started together serialize on the knob lock: each runs under its own
/// settings (its layout shows the folio size it asked for), and the host ends with
/// the knobs it had before either.
#[test]
fn concurrent_runs_take_turns_with_the_knobs() {
    if let Some(why) = skip_reason() {
        println!("SKIP concurrent_runs_take_turns_with_the_knobs: {why}");
        return;
    }
    let _lock = knob_lock();
    let before = knob_snapshot();
    let dir = std::env::temp_dir().join(format!("foliolab-concurrent-{}", std::process::id()));
    std::fs::create_dir_all(&dir).unwrap();
    // Long enough that the second run starts while the first holds its knobs.
    let long = dir.join("a64k.wl");
    std::fs::write(
        &long,
        "set hugepages-64kB/enabled always\nmmap buf 64M\nrepeat 40\n  touch buf\n  madvise buf 0 64M dontneed\nend\ntouch buf\n",
    )
    .unwrap();
    let short = dir.join("b32k.wl");
    std::fs::write(&short, "set hugepages-32kB/enabled always\nmmap buf 8M\ntouch buf\n").unwrap();
    let spawn = |wl: &Path| {
        Command::new(bin())
            .args(["native", "--json"])
            .arg(wl)
            .stdout(Stdio::piped())
            .stderr(Stdio::piped())
            .spawn()
            .unwrap()
    };
    let a = spawn(&long);
    let start = Instant::now();
    while std::fs::read_to_string(Path::new(THP).join("hugepages-64kB/enabled"))
        .unwrap()
        .contains("[never]")
    {
        assert!(
            start.elapsed() < Duration::from_secs(30),
            "the first run never set its knobs"
        );
        std::thread::sleep(Duration::from_millis(5));
    }
    let b = spawn(&short);
    let (a, b) = (a.wait_with_output().unwrap(), b.wait_with_output().unwrap());
    assert!(a.status.success() && b.status.success());
    let waited = String::from_utf8_lossy(&b.stderr);
    assert!(waited.contains("waiting for the THP knobs"), "{waited}");
    let (a, b): (serde_json::Value, serde_json::Value) = (
        serde_json::from_slice(&a.stdout).unwrap(),
        serde_json::from_slice(&b.stdout).unwrap(),
    );
    assert_eq!(a["counters"]["proc.main.minflt"], 41 * 1024);
    assert_eq!(a["layout"]["main/buf"], serde_json::json!([[0, 16384, 4]]));
    assert_eq!(b["counters"]["proc.main.minflt"], 256);
    assert_eq!(b["layout"]["main/buf"], serde_json::json!([[0, 2048, 3]]));
    assert_eq!(knob_snapshot(), before);
    std::fs::remove_dir_all(&dir).unwrap();
}

/// `validate` with a model broken by one fault exits 1 and prints the exact
/// per-process row that breaks, one fault off (the suite's every workload is checked
/// against the same rule in-process above; one workload here for the command's path).
#[test]
fn validate_fails_a_model_broken_by_one_fault() {
    if let Some(why) = skip_reason() {
        println!("SKIP validate_fails_a_model_broken_by_one_fault: {why}");
        return;
    }
    let _lock = knob_lock();
    let out = Command::new(bin())
        .args(["validate", "--json", "--set", "inject=extra-fault"])
        .arg(suite("fork_cow.wl"))
        .output()
        .unwrap();
    assert_eq!(out.status.code(), Some(1), "{}", String::from_utf8_lossy(&out.stderr));
    let results: Vec<serde_json::Value> = serde_json::from_slice(&out.stdout).unwrap();
    assert_eq!(results.len(), 1);
    let broken: Vec<&serde_json::Value> = results[0]["rows"]
        .as_array()
        .unwrap()
        .iter()
        .filter(|r| r["rule"] == "exact" && r["counter"].as_str().unwrap().starts_with("proc.") && r["ok"] == false)
        .collect();
    assert_eq!(broken.len(), 1, "{:?}", results[0]["rows"]);
    assert_eq!(broken[0]["diff"], -1);
}

#[test]
fn sigterm_mid_run_takes_the_zram_swap_device_down() {
    if let Some(why) = skip_reason() {
        eprintln!("SKIP sigterm_mid_run_takes_the_zram_swap_device_down: {why}");
        return;
    }
    let disksize = Path::new("/sys/block/zram0/disksize");
    match std::fs::read_to_string(disksize) {
        Ok(s) if s.trim() == "0" => {}
        other => {
            eprintln!("SKIP sigterm_mid_run_takes_the_zram_swap_device_down: no unused zram0 ({other:?})");
            return;
        }
    }
    let _lock = knob_lock();
    let wl = std::env::temp_dir().join(format!("foliolab-swap-{}.wl", std::process::id()));
    std::fs::write(
        &wl,
        "swapon 64M\nmmap buf 4M nohugepage\nrepeat 1000000\n  touch buf\n  madvise buf 0 4M pageout\nend\n",
    )
    .unwrap();
    let swapped_on = || std::fs::read_to_string("/proc/swaps").unwrap().contains("/dev/zram0 ");
    sigterm_once(&wl, "swapped zram0 on", swapped_on);
    std::fs::remove_file(&wl).unwrap();
    assert!(!swapped_on(), "zram0 is still a swap device");
    assert_eq!(
        std::fs::read_to_string(disksize).unwrap().trim(),
        "0",
        "zram0 was not reset"
    );
}

#[test]
fn sigterm_mid_run_removes_the_memory_cgroup_and_takes_zram_down() {
    if let Some(why) = skip_reason() {
        eprintln!("SKIP sigterm_mid_run_removes_the_memory_cgroup_and_takes_zram_down: {why}");
        return;
    }
    let disksize = Path::new("/sys/block/zram0/disksize");
    let root = Path::new("/sys/fs/cgroup/memory");
    match std::fs::read_to_string(disksize) {
        Ok(s) if s.trim() == "0" && root.join("memory.limit_in_bytes").exists() => {}
        other => {
            eprintln!(
                "SKIP sigterm_mid_run_removes_the_memory_cgroup_and_takes_zram_down: no unused zram0 ({other:?}) or no cgroup v1 memory controller"
            );
            return;
        }
    }
    let _lock = knob_lock();
    let ours = || {
        std::fs::read_dir(root)
            .unwrap()
            .flatten()
            .any(|e| e.file_name().to_string_lossy().starts_with("foliolab-"))
    };
    assert!(!ours(), "a foliolab memory cgroup exists before the run");
    let wl = std::env::temp_dir().join(format!("foliolab-memlimit-{}.wl", std::process::id()));
    std::fs::write(
        &wl,
        "swapon 64M\nmemlimit 4M\nmmap buf 8M nohugepage\nrepeat 1000000\n  touch buf\nend\n",
    )
    .unwrap();
    sigterm_once(&wl, "made its memory cgroup", ours);
    std::fs::remove_file(&wl).unwrap();
    assert!(!ours(), "the memory cgroup is still there");
    assert!(
        !std::fs::read_to_string("/proc/swaps").unwrap().contains("/dev/zram0 "),
        "zram0 is still a swap device"
    );
    assert_eq!(
        std::fs::read_to_string(disksize).unwrap().trim(),
        "0",
        "zram0 was not reset"
    );
}
