//! `foliolab validate WORKLOAD... [--set k=v ...] [--json]`: run each workload on the
//! model and on the host, and compare.
//!
//! Rules, one per counter, named in the output:
//! - `exact`: per-process faults, and the layout, always; a global counter (`vmstat.*`,
//!   `mthp.*`) too when the host's background measurement saw it still while the
//!   workload sat idle;
//! - `informational`: a global counter that other processes moved during that idle
//!   window (the host report's `background`): shown with what moved it, not judged;
//! - `unmeasured`: a global counter of a host report without a background measurement
//!   (saved results), likewise not judged here;
//! - `host_state`: a counter of host-wide state that outlives processes (the huge zero
//!   page's allocation), informational.
//!
//! The host's `vmstat.pgfault` is compared less `runner.minflt`, the faults the runner's
//! own processes take inside op windows (copy-on-write after forking a worker).
//!
//! Exit status: 0 all agree, 1 some disagree, 2 bad input or a side that could not run.

use crate::report::{Report, Run};
use crate::workload::Workload;
use serde::Serialize;
use std::collections::BTreeMap;
use std::process::ExitCode;

#[derive(clap::Args)]
pub struct Args {
    /// Workload files.
    #[arg(required_unless_present = "seeds")]
    pub workloads: Vec<String>,
    /// Instead of workloads: each seed's before and after on Debian's arm64 6.1 and
    /// 6.12 kernels under QEMU, against the model's 6.1 and 6.12 presets (one boot per
    /// kernel for the seed workloads, and per RAM size for seed 003's map_mem); then
    /// seeds 003 and 001 on 6.12 built from source, before and after (`foliolab kernel
    /// build`, cached), or why not.
    #[arg(long, conflicts_with_all = ["workloads", "target", "image", "sets", "kernel"])]
    pub seeds: bool,
    /// A model variant, as for `run` (the host runs as it is).
    #[arg(long = "set", value_name = "KEY=VALUE")]
    pub sets: Vec<String>,
    /// Print the comparisons as JSON.
    #[arg(long)]
    pub json: bool,
    /// The kernel to compare with: this host's, an arm64 kernel under QEMU, or
    /// Linux 6.18 x86-64 under QEMU (qemu-x86_64).
    #[arg(long, value_enum, default_value = "host")]
    pub target: crate::native::qemu::Target,
    /// With a QEMU target: boot this kernel instead of Debian's, a key from
    /// `foliolab kernel build` or a kernel build directory (Image, System.map, .config).
    #[arg(long, value_name = "KEY|DIR")]
    pub image: Option<String>,
    /// The model's kernel preset (`foliolab kernels`); default: the target's release.
    #[arg(long, value_name = "6.1|6.12|6.18|7.0|7.1|7.2|7.3", value_parser = crate::sim::kernels::parse_kernel)]
    pub kernel: Option<crate::sim::kernels::Release>,
}

/// The model's variants for `target`: the user's `--set`s, then the target's machine
/// (`Target::machine_sets`) and `kernel`'s preset (the target's own release when
/// None) for every key the user left alone.
pub fn target_variants(
    target: crate::native::qemu::Target,
    kernel: Option<crate::sim::kernels::Release>,
    sets: &[String],
) -> Result<crate::sim::Variants, String> {
    guest_variants(target.guest_kernel().as_ref(), kernel, sets)
}

/// `target_variants` for a guest kernel (None: the host): its machine and release.
pub fn guest_variants(
    guest: Option<&crate::native::qemu::GuestKernel>,
    kernel: Option<crate::sim::kernels::Release>,
    sets: &[String],
) -> Result<crate::sim::Variants, String> {
    use crate::sim::kernels::{host_release, overlay, with_preset, Scope};
    let own = guest.map_or_else(host_release, |k| k.release);
    let machine = guest.map(|k| k.machine_sets()).unwrap_or_default();
    let sets = overlay(machine, sets);
    crate::sim::Variants::from_sets(&with_preset(kernel.unwrap_or(own), Scope::Run, &sets))
}

/// Runs a workload on one side; the error is reported as that side's failure.
pub type Runner<'a> = dyn FnMut(&Workload) -> Result<Report, String> + 'a;

/// The model executor with variants `v`.
pub fn model_runner(v: crate::sim::Variants) -> Box<Runner<'static>> {
    Box::new(move |w: &Workload| crate::sim::run(w, &v).map_err(|e| e.to_string()))
}

fn host_runner() -> Box<Runner<'static>> {
    Box::new(move |w: &Workload| crate::native::run(w).map_err(|e| e.to_string()))
}

/// Every workload on `guest` in one boot, a result each: a workload whose offsets
/// or lengths are not multiples of the page size (`page`) does not go to the guest (a
/// touch of the rounded-up hole would kill the worker), nor one the runner cannot do:
/// it is not applicable there.
pub fn run_guest_batch(guest: &crate::native::qemu::GuestKernel, workloads: &[Workload], page: u64) -> GuestBatch {
    let misfit: Vec<Option<String>> = workloads
        .iter()
        .map(|w| crate::sim::granule_misfit(w, page).or_else(|| crate::native::qemu::unsupported(w)))
        .collect();
    let fit: Vec<Workload> = workloads
        .iter()
        .zip(&misfit)
        .filter(|(_, m)| m.is_none())
        .map(|(w, _)| w.clone())
        .collect();
    let source = guest.source.clone();
    let (results, share, guest, features) = match crate::native::qemu::run_guest(guest, &fit) {
        Ok(b) => {
            eprintln!(
                "{}: one boot ran {} workloads in {:.1} s",
                guest.label(),
                fit.len(),
                b.wall.as_secs_f64()
            );
            let share = b.wall / fit.len().max(1) as u32;
            (b.reports, share, b.guest, b.cpu_features)
        }
        Err(e) => (
            fit.iter().map(|_| Err(e.to_string())).collect(),
            std::time::Duration::ZERO,
            Vec::new(),
            Vec::new(),
        ),
    };
    let mut guest = guest.into_iter();
    let times = misfit
        .iter()
        .map(|m| if m.is_some() { None } else { guest.next() })
        .collect();
    let mut results = results.into_iter();
    let all = misfit
        .into_iter()
        .map(|m| match m {
            Some(why) => Err(format!("{}{source}: {why}", crate::native::qemu::NOT_APPLICABLE)),
            None => results
                .next()
                .unwrap_or_else(|| Err("the batch has no result for it".into())),
        })
        .collect();
    GuestBatch {
        results: all,
        share,
        times,
        features,
    }
}

/// What one boot of a guest kernel gave its batch of workloads (`run_guest_batch`).
pub struct GuestBatch {
    /// Per workload, in order, its report or why there is none.
    pub results: Vec<Result<Report, String>>,
    /// The boot's wall time shared out per workload.
    pub share: std::time::Duration,
    /// Per workload, its wall time under QEMU (None where it did not run).
    pub times: Vec<Option<std::time::Duration>>,
    /// The guest CPU's features the runner reported.
    pub features: Vec<String>,
}

/// A guest kernel's runner: every workload runs in one boot, up front
/// (`run_guest_batch`); the runner hands out the results in order (one workload's
/// error stays that workload's).
fn batched_runner(
    guest: &crate::native::qemu::GuestKernel,
    workloads: &[Workload],
    page: u64,
) -> (
    Box<Runner<'static>>,
    std::time::Duration,
    Vec<Option<std::time::Duration>>,
    Vec<String>,
) {
    let GuestBatch {
        results,
        share,
        times,
        features,
    } = run_guest_batch(guest, workloads, page);
    let mut all = results.into_iter();
    let runner = Box::new(move |w: &Workload| {
        all.next()
            .unwrap_or_else(|| Err(format!("{}: the batch has no result for it", w.path)))
    });
    (runner, share, times, features)
}

/// The model's BBM Level 3 rule as the guest's kernel decided it: when the kernel's
/// verdict on its CPU (`BBML3_FEATURE` among the capabilities its log says it
/// detected) differs from the verdict of the rule `v` takes for that CPU, the
/// `bbml2-detect` setting whose verdict is the kernel's, and a note saying so. None
/// when they agree, or when the user set `bbml2-detect` (theirs stands).
pub fn bbml2_rule_from_guest(
    features: &[String],
    v: &crate::sim::Variants,
    sets: &[String],
) -> Option<(String, String)> {
    use crate::arch::arm64::cpufeature::{supports_bbml2_noabort, Bbml2Detect};
    if sets.iter().any(|s| s.starts_with("bbml2-detect=")) {
        return None;
    }
    let feature = crate::native::qemu::BBML3_FEATURE;
    let guest = features.iter().any(|f| f == feature);
    let cpu = v.machine().features;
    if supports_bbml2_noabort(&cpu, v.bbml2_detect()) == guest {
        return None;
    }
    let rules = [
        (Bbml2Detect::IdRegOrList, "idreg-or-list"),
        (Bbml2Detect::IdRegOrListQemu, "idreg-or-list-qemu"),
        (Bbml2Detect::MidrList, "midr-list"),
    ];
    let (_, name) = rules
        .into_iter()
        .find(|&(r, _)| supports_bbml2_noabort(&cpu, r) == guest)?;
    let set = format!("bbml2-detect={name}");
    let said = if guest {
        format!("detected {feature}")
    } else {
        format!("did not detect {feature}")
    };
    let note = format!(
        "the guest's kernel {said} (its log's \"CPU features: detected:\" lines), unlike the model's rule for cpu={} ({}): the model takes {set}",
        v.get("cpu"),
        v.get("bbml2-detect")
    );
    Some((set, note))
}

/// `runner`, with every report it makes recorded in the results store as `kind`, with
/// the time it took (`wall`: the time it was given, for a batch's runner).
fn recorded<'a>(
    mut runner: Box<Runner<'a>>,
    kind: &'a str,
    db: &'a super::StoreArgs,
    wall: Option<std::time::Duration>,
) -> Box<Runner<'a>> {
    Box::new(move |w: &Workload| {
        let start = std::time::Instant::now();
        let r = runner(w)?;
        super::record_report(db, kind, w, &r, None, wall.unwrap_or_else(|| start.elapsed()));
        Ok(r)
    })
}

/// How a counter is judged.
#[derive(Debug, Serialize, PartialEq, Clone)]
#[serde(tag = "rule", rename_all = "snake_case")]
pub enum Rule {
    Exact,
    /// Other processes moved it by `moved` over a `window_ms` idle window.
    Informational {
        moved: i64,
        window_ms: f64,
    },
    Unmeasured,
    /// The host's global count exceeds the workload's own major faults (its processes'
    /// `majflt`, judged exactly) by `extra` more than the model's majors outside a
    /// fault do: another process's major fault landed in an op's window, which an idle
    /// window too short to see a rare event does not rule out.
    OthersMajflt {
        extra: i64,
    },
    /// The same for every fault: the host's global pgfault exceeds the workload's own
    /// (its processes' `minflt` and `majflt`, judged exactly, and the runner's) by
    /// `extra` more than the model's does: other processes faulted in an op's window.
    OthersFaults {
        extra: i64,
    },
    /// Other processes held `held` folios of the size this counter follows when the
    /// run began; splitting, partially unmapping or freeing one moves it at any time.
    OthersHold {
        size_kb: u64,
        held: i64,
    },
    /// Other processes allocated `moved` folios of the size this counter follows in
    /// the `window_ms` idle window, under the workload's own settings: their folios
    /// come and go in and between the op windows (a gauge such as nr_anon can move
    /// either way), so this size's counters are theirs too.
    OthersAlloc {
        size_kb: u64,
        moved: i64,
        window_ms: f64,
    },
    /// A `set` started khugepaged, and the scan it runs on starting collapsed
    /// `collapsed` ranges host-wide (from the host's own scan cursor, over every
    /// process's mm), moving this counter by `moved` inside that `set`'s window.
    StartScan {
        moved: i64,
        collapsed: u64,
    },
    /// It depends on state the host keeps between processes, which the model starts
    /// without.
    HostState {
        why: &'static str,
    },
    /// It depends on which page frames the page allocator hands out, which the
    /// model's buddy allocator does not reproduce.
    Physical {
        why: &'static str,
    },
}

/// Counters that depend on the physical frames allocated, not only on the workload.
const PHYSICAL: &[(&str, &str)] = &[(
    "kernel.__contpte_try_fold",
    "set_ptes calls it when the pte's frame is the last of an aligned block",
)];

/// The counters the deferred split shrinker moves.
fn moved_by_shrink(key: &str) -> bool {
    let stat = key.rsplit('.').next().unwrap_or("");
    matches!(
        key,
        "vmstat.thp_split_page" | "vmstat.thp_split_page_failed" | "vmstat.thp_underused_split_page"
    ) || (key.starts_with("mthp.") && matches!(stat, "split" | "split_failed" | "nr_anon" | "nr_anon_partially_mapped"))
}

/// The per-size mTHP stats that a folio's allocation, split, partial unmap, swap-out or
/// free moves (whoever's it is), and the PMD size's vmstat twins.
const FOLIO_LIFE: &[&str] = &[
    "anon_fault_alloc",
    "anon_fault_fallback",
    "anon_fault_fallback_charge",
    "split",
    "split_failed",
    "split_deferred",
    "nr_anon",
    "nr_anon_partially_mapped",
    "swpout",
    "swpout_fallback",
    "zswpout",
];
const PMD_FOLIO_LIFE: &[&str] = &[
    "vmstat.thp_fault_alloc",
    "vmstat.thp_fault_fallback",
    "vmstat.thp_fault_fallback_charge",
    "vmstat.thp_split_page",
    "vmstat.thp_split_page_failed",
    "vmstat.thp_deferred_split_page",
    "vmstat.thp_split_pmd",
    "vmstat.thp_swpout",
    "vmstat.thp_swpout_fallback",
];

/// The folio size `key` follows, in kB, where it is one of a folio's life counters:
/// `mthp.<size>kB.<stat>`, or a PMD-size vmstat twin (the largest size the host has).
fn folio_life_size(key: &str, host: &Report) -> Option<u64> {
    let size = |k: &str| -> Option<u64> { k.strip_prefix("mthp.")?.split_once("kB.")?.0.parse().ok() };
    if PMD_FOLIO_LIFE.contains(&key) {
        return host.counters.keys().filter_map(|k| size(k)).max();
    }
    let (_, stat) = key.strip_prefix("mthp.")?.split_once("kB.")?;
    FOLIO_LIFE.contains(&stat).then(|| size(key)).flatten()
}

/// Global counters that count a host-wide state change rather than the workload's work:
/// the huge zero page is allocated once and kept until a shrinker frees it, so whether
/// a run allocates it depends on what ran before.
const HOST_STATE: &[(&str, &str)] = &[
    (
        "vmstat.thp_zero_page_alloc",
        "the huge zero page outlives the process that allocated it",
    ),
    (
        "vmstat.thp_zero_page_alloc_failed",
        "the huge zero page outlives the process that allocated it",
    ),
];

impl Rule {
    fn judged(&self) -> bool {
        *self == Rule::Exact
    }
}

impl std::fmt::Display for Rule {
    fn fmt(&self, f: &mut std::fmt::Formatter) -> std::fmt::Result {
        match self {
            Rule::Exact => write!(f, "exact"),
            Rule::Informational { moved, window_ms } => {
                write!(
                    f,
                    "informational: other processes moved it {moved:+} in {window_ms:.0} ms idle"
                )
            }
            Rule::Unmeasured => write!(f, "informational: no background measured"),
            Rule::StartScan { moved, collapsed } => write!(
                f,
                "informational: moved {moved:+} in the window of a `set` that started khugepaged, whose first scan collapsed {collapsed} ranges host-wide"
            ),
            Rule::OthersHold { size_kb, held } => write!(
                f,
                "informational: other processes held {held} {size_kb}kB folios as the run began: their faults, splits and frees move it"
            ),
            Rule::OthersAlloc {
                size_kb,
                moved,
                window_ms,
            } => write!(
                f,
                "informational: other processes allocated {moved} {size_kb}kB folios in {window_ms:.0} ms idle under the workload's settings: their faults, splits and frees move it"
            ),
            Rule::OthersFaults { extra } => write!(
                f,
                "informational: {extra:+} beyond the workload's own faults (proc.*.minflt, proc.*.majflt) and the model's outside them: other processes'"
            ),
            Rule::OthersMajflt { extra } => write!(
                f,
                "informational: {extra:+} beyond the workload's own major faults (proc.*.majflt) and the model's outside a fault: other processes'"
            ),
            Rule::HostState { why } => write!(f, "informational: host state ({why})"),
            Rule::Physical { why } => write!(f, "informational: physical frames ({why})"),
        }
    }
}

/// The rule for `key` against host report `host`.
pub fn rule(key: &str, host: &Report) -> Rule {
    if key.starts_with("proc.") {
        return Rule::Exact;
    }
    if let Some((_, why)) = HOST_STATE.iter().find(|(k, _)| *k == key) {
        return Rule::HostState { why };
    }
    if let Some((_, why)) = PHYSICAL.iter().find(|(k, _)| *k == key) {
        return Rule::Physical { why };
    }
    if host.background.as_ref().is_some_and(|b| b.shrink) && moved_by_shrink(key) {
        return Rule::HostState {
            why: "shrink drops caches host-wide, splitting other processes' partially mapped folios too",
        };
    }
    if let (Some(b), Some(size_kb)) = (&host.background, folio_life_size(key, host)) {
        if let Some(&held) = b.held.get(&format!("mthp.{size_kb}kB.nr_anon")) {
            return Rule::OthersHold { size_kb, held };
        }
        if let Some(&moved) = b
            .counters
            .get(&format!("mthp.{size_kb}kB.anon_fault_alloc"))
            .filter(|&&n| n > 0)
        {
            return Rule::OthersAlloc {
                size_kb,
                moved,
                window_ms: b.window_ms,
            };
        }
    }
    if let Some(scan) = host.background.as_ref().and_then(|b| b.start_scan.as_ref()) {
        if let Some(&moved) = scan.counters.get(key) {
            return Rule::StartScan {
                moved,
                collapsed: scan.collapsed,
            };
        }
    }
    match &host.background {
        None => Rule::Unmeasured,
        Some(b) => match b.counters.get(key) {
            None | Some(0) => Rule::Exact,
            Some(&moved) => Rule::Informational {
                moved,
                window_ms: b.window_ms,
            },
        },
    }
}

#[derive(Debug, Serialize, PartialEq)]
pub struct Row {
    pub counter: String,
    pub model: i64,
    pub host: i64,
    pub diff: i64,
    #[serde(flatten)]
    pub rule: Rule,
    pub ok: bool,
}

#[derive(Debug, Serialize, PartialEq, Eq)]
pub struct LayoutDiff {
    pub region: String,
    pub model: Option<Vec<RunTriple>>,
    pub host: Option<Vec<RunTriple>>,
}

/// A run as its JSON triple text, for printing and comparing.
pub type RunTriple = String;

#[derive(Debug, Default, Serialize)]
pub struct Comparison {
    pub workload: String,
    pub rows: Vec<Row>,
    pub layout_mismatches: Vec<LayoutDiff>,
    pub layout_regions: usize,
    /// Counters left out of the comparison, with why.
    pub not_compared: BTreeMap<String, String>,
    /// A side that failed to run, or a host measurement that reported a defect.
    pub error: Option<String>,
    /// Why the workload does not apply to the target (it writes a knob the target's
    /// kernel lacks): not compared, and no failure.
    #[serde(skip_serializing_if = "Option::is_none")]
    pub not_applicable: Option<String>,
    /// How long each side took on this workload, for a QEMU target: the model's wall
    /// time here and the guest's under QEMU TCG (wall time, boot not counted).
    #[serde(skip_serializing_if = "Option::is_none")]
    pub time_ms: Option<SideTimes>,
    /// What the run took from the target into the model (e.g. its kernel's BBM Level 3
    /// verdict), the same for every workload of the run.
    #[serde(skip_serializing_if = "Vec::is_empty")]
    pub notes: Vec<String>,
}

#[derive(Debug, Serialize, Clone, Copy)]
pub struct SideTimes {
    pub model: f64,
    pub target: f64,
}

impl Comparison {
    pub fn ok(&self) -> bool {
        self.error.is_none() && self.layout_mismatches.is_empty() && self.rows.iter().all(|r| r.ok)
    }

    fn verdict(&self) -> &'static str {
        if self.not_applicable.is_some() {
            return "N/A";
        }
        match (&self.error, self.ok()) {
            (Some(_), _) => "ERROR",
            (None, true) => "PASS",
            (None, false) => "FAIL",
        }
    }

    /// `(agreeing, judged)` rows whose counter starts with `prefix` (None: the globals).
    fn tally(&self, procs: bool) -> (usize, usize) {
        let judged = self
            .rows
            .iter()
            .filter(|r| r.counter.starts_with("proc.") == procs && r.rule.judged());
        let (n, ok) = judged.fold((0, 0), |(n, ok), r| (n + 1, ok + r.ok as usize));
        (ok, n)
    }
}

/// Global counters that only the workload's own splits and swap-out attempts move on a
/// quiet host, compared exactly against saved host results, which carry no background
/// measurement: also every swap-in, swap-out and swap readahead counter, since the only
/// swap device is the workload's own zram, on just while it runs. split_deferred is
/// left out: other processes partially unmap the mTHPs a workload's knobs let them
/// fault, and move it in most saved runs. The PMD-sized shmem allocations follow the
/// shmem knobs as the per-size shmem stats do; thp_file_mapped is left out, any file
/// THP's pmd mapping by another process moves it.
pub fn exact_global(key: &str) -> bool {
    let stat = key.rsplit('.').next().unwrap_or("");
    matches!(
        key,
        "vmstat.thp_split_pmd"
            | "vmstat.thp_split_page"
            | "vmstat.thp_deferred_split_page"
            | "vmstat.thp_swpout_fallback"
            | "vmstat.thp_swpout"
            | "vmstat.pswpin"
            | "vmstat.pswpout"
            | "vmstat.swpin_zero"
            | "vmstat.swpout_zero"
            | "vmstat.swap_ra"
            | "vmstat.swap_ra_hit"
            | "vmstat.thp_file_alloc"
            | "vmstat.thp_file_fallback"
    ) || (key.starts_with("mthp.")
        && matches!(
            stat,
            "split"
                | "swpout_fallback"
                | "swpout"
                | "swpin"
                | "swpin_fallback"
                | "shmem_alloc"
                | "shmem_fallback"
                | "shmem_fallback_charge"
        ))
}

impl Comparison {
    /// The `exact_global` counters that differ, one line each.
    pub fn global_mismatches(&self) -> Vec<String> {
        self.rows
            .iter()
            .filter(|r| exact_global(&r.counter) && r.model != r.host)
            .map(|r| format!("{}: model {} host {}", r.counter, r.model, r.host))
            .collect()
    }

    /// What breaks the exact part of the contract (per-process faults and layouts),
    /// one line each; empty when model and host agree on it.
    pub fn exact_mismatches(&self) -> Vec<String> {
        let mut out: Vec<String> = self
            .rows
            .iter()
            .filter(|r| r.counter.starts_with("proc.") && !r.ok)
            .map(|r| format!("{}: model {} host {}", r.counter, r.model, r.host))
            .collect();
        for l in &self.layout_mismatches {
            out.push(format!("layout {}: model {:?} host {:?}", l.region, l.model, l.host));
        }
        out.extend(self.error.iter().cloned());
        out
    }
}

/// Compares a model report with a host report (the pure core of `validate`).
pub fn compare(model: &Report, host: &Report) -> Comparison {
    let mut c = Comparison {
        workload: host.workload.clone(),
        ..Comparison::default()
    };
    if !host.diagnostics.is_empty() {
        c.error = Some(format!("host measurement defect: {}", host.diagnostics.join("; ")));
    }
    let keys: std::collections::BTreeSet<&String> = model.counters.keys().chain(host.counters.keys()).collect();
    let is_majflt = |k: &str| k.starts_with("proc.") && k.ends_with(".majflt");
    let majflt_measured = host.counters.keys().any(|k| is_majflt(k));
    let own = |c: &crate::report::Counters, minor: bool| -> i64 {
        c.iter()
            .filter(|(k, _)| is_majflt(k) || (minor && k.starts_with("proc.") && k.ends_with(".minflt")))
            .map(|(_, n)| n)
            .sum()
    };
    for key in keys {
        if is_majflt(key) && !majflt_measured {
            c.not_compared.insert(
                key.clone(),
                "host: not measured (its runner counts minor faults only)".into(),
            );
            continue;
        }
        let (m, h) = (model.counters.get(key), host.counters.get(key));
        if let Some(why) = host.unavailable.get(key) {
            c.not_compared.insert(key.clone(), format!("host: {why}"));
            continue;
        }
        if crate::native::qemu::is_insns(key) {
            c.not_compared
                .insert(key.clone(), "not modeled: the model counts no instructions".into());
            continue;
        }
        let (m, h) = match (m, h, key.starts_with("proc.")) {
            (Some(m), Some(h), _) => (*m, *h),
            // A process that took no faults may be left out by either side.
            (m, h, true) => (m.copied().unwrap_or(0), h.copied().unwrap_or(0)),
            (None, Some(_), false) => {
                c.not_compared.insert(key.clone(), "not modelled".into());
                continue;
            }
            (Some(_), None, false) => {
                c.not_compared.insert(key.clone(), "model only".into());
                continue;
            }
            (None, None, false) => unreachable!("key from one of the maps"),
        };
        // The global pgfault also counts the runner's own copy-on-write after its forks,
        // which the host report measures exactly.
        let h = match key.as_str() {
            "vmstat.pgfault" => h - host.counters.get(crate::native::RUNNER_KEY).copied().unwrap_or(0),
            _ => h,
        };
        // A global fault count beyond the workload's own, which are judged exactly by
        // process, by more than the model's own surplus is only another process's.
        let minor = key == "vmstat.pgfault";
        let extra = match key.as_str() {
            "vmstat.pgmajfault" | "vmstat.pgfault" if majflt_measured => {
                (h - own(&host.counters, minor)) - (m - own(&model.counters, minor))
            }
            _ => 0,
        };
        let rule = match (extra > 0, minor) {
            (false, _) => rule(key, host),
            (true, false) => Rule::OthersMajflt { extra },
            (true, true) => Rule::OthersFaults { extra },
        };
        c.rows.push(Row {
            counter: key.clone(),
            model: m,
            host: h,
            diff: h - m,
            ok: !rule.judged() || h == m,
            rule,
        });
    }
    if let Some(why) = host.unavailable.get("layout") {
        c.not_compared.insert("layout".into(), format!("host: {why}"));
        return c;
    }
    let regions: std::collections::BTreeSet<&String> = model.layout.keys().chain(host.layout.keys()).collect();
    c.layout_regions = regions.len();
    let triples = |runs: &Vec<Run>| {
        runs.iter()
            .map(|r| serde_json::to_string(r).unwrap_or_default())
            .collect()
    };
    for region in regions {
        let (m, h) = (model.layout.get(region), host.layout.get(region));
        if m != h {
            c.layout_mismatches.push(LayoutDiff {
                region: region.clone(),
                model: m.map(triples),
                host: h.map(triples),
            });
        }
    }
    c
}

/// Runs every workload on both sides and compares.
pub fn validate(workloads: &[Workload], model: &mut Runner, host: &mut Runner) -> Vec<Comparison> {
    let mut progress = crate::sim::progress::Progress::counting(workloads.len() as u64, "workloads");
    workloads
        .iter()
        .map(|w| {
            progress.op();
            let fail = |e: String| Comparison {
                workload: w.path.clone(),
                error: Some(e),
                ..Comparison::default()
            };
            let na = |e: String| Comparison {
                workload: w.path.clone(),
                not_applicable: Some(e),
                ..Comparison::default()
            };
            match (model(w), host(w)) {
                (_, Err(e)) if crate::native::qemu::not_applicable(&e).is_some() => na(e),
                // What the model says it does not model has no verdict (its reason shown).
                (Err(e), _) if e.contains(": not modeled: ") => na(format!("model: {e}")),
                (Ok(m), Ok(h)) => compare(&m, &h),
                (Err(e), _) => fail(format!("model: {e}")),
                (_, Err(e)) => fail(format!("host: {e}")),
            }
        })
        .collect()
}

/// One comparison for people: a verdict line, then only the rows that differ or are
/// non-zero, with the rule each was judged by.
pub fn table(c: &Comparison) -> String {
    let (fo, fn_) = c.tally(true);
    let (go, gn) = c.tally(false);
    let informational = c.rows.iter().filter(|r| !r.rule.judged()).count();
    let layout_ok = c.layout_regions - c.layout_mismatches.len();
    let mut s = format!("{}: {}", c.workload, c.verdict());
    if let Some(e) = c.not_applicable.as_ref().or(c.error.as_ref()) {
        return s + &format!("\n   {e}\n");
    }
    s += &format!(
        "  (faults {fo}/{fn_} exact, layout {layout_ok}/{} regions, global {go}/{gn} exact, {informational} informational)\n",
        c.layout_regions
    );
    let shown: Vec<&Row> = c.rows.iter().filter(|r| r.model != 0 || r.host != 0).collect();
    if !shown.is_empty() {
        s += &format!(
            "   {:<40} {:>10} {:>10} {:>8}  rule\n",
            "counter", "model", "host", "diff"
        );
    }
    for r in shown {
        let mark = if r.ok { ' ' } else { '!' };
        s += &format!(
            "{mark}  {:<40} {:>10} {:>10} {:>+8}  {}\n",
            r.counter, r.model, r.host, r.diff, r.rule
        );
    }
    for d in &c.layout_mismatches {
        let show = |l: &Option<Vec<String>>| l.as_ref().map_or("(absent)".into(), |v| v.join(","));
        s += &format!(
            "!  layout {}:\n     model: {}\n     host:  {}\n",
            d.region,
            show(&d.model),
            show(&d.host)
        );
    }
    // One line per reason: the model's arch.* counters alone are some fifty keys.
    let mut by_why: BTreeMap<&str, Vec<&str>> = BTreeMap::new();
    for (k, why) in &c.not_compared {
        by_why.entry(why).or_default().push(k);
    }
    for (why, keys) in by_why {
        let more = if keys.len() > 3 {
            format!(" and {} more", keys.len() - 3)
        } else {
            String::new()
        };
        s += &format!(
            "   not compared ({why}): {}{more}\n",
            keys[..keys.len().min(3)].join(" ")
        );
    }
    for n in &c.notes {
        s += &format!("   note: {n}\n");
    }
    s
}

/// The table across workloads, one line each, and the totals.
pub fn summary(results: &[Comparison]) -> String {
    let w = results.iter().map(|c| c.workload.len()).max().unwrap_or(8).max(8);
    let timed = results.iter().any(|c| c.time_ms.is_some());
    let mut s = format!(
        "\n{:<w$}  {:<7} {:>9} {:>9} {:>11} {:>13}{}\n",
        "workload",
        "verdict",
        "faults",
        "layout",
        "global",
        "informational",
        if timed {
            format!(" {:>10} {:>10} {:>8}", "model ms", "guest ms", "speed-up")
        } else {
            String::new()
        }
    );
    for c in results {
        let (fo, fn_) = c.tally(true);
        let (go, gn) = c.tally(false);
        let info = c.rows.iter().filter(|r| !r.rule.judged()).count();
        let layout = format!("{}/{}", c.layout_regions - c.layout_mismatches.len(), c.layout_regions);
        let time = match c.time_ms {
            Some(t) if timed => format!(
                " {:>10.2} {:>10.1} {:>7.0}x",
                t.model,
                t.target,
                t.target / t.model.max(1e-3)
            ),
            _ if timed => format!(" {:>10} {:>10} {:>8}", "", "", ""),
            _ => String::new(),
        };
        s += &format!(
            "{:<w$}  {:<7} {:>9} {:>9} {:>11} {:>13}{time}\n",
            c.workload,
            c.verdict(),
            format!("{fo}/{fn_}"),
            layout,
            format!("{go}/{gn}"),
            info
        );
    }
    let (m, t) = results
        .iter()
        .filter_map(|c| c.time_ms)
        .fold((0.0, 0.0), |(m, t), x| (m + x.model, t + x.target));
    if timed {
        s += &format!(
            "time: the model {m:.1} ms, the guest {t:.1} ms under QEMU (wall time per workload, boot not counted): {:.0}x\n",
            t / m.max(1e-3)
        );
    }
    let count = |v: &str| results.iter().filter(|c| c.verdict() == v).count();
    s + &format!(
        "{} workloads: {} PASS, {} FAIL, {} ERROR, {} N/A\n",
        results.len(),
        count("PASS"),
        count("FAIL"),
        count("ERROR"),
        count("N/A")
    )
}

/// Exit status 2 if any side could not run, else 1 if any comparison failed.
pub fn exit_code(results: &[Comparison]) -> ExitCode {
    if results.iter().any(|c| c.error.is_some()) {
        ExitCode::from(2)
    } else if results.iter().all(Comparison::ok) {
        ExitCode::SUCCESS
    } else {
        ExitCode::FAILURE
    }
}

pub fn main(a: Args, db: &super::StoreArgs) -> super::CmdResult {
    if a.seeds {
        return seeds_main(a.json, db);
    }
    let guest = crate::native::qemu::resolve(a.target, a.image.as_deref())?;
    let mut v = guest_variants(guest.as_ref(), a.kernel, &a.sets)?;
    // What the run learnt about the guest's kernel and took into the model.
    let mut notes = Vec::new();
    // Every workload is checked before anything runs: bad input is exit 2, up front.
    let workloads = a
        .workloads
        .iter()
        .map(|p| crate::workload::parse_file(p))
        .collect::<Result<Vec<_>, _>>()?;
    let start = std::time::Instant::now();
    let (host, wall, guest_times) = match &guest {
        None => (host_runner(), None, Vec::new()),
        Some(k) => {
            if let Some(why) = crate::native::qemu::guest_missing(k) {
                return Err(crate::native::qemu::QemuError::NotSetUp(why).into());
            }
            let (r, share, times, features) = batched_runner(k, &workloads, v.machine().granule.page_size());
            if let Some((set, note)) = bbml2_rule_from_guest(&features, &v, &a.sets) {
                let sets = crate::sim::kernels::overlay(a.sets.clone(), &[set]);
                v = guest_variants(Some(k), a.kernel, &sets)?;
                notes.push(note);
            }
            (r, Some(share), times)
        }
    };
    let model_times = std::rc::Rc::new(std::cell::RefCell::new(Vec::new()));
    let model = match guest {
        None => model_runner(v),
        Some(_) => {
            let times = model_times.clone();
            Box::new(move |w: &Workload| {
                let start = std::time::Instant::now();
                let r = crate::sim::run(w, &v).map_err(|e| e.to_string());
                times.borrow_mut().push(start.elapsed());
                crate::native::qemu::as_guest_measures(r?, w, &v)
            })
        }
    };
    let mut results = validate(
        &workloads,
        &mut *recorded(model, "run", db, None),
        &mut *recorded(host, "native", db, wall),
    );
    for c in results.iter_mut() {
        c.notes.clone_from(&notes);
    }
    for ((c, m), g) in results.iter_mut().zip(model_times.borrow().iter()).zip(&guest_times) {
        c.time_ms = g.map(|g| SideTimes {
            model: m.as_secs_f64() * 1e3,
            target: g.as_secs_f64() * 1e3,
        });
    }
    super::record(
        db,
        &crate::store::NewRun {
            kind: "validate",
            workload: None,
            machine: None,
            host_kernel: crate::store::host_kernel(),
            wall_ms: start.elapsed().as_secs_f64() * 1e3,
            result: serde_json::to_value(&results)?,
        },
    );
    if a.json {
        super::emit(&(serde_json::to_string_pretty(&results)? + "\n"))?;
    } else {
        for c in &results {
            super::emit(&table(c))?;
        }
        super::emit(&summary(&results))?;
    }
    Ok(exit_code(&results))
}

/// `validate --seeds`: exit 0 when every seed table agrees, 1 when one differs.
fn seeds_main(json: bool, db: &super::StoreArgs) -> super::CmdResult {
    if let Some(why) = super::seeds::missing() {
        return Err(crate::native::qemu::QemuError::NotSetUp(why).into());
    }
    let start = std::time::Instant::now();
    let mut s = super::seeds::run()?;
    super::seeds::run_built(&mut s)?;
    // Seed 004 on kernels built from its own code (or why not here).
    let (text004, mut json004) = super::seed004::validate_section(db)?;
    let mut result = serde_json::to_value(&s)?;
    // reproduce's real-kernel column reads this array (seeds 003 and 001 from the
    // built kernels, then seed 004's); seed 004's moved, not copied, so the stored run
    // holds it once.
    let mut real = s.real_kernel_rows();
    if let Some(serde_json::Value::Array(rows)) = json004.as_object_mut().and_then(|o| o.remove("real_kernel")) {
        real.extend(rows);
    }
    result["real_kernel"] = real.into();
    result["seed004"] = json004;
    super::record(
        db,
        &crate::store::NewRun {
            kind: "validate-seeds",
            workload: None,
            machine: None,
            host_kernel: None,
            wall_ms: start.elapsed().as_secs_f64() * 1e3,
            result: result.clone(),
        },
    );
    if json {
        super::emit(&(serde_json::to_string_pretty(&result)? + "\n"))?;
    } else {
        super::emit(&(super::seeds::text(&s) + &text004))?;
    }
    Ok(if s.ok() { ExitCode::SUCCESS } else { ExitCode::FAILURE })
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::report::PageKind;

    fn report(source: &str, counters: &[(&str, i64)], layout: &[(&str, Vec<Run>)]) -> Report {
        Report {
            source: source.into(),
            workload: "w.wl".into(),
            counters: counters.iter().map(|(k, v)| (k.to_string(), *v)).collect(),
            layout: layout.iter().map(|(k, v)| (k.to_string(), v.clone())).collect(),
            ..Report::default()
        }
    }

    fn run(first: u64, n: u64, order: u32) -> Run {
        Run {
            first,
            n,
            kind: PageKind::Order(order),
        }
    }

    #[test]
    fn exact_keys_and_layout_must_match() {
        let m = report(
            "model",
            &[("proc.main.minflt", 1024)],
            &[("main/buf", vec![run(0, 16384, 4)])],
        );
        let h = report(
            "host",
            &[("proc.main.minflt", 1024)],
            &[("main/buf", vec![run(0, 16384, 4)])],
        );
        assert!(compare(&m, &h).ok());
        let h2 = report(
            "host",
            &[("proc.main.minflt", 1025)],
            &[("main/buf", vec![run(0, 16384, 4)])],
        );
        let c = compare(&m, &h2);
        assert!(!c.ok());
        assert_eq!(
            c.rows[0],
            Row {
                counter: "proc.main.minflt".into(),
                model: 1024,
                host: 1025,
                diff: 1,
                rule: Rule::Exact,
                ok: false
            }
        );
        let h3 = report(
            "host",
            &[("proc.main.minflt", 1024)],
            &[("main/buf", vec![run(0, 16383, 4), run(16383, 1, 0)])],
        );
        let c = compare(&m, &h3);
        assert!(!c.ok());
        assert_eq!(
            c.layout_mismatches[0].host.as_ref().unwrap(),
            &["[0,16383,4]", "[16383,1,0]"]
        );
        assert!(table(&c).starts_with("w.wl: FAIL"));
    }

    /// The guest's instruction counts are never compared, even against a model key of
    /// the same name: the model counts no instructions.
    #[test]
    fn instruction_counts_are_guest_only() {
        let m = report("model", &[("kernel.insns", 0)], &[]);
        let h = report(
            "qemu-arm64",
            &[
                ("kernel.insns", 900),
                ("kernel.insns.do_anonymous_page", 400),
                ("user.insns", 7),
            ],
            &[],
        );
        let c = compare(&m, &h);
        assert!(c.rows.is_empty());
        assert!(c.ok());
        assert_eq!(c.not_compared.len(), 3);
        assert!(c.not_compared.values().all(|why| why.starts_with("not modeled")));
    }

    #[test]
    fn a_region_on_one_side_only_is_a_mismatch() {
        let m = report("model", &[], &[("main/a", vec![]), ("main/b", vec![run(0, 1, 0)])]);
        let h = report("host", &[], &[("main/a", vec![])]);
        let c = compare(&m, &h);
        assert_eq!(c.layout_mismatches.len(), 1);
        assert_eq!(c.layout_mismatches[0].region, "main/b");
        assert_eq!(c.layout_mismatches[0].host, None);
        assert_eq!(c.layout_regions, 2);
    }

    /// The workload's own major faults are judged by process; the global pgmajfault is
    /// judged exactly unless it exceeds them by more than the model's majors outside a
    /// fault, which only another process's major fault in an op's window explains (seen
    /// on this host: +1 in one of 40 runs of fork_cow.wl, with none in the idle window).
    #[test]
    fn a_major_fault_beyond_the_workloads_own_is_another_process() {
        let quiet = crate::report::Background {
            op_ms: 3.0,
            window_ms: 200.0,
            ..Default::default()
        };
        let judge = |m: &[(&str, i64)], h: &[(&str, i64)]| {
            let mut h = report("host", h, &[]);
            h.background = Some(quiet.clone());
            let c = compare(&report("model", m, &[]), &h);
            let row = |k: &str| c.rows.iter().find(|r| r.counter == k).map(|r| (r.rule.clone(), r.ok));
            (
                row("vmstat.pgmajfault"),
                row("proc.main.majflt"),
                c.not_compared.clone(),
            )
        };
        // fork_cow.wl's failing run: nothing of the workload's, one of another's.
        let own = [("vmstat.pgmajfault", 0)];
        let (g, p, _) = judge(&own, &[("vmstat.pgmajfault", 1), ("proc.main.majflt", 0)]);
        assert_eq!(g, Some((Rule::OthersMajflt { extra: 1 }, true)));
        assert_eq!(p, Some((Rule::Exact, true)));
        // The workload's own major faults, counted alike: exact.
        let swap = [("vmstat.pgmajfault", 16), ("proc.main.majflt", 16)];
        assert_eq!(judge(&swap, &swap).0, Some((Rule::Exact, true)));
        // Majors outside a fault (a swap-in by mlock) are the model's too: exact, and a
        // count short of them fails.
        let mlock = [("vmstat.pgmajfault", 16), ("proc.main.majflt", 0)];
        assert_eq!(judge(&mlock, &mlock).0, Some((Rule::Exact, true)));
        let short = [("vmstat.pgmajfault", 15), ("proc.main.majflt", 0)];
        assert_eq!(judge(&mlock, &short).0, Some((Rule::Exact, false)));
        // A process's own count that differs fails, whatever the global one does.
        let (g, p, _) = judge(&swap, &[("vmstat.pgmajfault", 17), ("proc.main.majflt", 15)]);
        assert_eq!(g, Some((Rule::OthersMajflt { extra: 2 }, true)));
        assert_eq!(p, Some((Rule::Exact, false)));
        // A report whose runner counts minor faults only (a guest's, a saved one).
        let (g, p, not) = judge(&swap, &[("vmstat.pgmajfault", 16)]);
        assert_eq!((g, p), (Some((Rule::Exact, true)), None));
        assert!(not["proc.main.majflt"].starts_with("host: not measured"));
    }

    /// mthp_64k_skew4k_alone.wl failed with pgfault +126 and an idle window that saw
    /// none, every process of the workload's faults exact: the surplus is others'. A
    /// count short of the workload's own still fails.
    #[test]
    fn faults_beyond_the_workloads_own_are_another_processes() {
        let judge = |m: &[(&str, i64)], h: &[(&str, i64)]| {
            let mut h = report("host", h, &[]);
            h.background = Some(crate::report::Background {
                op_ms: 3.0,
                window_ms: 201.0,
                ..Default::default()
            });
            let c = compare(&report("model", m, &[]), &h);
            c.rows
                .iter()
                .find(|r| r.counter == "vmstat.pgfault")
                .map(|r| (r.rule.clone(), r.ok))
        };
        let model = [("vmstat.pgfault", 79), ("proc.main.minflt", 79)];
        let host = |pgfault| {
            [
                ("vmstat.pgfault", pgfault),
                ("proc.main.minflt", 79),
                ("proc.main.majflt", 0),
            ]
        };
        assert_eq!(
            judge(&model, &host(205)),
            Some((Rule::OthersFaults { extra: 126 }, true))
        );
        assert_eq!(judge(&model, &host(79)), Some((Rule::Exact, true)));
        assert_eq!(judge(&model, &host(78)), Some((Rule::Exact, false)));
        // Without per-process major faults (a guest's report) the count is judged as is.
        let guest = [("vmstat.pgfault", 205), ("proc.main.minflt", 79)];
        assert_eq!(judge(&model, &guest), Some((Rule::Exact, false)));
    }

    /// A global counter is exact when the host's idle window saw it still, and only
    /// informational when other processes moved it there.
    #[test]
    fn global_counters_follow_the_measured_background() {
        let m = report("model", &[("vmstat.pgfault", 1000), ("mthp.64kB.split", 0)], &[]);
        let mut h = report("host", &[("vmstat.pgfault", 1020), ("mthp.64kB.split", 0)], &[]);
        assert_eq!(rule("vmstat.pgfault", &h), Rule::Unmeasured);
        assert!(compare(&m, &h).ok(), "saved results are not judged on global counters");
        h.background = Some(crate::report::Background {
            op_ms: 3.0,
            window_ms: 200.0,
            counters: [("vmstat.pgfault".to_string(), 57)].into(),
            ..Default::default()
        });
        assert_eq!(rule("proc.main.minflt", &h), Rule::Exact);
        assert_eq!(rule("mthp.64kB.split", &h), Rule::Exact);
        assert!(matches!(rule("vmstat.thp_zero_page_alloc", &h), Rule::HostState { .. }));
        let c = compare(&m, &h);
        assert!(c.ok(), "{c:?}");
        assert_eq!(
            c.rows.iter().find(|r| r.counter == "vmstat.pgfault").unwrap().rule,
            Rule::Informational {
                moved: 57,
                window_ms: 200.0
            }
        );
        assert!(table(&c).contains("informational: other processes moved it +57 in 200 ms idle"));
        h.counters.insert("mthp.64kB.split".into(), 1);
        let c = compare(&m, &h);
        assert!(!c.ok());
        assert!(table(&c).contains("!  mthp.64kB.split"), "{}", table(&c));
        // A workload that ran shrink split other processes' folios as well.
        h.background.as_mut().unwrap().shrink = true;
        assert!(matches!(rule("mthp.64kB.split", &h), Rule::HostState { .. }));
        assert!(compare(&m, &h).ok());
    }

    /// fork_cow.wl failed at load 7 with 64K split_deferred and nr_anon_partially_mapped
    /// +4, none in the idle window, while other processes held thousands of 64K folios
    /// (and three workloads at load 13 with one PMD THP more, others holding 446): a
    /// size's life counters are informational when others hold folios of that size.
    #[test]
    fn a_sizes_life_counters_are_informational_while_others_hold_its_folios() {
        let mut h = report(
            "host",
            &[
                ("mthp.64kB.split_deferred", 4),
                ("mthp.64kB.anon_fault_alloc", 16),
                ("mthp.64kB.swpin", 0),
                ("mthp.2048kB.split", 0),
                ("vmstat.thp_split_pmd", 1),
                ("vmstat.thp_collapse_alloc", 0),
            ],
            &[],
        );
        h.background = Some(crate::report::Background {
            op_ms: 3.0,
            window_ms: 200.0,
            held: [("mthp.64kB.nr_anon".to_string(), 4862)].into(),
            ..Default::default()
        });
        assert_eq!(
            rule("mthp.64kB.split_deferred", &h),
            Rule::OthersHold {
                size_kb: 64,
                held: 4862
            }
        );
        assert!(matches!(
            rule("mthp.64kB.anon_fault_alloc", &h),
            Rule::OthersHold { .. }
        ));
        // A swap-in, a collapse, or another size's counter stays exact.
        assert_eq!(rule("mthp.64kB.swpin", &h), Rule::Exact);
        assert_eq!(rule("vmstat.thp_split_pmd", &h), Rule::Exact);
        let b = h.background.as_mut().unwrap();
        b.held.insert("mthp.2048kB.nr_anon".into(), 446);
        assert_eq!(
            rule("vmstat.thp_split_pmd", &h),
            Rule::OthersHold {
                size_kb: 2048,
                held: 446
            }
        );
        assert_eq!(rule("vmstat.thp_collapse_alloc", &h), Rule::Exact);
    }

    /// mprotect_split_rw.wl failed at load 4 with 64K nr_anon 15 against the model's 16:
    /// no 64K folio held by others as the run began, but others allocated 100 in the
    /// idle window under the workload's 64K `always` (a build running beside it), so a
    /// folio of theirs made in a gap between op windows and freed in one moved the gauge.
    #[test]
    fn a_sizes_life_counters_are_informational_while_others_allocate_it() {
        let mut h = report(
            "host",
            &[
                ("mthp.64kB.nr_anon", 15),
                ("mthp.64kB.anon_fault_alloc", 18),
                ("mthp.64kB.swpin", 0),
                ("mthp.32kB.nr_anon", 0),
            ],
            &[],
        );
        h.background = Some(crate::report::Background {
            op_ms: 3.0,
            window_ms: 201.0,
            counters: [("mthp.64kB.anon_fault_alloc".to_string(), 100)].into(),
            ..Default::default()
        });
        let others = Rule::OthersAlloc {
            size_kb: 64,
            moved: 100,
            window_ms: 201.0,
        };
        assert_eq!(rule("mthp.64kB.nr_anon", &h), others);
        assert_eq!(rule("mthp.64kB.anon_fault_alloc", &h), others);
        assert!(
            others.to_string().contains("allocated 100 64kB folios in 201 ms idle"),
            "{others}"
        );
        // Not a life counter, or another size nobody allocated: exact.
        assert_eq!(rule("mthp.64kB.swpin", &h), Rule::Exact);
        assert_eq!(rule("mthp.32kB.nr_anon", &h), Rule::Exact);
    }

    /// pmd_2048k_always_knob.wl's `set` started khugepaged, whose first scan collapsed
    /// other processes' ranges (thp_collapse_alloc +8, 64K nr_anon -169 in that window,
    /// none in the idle one): those counters are informational, the rest stay exact.
    #[test]
    fn counters_the_start_scan_moved_are_informational() {
        let m = report(
            "model",
            &[("vmstat.thp_collapse_alloc", 0), ("mthp.64kB.split", 0)],
            &[],
        );
        let mut h = report("host", &[("vmstat.thp_collapse_alloc", 8), ("mthp.64kB.split", 1)], &[]);
        h.background = Some(crate::report::Background {
            op_ms: 3.0,
            window_ms: 200.0,
            start_scan: Some(crate::report::StartScan {
                collapsed: 8,
                counters: [("vmstat.thp_collapse_alloc".to_string(), 8)].into(),
            }),
            ..Default::default()
        });
        assert_eq!(
            rule("vmstat.thp_collapse_alloc", &h),
            Rule::StartScan { moved: 8, collapsed: 8 }
        );
        let c = compare(&m, &h);
        assert!(table(&c).contains("moved +8 in the window of a `set` that started khugepaged, whose first scan collapsed 8 ranges host-wide"), "{}", table(&c));
        assert!(!c.ok(), "a counter the scan did not move is still exact");
        h.counters.insert("mthp.64kB.split".into(), 0);
        assert!(compare(&m, &h).ok());
    }

    /// Saved results carry no background, yet their swap counters are judged: only the
    /// workload swaps, to its own device.
    #[test]
    fn saved_swap_counters_are_judged_and_the_global_fault_count_is_not() {
        let m = report("model", &[("vmstat.swap_ra", 27), ("vmstat.pgmajfault", 5)], &[]);
        let h = report("host", &[("vmstat.swap_ra", 26), ("vmstat.pgmajfault", 6)], &[]);
        assert_eq!(
            compare(&m, &h).global_mismatches(),
            ["vmstat.swap_ra: model 27 host 26"]
        );
        assert!(exact_global("mthp.64kB.swpin") && exact_global("vmstat.pswpout"));
        assert!(!exact_global("mthp.64kB.anon_fault_alloc"));
    }

    #[test]
    fn a_host_diagnostic_is_an_error_not_a_pass() {
        let m = report("model", &[("proc.main.minflt", 16)], &[]);
        let mut h = report("host", &[("proc.main.minflt", 16)], &[]);
        h.diagnostics
            .push("w.wl:3:1: runner fault outside the workload's regions at 0x5000".into());
        let c = compare(&m, &h);
        assert!(!c.ok());
        assert!(table(&c).starts_with("w.wl: ERROR\n   host measurement defect: w.wl:3:1: runner fault"));
        assert_eq!(exit_code(&[c]), ExitCode::from(2));
    }

    #[test]
    fn one_sided_and_unavailable_keys() {
        let m = report(
            "model",
            &[("arch.tlbi.vae1is", 3), ("proc.child.minflt", 0), ("vmstat.pgfault", 5)],
            &[],
        );
        let mut h = report(
            "host",
            &[("mthp.8kB.split", 0), ("proc.main.minflt", 0)],
            &[("main/a", vec![])],
        );
        h.unavailable.insert("vmstat.pgfault".into(), "not root".into());
        h.unavailable.insert("layout".into(), "no PFNs".into());
        let c = compare(&m, &h);
        assert!(c.ok(), "{c:?}");
        assert_eq!(c.not_compared["arch.tlbi.vae1is"], "model only");
        assert_eq!(c.not_compared["mthp.8kB.split"], "not modelled");
        assert_eq!(c.not_compared["vmstat.pgfault"], "host: not root");
        assert_eq!(c.not_compared["layout"], "host: no PFNs");
        // Absent process counters count as zero faults, on either side.
        assert_eq!(c.rows.len(), 2);
        let h2 = report("host", &[("proc.child.minflt", 2)], &[]);
        assert!(!compare(&report("model", &[], &[]), &h2).ok());
    }

    #[test]
    fn validate_reports_a_failing_side() {
        let w = crate::workload::parse_str("good.wl", "mmap a 64K\ntouch a\n").unwrap();
        let canned = |source: &'static str| {
            move |w: &Workload| Ok(report(source, &[("proc.main.minflt", 16)], &[]).with_workload(&w.path))
        };
        let res = validate(std::slice::from_ref(&w), &mut canned("model"), &mut canned("host"));
        assert!(res[0].ok(), "{:?}", res[0]);
        assert_eq!(exit_code(&res), ExitCode::SUCCESS);
        // The real model agrees on the faults; the canned host has no layout.
        let res = validate(
            std::slice::from_ref(&w),
            &mut *model_runner(crate::sim::Variants::default()),
            &mut canned("host"),
        );
        assert!(res[0].error.is_none(), "{:?}", res[0].error);
        assert!(res[0].rows.iter().any(|r| r.counter == "proc.main.minflt" && r.ok));
        assert_eq!(res[0].layout_mismatches.len(), 1);
        assert!(table(&res[0]).starts_with("good.wl: FAIL"));
        assert_eq!(exit_code(&res), ExitCode::FAILURE);
        let res = validate(&[w], &mut canned("model"), &mut |_: &Workload| {
            Err("not root".to_string())
        });
        assert_eq!(res[0].error.as_deref(), Some("host: not root"));
        assert!(summary(&res).ends_with("1 workloads: 0 PASS, 0 FAIL, 1 ERROR, 0 N/A\n"));
        assert_eq!(exit_code(&res), ExitCode::from(2));
    }

    #[test]
    fn a_workload_the_target_cannot_run_is_not_applicable() {
        let w = crate::workload::parse_str("k.wl", "set hugepages-16kB/enabled always\n").unwrap();
        let why = "not applicable on qemu-arm64-16k: its kernel has no \
                   /sys/kernel/mm/transparent_hugepage/hugepages-16kB/enabled (set at k.wl:1:1)";
        // Whatever the model says: the target's kernel cannot run the workload.
        let res = validate(
            std::slice::from_ref(&w),
            &mut |_: &Workload| Err("no such knob".to_string()),
            &mut |_: &Workload| Err(why.to_string()),
        );
        assert_eq!(res[0].not_applicable.as_deref(), Some(why));
        assert_eq!(table(&res[0]), format!("k.wl: N/A\n   {why}\n"));
        assert!(summary(&res).ends_with("1 workloads: 0 PASS, 0 FAIL, 0 ERROR, 1 N/A\n"));
        assert_eq!(exit_code(&res), ExitCode::SUCCESS);
    }

    #[test]
    fn a_workload_the_model_does_not_model_is_not_applicable_with_its_reason() {
        let w = crate::workload::parse_str("k.wl", "swapon 1M\n").unwrap();
        let why = "k.wl:1:1: not modeled: large shmem folios through swap without THP_SWAP";
        let res = validate(
            std::slice::from_ref(&w),
            &mut |_: &Workload| Err(why.to_string()),
            &mut |_: &Workload| Ok(Report::default()),
        );
        assert_eq!(res[0].not_applicable.as_deref(), Some(format!("model: {why}").as_str()));
        assert!(summary(&res).ends_with("1 workloads: 0 PASS, 0 FAIL, 0 ERROR, 1 N/A\n"));
        // Any other model error stays an error.
        let res = validate(
            std::slice::from_ref(&w),
            &mut |_: &Workload| Err("k.wl:1:1: out of memory".to_string()),
            &mut |_: &Workload| Ok(Report::default()),
        );
        assert!(summary(&res).ends_with("1 workloads: 0 PASS, 0 FAIL, 1 ERROR, 0 N/A\n"));
    }

    impl Report {
        fn with_workload(mut self, path: &str) -> Report {
            self.workload = path.into();
            self
        }
    }
}
