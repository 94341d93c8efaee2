//! One output shape (issue 39): every key every command prints with `--json` is in
//! the output-keys reference (docs/src/reference/output-keys.md), listed for that
//! command, and the commands that report processes name them alike: `run`, `native`,
//! the QEMU target and `replay` of a recording of the same workload all say
//! `proc.main.minflt`. Commands that need root, writable THP knobs or QEMU are skipped
//! with the reason printed; the rest always run.

use std::collections::{BTreeMap, BTreeSet};
use std::path::{Path, PathBuf};
use std::process::Command;

const DOC: &str = "docs/src/reference/output-keys.md";

/// The reference's two tables: JSON paths (`| key | commands | ... |`) and counter
/// names (`| counter | commands | ... |`), each pattern with the commands it is for.
struct Doc {
    keys: Vec<(String, BTreeSet<String>)>,
    counters: Vec<(String, BTreeSet<String>)>,
}

impl Doc {
    fn parse(text: &str) -> Doc {
        let mut doc = Doc {
            keys: Vec::new(),
            counters: Vec::new(),
        };
        let mut table: Option<bool> = None; // Some(true): counters
        for line in text.lines() {
            let cells: Vec<&str> = line.trim().trim_matches('|').split('|').map(str::trim).collect();
            if !line.trim_start().starts_with('|') {
                table = None;
                continue;
            }
            match (table, cells[0]) {
                (None, "key") => table = Some(false),
                (None, "counter") => table = Some(true),
                (Some(c), first) if !first.starts_with("---") && cells.len() > 1 => {
                    let commands: BTreeSet<String> = cells[1].split(',').map(|c| c.trim().to_string()).collect();
                    for pat in code_spans(first) {
                        let list = if c { &mut doc.counters } else { &mut doc.keys };
                        list.push((pat, commands.clone()));
                    }
                }
                _ => {}
            }
        }
        assert!(
            !doc.keys.is_empty() && !doc.counters.is_empty(),
            "{DOC}: no key or counter table"
        );
        doc
    }

    fn key(&self, path: &str, cmd: &str) -> Result<(), String> {
        check(&self.keys, path, cmd)
    }

    /// A counter name; `cmd` when it must also be listed for that command (in a
    /// report's own counters), None where any command's counters may appear
    /// (`compare`'s rows, `validate`'s, `time.by_event`, ...).
    fn counter(&self, name: &str, cmd: Option<&str>) -> Result<(), String> {
        match cmd {
            Some(cmd) => check(&self.counters, name, cmd),
            None if self.counters.iter().any(|(p, _)| matches(p, name)) => Ok(()),
            None => Err(format!("counter `{name}` is not documented")),
        }
    }

    /// Whether the map at `path` is keyed by counter names.
    fn counter_map(&self, path: &str) -> bool {
        let p = format!("{path}.<counter>");
        self.keys.iter().any(|(k, _)| *k == p)
    }
}

fn check(list: &[(String, BTreeSet<String>)], name: &str, cmd: &str) -> Result<(), String> {
    let found: Vec<_> = list.iter().filter(|(p, _)| matches(p, name)).collect();
    if found.is_empty() {
        return Err(format!("`{name}` ({cmd}) is not documented"));
    }
    if found.iter().any(|(_, cmds)| cmds.contains(cmd)) {
        return Ok(());
    }
    Err(format!(
        "`{name}` is documented as `{}` but not for `{cmd}`",
        found[0].0
    ))
}

fn code_spans(cell: &str) -> Vec<String> {
    cell.split('`').skip(1).step_by(2).map(str::to_string).collect()
}

/// A glob where each `<placeholder>` stands for one or more characters.
fn matches(pat: &str, s: &str) -> bool {
    match pat.find('<') {
        None => pat == s,
        Some(i) => {
            let Some(rest) = s.strip_prefix(&pat[..i]) else {
                return false;
            };
            let after = &pat[i + pat[i..].find('>').expect("closed placeholder") + 1..];
            rest.char_indices()
                .skip(1)
                .map(|(j, _)| j)
                .chain([rest.len()])
                .any(|j| !rest.is_empty() && matches(after, &rest[j..]))
        }
    }
}

/// Walks one command's JSON, recording every undocumented key and counter in `errs`,
/// and returns how many keys it checked.
fn walk(doc: &Doc, cmd: &str, v: &serde_json::Value, path: &str, errs: &mut Vec<String>) -> usize {
    use serde_json::Value;
    match v {
        Value::Object(m) if doc.counter_map(path) => {
            let own = (path == "counters" || path.ends_with(".counters")) && !path.starts_with("time");
            for k in m.keys() {
                errs.extend(doc.counter(k, own.then_some(cmd)).err());
            }
            m.len()
        }
        Value::Object(m) => {
            let mut n = 0;
            for (k, x) in m {
                let p = if path.is_empty() {
                    k.clone()
                } else {
                    format!("{path}.{k}")
                };
                if k == "counter" {
                    errs.extend(x.as_str().and_then(|c| doc.counter(c, None).err()));
                }
                n += match x {
                    Value::Object(o) if !o.is_empty() && doc.keys.iter().all(|(d, _)| !matches(d, &p)) => {
                        walk(doc, cmd, x, &p, errs)
                    }
                    Value::Array(a) if a.iter().any(Value::is_object) => walk(doc, cmd, x, &p, errs),
                    _ => {
                        errs.extend(doc.key(&p, cmd).err());
                        1
                    }
                };
            }
            n
        }
        Value::Array(a) => a.iter().map(|x| walk(doc, cmd, x, &format!("{path}[]"), errs)).sum(),
        _ => {
            errs.extend(doc.key(path, cmd).err());
            1
        }
    }
}

fn bin() -> &'static str {
    env!("CARGO_BIN_EXE_foliolab")
}

fn root() -> &'static Path {
    Path::new(env!("CARGO_MANIFEST_DIR"))
}

/// `foliolab ARGS` from the crate root, its stdout as JSON.
fn json(db: &Path, args: &[&str]) -> serde_json::Value {
    let out = Command::new(bin())
        .current_dir(root())
        .arg("--db")
        .arg(db)
        .args(args)
        .output()
        .unwrap();
    assert!(
        out.status.success(),
        "foliolab {}: {}",
        args.join(" "),
        String::from_utf8_lossy(&out.stderr)
    );
    serde_json::from_slice(&out.stdout).unwrap_or_else(|e| panic!("foliolab {}: {e}", args.join(" ")))
}

/// Why the host cannot run `native`, if it cannot.
fn host_skip() -> Option<String> {
    // SAFETY: geteuid has no preconditions.
    if unsafe { libc::geteuid() } != 0 {
        return Some("not root: native needs the THP knobs, recording tracepoint events".into());
    }
    let probe = "/sys/kernel/mm/transparent_hugepage/hugepages-64kB/enabled";
    std::fs::OpenOptions::new()
        .write(true)
        .open(probe)
        .err()
        .map(|e| format!("{probe} not writable: {e}"))
}

/// Builds tests/programs/mthp_fault_64k.c as `main` (its process's name in the
/// workload) and records it, with the host's THP knobs as they are.
fn recording(dir: &Path) -> PathBuf {
    let exe = dir.join("main");
    let out = Command::new("cc")
        .args(["-O1", "-o"])
        .arg(&exe)
        .arg(root().join("tests/programs/mthp_fault_64k.c"))
        .output()
        .expect("cc");
    assert!(out.status.success(), "{}", String::from_utf8_lossy(&out.stderr));
    let trc = dir.join("main.trc");
    let out = Command::new(bin())
        .args(["--no-store", "record", "--no-aslr", "-o"])
        .arg(&trc)
        .arg("--")
        .arg(&exe)
        .output()
        .unwrap();
    assert!(out.status.success(), "record: {}", String::from_utf8_lossy(&out.stderr));
    trc
}

fn proc_keys(r: &serde_json::Value) -> BTreeSet<String> {
    r["counters"]
        .as_object()
        .unwrap()
        .keys()
        .filter(|k| k.starts_with("proc.") && k.ends_with(".minflt"))
        .cloned()
        .collect()
}

/// One output: the command it is documented under, its arguments, its JSON.
type Output = (String, String, serde_json::Value);

/// `foliolab ARGS` as an output of `cmd`; a `{"runs": [...]}` of `--each` gives one
/// report per run (the `runs` key itself is checked as documented for `cmd`).
fn add(out: &mut Vec<Output>, db: &Path, cmd: &str, args: &[&str]) {
    let v = json(db, args);
    match v.get("runs").and_then(|r| r.as_array()) {
        Some(runs) if args.contains(&"--each") => {
            out.push((cmd.into(), args.join(" "), serde_json::json!({ "runs": [] })));
            out.extend(runs.iter().map(|r| (cmd.to_string(), args.join(" "), r.clone())));
        }
        _ => out.push((cmd.into(), args.join(" "), v)),
    }
}

/// Every `--json` output this host can produce, and what it cannot, with the reason.
fn outputs(dir: &Path, db: &Path) -> (Vec<Output>, Vec<String>) {
    let mut out = Vec::new();
    let mut skipped = Vec::new();
    let wl = "workloads/mthp-fault-64k.wl";
    let fork = "tests/validation/fork_cow.wl";
    let a = dir.join("a.json");
    let b = dir.join("b.json");
    std::fs::write(&a, json(db, &["run", "--json", fork]).to_string()).unwrap();
    std::fs::write(
        &b,
        json(db, &["run", "--json", "--set", "zap=per-pte", fork]).to_string(),
    )
    .unwrap();
    let o = &mut out;
    add(o, db, "run", &["run", "--json", fork]);
    add(o, db, "run", &["run", "--json", wl]);
    add(o, db, "run", &["run", "--json", "--machine", "m2-vm", fork]);
    add(o, db, "run", &["run", "--json", "--each", "zap=per-pte,batched", fork]);
    add(o, db, "replay", &["replay", "--json", "tests/fuzz/forks.trc"]);
    add(
        o,
        db,
        "replay",
        &["replay", "--json", "--machine", "m2-vm", "tests/fuzz/forks.trc"],
    );
    add(
        o,
        db,
        "replay",
        &["replay", "--json", "--each", "thp=off,64K", "tests/fuzz/forks.trc"],
    );
    add(
        o,
        db,
        "compare",
        &["compare", "--json", a.to_str().unwrap(), b.to_str().unwrap()],
    );
    add(o, db, "runs", &["runs", "--json"]);
    add(o, db, "kernels", &["kernels", "--json"]);
    add(o, db, "boot", &["boot", "--json", "--ram", "4G"]);
    add(o, db, "reproduce", &["reproduce", "--json", "003"]);
    match host_skip() {
        Some(why) => skipped.push(format!("native, validate, record and replay of a recording: {why}")),
        None => {
            add(o, db, "native", &["native", "--json", fork]);
            add(o, db, "native", &["native", "--json", wl]);
            add(o, db, "validate", &["validate", "--json", fork]);
            let trc = recording(dir);
            let knob = "hugepages-64kB/enabled=always";
            add(
                o,
                db,
                "replay",
                &["replay", "--json", "--thp", knob, trc.to_str().unwrap()],
            );
        }
    }
    match foliolab::native::qemu::missing(foliolab::native::qemu::Target::QemuArm64) {
        Some(why) => skipped.push(format!("native and validate --target qemu-arm64: {why}")),
        None => {
            add(
                o,
                db,
                "qemu-arm64",
                &["native", "--json", "--target", "qemu-arm64", fork],
            );
            add(
                o,
                db,
                "validate",
                &["validate", "--json", "--target", "qemu-arm64", fork],
            );
        }
    }
    (out, skipped)
}

#[test]
fn every_key_every_command_prints_is_documented_and_processes_are_named_alike() {
    let doc = Doc::parse(&std::fs::read_to_string(root().join(DOC)).unwrap());
    let dir = std::env::temp_dir().join(format!("foliolab-output-keys-{}", std::process::id()));
    std::fs::create_dir_all(&dir).unwrap();
    let (outputs, skipped) = outputs(&dir, &dir.join("results.db"));
    for s in &skipped {
        println!("SKIP (part) every_key_every_command_prints_is_documented: {s}");
    }
    let mut errs = Vec::new();
    let mut checked = 0;
    for (cmd, args, v) in &outputs {
        let before = errs.len();
        checked += walk(&doc, cmd, v, "", &mut errs);
        for e in &mut errs[before..] {
            *e = format!("foliolab {args}: {e}");
        }
    }
    errs.sort();
    errs.dedup();
    assert!(
        errs.is_empty(),
        "{} undocumented in {DOC}:\n{}",
        errs.len(),
        errs.join("\n")
    );
    let commands: BTreeSet<&str> = outputs.iter().map(|(c, _, _)| c.as_str()).collect();
    println!(
        "checked {checked} keys from {} outputs of {} commands ({}) against {} key and {} counter patterns",
        outputs.len(),
        commands.len(),
        commands.iter().copied().collect::<Vec<_>>().join(", "),
        doc.keys.len(),
        doc.counters.len()
    );

    // The same workload's processes carry the same keys whatever ran it: `run`,
    // `native`, the QEMU target, and the replay of a recording of it.
    let mut procs: BTreeMap<String, BTreeSet<String>> = BTreeMap::new();
    for (cmd, args, v) in &outputs {
        let same = args.ends_with("fork_cow.wl") && !args.contains("--each") && v.get("counters").is_some();
        let recorded = args.ends_with("main.trc") || args.ends_with("mthp-fault-64k.wl");
        if same || recorded {
            procs.insert(format!("{cmd}: {args}"), proc_keys(v));
        }
    }
    for (args, keys) in &procs {
        let want: &[&str] = if args.ends_with("fork_cow.wl") {
            &["proc.child.minflt", "proc.main.minflt"]
        } else {
            &["proc.main.minflt"]
        };
        let want: BTreeSet<String> = want.iter().map(|s| s.to_string()).collect();
        assert_eq!(*keys, want, "foliolab {args}");
    }
    let _ = std::fs::remove_dir_all(&dir);
}

#[test]
fn an_undocumented_key_fails() {
    let doc = Doc::parse(
        "| key | commands | what |\n|---|---|---|\n| `counters.<counter>` | run | x |\n\n\
         | counter | commands | what |\n|---|---|---|\n| `proc.<name>.minflt` | run | x |\n| `mthp.<size>kB.<stat>` | run | x |\n",
    );
    let report = serde_json::json!({"counters": {"proc.main.minflt": 1, "mthp.64kB.split": 0}});
    let mut errs = Vec::new();
    assert_eq!(walk(&doc, "run", &report, "", &mut errs), 2);
    assert!(errs.is_empty(), "{errs:?}");
    let report = serde_json::json!({"counters": {"proc.main.majflt": 1}, "source": "model"});
    walk(&doc, "run", &report, "", &mut errs);
    assert_eq!(
        errs,
        [
            "`proc.main.majflt` (run) is not documented",
            "`source` (run) is not documented"
        ]
    );
    errs.clear();
    walk(
        &doc,
        "replay",
        &serde_json::json!({"counters": {"proc.main.minflt": 1}}),
        "",
        &mut errs,
    );
    assert_eq!(
        errs,
        ["`proc.main.minflt` is documented as `proc.<name>.minflt` but not for `replay`"]
    );
}

#[test]
fn placeholders_stand_for_one_or_more_characters() {
    assert!(matches("proc.<name>.minflt", "proc.cc1.minflt"));
    assert!(matches("proc.<name>.minflt", "proc.a.b.minflt"));
    assert!(!matches("proc.<name>.minflt", "proc..minflt"));
    assert!(!matches("proc.<name>.minflt", "unmodeled.proc.a.minflt"));
    assert!(matches("mthp.<size>kB.<stat>", "mthp.64kB.split"));
    assert!(!matches("mthp.<size>kB.<stat>", "mthp.64kB."));
}
