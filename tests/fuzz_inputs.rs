//! Fuzzing kept in the project: proptest generators for the two inputs a user writes
//! by hand, workloads (parser and checker, then the model on what they accept) and
//! machine profiles. Nothing may panic; every refusal is one `LINE:COL` message with
//! no control byte in it. CI runs the case counts below with `cargo test` (a few
//! seconds each); `PROPTEST_CASES=100000 cargo test --test fuzz_inputs` fuzzes longer.
//! A failure found is kept in fuzz_inputs.proptest-regressions and replayed first
//! on every later run.

use foliolab::report::{Counters, Report};
use foliolab::sim::{self, Variants};
use foliolab::time::{self, Lookup, Profile};
use foliolab::workload::{self, parse_str};
use proptest::prelude::*;
use proptest::test_runner::{Config, FileFailurePersistence};

/// `cases` cases (CI), or `$PROPTEST_CASES` when set, to fuzz longer.
fn config(cases: u32) -> Config {
    Config {
        cases: std::env::var("PROPTEST_CASES")
            .ok()
            .and_then(|n| n.parse().ok())
            .unwrap_or(cases),
        failure_persistence: Some(Box::new(FileFailurePersistence::WithSource("proptest-regressions"))),
        ..Config::default()
    }
}

/// Tokens a workload line is built from: the grammar's words, edge values of its
/// numbers and sizes, and bytes no line should hold.
fn token() -> impl Strategy<Value = String> {
    let words = [
        "mmap",
        "touch",
        "madvise",
        "munmap",
        "mprotect",
        "mlock",
        "munlock",
        "fork",
        "exit",
        "repeat",
        "end",
        "mark",
        "set",
        "swapon",
        "memlimit",
        "thread",
        "threads",
        "all",
        "cpu",
        "shrink",
        "migrate",
        "mremap",
        "move",
        "a",
        "b",
        "c",
        "@c",
        "@main",
        "@b",
        "read",
        "write",
        "hugepage",
        "nohugepage",
        "populate",
        "ro",
        "r",
        "rw",
        "none",
        "dontneed",
        "free",
        "pageout",
        "cold",
        "collapse",
        "enabled",
        "always",
        "never",
        "madvise",
        "defrag",
        "hugepages-64kB/enabled",
        "inherit",
        "node=0",
        "node=1",
        "node=99",
        "stride=4K",
        "stride=0",
        "step=4K",
        "skew=4K",
        "skew=1M",
    ];
    let numbers = [
        "0",
        "1",
        "2",
        "3",
        "4K",
        "8K",
        "12K",
        "64K",
        "2M",
        "4097",
        "1G",
        "32G",
        "33G",
        "16T",
        "128T",
        "32m",
        "4KB",
        "0x1000",
        "0x",
        "1.5M",
        "-1",
        "18446744073709551615",
        "18446744073709551616",
        "4000000000",
        "99999999999T",
    ];
    let odd = [
        "\u{1b}[2J",
        "\u{7}",
        "\u{0}",
        "é",
        "#",
        "\u{feff}",
        "\t",
        "\r",
        "@",
        "=",
        "a b",
    ];
    prop_oneof![
        6 => prop::sample::select(words.to_vec()).prop_map(str::to_string),
        4 => prop::sample::select(numbers.to_vec()).prop_map(str::to_string),
        1 => prop::sample::select(odd.to_vec()).prop_map(str::to_string),
        1 => "[ -~]{0,12}",
    ]
}

/// A workload: lines of 0 to 6 tokens, indented at random.
fn workload_text() -> impl Strategy<Value = String> {
    let line = (0..3usize, prop::collection::vec(token(), 0..6))
        .prop_map(|(indent, toks)| "  ".repeat(indent) + &toks.join(" "));
    prop::collection::vec(line, 0..24).prop_map(|lines| lines.join("\n"))
}

/// Workloads that mostly make sense, so the checker accepts them and the model runs
/// them: two regions, an optional swap device and child, then ops inside the regions,
/// maybe in a repeat.
fn valid_ish_text() -> impl Strategy<Value = String> {
    let region = prop::sample::select(vec!["a", "b"]);
    let off = prop::sample::select(vec!["0", "4K", "60K", "1M"]);
    let len = prop::sample::select(vec!["4K", "8K", "64K", "1M"]);
    let op = prop_oneof![
        3 => (region.clone(), prop::sample::select(vec!["", " read", " 0 64K", " 4K 8K write", " 0 2M read stride=64K"]))
            .prop_map(|(r, o)| format!("touch {r}{o}")),
        3 => (region.clone(), off.clone(), len.clone(), prop::sample::select(vec!["dontneed", "free", "pageout", "cold", "collapse", "hugepage", "nohugepage"]))
            .prop_map(|(r, o, l, a)| format!("madvise {r} {o} {l} {a}")),
        1 => (region.clone(), off.clone(), len.clone()).prop_map(|(r, o, l)| format!("mprotect {r} {o} {l} rw")),
        1 => (region.clone(), off.clone(), len.clone()).prop_map(|(r, o, l)| format!("mlock {r} {o} {l}")),
        1 => (region.clone(), off, len).prop_map(|(r, o, l)| format!("munlock {r} {o} {l}")),
        1 => (region.clone(), prop::sample::select(vec!["0 64K", "1M 64K"])).prop_map(|(r, o)| format!("migrate {r} {o} node=1")),
        2 => region.prop_map(|r| format!("@c touch {r} 0 64K")),
        1 => Just("mark m".to_string()),
        1 => Just("shrink".to_string()),
        1 => prop::sample::select(vec!["always", "never", "inherit"]).prop_map(|m| format!("set hugepages-64kB/enabled {m}")),
    ];
    (any::<bool>(), any::<bool>(), prop::collection::vec(op, 1..16)).prop_map(|(swap, repeat, ops)| {
        let mut text = String::from("mmap a 4M\nmmap b 2M hugepage\nfork c\n");
        if swap {
            text += "swapon 64M\n";
        }
        let body = ops.join("\n");
        if repeat {
            text + "repeat 2\n" + &body + "\nend\n"
        } else {
            text + &body + "\n"
        }
    })
}

/// A refusal is `t.wl:LINE:COL: message`: see `assert_positioned`.
fn assert_clean_error(e: &dyn std::fmt::Display) {
    let text = e.to_string();
    assert_positioned(
        text.strip_prefix("t.wl:")
            .unwrap_or_else(|| panic!("no path: {text:?}")),
    );
}

/// `LINE:COL: message` on one line, at a real position, short, and showing no control
/// byte of the input.
fn assert_positioned(text: &str) {
    let mut parts = text.splitn(3, ':');
    let line: u32 = parts
        .next()
        .and_then(|l| l.parse().ok())
        .unwrap_or_else(|| panic!("no line: {text:?}"));
    let col: u32 = parts
        .next()
        .and_then(|c| c.parse().ok())
        .unwrap_or_else(|| panic!("no column: {text:?}"));
    assert!(line >= 1 && col >= 1, "{text:?}");
    assert!(!text.chars().any(char::is_control), "a control byte in {text:?}");
    assert!(text.len() < 2000, "{} bytes", text.len());
}

/// Runs an accepted workload on a small model machine; it must finish or fail with a
/// positioned error, never panic.
fn run_small(w: &workload::Workload) {
    if sim::progress::total_ops(&w.stmts) > 5_000 {
        return;
    }
    let v = Variants::from_sets(&["ram=256M".into(), "cpus=2".into(), "nodes=2".into()]).unwrap();
    if let Err(e) = sim::run(w, &v) {
        if let sim::SimError::Failed { .. } = e {
            assert_clean_error(&e);
        }
    }
}

/// Parses `text`: a refusal must be clean, an accepted workload runs on the model.
fn parse_and_run(text: &str) {
    match parse_str("t.wl", text) {
        Ok(w) => run_small(&w),
        Err(e) => assert_clean_error(&e),
    }
}

proptest! {
    #![proptest_config(config(2000))]

    #[test]
    fn workload_parser_and_checker_never_panic(text in workload_text()) {
        parse_and_run(&text);
    }

    #[test]
    fn arbitrary_bytes_are_refused_cleanly(bytes in prop::collection::vec(any::<u8>(), 0..200)) {
        if let Err(e) = parse_str("t.wl", &String::from_utf8_lossy(&bytes)) {
            assert_clean_error(&e);
        }
    }
}

proptest! {
    #![proptest_config(config(150))]

    #[test]
    fn accepted_workloads_run_on_the_model(text in valid_ish_text()) {
        parse_and_run(&text);
    }
}

/// Edge values for a profile's numbers.
fn number() -> impl Strategy<Value = String> {
    prop_oneof![
        3 => prop::sample::select(vec!["0", "-1", "nan", "inf", "-inf", "1e300", "1e15", "1e9", "0.0001", "3", "2.5", "0.1", "10", "4294967296", "\"x\""]).prop_map(str::to_string),
        1 => any::<f64>().prop_map(|f| format!("{f:?}")),
    ]
}

/// A built-in profile, changed one way: a number replaced, the text cut, or a line
/// added.
fn profile_text() -> impl Strategy<Value = String> {
    let base = 0..time::profile::BUILTIN.len();
    let lines = prop::sample::select(vec![
        "[[cost]]",
        "events = [\"arch.isb\"]",
        "ns = 1e300",
        "quality = \"M\"",
        "quality = \"NONE\"",
        "source = \"\"",
        "clock_ghz = 0",
        "cpus = 0",
        "x = \u{1b}",
        "[tlb",
    ]);
    (base, 0..3u8, any::<prop::sample::Index>(), number(), lines).prop_map(|(b, how, at, num, line)| {
        let text = time::profile::BUILTIN[b].1;
        match how {
            0 => {
                let spots: Vec<usize> = text
                    .match_indices("= ")
                    .map(|(i, _)| i + 2)
                    .filter(|&i| text[i..].starts_with(|c: char| c.is_ascii_digit()))
                    .collect();
                let i = spots[at.index(spots.len())];
                let end = i + text[i..].find(['\n', ',', ']']).unwrap_or(text.len() - i);
                format!("{}{num}{}", &text[..i], &text[end..])
            }
            1 => {
                let mut i = at.index(text.len() + 1);
                while !text.is_char_boundary(i) {
                    i -= 1;
                }
                text[..i].to_string()
            }
            _ => {
                let ls: Vec<&str> = text.lines().collect();
                let i = at.index(ls.len() + 1);
                [&ls[..i], &[line], &ls[i..]].concat().join("\n")
            }
        }
    })
}

proptest! {
    #![proptest_config(config(1000))]

    #[test]
    fn profiles_are_validated_and_never_overflow(text in profile_text()) {
        match Profile::parse(&text) {
            Err(e) => assert_positioned(&e),
            Ok(p) => {
                prop_assert!(time::profile::CLOCK_GHZ.contains(&p.clock_ghz));
                // Every costed event at the largest count: the sums must neither wrap
                // nor panic, and scaling by another profile's clock keeps them so.
                let counters: Counters = p
                    .cost
                    .iter()
                    .flat_map(|c| c.events.clone())
                    .filter(|e| matches!(p.lookup(e), Lookup::Costed(..)))
                    .map(|e| (e, i64::MAX))
                    .collect();
                let r = Report { counters, ..Report::default() };
                let m = time::model(&p, &r);
                prop_assert!(m.total_ps >= 0);
                let (scaled, _) = Profile::load("generic").unwrap().with_software(&p);
                prop_assert!(time::model(&scaled, &r).total_ps >= 0);
            }
        }
    }
}

/// The generators reach the code past the parser: a fuzzer whose every input is
/// refused at the first token would test nothing.
#[test]
fn the_generators_produce_accepted_inputs() {
    use proptest::strategy::ValueTree;
    let mut runner = proptest::test_runner::TestRunner::deterministic();
    let mut accepted =
        |s: &dyn Fn(&mut proptest::test_runner::TestRunner) -> bool| (0..200).filter(|_| s(&mut runner)).count();
    let wl = accepted(&|r| parse_str("t.wl", &valid_ish_text().new_tree(r).unwrap().current()).is_ok());
    let any_wl = accepted(&|r| parse_str("t.wl", &workload_text().new_tree(r).unwrap().current()).is_ok());
    let prof = accepted(&|r| Profile::parse(&profile_text().new_tree(r).unwrap().current()).is_ok());
    assert!(wl >= 100, "{wl} of 200 valid-ish workloads accepted");
    assert!(any_wl >= 4, "{any_wl} of 200 random workloads accepted");
    assert!((20..180).contains(&prof), "{prof} of 200 mutated profiles accepted");
}
