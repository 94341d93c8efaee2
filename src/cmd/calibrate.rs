//! `foliolab calibrate [--suite DIR] [--out PATH] [--json]`: measure this host's costs of
//! the generic mm software, write them as the `host` machine profile, and state the
//! model's time error on workloads the fit never saw.
//!
//! The fit uses the calibration workloads (calibrate/*.wl, built in) and every other
//! workload of the validation suite; the rest of the suite is held out, and each held-out
//! workload's modeled time on the `host` profile is set against its measured time.
//! Every workload runs three times on the host, and each phase's time is the fastest.
//! There is no PMD THP calibration workload: a PMD fault's time on the host is mostly
//! its direct compaction, which depends on the host's fragmentation, not the workload.

use crate::report::Report;
use crate::time::calibrate::{fit, host_profile, median_and_worst, predict, samples, Sample, FEATURES, MIN_FIT_NS};
use crate::workload::{parse_str, Workload};
use serde::Serialize;
use std::process::ExitCode;

#[derive(clap::Args)]
pub struct Args {
    /// The validation suite, split into fitted and held-out halves.
    #[arg(long, default_value = "tests/validation", value_name = "DIR")]
    pub suite: String,
    /// Where to write the profile (default: the `host` profile in the data directory).
    #[arg(long, value_name = "PATH")]
    pub out: Option<std::path::PathBuf>,
    /// The profile's name (`calibrated` is the one committed in machines/).
    #[arg(long, default_value = crate::time::profile::HOST)]
    pub name: String,
    /// Print the fit and the held-out errors as JSON.
    #[arg(long)]
    pub json: bool,
    /// Measure only x86's TLB shootdown (IPI, INVLPG, full flush) and put its costs
    /// into the existing profile at --out (or the host profile), keeping the others.
    #[arg(long)]
    pub shootdown_only: bool,
}

/// The calibration workloads, built into the binary.
const WORKLOADS: &[(&str, &str)] = &[
    (
        "calibrate/fault-order0.wl",
        include_str!("../../calibrate/fault-order0.wl"),
    ),
    ("calibrate/fault-16k.wl", include_str!("../../calibrate/fault-16k.wl")),
    ("calibrate/fault-64k.wl", include_str!("../../calibrate/fault-64k.wl")),
    ("calibrate/read-zero.wl", include_str!("../../calibrate/read-zero.wl")),
    (
        "calibrate/dontneed-step.wl",
        include_str!("../../calibrate/dontneed-step.wl"),
    ),
    ("calibrate/cow.wl", include_str!("../../calibrate/cow.wl")),
    ("calibrate/mprotect.wl", include_str!("../../calibrate/mprotect.wl")),
];

#[derive(Serialize)]
struct Fitted {
    workload: String,
    phase: String,
    measured_ns: f64,
    predicted_ns: f64,
    error: f64,
}

#[derive(Serialize)]
struct HeldOut {
    workload: String,
    measured_ns: f64,
    predicted_ns: f64,
    error: f64,
}

#[derive(Serialize)]
struct Outcome {
    profile: String,
    costs_ns: std::collections::BTreeMap<String, f64>,
    fit: Vec<Fitted>,
    held_out: Vec<HeldOut>,
    median_error: f64,
    worst_error: f64,
}

/// Host runs per workload: each phase's time is the fastest of them, the one other
/// processes disturbed least (the counts are the same in every run).
const RUNS: usize = 3;

/// Model (the host's release, contpte off: the host has no contiguous bit) and host
/// reports of `w`.
fn both(w: &Workload) -> Result<(Report, Report), String> {
    let v = super::validate::target_variants(crate::native::qemu::Target::Host, None, &["contpte=off".into()])?;
    let model = crate::sim::run(w, &v).map_err(|e| e.to_string())?;
    let mut host = crate::native::run(w).map_err(|e| format!("host: {e}"))?;
    for _ in 1..RUNS {
        let again = crate::native::run(w).map_err(|e| format!("host: {e}"))?;
        for (p, q) in host.phases.iter_mut().zip(&again.phases) {
            p.time_ns = match (p.time_ns, q.time_ns) {
                (Some(a), Some(b)) => Some(a.min(b)),
                (a, b) => a.or(b),
            };
        }
    }
    Ok((model, host))
}

/// The profile entries of x86's shootdown, measured here; if the host cannot measure
/// them, NONE entries saying why.
fn shootdown_costs(what: &str) -> (Vec<crate::time::profile::Cost>, String) {
    match crate::time::ipi::measure() {
        Ok(m) => {
            let line = format!(
                "shootdown: IPI round {:.1} ns, remote INVLPG {:.1} ns, remote full flush {:.1} ns ({:.3} shootdowns received per drop)",
                m.ipi_ns, m.invlpg_ns, m.flush_all_ns, m.received_per_drop
            );
            (crate::time::ipi::costs(&m, what), line)
        }
        Err(why) => {
            let none = crate::time::profile::Cost {
                events: vec!["arch.ipi".into(), "arch.tlbi.vale1".into(), "arch.tlbi.aside1".into()],
                ns: None,
                quality: crate::time::Quality::None,
                source: format!("foliolab calibrate on {what}"),
                rows: Vec::new(),
                note: Some(why.clone()),
                derived_from_seed: None,
                seed_relation: None,
            };
            (vec![none], format!("shootdown: not measured: {why}"))
        }
    }
}

/// Replace `p`'s costs of the events in `new` with `new`.
fn put_costs(p: &mut crate::time::Profile, new: Vec<crate::time::profile::Cost>) {
    let events: Vec<&String> = new.iter().flat_map(|c| &c.events).collect();
    p.cost.retain(|c| !c.events.iter().any(|e| events.contains(&e)));
    p.cost.extend(new);
}

/// `--shootdown-only`: the shootdown costs into an existing profile.
fn shootdown_only(a: &Args) -> super::CmdResult {
    let path = match &a.out {
        Some(p) => p.clone(),
        None => crate::time::profile::host_path().ok_or("no HOME or XDG_DATA_HOME for the host profile")?,
    };
    let text =
        std::fs::read_to_string(&path).map_err(|e| format!("{}: {e} (run a full calibrate first)", path.display()))?;
    let (costs, line) = shootdown_costs(&host_description());
    // The file as it is, less its [[cost]] blocks of these events, plus the new ones:
    // parsing and writing it back would fill in the shared defaults it leaves out.
    let events: Vec<String> = costs
        .iter()
        .flat_map(|c| c.events.iter().map(|e| format!("\"{e}\"")))
        .collect();
    let mut blocks: Vec<&str> = text.split("\n[[cost]]\n").collect();
    blocks.retain(|b| {
        !b.lines()
            .next()
            .is_some_and(|l| events.iter().any(|e| l.contains(e.as_str())))
    });
    #[derive(serde::Serialize)]
    struct Costs {
        cost: Vec<crate::time::profile::Cost>,
    }
    let out = blocks.join("\n[[cost]]\n").trim_end().to_string() + "\n\n" + &toml::to_string(&Costs { cost: costs })?;
    crate::time::Profile::parse(&out)?.check()?;
    std::fs::write(&path, out).map_err(|e| format!("{}: {e}", path.display()))?;
    super::emit(&format!("{line}\nwritten to {}\n", path.display()))?;
    Ok(ExitCode::SUCCESS)
}

pub fn main(a: Args) -> super::CmdResult {
    if a.shootdown_only {
        return shootdown_only(&a);
    }
    let mut suite: Vec<String> = std::fs::read_dir(&a.suite)
        .map_err(|e| format!("--suite {}: {e}", a.suite))?
        .filter_map(|e| e.ok().map(|e| e.path()))
        .filter(|p| p.extension().is_some_and(|x| x == "wl"))
        .map(|p| p.display().to_string())
        .collect();
    suite.sort();
    let mut train = Vec::new();
    for (name, text) in WORKLOADS {
        train.push(parse_str(name, text)?);
    }
    let mut held = Vec::new();
    for (i, p) in suite.iter().enumerate() {
        let w = crate::workload::parse_file(p)?;
        if i % 2 == 0 {
            train.push(w);
        } else {
            held.push(w);
        }
    }
    let mut progress = crate::sim::progress::Progress::counting((train.len() + held.len()) as u64, "workloads");
    let mut fitted: Vec<Sample> = Vec::new();
    for w in &train {
        let (m, h) = both(w)?;
        fitted.extend(samples(&m, &h).into_iter().filter(|s| s.ns >= MIN_FIT_NS));
        progress.op();
    }
    let costs = fit(&fitted);
    let mut held_out = Vec::new();
    for w in &held {
        let (m, h) = both(w)?;
        let s = samples(&m, &h);
        let measured: f64 = h.phases.iter().filter_map(|p| p.time_ns).sum();
        let predicted: f64 = s.iter().map(|s| predict(&costs, &s.counts)).sum();
        if measured > 0.0 {
            held_out.push(HeldOut {
                workload: w.path.clone(),
                measured_ns: measured,
                predicted_ns: predicted,
                error: (predicted - measured) / measured,
            });
        }
        progress.op();
    }
    drop(progress);
    let fit_rows: Vec<Fitted> = fitted
        .iter()
        .map(|s| {
            let p = predict(&costs, &s.counts);
            Fitted {
                workload: s.workload.clone(),
                phase: s.phase.clone(),
                measured_ns: s.ns,
                predicted_ns: p,
                error: (p - s.ns) / s.ns,
            }
        })
        .collect();
    let (fit_median, fit_worst) = median_and_worst(&fit_rows.iter().map(|f| f.error).collect::<Vec<_>>());
    let (median, worst) = median_and_worst(&held_out.iter().map(|h| h.error).collect::<Vec<_>>());
    let what = host_description();
    let note = format!(
        "weighted NNLS over {} timed phases (of at least {} us) of {} workloads (fit error median {:.1}%, worst {:.1}%); held out {} workloads: median {:.1}%, worst {:.1}%",
        fit_rows.len(),
        MIN_FIT_NS / 1e3,
        train.len(),
        fit_median * 100.0,
        fit_worst * 100.0,
        held_out.len(),
        median * 100.0,
        worst * 100.0
    );
    let mut profile = host_profile(&a.name, &costs, &what, host_clock_ghz(), &note);
    let (shootdown, shootdown_line) = shootdown_costs(&what);
    put_costs(&mut profile, shootdown);
    eprintln!("{shootdown_line}");
    let path = match a.out {
        Some(p) => p,
        None => crate::time::profile::host_path().ok_or("no HOME or XDG_DATA_HOME for the host profile")?,
    };
    if let Some(dir) = path.parent().filter(|d| !d.as_os_str().is_empty()) {
        std::fs::create_dir_all(dir).map_err(|e| format!("{}: {e}", dir.display()))?;
    }
    std::fs::write(&path, toml::to_string(&profile)?).map_err(|e| format!("{}: {e}", path.display()))?;
    let outcome = Outcome {
        profile: path.display().to_string(),
        costs_ns: FEATURES
            .iter()
            .zip(&costs)
            .map(|((f, _), &c)| (f.to_string(), c))
            .collect(),
        fit: fit_rows,
        held_out,
        median_error: median,
        worst_error: worst,
    };
    if a.json {
        super::emit(&(serde_json::to_string_pretty(&outcome)? + "\n"))?;
    } else {
        super::emit(&text(&outcome, &what))?;
    }
    Ok(ExitCode::SUCCESS)
}

fn text(o: &Outcome, what: &str) -> String {
    let mut s = format!(
        "host profile for {what}\nwritten to {}\n\ncosts (ns per count):\n",
        o.profile
    );
    for (f, means) in FEATURES {
        s += &format!("  {f:<38} {:>10.2}  {means}\n", o.costs_ns[*f]);
    }
    s += "\nfit (measured against predicted, per phase):\n";
    for f in &o.fit {
        s += &format!(
            "  {:<48} {:>13.3} ms {:>13.3} ms {:>+7.1}%\n",
            format!("{} {}", f.workload, f.phase),
            f.measured_ns / 1e6,
            f.predicted_ns / 1e6,
            f.error * 100.0
        );
    }
    s += "\nheld out (never fitted), whole workload:\n";
    for h in &o.held_out {
        s += &format!(
            "  {:<48} {:>13.3} ms {:>13.3} ms {:>+7.1}%\n",
            h.workload,
            h.measured_ns / 1e6,
            h.predicted_ns / 1e6,
            h.error * 100.0
        );
    }
    s + &format!(
        "\nheld-out time error over {} workloads: median {:.1}%, worst {:.1}%\n",
        o.held_out.len(),
        o.median_error * 100.0,
        o.worst_error * 100.0
    )
}

/// The CPU model and kernel release, as the profile names its source.
fn host_description() -> String {
    let cpu = std::fs::read_to_string("/proc/cpuinfo")
        .ok()
        .and_then(|t| {
            t.lines()
                .find(|l| l.starts_with("model name"))
                .and_then(|l| l.split_once(':'))
                .map(|(_, v)| v.trim().to_string())
        })
        .unwrap_or_else(|| "an unknown CPU".into());
    let kernel = crate::store::host_kernel().unwrap_or_default();
    format!("{cpu}, Linux {kernel}")
}

/// The first CPU's clock in GHz, from /proc/cpuinfo.
fn host_clock_ghz() -> f64 {
    std::fs::read_to_string("/proc/cpuinfo")
        .ok()
        .and_then(|t| {
            t.lines()
                .find(|l| l.starts_with("cpu MHz"))
                .and_then(|l| l.split_once(':'))
                .and_then(|(_, v)| v.trim().parse::<f64>().ok())
        })
        .map_or(0.0, |mhz| mhz / 1000.0)
}
