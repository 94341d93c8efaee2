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
//!
//! Where `--target qemu-x86_64` is set up (`scripts/setup-qemu --x86_64`), the fitted
//! workloads also run in one boot of the host's release under QEMU, whose counted
//! kernel instructions give each software feature's instructions per count; the
//! profile's costs are then those at one fitted ns per instruction, page zeroing and
//! copying (and any feature no counted phase has) fitted apart (src/time/calibrate.rs).
//! Both fits' held-out errors are printed: the wall-time split, and the counted
//! instructions.

use crate::report::Report;
use crate::time::calibrate::{
    fit, fit_counted, fit_insns, fitted_apart, host_profile, insns_samples, median_and_worst, predict, samples, Sample,
    FEATURES, MIN_FIT_NS,
};
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

/// The wall-time fit's costs, its fitted phases and its held-out errors; `counted`,
/// when the x86-64 guest is set up, the costs from counted instructions (the profile's
/// then) and theirs; else `counted_not_measured` says why not.
#[derive(Serialize)]
struct Outcome {
    profile: String,
    costs_ns: std::collections::BTreeMap<String, f64>,
    fit: Vec<Fitted>,
    held_out: Vec<HeldOut>,
    median_error: f64,
    worst_error: f64,
    /// The workloads whose model started with the huge zero folio allocated
    /// (`huge-zero=allocated`): the host's runs timed did not allocate it.
    huge_zero_allocated: Vec<String>,
    #[serde(skip_serializing_if = "Option::is_none")]
    counted: Option<Counted>,
    #[serde(skip_serializing_if = "Option::is_none")]
    counted_not_measured: Option<String>,
}

/// Costs from instructions counted on `qemu-x86_64`.
#[derive(Serialize)]
struct Counted {
    /// The guest kernel's release.
    guest: String,
    /// Phases the instruction regression used (the fitted ones the guest ran).
    phases: usize,
    /// Kernel instructions per count of each software feature not fitted apart.
    insns_per_count: std::collections::BTreeMap<String, f64>,
    ns_per_insn: f64,
    costs_ns: std::collections::BTreeMap<String, f64>,
    fit: Vec<Fitted>,
    held_out: Vec<HeldOut>,
    median_error: f64,
    worst_error: f64,
}

/// Host runs per workload: each phase's time is the fastest of them, the one other
/// processes disturbed least (the counts are the same in every run).
const RUNS: usize = 3;

/// Whether `r` allocated the huge zero folio, by the host's own counter.
fn allocates_huge_zero(r: &Report) -> bool {
    r.phases
        .iter()
        .any(|p| p.counters.get(HUGE_ZERO_ALLOC).is_some_and(|&n| n > 0))
}

const HUGE_ZERO_ALLOC: &str = "vmstat.thp_zero_page_alloc";

/// The host runs to time against the model, and whether the model starts with the
/// huge zero folio allocated (`huge-zero=allocated`). The host keeps the huge zero
/// folio from one run to the next (6.18 without CONFIG_PERSISTENT_HUGE_ZERO_FOLIO frees
/// it only by its shrinker, under reclaim), so a run after the first maps it without
/// allocating or zeroing it, where a fresh model does both. Where the model allocates
/// it and some host runs did not, those runs are timed against a model that starts
/// with it; otherwise every run, against the fresh model (a count in a run of a
/// workload that never maps it is another process's).
fn huge_zero_state(model_allocates: bool, host_allocates: &[bool]) -> (Vec<usize>, bool) {
    let kept: Vec<usize> = (0..host_allocates.len()).filter(|&i| !host_allocates[i]).collect();
    if model_allocates && !kept.is_empty() {
        (kept, true)
    } else {
        ((0..host_allocates.len()).collect(), false)
    }
}

/// Model (the host's release, contpte off: the host has no contiguous bit) and host
/// reports of `w`, each host phase timed by the fastest of the runs `huge_zero_state`
/// keeps; and whether the model started with the huge zero folio allocated.
fn both(w: &Workload) -> Result<(Report, Report, bool), String> {
    let sets = |extra: &[&str]| -> Vec<String> {
        std::iter::once("contpte=off")
            .chain(extra.iter().copied())
            .map(String::from)
            .collect()
    };
    let target = crate::native::qemu::Target::Host;
    let v = super::validate::target_variants(target, None, &sets(&[]))?;
    let model = crate::sim::run(w, &v).map_err(|e| e.to_string())?;
    let mut runs = Vec::with_capacity(RUNS);
    for _ in 0..RUNS {
        runs.push(crate::native::run(w).map_err(|e| format!("host: {e}"))?);
    }
    let host_allocates: Vec<bool> = runs.iter().map(allocates_huge_zero).collect();
    let model_allocates = model.counters.get(HUGE_ZERO_ALLOC).is_some_and(|&n| n > 0);
    let (keep, allocated) = huge_zero_state(model_allocates, &host_allocates);
    let model = if allocated {
        let v = super::validate::target_variants(target, None, &sets(&["huge-zero=allocated"]))?;
        crate::sim::run(w, &v).map_err(|e| e.to_string())?
    } else {
        model
    };
    let mut kept = runs
        .into_iter()
        .enumerate()
        .filter(|(i, _)| keep.contains(i))
        .map(|(_, r)| r);
    let mut host = kept.next().expect("at least one run kept");
    for again in kept {
        for (p, q) in host.phases.iter_mut().zip(&again.phases) {
            p.time_ns = match (p.time_ns, q.time_ns) {
                (Some(a), Some(b)) => Some(a.min(b)),
                (a, b) => a.or(b),
            };
        }
    }
    Ok((model, host, allocated))
}

/// Each fitted workload's phases on `qemu-x86_64`, each with its software instructions
/// (`insns_samples`), the model's counts under the guest's variants as the guest
/// measures them (`as_guest_measures`); or why the guest cannot run. Workloads the
/// guest cannot run (`memlimit`) have none.
fn guest_insns(train: &[Workload]) -> Result<(String, Vec<Sample>), String> {
    use crate::native::qemu::{self, Target};
    let kernel = Target::QemuX86_64.guest_kernel().ok_or("no x86-64 guest")?;
    if let Some(why) = qemu::guest_missing(&kernel) {
        return Err(format!("{why} (scripts/setup-qemu --x86_64)"));
    }
    let v = super::validate::target_variants(Target::QemuX86_64, None, &[])?;
    let reports = super::validate::run_guest_batch(&kernel, train, 4096).results;
    let mut out = Vec::new();
    for (w, r) in train.iter().zip(reports) {
        let Ok(g) = r else { continue };
        let m = crate::sim::run(w, &v).map_err(|e| e.to_string())?;
        let m = qemu::as_guest_measures(m, w, &v)?;
        out.extend(insns_samples(&m, &g));
    }
    let release = match &kernel.provenance {
        qemu::Provenance::Debian(r) => r.clone(),
        _ => kernel.label(),
    };
    Ok((release, out))
}

/// Each held-out workload's time against `costs`' prediction.
fn held_out_errors(held: &[(Report, Report)], costs: &[f64]) -> Vec<HeldOut> {
    held.iter()
        .filter_map(|(m, h)| {
            let measured: f64 = h.phases.iter().filter_map(|p| p.time_ns).sum();
            let predicted: f64 = samples(m, h).iter().map(|s| predict(costs, &s.counts)).sum();
            (measured > 0.0).then(|| HeldOut {
                workload: h.workload.clone(),
                measured_ns: measured,
                predicted_ns: predicted,
                error: (predicted - measured) / measured,
            })
        })
        .collect()
}

/// Each fitted phase's time against `costs`' prediction.
fn fit_errors(fitted: &[Sample], costs: &[f64]) -> Vec<Fitted> {
    fitted
        .iter()
        .map(|s| {
            let p = predict(costs, &s.counts);
            Fitted {
                workload: s.workload.clone(),
                phase: s.phase.clone(),
                measured_ns: s.ns,
                predicted_ns: p,
                error: (p - s.ns) / s.ns,
            }
        })
        .collect()
}

fn by_feature(v: &[f64]) -> std::collections::BTreeMap<String, f64> {
    FEATURES.iter().zip(v).map(|((f, _), &c)| (f.to_string(), c)).collect()
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
    // The guest first: its boot is not timed, the host's runs are.
    let guest = guest_insns(&train);
    let mut progress = crate::sim::progress::Progress::counting((train.len() + held.len()) as u64, "workloads");
    let mut fitted: Vec<Sample> = Vec::new();
    let mut huge_zero_allocated = Vec::new();
    for w in &train {
        let (m, h, allocated) = both(w)?;
        if allocated {
            huge_zero_allocated.push(h.workload.clone());
        }
        fitted.extend(samples(&m, &h).into_iter().filter(|s| s.ns >= MIN_FIT_NS));
        progress.op();
    }
    let costs = fit(&fitted);
    let mut held_runs = Vec::new();
    for w in &held {
        let (m, h, allocated) = both(w)?;
        if allocated {
            huge_zero_allocated.push(h.workload.clone());
        }
        held_runs.push((m, h));
        progress.op();
    }
    drop(progress);
    let held_out = held_out_errors(&held_runs, &costs);
    let fit_rows = fit_errors(&fitted, &costs);
    let (fit_median, fit_worst) = median_and_worst(&fit_rows.iter().map(|f| f.error).collect::<Vec<_>>());
    let (median, worst) = median_and_worst(&held_out.iter().map(|h| h.error).collect::<Vec<_>>());
    // The instruction regression on the fitted phases the guest ran.
    let (counted, counted_not_measured) = match guest {
        Err(why) => (None, Some(why)),
        Ok((release, insns)) => {
            let insns: Vec<Sample> = insns
                .into_iter()
                .filter(|i| fitted.iter().any(|f| f.workload == i.workload && f.phase == i.phase))
                .collect();
            let per_count = fit_insns(&insns);
            let apart = fitted_apart(&insns);
            let (costs, ns_per_insn) = fit_counted(&fitted, &per_count, &apart);
            let held_out = held_out_errors(&held_runs, &costs);
            let (median_error, worst_error) = median_and_worst(&held_out.iter().map(|h| h.error).collect::<Vec<_>>());
            let insns_per_count = FEATURES
                .iter()
                .zip(&per_count)
                .enumerate()
                .filter(|(i, _)| !apart.contains(i))
                .map(|(_, ((f, _), &n))| (f.to_string(), n))
                .collect();
            let c = Counted {
                guest: release,
                phases: insns.len(),
                insns_per_count,
                ns_per_insn,
                costs_ns: by_feature(&costs),
                fit: fit_errors(&fitted, &costs),
                held_out,
                median_error,
                worst_error,
            };
            (Some(c), None)
        }
    };
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
    let mut profile = match &counted {
        None => host_profile(&a.name, &costs, &what, host_clock_ghz(), &note),
        Some(c) => counted_profile(&a.name, c, &what, &note),
    };
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
        costs_ns: by_feature(&costs),
        fit: fit_rows,
        held_out,
        median_error: median,
        worst_error: worst,
        huge_zero_allocated,
        counted,
        counted_not_measured,
    };
    if a.json {
        super::emit(&(serde_json::to_string_pretty(&outcome)? + "\n"))?;
    } else {
        super::emit(&text(&outcome, &what))?;
    }
    Ok(ExitCode::SUCCESS)
}

/// The profile of the counted instructions' costs: each software cost's note names its
/// instructions per count and the ns per instruction, beside the wall-time fit's note.
fn counted_profile(name: &str, c: &Counted, what: &str, wall_note: &str) -> crate::time::Profile {
    let costs: Vec<f64> = FEATURES.iter().map(|(f, _)| c.costs_ns[*f]).collect();
    let note = format!(
        "kernel instructions per count by a weighted NNLS over {} phases counted on Debian's {} x86-64 under QEMU \
         (foliolab validate --target qemu-x86_64), at {:.4} ns per instruction, page zeroing and copying \
         (and features no counted phase has) fitted apart, by a weighted NNLS on host time; held out: median {:.1}%, worst {:.1}% (the wall-time \
         split alone: {wall_note})",
        c.phases,
        c.guest,
        c.ns_per_insn,
        c.median_error * 100.0,
        c.worst_error * 100.0
    );
    let mut p = host_profile(name, &costs, what, host_clock_ghz(), &note);
    for cost in &mut p.cost {
        if let (Some(n), Some(text)) = (
            cost.events.first().and_then(|e| c.insns_per_count.get(e)),
            cost.note.as_mut(),
        ) {
            *text = format!("{n:.0} instructions; {text}");
        }
    }
    p
}

/// A line per held-out workload: measured, predicted, error.
fn held_out_rows(rows: &[HeldOut]) -> String {
    rows.iter()
        .map(|h| {
            format!(
                "  {:<48} {:>13.3} ms {:>13.3} ms {:>+7.1}%\n",
                h.workload,
                h.measured_ns / 1e6,
                h.predicted_ns / 1e6,
                h.error * 100.0
            )
        })
        .collect()
}

fn text(o: &Outcome, what: &str) -> String {
    let mut s = format!(
        "host profile for {what}\nwritten to {}\n\ncosts (ns per count), the wall-time split{}:\n",
        o.profile,
        if o.counted.is_some() {
            " (the profile's are the counted instructions', below)"
        } else {
            " (the profile's)"
        }
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
    if !o.huge_zero_allocated.is_empty() {
        s += &format!(
            "\nthe host kept the huge zero folio from an earlier run (vmstat.thp_zero_page_alloc 0 in the runs timed), \
             so the model started with it allocated (huge-zero=allocated): {}\n",
            o.huge_zero_allocated.join(", ")
        );
    }
    s += "\nheld out (never fitted), whole workload:\n";
    s += &held_out_rows(&o.held_out);
    s += &format!(
        "\nheld-out time error over {} workloads: median {:.1}%, worst {:.1}%\n",
        o.held_out.len(),
        o.median_error * 100.0,
        o.worst_error * 100.0
    );
    match (&o.counted, &o.counted_not_measured) {
        (Some(c), _) => {
            s += &format!(
                "\ncounted instructions (qemu-x86_64, {}; {} phases): the profile's costs\n",
                c.guest, c.phases
            );
            for (f, _) in FEATURES {
                let insns = c
                    .insns_per_count
                    .get(*f)
                    .map_or("fitted apart".to_string(), |n| format!("{n:.0} insns"));
                s += &format!("  {f:<38} {insns:>14} {:>10.2} ns\n", c.costs_ns[*f]);
            }
            s += &format!(
                "  ns per instruction {:.4}\n\nheld out, counted instructions:\n",
                c.ns_per_insn
            );
            s += &held_out_rows(&c.held_out);
            s += &format!(
                "\nheld-out time error over {} workloads: wall-time fit median {:.1}%, worst {:.1}%; \
                 counted instructions median {:.1}%, worst {:.1}%\n",
                c.held_out.len(),
                o.median_error * 100.0,
                o.worst_error * 100.0,
                c.median_error * 100.0,
                c.worst_error * 100.0
            );
        }
        (None, Some(why)) => s += &format!("counted instructions: not measured: {why}\n"),
        (None, None) => {}
    }
    s
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

#[cfg(test)]
mod tests {
    use super::*;

    fn held(error: f64) -> HeldOut {
        HeldOut {
            workload: "w.wl".into(),
            measured_ns: 1e6,
            predicted_ns: 1e6 * (1.0 + error),
            error,
        }
    }

    /// The text states both fits' held-out errors when the guest counted, and why not
    /// when it did not.
    #[test]
    fn the_text_prints_both_fits_held_out_errors() {
        let zero = || FEATURES.iter().map(|(f, _)| (f.to_string(), 0.0)).collect();
        let mut o = Outcome {
            profile: "p.toml".into(),
            costs_ns: zero(),
            fit: Vec::new(),
            held_out: vec![held(0.5)],
            median_error: 0.5,
            worst_error: 0.5,
            counted: Some(Counted {
                guest: "6.18.15+deb13-cloud-amd64".into(),
                phases: 3,
                insns_per_count: [("vmstat.pgfault".to_string(), 2500.0)].into(),
                ns_per_insn: 0.25,
                costs_ns: zero(),
                fit: Vec::new(),
                held_out: vec![held(-0.25)],
                median_error: 0.25,
                worst_error: 0.25,
            }),
            huge_zero_allocated: Vec::new(),
            counted_not_measured: None,
        };
        let t = text(&o, "a CPU");
        assert!(
            t.contains("wall-time fit median 50.0%, worst 50.0%; counted instructions median 25.0%, worst 25.0%"),
            "{t}"
        );
        assert!(t.contains("2500 insns") && t.contains("fitted apart"), "{t}");
        o.counted = None;
        o.counted_not_measured = Some("qemu-system-x86_64 is not installed".into());
        let t = text(&o, "a CPU");
        assert!(
            t.ends_with("counted instructions: not measured: qemu-system-x86_64 is not installed\n"),
            "{t}"
        );
        assert!(t.contains("the wall-time split (the profile's)"), "{t}");
        assert!(!t.contains("huge zero"), "{t}");
        o.huge_zero_allocated = vec!["huge_zero_page.wl".into()];
        let t = text(&o, "a CPU");
        assert!(t.contains("(huge-zero=allocated): huge_zero_page.wl\n"), "{t}");
    }

    /// A model that allocates the huge zero folio is timed against the host runs that
    /// did not, started with it allocated; with every host run allocating it, or a
    /// model that never maps it, against every run as it is.
    #[test]
    fn the_host_runs_that_kept_the_huge_zero_folio_meet_a_model_that_has_it() {
        assert_eq!(huge_zero_state(true, &[true, false, false]), (vec![1, 2], true));
        assert_eq!(huge_zero_state(true, &[true, true, true]), (vec![0, 1, 2], false));
        assert_eq!(huge_zero_state(false, &[false, true, false]), (vec![0, 1, 2], false));
        assert_eq!(huge_zero_state(true, &[false, false, false]), (vec![0, 1, 2], true));
    }

    /// `huge-zero=allocated` leaves the run the mapping of the huge zero folio only: no
    /// allocation, no zeroing.
    #[test]
    fn a_model_started_with_the_huge_zero_folio_neither_allocates_nor_zeroes_it() {
        let w = parse_str("z.wl", "mmap buf 4M hugepage\ntouch buf read\n").unwrap();
        let run = |sets: &[&str]| {
            let sets: Vec<String> = sets.iter().map(|s| s.to_string()).collect();
            let v = crate::sim::Variants::from_sets(&sets).unwrap();
            crate::sim::run(&w, &v).unwrap().counters
        };
        let (lazy, kept) = (run(&["contpte=off"]), run(&["contpte=off", "huge-zero=allocated"]));
        let get = |c: &crate::report::Counters, k: &str| c.get(k).copied().unwrap_or(0);
        assert_eq!(get(&lazy, HUGE_ZERO_ALLOC), 1);
        assert_eq!(get(&kept, HUGE_ZERO_ALLOC), 0);
        assert_eq!(get(&lazy, "arch.page.zero") - get(&kept, "arch.page.zero"), 512);
        assert_eq!(get(&lazy, "vmstat.pgfault"), get(&kept, "vmstat.pgfault"));
    }
}
