//! Same input, same output: two runs of one workload give byte-identical JSON, and
//! the model's result does not depend on how many threads the test harness uses.

use foliolab::sim::{self, Variants};
use foliolab::workload::parse_file;

fn json(path: &str, sets: &[&str]) -> String {
    let w = parse_file(path).unwrap();
    let v = Variants::from_sets(&sets.iter().map(|s| s.to_string()).collect::<Vec<_>>()).unwrap();
    serde_json::to_string(&sim::run(&w, &v).unwrap()).unwrap()
}

#[test]
fn two_runs_give_identical_json() {
    for (p, sets) in [
        ("tests/validation/mthp_64k_dontneed_retouch.wl", &[][..]),
        (
            "tests/validation/pmd_partial_munmap.wl",
            &["zap=per-pte", "checks=on"][..],
        ),
        (
            "tests/validation/dontneed_step_64k.wl",
            &["tlbi-range=on", "kpti=on"][..],
        ),
        ("tests/validation/swap_fork_both.wl", &["checks=on"][..]),
    ] {
        let a = json(p, sets);
        let b = std::thread::spawn({
            let p = p.to_string();
            let sets: Vec<String> = sets.iter().map(|s| s.to_string()).collect();
            move || json(&p, &sets.iter().map(|s| s.as_str()).collect::<Vec<_>>())
        })
        .join()
        .unwrap();
        assert_eq!(a, b, "{p}");
        assert!(a.contains("\"layout\""));
    }
}
