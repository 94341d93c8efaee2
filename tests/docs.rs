//! Docs that cannot lie: every command the README and the guide show is run, its
//! output checked where the text shows output, and every relative link resolved.
//!
//! A ```` ```console ```` block holds commands (`$ foliolab ...`, or the README's
//! `$ cargo run --release -- ...`) each followed by the output it prints; a line `...`
//! stands for any run of lines, and a block whose output is only `...` checks the exit
//! status alone. The info string may add, comma-separated: `root` (needs root and a
//! writable THP sysfs), `qemu` (needs `scripts/setup-qemu`'s guests), `kbuild` (needs a
//! built kernel in the cache), `exit=N` (the status every command of the block must end
//! with; 0 otherwise). Commands run through `sh` from the repository root with the
//! built `foliolab` first on PATH, in a fresh `/tmp/foliolab-guide` (the directory the
//! examples write to, held under a lock so concurrent test runs take turns) that also
//! holds the results store. A `foliolab` line in any other fenced block is a
//! synopsis and must show a placeholder (an upper-case word or `[...]`), so no concrete
//! command escapes being run.

use std::collections::BTreeSet;
use std::path::{Path, PathBuf};
use std::process::Command;

fn root() -> PathBuf {
    PathBuf::from(env!("CARGO_MANIFEST_DIR"))
}

/// README.md and every page of the guide, as (path relative to the root, text).
fn pages() -> Vec<(PathBuf, String)> {
    let mut out = vec![(
        PathBuf::from("README.md"),
        std::fs::read_to_string(root().join("README.md")).unwrap(),
    )];
    let mut stack = vec![root().join("docs/src")];
    while let Some(dir) = stack.pop() {
        let mut entries: Vec<_> = std::fs::read_dir(&dir).unwrap().map(|e| e.unwrap().path()).collect();
        entries.sort();
        for p in entries {
            if p.is_dir() {
                stack.push(p);
            } else if p.extension().is_some_and(|e| e == "md") {
                let rel = p.strip_prefix(root()).unwrap().to_path_buf();
                out.push((rel, std::fs::read_to_string(&p).unwrap()));
            }
        }
    }
    out
}

#[derive(Debug)]
struct Fence {
    info: String,
    /// Line number (1-based) of the opening fence.
    line: usize,
    body: Vec<String>,
}

/// The fenced blocks of a page, and its prose (lines outside fences, with numbers).
fn split(text: &str) -> (Vec<Fence>, Vec<(usize, &str)>) {
    let mut fences = Vec::new();
    let mut prose = Vec::new();
    let mut open: Option<Fence> = None;
    for (i, l) in text.lines().enumerate() {
        let t = l.trim_start();
        match open.take() {
            Some(f) if t.starts_with("```") => fences.push(f),
            Some(mut f) => {
                f.body.push(l.to_string());
                open = Some(f);
            }
            None if t.starts_with("```") => {
                open = Some(Fence {
                    info: t.trim_start_matches('`').trim().to_string(),
                    line: i + 1,
                    body: vec![],
                })
            }
            None => prose.push((i + 1, l)),
        }
    }
    assert!(open.is_none(), "an unclosed fence");
    (fences, prose)
}

struct Step {
    cmd: String,
    expect: Vec<String>,
}

fn steps(f: &Fence) -> Vec<Step> {
    let mut out: Vec<Step> = Vec::new();
    for l in &f.body {
        if let Some(c) = l.strip_prefix("$ ") {
            let cmd = c
                .strip_prefix("cargo run --release -- ")
                .map(|r| format!("foliolab {r}"))
                .unwrap_or(c.to_string());
            out.push(Step { cmd, expect: vec![] });
        } else {
            out.last_mut()
                .expect("output before the first command")
                .expect
                .push(l.clone());
        }
    }
    out
}

/// Does `actual` match `expect`, where a `...` line matches any run of lines?
fn matches(expect: &[String], actual: &[&str]) -> bool {
    match expect.split_first() {
        None => actual.is_empty(),
        Some((e, rest)) if e.trim() == "..." => (0..=actual.len()).any(|k| matches(rest, &actual[k..])),
        Some((e, rest)) => actual.first().is_some_and(|a| a.trim_end() == e.trim_end()) && matches(rest, &actual[1..]),
    }
}

/// Why a block with these flags cannot run here, if it cannot.
fn unavailable(flags: &[&str]) -> Option<String> {
    let is_root = unsafe { libc::geteuid() } == 0;
    for f in flags {
        match *f {
            "root" if !is_root => return Some("needs root".into()),
            "root" => {
                let knob = Path::new("/sys/kernel/mm/transparent_hugepage/enabled");
                let writable = std::fs::OpenOptions::new().write(true).open(knob).is_ok();
                if !writable {
                    return Some("needs a writable /sys/kernel/mm/transparent_hugepage".into());
                }
            }
            "qemu" => {
                let cache = std::env::var_os("FOLIOLAB_QEMU_CACHE")
                    .map(PathBuf::from)
                    .unwrap_or_else(|| PathBuf::from("/var/cache/foliolab/qemu"));
                if !cache.join("arm64/Image").exists() || !cache.join("plugin.so").exists() {
                    return Some(format!("needs scripts/setup-qemu's guests in {}", cache.display()));
                }
            }
            "kbuild" => {
                let src = foliolab::kbuild::cache_dir().join("src/6.12/identity");
                if !src.is_file() {
                    return Some(format!(
                        "needs scripts/setup-kbuild's source ({} is missing)",
                        src.display()
                    ));
                }
            }
            _ => {}
        }
    }
    None
}

/// A lock on a file (`flock`, exclusive or shared), released when dropped (or when the
/// process dies).
struct FileLock {
    _file: std::fs::File,
}

impl FileLock {
    fn take(path: &str, how: libc::c_int) -> FileLock {
        use std::os::fd::AsRawFd;
        let f = std::fs::File::create(path).unwrap();
        // SAFETY: flock on a descriptor this process owns; it changes no memory.
        let r = unsafe { libc::flock(f.as_raw_fd(), how) };
        assert_eq!(r, 0, "flock {path}");
        FileLock { _file: f }
    }

    /// `/tmp/foliolab-guide`, which the guide's commands write into.
    fn guide() -> FileLock {
        FileLock::take("/tmp/foliolab-guide.lock", libc::LOCK_EX)
    }

    /// The host, for one command of these tests: a `root` one, which runs work on the
    /// host, holds it alone; any other shares it. `validate` judges a global counter
    /// exactly when its idle window saw the host still, and any of these tests'
    /// commands starting after that window moves one: a calibration's or a recorded
    /// program's host run, and a model run too, whose arrays the host backs with 2 MiB
    /// pages (`vmstat.thp_fault_alloc` and `mthp.2048kB.anon_fault_alloc` moved by 4
    /// and 3 under a help example's `validate`).
    fn host(root: bool) -> FileLock {
        let how = if root { libc::LOCK_EX } else { libc::LOCK_SH };
        FileLock::take("/tmp/foliolab-docs-host.lock", how)
    }
}

/// The directory holding a `foliolab` that is the binary under test.
fn bin_dir(scratch: &Path) -> PathBuf {
    let dir = scratch.join("bin");
    std::fs::create_dir_all(&dir).unwrap();
    let link = dir.join("foliolab");
    let _ = std::fs::remove_file(&link);
    std::os::unix::fs::symlink(env!("CARGO_BIN_EXE_foliolab"), &link).unwrap();
    dir
}

#[test]
fn every_documented_command_runs_and_prints_what_the_text_shows() {
    let _lock = FileLock::guide();
    let guide = PathBuf::from("/tmp/foliolab-guide");
    let _ = std::fs::remove_dir_all(&guide);
    std::fs::create_dir_all(&guide).unwrap();
    let scratch = std::env::temp_dir().join(format!("foliolab-docs-{}", std::process::id()));
    let path = format!(
        "{}:{}",
        bin_dir(&scratch).display(),
        std::env::var("PATH").unwrap_or_default()
    );
    let (mut ran, mut skipped, mut failures) = (0, 0, Vec::new());
    let started = std::time::Instant::now();
    for (page, text) in pages() {
        for f in split(&text).0 {
            let mut words = f.info.split(',').map(str::trim);
            if words.next() != Some("console") {
                continue;
            }
            let flags: Vec<&str> = words.collect();
            let status: i32 = flags
                .iter()
                .find_map(|f| f.strip_prefix("exit="))
                .map(|n| n.parse().unwrap())
                .unwrap_or(0);
            if let Some(why) = unavailable(&flags) {
                for s in steps(&f) {
                    println!("SKIP {}:{}: `{}`: {why}", page.display(), f.line, s.cmd);
                    skipped += 1;
                }
                continue;
            }
            let _host = FileLock::host(flags.contains(&"root"));
            for s in steps(&f) {
                let out = Command::new("sh")
                    .arg("-c")
                    .arg(&s.cmd)
                    .current_dir(root())
                    .env("PATH", &path)
                    .env("FOLIOLAB_DB", guide.join("default.db"))
                    .output()
                    .unwrap();
                ran += 1;
                let stdout = String::from_utf8_lossy(&out.stdout);
                let lines: Vec<&str> = stdout.lines().collect();
                let at = format!("{}:{}: `{}`", page.display(), f.line, s.cmd);
                if out.status.code() != Some(status) {
                    failures.push(format!(
                        "{at}: exit {:?}, the text expects {status}\n{}{stdout}",
                        out.status.code(),
                        String::from_utf8_lossy(&out.stderr)
                    ));
                } else if !matches(&s.expect, &lines) {
                    failures.push(format!(
                        "{at}: output differs from the text\n--- text\n{}\n--- printed\n{stdout}",
                        s.expect.join("\n")
                    ));
                }
            }
        }
    }
    let _ = std::fs::remove_dir_all(&scratch);
    let _ = std::fs::remove_dir_all(&guide);
    println!(
        "docs: {ran} commands run, {skipped} skipped, in {:.1} s",
        started.elapsed().as_secs_f64()
    );
    assert!(failures.is_empty(), "{}", failures.join("\n\n"));
    assert!(ran > 10, "only {ran} documented commands ran");
}

/// A `foliolab` line outside a console block must be a synopsis, not a concrete
/// command that nothing runs.
#[test]
fn every_foliolab_line_outside_console_blocks_is_a_synopsis() {
    let mut concrete = Vec::new();
    for (page, text) in pages() {
        for f in split(&text).0 {
            if f.info.starts_with("console") {
                continue;
            }
            for (k, l) in f.body.iter().enumerate() {
                let t = l.trim_start().trim_start_matches("$ ");
                if !t.starts_with("foliolab ") {
                    continue;
                }
                let placeholder = t.contains('[')
                    || t.contains("...")
                    || t.split(|c: char| !c.is_ascii_alphanumeric() && c != '_')
                        .any(|w| w.len() >= 2 && w.chars().all(|c| c.is_ascii_uppercase() || c == '_'));
                if !placeholder {
                    concrete.push(format!("{}:{}: {t}", page.display(), f.line + 1 + k));
                }
            }
        }
    }
    assert!(
        concrete.is_empty(),
        "concrete commands outside console blocks (make them console blocks):\n{}",
        concrete.join("\n")
    );
}

/// mdBook's id for a heading: lower case, spaces to `-`, other punctuation dropped.
fn slug(heading: &str) -> String {
    heading
        .trim()
        .to_lowercase()
        .chars()
        .filter_map(|c| match c {
            ' ' => Some('-'),
            c if c.is_alphanumeric() || c == '-' || c == '_' => Some(c),
            _ => None,
        })
        .collect()
}

fn anchors(text: &str) -> BTreeSet<String> {
    split(text)
        .1
        .iter()
        .filter_map(|(_, l)| l.strip_prefix('#'))
        .map(|h| slug(h.trim_start_matches('#')))
        .collect()
}

/// The targets of the inline links `[text](target)` on a line, skipping code spans.
fn link_targets(line: &str) -> Vec<String> {
    let mut out = Vec::new();
    let mut in_code = false;
    let b = line.as_bytes();
    let mut i = 0;
    while i < b.len() {
        match b[i] {
            b'`' => in_code = !in_code,
            b']' if !in_code && b.get(i + 1) == Some(&b'(') => {
                if let Some(end) = line[i + 2..].find(')') {
                    out.push(line[i + 2..i + 2 + end].to_string());
                }
            }
            _ => {}
        }
        i += 1;
    }
    out
}

#[test]
fn every_relative_link_and_anchor_resolves() {
    let mut broken = Vec::new();
    let mut checked = 0;
    for (page, text) in pages() {
        for (n, line) in split(&text).1 {
            for target in link_targets(line) {
                if target.contains("://") || target.starts_with("mailto:") {
                    continue;
                }
                let (file, anchor) = target.split_once('#').unwrap_or((&target, ""));
                let dest = if file.is_empty() {
                    root().join(&page)
                } else {
                    root().join(page.parent().unwrap()).join(file)
                };
                checked += 1;
                if !dest.exists() {
                    broken.push(format!("{}:{n}: {target}: no such file", page.display()));
                } else if !anchor.is_empty() && dest.extension().is_some_and(|e| e == "md") {
                    let t = std::fs::read_to_string(&dest).unwrap();
                    if !anchors(&t).contains(anchor) {
                        broken.push(format!("{}:{n}: {target}: no heading #{anchor}", page.display()));
                    }
                }
            }
        }
    }
    assert!(broken.is_empty(), "broken links:\n{}", broken.join("\n"));
    assert!(checked > 20, "only {checked} links found: the link parser is broken");
}

#[test]
fn the_summary_lists_every_page_of_the_guide() {
    let src = root().join("docs/src");
    let summary = std::fs::read_to_string(src.join("SUMMARY.md")).unwrap();
    let listed: BTreeSet<String> = summary.lines().flat_map(link_targets).collect();
    let pages: BTreeSet<String> = pages()
        .into_iter()
        .filter_map(|(p, _)| p.strip_prefix("docs/src").ok().map(|p| p.display().to_string()))
        .filter(|p| p != "SUMMARY.md")
        .collect();
    let unlisted: Vec<_> = pages.difference(&listed).collect();
    assert!(unlisted.is_empty(), "pages not in SUMMARY.md: {unlisted:?}");
}

/// The subcommands whose help must end with examples.
const SUBCOMMANDS: &[&str] = &[
    "run",
    "native",
    "validate",
    "boot",
    "reproduce",
    "calibrate",
    "runs",
    "compare",
    "machines",
    "kernels",
    "record",
    "replay",
    "predict",
    "sweep",
    "bench",
    "kernel",
    "ab",
];

/// The commands whose examples take minutes (host runs, a kernel build, guest boots),
/// longest first: `every_help_ends_with_examples_that_run` starts them first.
const SLOW_FIRST: &[&str] = &["calibrate", "kernel", "reproduce", "ab", "native", "validate"];

/// The examples a help text ends with: `  foliolab ...` lines after `Examples:`, each
/// with the flags of its trailing `# root` or `# qemu` note.
fn help_examples(help: &str) -> Vec<(String, Vec<&'static str>)> {
    let Some((_, tail)) = help.split_once("Examples:\n") else {
        return vec![];
    };
    tail.lines()
        .map_while(|l| l.strip_prefix("  foliolab "))
        .map(|l| {
            let (cmd, note) = l.split_once("  # ").unwrap_or((l, ""));
            let flags = ["root", "qemu", "kbuild"]
                .into_iter()
                .filter(|f| note.split([',', ':']).any(|n| n.trim() == *f))
                .collect();
            (format!("foliolab {cmd}"), flags)
        })
        .collect()
}

#[test]
fn every_help_ends_with_examples_that_run() {
    let scratch = std::env::temp_dir().join(format!("foliolab-help-{}", std::process::id()));
    let _ = std::fs::remove_dir_all(&scratch);
    std::fs::create_dir_all(&scratch).unwrap();
    let path = format!(
        "{}:{}",
        bin_dir(&scratch).display(),
        std::env::var("PATH").unwrap_or_default()
    );
    let mut failures = Vec::new();
    let help = |args: &[&str]| {
        let out = Command::new(env!("CARGO_BIN_EXE_foliolab"))
            .args(args)
            .output()
            .unwrap();
        help_examples(&String::from_utf8_lossy(&out.stdout))
    };
    let top = help(&["--help"]);
    assert!(!top.is_empty(), "foliolab --help shows no examples");
    let mut groups = vec![("foliolab", top)];
    for sub in SUBCOMMANDS {
        let ex = help(&[sub, "--help"]);
        if !(2..=3).contains(&ex.len()) {
            failures.push(format!(
                "foliolab {sub} --help: {} examples, want two or three",
                ex.len()
            ));
        }
        groups.push((sub, ex));
    }
    // Each command's examples run on a store of their own; `compare`'s finds two runs
    // of one workload in it, as ids 1 and 2.
    let sh = |cmd: &str, db: &Path| {
        Command::new("sh")
            .arg("-c")
            .arg(cmd)
            .current_dir(root())
            .env("PATH", &path)
            .env("FOLIOLAB_DB", db)
            .output()
            .unwrap()
    };
    // Two workers take the commands longest first (calibrate's host runs, a kernel
    // build, reproduce, guest boots), each command's examples in order on its own
    // store: most examples keep one core busy (a guest, a host run), so one worker
    // would leave CI's second core idle for most of this test.
    groups.sort_by_key(|(sub, _)| SLOW_FIRST.iter().position(|s| s == sub).unwrap_or(SLOW_FIRST.len()));
    let queue = std::sync::Mutex::new(groups.into_iter());
    let failures = std::sync::Mutex::new(failures);
    std::thread::scope(|scope| {
        for _ in 0..2 {
            scope.spawn(|| loop {
                let Some((sub, examples)) = queue.lock().unwrap().next() else {
                    break;
                };
                let db = scratch.join(format!("{sub}.db"));
                if sub == "compare" {
                    let _host = FileLock::host(false);
                    for set in ["contpte=on", "contpte=off"] {
                        assert!(
                            sh(&format!("foliolab run workloads/mthp-fault-64k.wl --set {set}"), &db)
                                .status
                                .success()
                        );
                    }
                }
                for (cmd, flags) in examples {
                    // A timing's exit status depends on the machine's load: measured by
                    // CI's own run of the guard, never by a test.
                    if cmd.starts_with("foliolab bench") {
                        println!("SKIP `{cmd}`: a timing, not a test (.ci/run prints the guard)");
                        continue;
                    }
                    if let Some(why) = unavailable(&flags) {
                        println!("SKIP `{cmd}`: {why}");
                        continue;
                    }
                    let out = {
                        let _host = FileLock::host(flags.contains(&"root"));
                        sh(&cmd, &db)
                    };
                    if !out.status.success() {
                        failures.lock().unwrap().push(format!(
                            "`{cmd}`: exit {:?}\n{}{}",
                            out.status.code(),
                            String::from_utf8_lossy(&out.stderr),
                            String::from_utf8_lossy(&out.stdout)
                        ));
                    }
                }
            });
        }
    });
    let failures = failures.into_inner().unwrap();
    let _ = std::fs::remove_dir_all(&scratch);
    assert!(failures.is_empty(), "{}", failures.join("\n"));
}

#[test]
fn the_readme_fits_on_two_screens() {
    let n = std::fs::read_to_string(root().join("README.md"))
        .unwrap()
        .lines()
        .count();
    assert!(
        n <= 120,
        "README.md has {n} lines; move detail into the guide (docs/src)"
    );
}

mod matcher {
    use super::matches;

    fn s(v: &[&str]) -> Vec<String> {
        v.iter().map(|x| x.to_string()).collect()
    }

    #[test]
    fn an_ellipsis_matches_any_run_of_lines() {
        assert!(matches(&s(&["a", "...", "d"]), &["a", "b", "c", "d"]));
        assert!(matches(&s(&["a", "...", "d"]), &["a", "d"]));
        assert!(matches(&s(&["..."]), &[]));
    }

    #[test]
    fn a_changed_line_does_not_match() {
        assert!(!matches(&s(&["a", "b"]), &["a", "c"]));
        assert!(!matches(&s(&["a", "...", "d"]), &["a", "b", "e"]));
        assert!(!matches(&s(&["a"]), &["a", "extra"]));
    }
}
