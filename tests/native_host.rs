//! `foliolab native` on this host: known fault counts, knob restore on SIGTERM, and
//! refusal of bad workloads. Tests that write the global THP knobs hold KNOB_LOCK (and a
//! file lock, against other test binaries), so they never overlap.

use std::path::{Path, PathBuf};
use std::process::{Command, Stdio};
use std::time::{Duration, Instant};

const THP: &str = "/sys/kernel/mm/transparent_hugepage";
static KNOB_LOCK: std::sync::Mutex<()> = std::sync::Mutex::new(());

fn bin() -> &'static str {
    env!("CARGO_BIN_EXE_foliolab")
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

/// Serializes knob-writing tests in this process and across test processes.
fn knob_lock() -> (std::sync::MutexGuard<'static, ()>, std::fs::File) {
    let g = KNOB_LOCK.lock().unwrap_or_else(|e| e.into_inner());
    let f = std::fs::File::create(std::env::temp_dir().join("foliolab-knobs.lock")).unwrap();
    // SAFETY: flock on an open file descriptor.
    unsafe { libc::flock(std::os::fd::AsRawFd::as_raw_fd(&f), libc::LOCK_EX) };
    (g, f)
}

fn native_json(wl: &Path) -> serde_json::Value {
    let out = Command::new(bin()).args(["native", "--json"]).arg(wl).output().unwrap();
    assert!(out.status.success(), "{}", String::from_utf8_lossy(&out.stderr));
    serde_json::from_slice(&out.stdout).unwrap()
}

/// `foliolab native` until `ok` holds of its report, at most five runs: the host takes
/// the odd extra fault when kcompactd or khugepaged migrates a page under a run, while
/// a wrong expectation fails every run. Returns the last report.
fn native_until(wl: &Path, ok: impl Fn(&serde_json::Value) -> bool) -> serde_json::Value {
    let mut r = native_json(wl);
    for _ in 1..5 {
        if ok(&r) {
            break;
        }
        r = native_json(wl);
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
    let r = native_until(&suite("mthp_64k_aligned.wl"), |r| {
        r["counters"]["proc.main.minflt"] == 1024
    });
    assert_eq!(r["counters"]["proc.main.minflt"], 1024);
    assert_eq!(r["layout"]["main/buf"], serde_json::json!([[0, 16384, 4]]));
    let r = native_until(&suite("mthp_16k_64k_skew4k.wl"), |r| {
        r["counters"]["proc.main.minflt"] == 1030
    });
    assert_eq!(r["counters"]["proc.main.minflt"], 1030);
    let r = native_until(&suite("mthp_64k_dontneed_retouch.wl"), |r| retouch_faults(r) == 8);
    assert_eq!(retouch_faults(&r), 8);
    assert_eq!(r["phases"][0]["label"], "start");
    let r = native_until(&suite("fork_cow.wl"), |r| r["counters"]["proc.child.minflt"] == 16);
    assert_eq!(r["counters"]["proc.child.minflt"], 16);
    assert_eq!(r["source"], "host");
    assert_eq!(knob_snapshot(), before, "knobs restored after normal runs");
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
    let mut child = Command::new(bin())
        .arg("native")
        .arg(&wl)
        .stdout(Stdio::null())
        .spawn()
        .unwrap();
    // Wait until the run has written its knobs, then stop it.
    let start = Instant::now();
    while std::fs::read_to_string(Path::new(THP).join("hugepages-64kB/enabled"))
        .unwrap()
        .contains("[never]")
    {
        assert!(start.elapsed() < Duration::from_secs(30), "the run never set its knobs");
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

/// The whole validation suite, model against the live host: per-process faults and
/// layouts must agree exactly (global counters are left to `foliolab validate`, since
/// other processes move them).
#[test]
fn the_whole_suite_agrees_with_the_live_host() {
    if let Some(why) = skip_reason() {
        println!("SKIP the_whole_suite_agrees_with_the_live_host: {why}");
        return;
    }
    let _lock = knob_lock();
    let mut paths: Vec<PathBuf> = std::fs::read_dir(suite(""))
        .unwrap()
        .map(|e| e.unwrap().path())
        .filter(|p| p.extension().is_some_and(|e| e == "wl"))
        .collect();
    paths.sort();
    let (mut agree, mut failed, mut retried) = (0, Vec::new(), Vec::new());
    for p in &paths {
        let w = foliolab::workload::parse_file(p.to_str().unwrap()).unwrap();
        let model = foliolab::sim::run(&w, &foliolab::sim::Variants::default()).unwrap_or_else(|e| panic!("{e}"));
        let mismatches = |v: &serde_json::Value| {
            let host: foliolab::report::Report = serde_json::from_value(v.clone()).unwrap();
            foliolab::cmd::validate::compare(&model, &host).exact_mismatches()
        };
        let tries = std::cell::Cell::new(0);
        let host = native_until(p, |v| {
            tries.set(tries.get() + 1);
            mismatches(v).is_empty()
        });
        if tries.get() > 1 {
            retried.push(format!("{} ({} tries)", p.display(), tries.get()));
        }
        match mismatches(&host) {
            m if m.is_empty() => agree += 1,
            m => failed.push(format!("{}: {}", p.display(), m.join("; "))),
        }
    }
    println!("live suite: {agree} agree, {} disagree", failed.len());
    println!("agreed after a retry (host noise): {retried:?}");
    assert!(failed.is_empty(), "{}", failed.join("\n"));
}
