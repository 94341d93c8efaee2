//! Issue 33's hostile inputs to `run`, `compare` and machine profiles: each ends with
//! one positioned error line and exit status 2 (or, for a result that could not be
//! stored, status 3), never a panic, a hang or a host-memory blow-up.

use std::path::{Path, PathBuf};
use std::process::{Command, Output, Stdio};
use std::time::{Duration, Instant};

fn scratch(name: &str) -> PathBuf {
    Path::new(env!("CARGO_TARGET_TMPDIR")).join(format!("hostile-{}-{name}", std::process::id()))
}

fn file(name: &str, bytes: &[u8]) -> String {
    let path = scratch(name);
    std::fs::write(&path, bytes).unwrap();
    path.to_str().unwrap().to_string()
}

/// Runs foliolab, killing it (and failing) past `limit`.
fn foliolab_within(args: &[&str], limit: Duration) -> Output {
    let mut child = Command::new(env!("CARGO_BIN_EXE_foliolab"))
        .args(args)
        .stdout(Stdio::piped())
        .stderr(Stdio::piped())
        .spawn()
        .expect("run foliolab");
    let start = Instant::now();
    while child.try_wait().unwrap().is_none() {
        if start.elapsed() > limit {
            child.kill().unwrap();
            panic!("{args:?} still running after {limit:?}");
        }
        std::thread::sleep(Duration::from_millis(20));
    }
    child.wait_with_output().unwrap()
}

fn foliolab(args: &[&str]) -> Output {
    foliolab_within(args, Duration::from_secs(60))
}

/// The only line on stderr of a run that must fail with exit status 2.
#[track_caller]
fn error_line(args: &[&str]) -> String {
    let out = foliolab(args);
    let stderr = String::from_utf8_lossy(&out.stderr);
    assert_eq!(out.status.code(), Some(2), "{args:?}: {stderr}");
    assert_eq!(stderr.lines().count(), 1, "{stderr}");
    stderr.trim_end().to_string()
}

/// The workload file written from `bytes`, and the error line `foliolab run` gives for it.
#[track_caller]
fn run_refused(name: &str, bytes: &[u8]) -> (String, String) {
    let w = file(name, bytes);
    let line = error_line(&["run", &w, "--no-store"]);
    (w, line)
}

#[test]
fn a_swap_device_past_the_headers_32_bit_last_page_is_refused() {
    let (w, line) = run_refused("swap.wl", b"swapon 128T\n");
    assert_eq!(
        line,
        format!(
            "foliolab: {w}:1:1: a swap device has at most 2^32 pages (the swap header's last_page is 32 bits): 16T \
             of 4K pages"
        )
    );
}

#[test]
fn phases_and_repeated_work_are_bounded_before_the_run() {
    let (w, line) = run_refused("marks.wl", b"repeat 100000\n  mark a\nend\n");
    assert_eq!(
        line,
        format!(
            "foliolab: {w}:1:1: the workload would start more than 16384 phases here (marks, repeats multiplied out)"
        )
    );
    let (w, line) = run_refused("ops.wl", b"mmap a 8K\nrepeat 1000000000000\n  touch a\nend\n");
    assert!(
        line.starts_with(&format!("foliolab: {w}:2:1: the workload would run more than")),
        "{line}"
    );
}

#[test]
fn an_empty_repeat_does_not_spin() {
    let w = file(
        "empty.wl",
        b"repeat 18446744073709551615\n  repeat 18446744073709551615\n  end\nend\n",
    );
    let out = foliolab_within(&["run", &w, "--no-store", "--json"], Duration::from_secs(20));
    assert!(out.status.success(), "{}", String::from_utf8_lossy(&out.stderr));
}

#[test]
fn a_run_the_host_cannot_hold_is_refused_naming_what_to_make_smaller() {
    let text: String = (0..200).map(|i| format!("mmap a{i} 32G nohugepage\n")).collect();
    let w = file("huge.wl", text.as_bytes());
    let e = error_line(&["run", &w, "--set", "ram=128T", "--no-store"]);
    assert!(e.starts_with(&format!("foliolab: running {w} needs up to ")), "{e}");
    assert!(
        e.contains("for the model memory it maps (smaller mmaps, fewer forks, or a lower --set ram)"),
        "{e}"
    );
}

#[test]
fn endless_profiles_and_reports_stop_at_their_limits() {
    let zero = scratch("zero.toml");
    let _ = std::fs::remove_file(&zero);
    std::os::unix::fs::symlink("/dev/zero", &zero).unwrap();
    let zero = zero.to_str().unwrap();
    assert_eq!(
        error_line(&[
            "run",
            "workloads/seed000-munmap-64k.wl",
            "--machine",
            zero,
            "--no-store"
        ]),
        format!("foliolab: --machine {zero}:1:1: larger than the 1.0 MiB this input may be")
    );
    assert_eq!(
        error_line(&["compare", "/dev/zero", "/dev/zero", "--no-store"]),
        "foliolab: /dev/zero:1:1: larger than the 64.0 MiB this input may be"
    );
    // A long one-line profile is not echoed back.
    let long = file("long.toml", format!("name = \"{}", "x".repeat(900 << 10)).as_bytes());
    let e = error_line(&[
        "run",
        "workloads/seed000-munmap-64k.wl",
        "--machine",
        &long,
        "--no-store",
    ]);
    assert!(
        e.len() < 500 && e.starts_with(&format!("foliolab: --machine {long}:1:")),
        "{e}"
    );
}

#[test]
fn profile_values_outside_their_ranges_are_refused_at_their_line() {
    let generic = std::fs::read_to_string("machines/generic.toml").unwrap();
    let line = generic.lines().position(|l| l.starts_with("clock_ghz")).unwrap() + 1;
    for clock in ["0", "nan", "inf", "-2"] {
        let text = generic
            .lines()
            .map(|l| {
                if l.starts_with("clock_ghz") {
                    format!("clock_ghz = {clock}")
                } else {
                    l.to_string()
                }
            })
            .collect::<Vec<_>>()
            .join("\n");
        let p = file("clock.toml", text.as_bytes());
        let e = error_line(&["run", "workloads/seed000-munmap-64k.wl", "--machine", &p, "--no-store"]);
        assert!(
            e.starts_with(&format!("foliolab: --machine {p}:{line}:1: clock_ghz = ")),
            "{e}"
        );
    }
}

#[test]
fn a_result_that_could_not_be_stored_exits_3() {
    let w = file("store.wl", b"mmap a 64K\ntouch a\n");
    let dir = scratch("store-dir");
    std::fs::create_dir_all(&dir).unwrap();
    let out = foliolab(&["--db", dir.to_str().unwrap(), "run", &w]);
    assert_eq!(out.status.code(), Some(3), "{}", String::from_utf8_lossy(&out.stderr));
    assert!(
        String::from_utf8_lossy(&out.stdout).contains("counters"),
        "the result is still printed"
    );
    assert!(String::from_utf8_lossy(&out.stderr).starts_with("foliolab: not recorded: "));
    let out = foliolab(&["--db", dir.to_str().unwrap(), "--no-store", "run", &w]);
    assert_eq!(out.status.code(), Some(0));
}

#[test]
fn control_bytes_from_inputs_are_escaped() {
    let (w, line) = run_refused("ctl.wl", b"touch \x1b[31mred\x07\0\n");
    assert_eq!(
        line,
        format!("foliolab: {w}:1:7: invalid region name '\\u{{1b}}[31mred\\u{{7}}\\u{{0}}'")
    );
}

#[test]
fn file_errors_point_at_line_1_column_1() {
    assert_eq!(
        error_line(&["run", "/nonexistent/x.wl", "--no-store"]),
        "foliolab: /nonexistent/x.wl:1:1: cannot read: No such file or directory (os error 2)"
    );
}

#[test]
fn pageout_of_an_mlocked_range_says_why() {
    let (w, line) = run_refused("mlocked.wl", b"mmap a 64K\nmlock a\nmadvise a 0 64K pageout\n");
    assert_eq!(
        line,
        format!("foliolab: {w}:3:1: EINVAL: the range is mlocked (can_madv_lru_vma refuses VM_LOCKED)")
    );
}

#[test]
fn each_compares_sizes_by_value_and_names_the_failing_value() {
    let w = file("each.wl", b"mmap a 64K\n");
    assert_eq!(
        error_line(&["run", &w, "--each", "ram=1G,1024M", "--no-store"]),
        "foliolab: --each ram: value '1024M' given twice (as '1G')"
    );
    let e = error_line(&["run", &w, "--each", "ram=1G,2Q", "--no-store"]);
    assert!(e.starts_with("foliolab: --each ram=2Q: invalid value '2Q'"), "{e}");
    // Mapped only: the 64M column runs, the 128T one is refused by the budget.
    let text: String = (0..200).map(|i| format!("mmap a{i} 32G nohugepage\n")).collect();
    let w = file("each-big.wl", text.as_bytes());
    let e = error_line(&["run", &w, "--each", "ram=64M,128T", "--no-store"]);
    assert!(e.ends_with(" (with --each ram=128T)"), "{e}");
}

#[test]
fn sizes_parse_alike_in_workloads_and_on_the_command_line() {
    let w = file("sizes.wl", b"mmap a 32m\nmmap b 64KiB\ntouch a 0 4k\n");
    let out = foliolab(&["run", &w, "--set", "ram=1g", "--no-store"]);
    assert!(out.status.success(), "{}", String::from_utf8_lossy(&out.stderr));
}

#[test]
fn a_store_on_a_read_only_mount_is_read_and_a_run_there_exits_3() {
    // SAFETY: geteuid has no preconditions.
    if unsafe { libc::geteuid() } != 0 || Command::new("unshare").arg("--help").output().is_err() {
        eprintln!("SKIP: needs root and unshare(1) to bind-mount a directory read-only in a private mount namespace");
        return;
    }
    let dir = scratch("ro-store");
    let _ = std::fs::remove_dir_all(&dir);
    std::fs::create_dir_all(&dir).unwrap();
    let db = dir.join("r.db");
    let w = file("ro.wl", b"mmap a 64K\ntouch a\n");
    let out = foliolab(&["--db", db.to_str().unwrap(), "run", &w]);
    assert!(out.status.success(), "{}", String::from_utf8_lossy(&out.stderr));
    // The mount lives and dies with the private namespace: the host's mounts stay as found.
    let bin = env!("CARGO_BIN_EXE_foliolab");
    let (d, db) = (dir.to_str().unwrap(), db.to_str().unwrap());
    let script = format!(
        "mount --bind -o ro {d} {d} && {bin} --db {db} runs && {bin} --db {db} run {w} >/dev/null; echo status=$?"
    );
    let out = Command::new("unshare")
        .args(["-m", "--propagation", "private", "sh", "-c", &script])
        .output()
        .unwrap();
    let stdout = String::from_utf8_lossy(&out.stdout);
    let stderr = String::from_utf8_lossy(&out.stderr);
    assert!(stdout.contains("ro.wl"), "the stored run is listed: {stdout} {stderr}");
    assert!(stdout.trim_end().ends_with("status=3"), "{stdout} {stderr}");
}

/// A finished child's peak resident bytes (wait4's ru_maxrss), so that other tests'
/// children do not count as RUSAGE_CHILDREN's maximum would. The child is reaped by
/// wait4, which clippy does not see.
#[allow(clippy::zombie_processes)]
fn peak_rss(args: &[&str]) -> u64 {
    let child = Command::new(env!("CARGO_BIN_EXE_foliolab"))
        .args(args)
        .stdout(Stdio::null())
        .spawn()
        .unwrap();
    let mut status = 0;
    // SAFETY: an all-zero rusage is a valid value for wait4 to overwrite.
    let mut ru: libc::rusage = unsafe { std::mem::zeroed() };
    // SAFETY: the pid is this process's unwaited child; status and ru are valid for writes.
    let pid = unsafe { libc::wait4(child.id() as libc::pid_t, &mut status, 0, &mut ru) };
    assert_eq!(pid, child.id() as libc::pid_t);
    assert!(
        libc::WIFEXITED(status) && libc::WEXITSTATUS(status) == 0,
        "{args:?}: {status}"
    );
    ru.ru_maxrss as u64 * 1024
}

/// The budget's bound on the model memory a run maps (`sim::host_bytes_for`) holds on
/// the host: 1 GiB of 16K folios touched takes no more above a 4K run than the bound
/// allows (10.6 MiB, the bound 22.1 with the folios' LRU flags in their records and
/// order-0 entries; 10.8 and 20.3 with a byte-a-frame flags array; 11.8 and 18.3 with a
/// 1 MiB records head; 13.7 and 15.8 with 32-byte struct pages; it was 10.4 MiB before
/// large folios' records were in it). The bound is a worst case (an order-0 folio in
/// every host page of the order-0 array, every other frame in an order-1 folio), so
/// what makes the check not vacuous is a floor: the run's own struct pages and records.
#[test]
fn the_host_memory_of_a_large_folio_run_stays_within_its_budgets_bound() {
    use foliolab::mm::folio::{LargeFolio, Page};
    let base = file("rss-base.wl", b"mmap buf 4K\ntouch buf\n");
    let large = file(
        "rss-16k.wl",
        b"set hugepages-16kB/enabled always\nmmap buf 1G\ntouch buf\n",
    );
    let used = peak_rss(&["run", &large, "--no-store"]) - peak_rss(&["run", &base, "--no-store"]);
    let v = foliolab::sim::Variants::from_sets(&[]).unwrap();
    let bound = foliolab::sim::host_bytes_for(&v.machine(), (1 << 30) / 4096, 1);
    let floor =
        ((1 << 30) / 4096 * std::mem::size_of::<Page>() + (1 << 30) / 16384 * std::mem::size_of::<LargeFolio>()) as u64;
    assert!(
        used >= floor,
        "not vacuous: {used} bytes used, its struct pages and records alone {floor}"
    );
    assert!(used <= bound, "{used} bytes used, the bound {bound}");
}
