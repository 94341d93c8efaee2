//! The model against the host results saved beside every workload of the validation
//! suite (tests/validation/<name>.host.json, recorded with `foliolab native` on Linux
//! 6.18). Per-process faults and layouts must match exactly, and so must the split and
//! swap counters the workloads drive (`cmd::validate::exact_global`).

use foliolab::cmd::validate::{compare, target_variants};
use foliolab::native::qemu::Target;
use foliolab::report::Report;
use foliolab::sim::kernels::Release;
use foliolab::workload::parse_file;

/// The release the saved host results were recorded on: the model runs its preset,
/// as `validate` against that host does, not the default (a newer release).
const RECORDED_ON: Release = Release(6, 18);

#[test]
fn the_model_agrees_with_the_saved_host_results() {
    let mut paths: Vec<_> = std::fs::read_dir("tests/validation")
        .unwrap()
        .map(|e| e.unwrap().path())
        .filter(|p| p.extension().is_some_and(|e| e == "wl"))
        .collect();
    paths.sort();
    assert!(paths.len() >= 40, "the suite has {} workloads", paths.len());
    let (mut agree, mut failed) = (Vec::new(), Vec::new());
    let v = target_variants(Target::Host, Some(RECORDED_ON), &[]).unwrap();
    for p in &paths {
        let name = p.file_name().unwrap().to_string_lossy().to_string();
        let w = parse_file(p.to_str().unwrap()).unwrap();
        let model = match foliolab::sim::run(&w, &v) {
            Ok(r) => r,
            Err(e) => {
                failed.push(format!("{name}: model failed: {e}"));
                continue;
            }
        };
        let host: Report =
            serde_json::from_str(&std::fs::read_to_string(p.with_extension("host.json")).unwrap()).unwrap();
        let c = compare(&model, &host);
        let mut m = c.exact_mismatches();
        m.extend(c.global_mismatches());
        match m {
            m if m.is_empty() => agree.push(name),
            m => failed.push(format!("{name}:\n    {}", m.join("\n    "))),
        }
    }
    println!("agree ({}): {}", agree.len(), agree.join(" "));
    assert!(failed.is_empty(), "{} disagree:\n{}", failed.len(), failed.join("\n"));
}
