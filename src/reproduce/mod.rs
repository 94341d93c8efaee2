//! `foliolab reproduce`: every seed's tables, the seed's figures beside the model's.
//!
//! Each seed module runs its experiment in both variants on the seed's machines (the
//! model's counts, costed with the machine profiles) and returns rows in the shape of
//! the seed's own tables. A figure the model cannot produce is a row with no model
//! value and a note saying why, never a guess.

use serde::{Deserialize, Serialize};
use std::collections::BTreeMap;

/// One cell pair of a seed table: the seed's figure and the model's, and how they
/// compare.
#[derive(Clone, Debug, Serialize, Deserialize, PartialEq)]
pub struct Row {
    pub seed: String,
    pub experiment: String,
    pub machine: String,
    pub variant: String,
    pub unit: String,
    pub seed_value: f64,
    /// None where the model cannot produce the figure (`reason` says why).
    pub model_value: Option<f64>,
    pub seed_stdev: Option<f64>,
    /// Whether the model's change against the baseline has the seed's sign (false
    /// when either has no change to compare: a level, a missing value, a zero).
    pub sign_agrees: bool,
    /// Set when both figures are changes against this variant (which then has no row
    /// of its own: a baseline of a change-only table is 0 by definition); None when
    /// they are levels.
    #[serde(default)]
    pub baseline: Option<String>,
    /// The seed's stdev of its baseline, for a change-only table that gives one.
    #[serde(default)]
    pub baseline_stdev: Option<f64>,
    #[serde(default = "Verdict::unjudged")]
    pub verdict: Verdict,
    /// Why the verdict is not-modeled or disagrees (and, for noise, the spread used).
    #[serde(default)]
    pub reason: Option<String>,
    /// The seed's experiment measured on a real kernel, the third figure beside the
    /// seed's and the model's.
    #[serde(default)]
    pub real_kernel: RealKernel,
    /// The same cell measured on other builds (another compiler's), after the first.
    #[serde(default, skip_serializing_if = "Vec::is_empty")]
    pub real_kernel_more: Vec<RealKernel>,
}

/// What a real kernel measured for a cell (`foliolab validate --seeds` stores it), or
/// that nothing was measured.
#[derive(Clone, Debug, Serialize, Deserialize, PartialEq)]
pub struct RealKernel {
    pub value: Option<f64>,
    pub unit: Option<String>,
    /// The kernel and the stored run the value comes from, or [`NOT_MEASURED`].
    pub source: String,
    /// Which build of the experiment it is (seed 004: the compiler), when there are several.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub build: Option<String>,
    /// The change in percent against the real kernel's own baseline, when the value is
    /// a change.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub change_pct: Option<f64>,
}

/// A cell no stored real-kernel measurement has.
pub const NOT_MEASURED: &str = "not measured: run `foliolab validate --seeds`";

/// Why a seed's tables have no real-kernel cell at all: `validate --seeds` measures
/// seeds 001, 003 and 004 on kernels built with and without their change, and for the
/// rest checks only the counts of their workloads on the guests.
fn no_real_kernel(seed: &str) -> Option<&'static str> {
    match seed {
        "000" => Some(
            "none: the table is the seed's microbenchmark time on its machines, which a kernel under QEMU does not \
             give; `foliolab validate --seeds` checks the counts of its workloads (seed000-*.wl) on the 6.1 and 6.12 \
             guests against the model",
        ),
        "002" => Some(
            "none: the table is a kernel build's time on the seed's machine; `foliolab validate --seeds` checks the \
             counts of its fault workloads (seed002-*.wl) on the 6.1 and 6.12 guests against the model",
        ),
        "upstream" => Some(
            "none: each row's figures are its mail's, on hardware; the suite on the 7.x guests (`foliolab validate \
             --target qemu-arm64-7.3 tests/validation/*.wl`) counts these changes' events against the model",
        ),
        _ => None,
    }
}

impl Default for RealKernel {
    fn default() -> Self {
        RealKernel {
            value: None,
            unit: None,
            source: NOT_MEASURED.into(),
            build: None,
            change_pct: None,
        }
    }
}

/// A row of a stored `validate-seeds` result's `real_kernel` array: a seed's experiment
/// run on a real (built or Debian) kernel, keyed as `reproduce`'s rows are: seed,
/// experiment and variant, and the machine column when the measurement is one
/// machine's (absent: it stands for every column of the table).
#[derive(Clone, Debug, Deserialize)]
pub struct StoredRealKernel {
    pub seed: String,
    pub experiment: String,
    pub variant: String,
    #[serde(default)]
    pub machine: Option<String>,
    pub unit: String,
    pub value: f64,
    /// The kernel it ran on (e.g. `6.12.117 gcc-12 built, seed 003 before`).
    pub kernel: String,
    /// Which build of the experiment (seed 004: `gcc` or `clang`), when it has several.
    #[serde(default)]
    pub build: Option<String>,
    /// The value's change in percent against the real kernel's baseline.
    #[serde(default)]
    pub change_pct: Option<f64>,
}

/// How a model figure compares with the seed's.
#[derive(Clone, Copy, Debug, Serialize, Deserialize, PartialEq, Eq, PartialOrd, Ord)]
#[serde(rename_all = "kebab-case")]
pub enum Verdict {
    /// Same sign of change (and, where the seed gives an absolute figure, a magnitude
    /// within [`MAGNITUDE`]).
    Agrees,
    /// The seed's change is inside its own spread, and the model's is too.
    Noise,
    Disagrees,
    /// The model has no figure, or does not model what decides this one (`reason`).
    NotModeled,
}

impl Verdict {
    pub const ALL: [Verdict; 4] = [Verdict::Agrees, Verdict::Noise, Verdict::Disagrees, Verdict::NotModeled];

    /// What a row read from an older run without verdicts says.
    fn unjudged() -> Verdict {
        Verdict::NotModeled
    }

    pub fn name(self) -> &'static str {
        match self {
            Verdict::Agrees => "agrees",
            Verdict::Noise => "noise",
            Verdict::Disagrees => "disagrees",
            Verdict::NotModeled => "not-modeled",
        }
    }
}

/// How far a model's absolute figure may be from the seed's and still agree: a factor
/// either way (issue 37's targets: map_mem's ms and the Kunpeng share within ×1.5).
pub const MAGNITUDE: f64 = 1.5;

/// One cell to judge: the seed's figure and the model's, as levels or as changes.
pub struct Cell<'a> {
    pub seed: &'a str,
    pub experiment: &'a str,
    pub machine: &'a str,
    pub variant: &'a str,
    pub unit: &'a str,
    pub seed_value: f64,
    pub seed_stdev: Option<f64>,
    /// The model's figure, or why there is none.
    pub model: Result<f64, String>,
    pub figure: Figure,
    /// What the model does not count that decides this cell, when the model's work is
    /// the same in both variants, or when the seed's own figures put the cell's sign in
    /// work the model does not count (a disagreement then is not-modeled, for this reason).
    pub unmodeled: Option<String>,
}

/// What a cell's figures are.
pub enum Figure {
    /// Changes against `baseline` (which has no row): compared by sign; inside the
    /// seed's spread (its stdev of the change plus its baseline's) a change is noise.
    Change {
        baseline: &'static str,
        baseline_stdev: Option<f64>,
    },
    /// Changes against `baseline` (which has no row), whose size is judged as a share
    /// of the seed's baseline total `total`: the same sign, and the model's change
    /// within `points` percentage points of `total` of the seed's (issue 37's target
    /// for seed 004, whose model has no total of its own to make a percent of).
    ChangeOfTotal {
        baseline: &'static str,
        total: f64,
        points: f64,
    },
    /// Absolute levels with no change to compare (a baseline, a share): by magnitude.
    Level,
    /// Absolute levels of a changed variant: by magnitude, and the change against the
    /// baseline row's `(seed, model)` levels by sign.
    LevelChange { seed_base: f64, model_base: Option<f64> },
}

impl Cell<'_> {
    /// The row, judged.
    pub fn row(&self) -> Row {
        let (mut verdict, mut reason, sign_agrees) = self.judge();
        if let (Verdict::Disagrees, Some(why)) = (verdict, &self.unmodeled) {
            reason = Some(format!(
                "{why} (the model's figure is shown; judged alone: {})",
                reason.unwrap_or_default()
            ));
            verdict = Verdict::NotModeled;
        }
        let (baseline, baseline_stdev) = match self.figure {
            Figure::Change {
                baseline,
                baseline_stdev,
            } => (Some(baseline.to_string()), baseline_stdev),
            Figure::ChangeOfTotal { baseline, .. } => (Some(baseline.to_string()), None),
            _ => (None, None),
        };
        Row {
            seed: self.seed.into(),
            experiment: self.experiment.into(),
            machine: self.machine.into(),
            variant: self.variant.into(),
            unit: self.unit.into(),
            seed_value: self.seed_value,
            model_value: self.model.as_ref().ok().copied(),
            seed_stdev: self.seed_stdev,
            sign_agrees,
            baseline,
            baseline_stdev,
            verdict,
            reason,
            real_kernel: RealKernel::default(),
            real_kernel_more: Vec::new(),
        }
    }

    fn judge(&self) -> (Verdict, Option<String>, bool) {
        let model = match &self.model {
            Ok(m) => *m,
            Err(why) => return (Verdict::NotModeled, Some(why.clone()), false),
        };
        let disagrees = |why: String, sign: bool| (Verdict::Disagrees, Some(why), sign);
        // The change each side makes, the seed's spread of it, and whether the seed's
        // figure is an absolute one whose magnitude the model's must match.
        let (seed_change, model_change, spread, absolute) = match self.figure {
            Figure::Change { baseline_stdev, .. } => (
                self.seed_value,
                model,
                match (self.seed_stdev, baseline_stdev) {
                    (Some(a), Some(b)) => Some(a + b),
                    (a, b) => a.or(b),
                },
                // A change in %, or in points of a share, is relative; one in
                // instructions or seconds is a figure of its own.
                !matches!(self.unit, "%" | "points"),
            ),
            Figure::ChangeOfTotal { total, points, .. } => {
                let sign = same_sign(model, self.seed_value) && self.seed_value != 0.0;
                let gap = (model - self.seed_value) / total * 100.0;
                return if !sign {
                    disagrees(
                        format!(
                            "opposite signs: the seed {}, the model {}",
                            fig(self.seed_value),
                            fig(model)
                        ),
                        false,
                    )
                } else if gap.abs() > points {
                    disagrees(
                        format!(
                            "the model's change is {} points of the seed's {} total from the seed's (agreement needs {points})",
                            fig(gap),
                            fig(total)
                        ),
                        true,
                    )
                } else {
                    (Verdict::Agrees, None, true)
                };
            }
            Figure::Level => {
                return match magnitude(self.seed_value, model, self.unit) {
                    Some(why) => disagrees(why, false),
                    None => (Verdict::Agrees, None, false),
                }
            }
            Figure::LevelChange { seed_base, model_base } => {
                let Some(b) = model_base else {
                    return (
                        Verdict::NotModeled,
                        Some("the model has no baseline figure".into()),
                        false,
                    );
                };
                (self.seed_value - seed_base, model - b, None, true)
            }
        };
        let sign = same_sign(model_change, seed_change) && seed_change != 0.0;
        if let Some(sd) = spread.filter(|sd| seed_change.abs() <= *sd) {
            return if model_change.abs() <= sd {
                (Verdict::Noise, Some(format!("the seed's change {} is inside its spread ±{} (its stdev plus its baseline's), and the model's {} is too", fig(seed_change), fig(sd), fig(model_change))), sign)
            } else {
                disagrees(
                    format!(
                        "the seed's change {} is inside its spread ±{}, the model's {} is outside it",
                        fig(seed_change),
                        fig(sd),
                        fig(model_change)
                    ),
                    sign,
                )
            };
        }
        if !sign {
            return disagrees(
                if model_change == 0.0 {
                    format!("the seed changes by {}, the model not at all", fig(seed_change))
                } else {
                    format!(
                        "opposite signs: the seed {}, the model {}",
                        fig(seed_change),
                        fig(model_change)
                    )
                },
                false,
            );
        }
        match absolute.then(|| magnitude(self.seed_value, model, self.unit)).flatten() {
            Some(why) => disagrees(why, true),
            None => (Verdict::Agrees, None, true),
        }
    }
}

/// Why `model` is not within [`MAGNITUDE`] of `seed` (None when it is).
fn magnitude(seed: f64, model: f64, unit: &str) -> Option<String> {
    let ratio = model / seed;
    (!(1.0 / MAGNITUDE..=MAGNITUDE).contains(&ratio)).then(|| {
        format!(
            "the model's {} {unit} is ×{ratio:.2} the seed's {} (agreement needs ×{:.2} to ×{MAGNITUDE})",
            fig(model),
            fig(seed),
            1.0 / MAGNITUDE
        )
    })
}

/// A figure in a reason: four significant digits, no trailing zeros.
fn fig(v: f64) -> String {
    let digits = 3i32.saturating_sub(v.abs().log10().floor() as i32).clamp(0, 6) as usize;
    let s = format!("{v:.digits$}");
    if s.contains('.') {
        s.trim_end_matches('0').trim_end_matches('.').to_string()
    } else {
        s
    }
}

/// Verdict counts, and a line for each disagreement.
#[derive(Clone, Debug, Default, Serialize, Deserialize, PartialEq)]
pub struct Summary {
    /// Verdict -> cells.
    pub counts: BTreeMap<String, usize>,
    /// `seed N, experiment, machine, variant: why`, one per disagreeing cell.
    pub disagrees: Vec<String>,
}

impl Summary {
    pub fn of(rows: &[Row]) -> Summary {
        let mut counts: BTreeMap<String, usize> = Verdict::ALL.iter().map(|v| (v.name().to_string(), 0)).collect();
        let mut disagrees = Vec::new();
        for r in rows {
            *counts.get_mut(r.verdict.name()).expect("every verdict counted") += 1;
            if r.verdict == Verdict::Disagrees {
                disagrees.push(format!(
                    "seed {}, {}, {}, {}: {}",
                    r.seed,
                    r.experiment,
                    r.machine,
                    r.variant,
                    r.reason.as_deref().unwrap_or("")
                ));
            }
        }
        Summary { counts, disagrees }
    }
}

/// A seed 004 row (scenario 3's instructions, Modification 1) for tests of the
/// real-kernel column.
#[cfg(test)]
pub(crate) fn seed004_test_row() -> Row {
    Cell {
        seed: "004",
        experiment: "scenario 3: instructions, change against Original",
        machine: "generic",
        variant: "Modification 1",
        unit: "instructions",
        seed_value: 1.6e9,
        seed_stdev: None,
        model: Ok(1.0e9),
        figure: Figure::Change {
            baseline: "Original",
            baseline_stdev: None,
        },
        unmodeled: None,
    }
    .row()
}

impl Reproduction {
    /// Puts each of a stored result's real-kernel rows (its `real_kernel` array) beside
    /// the rows with its key; `run` names the stored run. A cell takes one measurement
    /// per build: the first attached is its `real_kernel`, other builds' follow in
    /// `real_kernel_more`, and a build the cell has already (from a newer run, attached
    /// first) is left. Rows it has none for stay [`NOT_MEASURED`]; a stored row that
    /// is not a real-kernel row is an error.
    pub fn attach_real_kernel(&mut self, run: &str, stored: &serde_json::Value) -> Result<usize, String> {
        let Some(rows) = stored.get("real_kernel") else {
            return Ok(0);
        };
        let rows: Vec<StoredRealKernel> =
            serde_json::from_value(rows.clone()).map_err(|e| format!("{run}: real_kernel: {e}"))?;
        let mut attached = 0;
        for r in &mut self.rows {
            let hits = rows.iter().filter(|s| {
                s.seed == r.seed
                    && s.experiment == r.experiment
                    && s.variant == r.variant
                    && s.machine.as_ref().is_none_or(|m| *m == r.machine)
            });
            for s in hits {
                let has = |k: &RealKernel| k.value.is_some() && k.build == s.build;
                if has(&r.real_kernel) || r.real_kernel_more.iter().any(has) {
                    continue;
                }
                let k = RealKernel {
                    value: Some(s.value),
                    unit: Some(s.unit.clone()),
                    source: format!("{} ({run})", s.kernel),
                    build: s.build.clone(),
                    change_pct: s.change_pct,
                };
                if r.real_kernel.value.is_none() {
                    r.real_kernel = k;
                } else {
                    r.real_kernel_more.push(k);
                }
                attached += 1;
            }
        }
        Ok(attached)
    }
}

/// The modeled time of one variant, by event kind, for the stacked breakdown.
#[derive(Clone, Debug, Serialize, Deserialize, PartialEq)]
pub struct Breakdown {
    pub seed: String,
    pub experiment: String,
    pub machine: String,
    pub variant: String,
    /// Event -> modeled nanoseconds.
    pub by_event_ns: BTreeMap<String, f64>,
}

/// A curve, e.g. seed 003's map_mem time against RAM size, per variant.
#[derive(Clone, Debug, Serialize, Deserialize, PartialEq)]
pub struct Series {
    pub seed: String,
    pub name: String,
    pub x_label: String,
    pub y_label: String,
    /// `(x, y)` points in x order.
    pub points: Vec<(f64, f64)>,
}

/// Seed 001's figures per page reclaimed or migrated: one run's flush work divided by
/// its pages, on one shootdown flavour, machine size and variant.
#[derive(Clone, Debug, Serialize, Deserialize, PartialEq)]
pub struct PerPage {
    pub seed: String,
    pub experiment: String,
    /// `arm64` (broadcast TLBI) or `x86` (IPIs).
    pub flavour: String,
    pub cpus: usize,
    pub variant: String,
    pub pages: u64,
    /// TLBIs of every kind, broadcast or local.
    pub tlbi: f64,
    pub ipi: f64,
    /// Waits for invalidation to complete: DSB ISH (arm64), or IPI rounds, each
    /// waiting for its targets (x86).
    pub waits: f64,
    /// Flush calls: ptep_clear_flush, arch_tlbbatch_flush, arch_flush_tlb_batched_pending.
    pub flushes: f64,
    /// The machine profile the time is modeled with.
    pub machine: String,
    /// Modeled time of the flush work per page (None: an event has no cost).
    pub flush_ns: Option<f64>,
}

/// Everything `reproduce` found.
#[derive(Clone, Debug, Default, Serialize, Deserialize, PartialEq)]
pub struct Reproduction {
    pub rows: Vec<Row>,
    pub breakdowns: Vec<Breakdown>,
    pub series: Vec<Series>,
    #[serde(default)]
    pub per_page: Vec<PerPage>,
    /// Per seed, what the reader must know (refused costs, missing counters ...).
    pub notes: BTreeMap<String, Vec<String>>,
    pub elapsed_s: f64,
    /// Verdict counts over every row, and why each disagreeing cell disagrees.
    #[serde(default)]
    pub summary: Summary,
}

mod seed000;
pub(crate) mod seed001;
mod seed002;
pub(crate) mod seed003;
pub(crate) mod seed004;
mod upstream;

use crate::report::{Counters, Report};
use crate::sim::kernels::{with_preset, Release, Scope, DEFAULT};
use crate::time::{model, Profile};

/// A seed table's baseline and changed variant, as the seed names them.
pub struct VariantPair {
    pub baseline: &'static str,
    pub changed: &'static str,
}

/// The costs a seed's figures are modeled with on one machine: the machine's profile
/// less what was derived from that seed's own series, with the generic mm software's
/// costs (which arm64 machines run as x86_64 hosts do) filled in from `software`,
/// scaled by the clock ratio.
pub struct Costs {
    pub profile: Profile,
    pub notes: Vec<String>,
    /// The events `software` lends a cost to, and the note saying so.
    lent: (std::collections::BTreeSet<String>, String),
}

impl Costs {
    pub fn for_seed(machine: &str, seed: &str, software: &Profile) -> Result<Costs, String> {
        Costs::build(machine, seed, software, None)
    }

    /// `for_seed` with `table`'s events costed from the instructions it counted on a
    /// real arm64 kernel before `software` fills in the rest: for the work the table
    /// measured, its count wins over the host's calibration, and the events whose work
    /// its functions include (`covers`) are left uncosted rather than counted twice.
    pub fn for_seed_insns(
        machine: &str,
        seed: &str,
        software: &Profile,
        table: &crate::time::insns::Table,
    ) -> Result<Costs, String> {
        Costs::build(machine, seed, software, Some(table))
    }

    fn build(
        machine: &str,
        seed: &str,
        software: &Profile,
        table: Option<&crate::time::insns::Table>,
    ) -> Result<Costs, String> {
        let own = Profile::load(machine)?;
        let stand_in = Profile::load(own.stand_in.as_ref().map_or("generic", |s| s.profile.as_str()))?;
        let (mut p, mut notes) = own.for_seed(seed, &stand_in);
        if let Some(s) = own.stand_in.as_ref().filter(|_| !own.derived_from(seed).is_empty()) {
            notes.push(format!(
                "{machine}: {} stands in for its refused costs: {}",
                s.profile, s.why
            ));
        }
        if let Some(t) = table {
            p = p.with_kernel_insns(t)?;
        }
        let (profile, why) = p.with_software(software);
        let lent = profile
            .cost
            .iter()
            .flat_map(|c| &c.events)
            .filter(|e| !matches!(p.lookup(e), crate::time::Lookup::Costed(..)))
            .cloned()
            .collect();
        let why = format!("{machine}: {why}");
        notes.push(why.clone());
        let mut c = Costs {
            profile,
            notes,
            lent: (lent, why),
        };
        if let Some(t) = table {
            c.note_insns(t)?;
        }
        Ok(c)
    }

    /// A note for each of `table`'s events these costs time from its instructions.
    fn note_insns(&mut self, table: &crate::time::insns::Table) -> Result<(), String> {
        use crate::time::Lookup;
        for (event, _, why) in table.per_event()? {
            if matches!(self.profile.lookup(&event), Lookup::Costed(_, c) if c.source.starts_with(&table.kernel)) {
                self.notes.push(format!(
                    "{}: {event}: {why}; timed at the machine's ns per kernel instruction (its kernel.insns cost)",
                    self.profile.name
                ));
            }
        }
        for e in &table.events {
            if let Some(Lookup::NotCosted(n)) = e.covers.first().map(|c| self.profile.lookup(c)) {
                self.notes
                    .push(format!("{}: {}: {}", self.profile.name, e.covers.join(", "), n.reason));
            }
        }
        Ok(())
    }

    /// Whether any event `counted` takes its cost from the host's calibration. When
    /// none does, the note saying the host's costs fill in is dropped: no figure of
    /// these counts rests on them.
    pub fn keep_software_note_if_used<'a>(&mut self, counted: impl IntoIterator<Item = &'a Counters>) -> bool {
        let used = counted
            .into_iter()
            .any(|c| c.iter().any(|(e, n)| *n != 0 && self.lent.0.contains(e)));
        if !used {
            self.notes.retain(|n| *n != self.lent.1);
        }
        used
    }

    /// Modeled nanoseconds of `counters`, with the time by event.
    pub fn time_ns(&self, counters: &Counters) -> (f64, BTreeMap<String, f64>) {
        let r = Report {
            counters: counters.clone(),
            ..Report::default()
        };
        let m = model(&self.profile, &r);
        let by = m.by_event.iter().map(|(k, ps)| (k.clone(), *ps as f64 / 1e3)).collect();
        (m.total_ps as f64 / 1e3, by)
    }
}

/// `kernel`'s preset with the experiment's own variants `sets` over it.
pub fn variants(kernel: Release, sets: &[(&str, &str)]) -> Result<crate::sim::Variants, String> {
    let sets: Vec<String> = sets.iter().map(|(k, v)| format!("{k}={v}")).collect();
    crate::sim::Variants::from_sets(&with_preset(kernel, Scope::Run, &sets))
}

/// The model's counts of phase `label` of `w` under `kernel`'s preset and `sets`.
pub fn phase_counts(
    w: &crate::workload::Workload,
    kernel: Release,
    sets: &[(&str, &str)],
    label: &str,
) -> Result<Counters, String> {
    let v = variants(kernel, sets)?;
    let rep = crate::sim::run(w, &v).map_err(|e| e.to_string())?;
    rep.phases
        .into_iter()
        .find(|p| p.label == label)
        .map(|p| p.counters)
        .ok_or_else(|| format!("{}: no phase '{label}'", w.path))
}

/// `f` of each item, on every core, in the items' order: the seeds' model runs are
/// independent, so the output is the same whatever the core count.
pub fn par_map<T: Sync, R: Send>(items: &[T], f: impl Fn(&T) -> R + Sync) -> Vec<R> {
    use std::sync::atomic::{AtomicUsize, Ordering};
    let jobs = std::thread::available_parallelism()
        .map_or(1, |n| n.get())
        .clamp(1, items.len().max(1));
    let next = AtomicUsize::new(0);
    let mut out: Vec<(usize, R)> = std::thread::scope(|s| {
        let workers: Vec<_> = (0..jobs)
            .map(|_| {
                s.spawn(|| {
                    let mut done = Vec::new();
                    loop {
                        let i = next.fetch_add(1, Ordering::Relaxed);
                        let Some(item) = items.get(i) else { break done };
                        done.push((i, f(item)));
                    }
                })
            })
            .collect();
        workers
            .into_iter()
            .flat_map(|w| w.join().unwrap_or_else(|p| std::panic::resume_unwind(p)))
            .collect()
    });
    out.sort_by_key(|(i, _)| *i);
    out.into_iter().map(|(_, r)| r).collect()
}

/// Percent change of `v` against `base`.
pub fn pct(v: f64, base: f64) -> f64 {
    (v - base) / base * 100.0
}

/// Whether two changes have the same sign (a zero change agrees with nothing but zero).
fn same_sign(a: f64, b: f64) -> bool {
    // signum(0.0) is 1: a zero is checked first.
    match (a == 0.0, b == 0.0) {
        (false, false) => a.signum() == b.signum(),
        (za, zb) => za && zb,
    }
}

/// What `reproduce` can be asked for: the seeds, and `upstream` (changes since 6.18
/// with a published arm64 table).
pub const SEEDS: &[&str] = &["000", "001", "002", "003", "004", "upstream"];

/// Runs every seed asked for (all when `seeds` is empty) with `software`'s costs for the
/// generic mm code, on `kernel`'s preset (each experiment sets the keys it varies).
pub fn reproduce(seeds: &[String], software: &Profile, kernel: Release) -> Result<Reproduction, String> {
    let start = std::time::Instant::now();
    let want = |s: &str| seeds.is_empty() || seeds.iter().any(|x| x == s);
    let n = SEEDS.iter().filter(|s| want(s)).count();
    let mut progress = crate::sim::progress::Progress::counting(n as u64, "seeds");
    let mut want = |s: &str| {
        let w = want(s);
        if w {
            progress.op();
        }
        w
    };
    let mut r = Reproduction::default();
    if want("000") {
        seed000::run(&mut r, software, kernel)?;
    }
    if want("001") {
        seed001::run(&mut r, software, kernel)?;
    }
    if want("002") {
        seed002::run(&mut r, software, kernel)?;
    }
    if want("003") {
        seed003::run(&mut r, software, kernel)?;
    }
    if want("004") {
        seed004::run(&mut r, software, kernel)?;
    }
    if want("upstream") {
        upstream::run(&mut r, software, kernel)?;
    }
    if kernel != DEFAULT {
        for notes in r.notes.values_mut() {
            notes.push(format!(
                "kernel preset {kernel}: every variant the experiment does not set is {kernel}'s (`foliolab kernels`)"
            ));
        }
    }
    for notes in r.notes.values_mut() {
        *notes = fold_machine_notes(std::mem::take(notes));
    }
    for row in &mut r.rows {
        if let Some(why) = no_real_kernel(&row.seed) {
            row.real_kernel.source = why.into();
        }
    }
    r.summary = Summary::of(&r.rows);
    r.elapsed_s = start.elapsed().as_secs_f64();
    Ok(r)
}

/// Notes said once: those that differ only in the machine they start with
/// (`m2-vm: ...`) or, after it, in the event they name (`m2-vm: arch.isb: ...`) are
/// folded into one naming every machine and event; all sorted, without repeats.
fn fold_machine_notes(notes: Vec<String>) -> Vec<String> {
    let machines: Vec<&str> = crate::time::profile::BUILTIN.iter().map(|(n, _)| *n).collect();
    let is_event = |e: &str| e.contains('.') && !e.contains(' ');
    // (machine, text) -> events, then (events, text) -> machines.
    let mut by_machine: BTreeMap<(String, String), Vec<String>> = BTreeMap::new();
    for n in notes {
        let (m, rest) = match n.split_once(": ").filter(|(m, _)| machines.contains(m)) {
            Some((m, rest)) => (m.to_string(), rest.to_string()),
            None => (String::new(), n),
        };
        match rest.split_once(": ").filter(|(e, _)| is_event(e)) {
            Some((e, text)) => by_machine.entry((m, text.to_string())).or_default().push(e.to_string()),
            None => {
                by_machine.entry((m, rest)).or_default();
            }
        }
    }
    let mut by_events: BTreeMap<(String, String), Vec<String>> = BTreeMap::new();
    for ((m, text), mut events) in by_machine {
        events.sort();
        events.dedup();
        let ms = by_events.entry((events.join(", "), text)).or_default();
        if !m.is_empty() {
            ms.push(m);
        }
    }
    let mut out: Vec<String> = by_events
        .into_iter()
        .map(|((events, text), ms)| {
            let text = if events.is_empty() {
                text
            } else {
                format!("{events}: {text}")
            };
            if ms.is_empty() {
                text
            } else {
                format!("{}: {text}", ms.join(", "))
            }
        })
        .collect();
    out.sort();
    out.dedup();
    out
}

thread_local! {
    /// Whether figures read from a seed's text are altered: only in the test that
    /// proves no model figure is derived from its own seed.
    static PUBLISHED_ALTERED: std::cell::Cell<bool> = const { std::cell::Cell::new(false) };
}

/// A figure as the seed publishes it. Every seed figure a row shows is read through
/// this, so a test can alter them all and check that no model figure moves.
pub fn published(v: f64) -> f64 {
    match PUBLISHED_ALTERED.with(|s| s.get()) {
        true => v * 1.37 + 0.11,
        false => v,
    }
}

/// Runs `f` with every published figure altered (for the test above): scaled and
/// shifted, so that changes and ratios of them move too.
#[cfg(test)]
fn with_published_altered<T>(f: impl FnOnce() -> T) -> T {
    PUBLISHED_ALTERED.with(|s| s.set(true));
    let out = f();
    PUBLISHED_ALTERED.with(|s| s.set(false));
    out
}

#[cfg(test)]
mod tests {
    use super::*;

    fn cell(seed_value: f64, sd: Option<f64>, base_sd: Option<f64>, model: f64) -> Row {
        Cell {
            seed: "x",
            experiment: "e",
            machine: "m",
            variant: "after",
            unit: "%",
            seed_value,
            seed_stdev: sd,
            model: Ok(model),
            figure: Figure::Change {
                baseline: "before",
                baseline_stdev: base_sd,
            },
            unmodeled: None,
        }
        .row()
    }

    /// Seed 000's M2 dontneed order-0 cell: −9.6 ±3.1 against a baseline of ±7.5 is
    /// inside the seed's spread, so the model's 0 is noise, not a disagreement; a
    /// model change beyond the spread disagrees.
    #[test]
    fn a_change_inside_the_seeds_spread_is_noise() {
        assert_eq!(cell(-9.6, Some(3.1), Some(7.5), 0.0).verdict, Verdict::Noise);
        assert_eq!(cell(-9.6, Some(3.1), Some(7.5), -20.0).verdict, Verdict::Disagrees);
        assert_eq!(cell(-3.2, Some(0.2), Some(0.1), -1.0).verdict, Verdict::Agrees);
        let r = cell(-3.2, Some(0.2), Some(0.1), 0.0);
        assert_eq!(r.verdict, Verdict::Disagrees);
        assert!(!r.sign_agrees);
        assert_eq!(cell(-3.2, None, None, 1.0).verdict, Verdict::Disagrees);
        // A model change of 0 agrees with no positive change either.
        assert_eq!(cell(1.8, Some(0.3), Some(0.5), 0.0).verdict, Verdict::Disagrees);
    }

    #[test]
    fn an_absent_value_is_not_modeled_and_a_level_is_judged_by_magnitude() {
        let mut c = Cell {
            seed: "x",
            experiment: "e",
            machine: "m",
            variant: "v",
            unit: "ms",
            seed_value: 161.0,
            seed_stdev: None,
            model: Err("no cost".into()),
            figure: Figure::Level,
            unmodeled: None,
        };
        let r = c.row();
        assert_eq!(
            (r.verdict, r.sign_agrees, r.reason.as_deref()),
            (Verdict::NotModeled, false, Some("no cost"))
        );
        c.model = Ok(120.0);
        let r = c.row();
        assert_eq!((r.verdict, r.sign_agrees), (Verdict::Agrees, false));
        c.model = Ok(24.7);
        assert_eq!(c.row().verdict, Verdict::Disagrees);
    }

    #[test]
    fn a_change_of_a_total_agrees_within_its_points_whatever_its_ratio() {
        let c = |seed_value: f64, model: f64| {
            Cell {
                seed: "004",
                experiment: "e",
                machine: "generic",
                variant: "Modification 2",
                unit: "instructions",
                seed_value,
                seed_stdev: None,
                model: Ok(model),
                figure: Figure::ChangeOfTotal {
                    baseline: "Original",
                    total: 1000.0,
                    points: 2.0,
                },
                unmodeled: None,
            }
            .row()
        };
        // ×2.4 the seed's change, 1.5 points of the total from it.
        let r = c(1.0, 16.0);
        assert_eq!(
            (r.verdict, r.sign_agrees, r.baseline.as_deref()),
            (Verdict::Agrees, true, Some("Original"))
        );
        let r = c(-500.0, -470.0);
        assert_eq!((r.verdict, r.sign_agrees), (Verdict::Disagrees, true));
        assert!(r.reason.unwrap().contains("3 points of the seed's 1000 total"));
        assert_eq!(c(1.0, -1.0).verdict, Verdict::Disagrees);
    }

    #[test]
    fn par_map_keeps_the_items_order() {
        let items: Vec<u64> = (0..50).collect();
        assert_eq!(
            par_map(&items, |x| x * x),
            items.iter().map(|x| x * x).collect::<Vec<_>>()
        );
        assert!(par_map(&[] as &[u64], |x| *x).is_empty());
    }

    #[test]
    fn notes_differing_only_in_machine_or_event_are_said_once() {
        let notes = vec![
            "m2-vm: arch.isb: refused".to_string(),
            "m2-vm: arch.dsb.ishst: refused".to_string(),
            "altra-vm: arch.isb: refused".to_string(),
            "altra-vm: arch.dsb.ishst: refused".to_string(),
            "a note".to_string(),
            "a note".to_string(),
        ];
        assert_eq!(
            fold_machine_notes(notes),
            vec![
                "a note".to_string(),
                "altra-vm, m2-vm: arch.dsb.ishst, arch.isb: refused".to_string()
            ]
        );
    }

    /// No cost a seed's figures are modeled with comes from that seed's own series, on
    /// any machine, whatever stands in for a refused one.
    #[test]
    fn no_cost_used_for_a_seed_comes_from_its_own_series() {
        let software = Profile::load(crate::time::profile::CALIBRATED).unwrap();
        for seed in ["000", "001", "002", "003", "004"] {
            for (m, _) in crate::time::profile::BUILTIN {
                let c = Costs::for_seed_insns(m, seed, &software, &crate::time::insns::Table::map_mem()).unwrap();
                for cost in &c.profile.cost {
                    assert!(
                        !(cost.is_derived_from(seed) && cost.ns.is_some()),
                        "{m}, seed {seed}: {cost:?}"
                    );
                }
            }
        }
        // Altra's refused TLBI costs for seed 003 are Kunpeng's measured ones.
        let c = Costs::for_seed("altra-vm", "003", &software).unwrap();
        let crate::time::Lookup::Costed(ps, cost) = c.profile.lookup("arch.tlbi.vaale1is") else {
            panic!("uncosted")
        };
        assert_eq!((ps, cost.derived_from_seed.as_deref()), (468_100, None));
        assert!(
            c.notes.iter().any(|n| n.contains("kunpeng-920 stands in")),
            "{:?}",
            c.notes
        );
        // Seed 003's barriers after kernel pte writes are costed on every machine, by
        // a cost that is not its own series' (the stand-in's stated ISB delay).
        for m in ["altra-vm", "altra-metal", "m2-vm"] {
            let c = Costs::for_seed(m, "003", &software).unwrap();
            for e in ["arch.dsb.ishst", "arch.isb"] {
                let crate::time::Lookup::Costed(_, cost) = c.profile.lookup(e) else {
                    panic!("{m}: {e} uncosted for seed 003")
                };
                assert_eq!(cost.derived_from_seed, None, "{m}: {e}");
            }
        }
    }

    /// Seed 001's loop costs its swap and shmem work from the guest's instructions:
    /// without them the share's denominator lacks most of the loop.
    #[test]
    fn seed_001s_swap_and_shmem_work_is_costed() {
        let software = Profile::load(crate::time::profile::CALIBRATED).unwrap();
        let table = crate::time::insns::Table::seed001_loop();
        let c = Costs::for_seed("kunpeng-920", "001", &software).unwrap();
        assert!(!matches!(
            c.profile.lookup("kernel.shmem_writeout"),
            crate::time::Lookup::Costed(..)
        ));
        let c = Costs::for_seed_insns("kunpeng-920", "001", &software, &table).unwrap();
        for e in [
            "kernel.shmem_writeout",
            "kernel.shmem_swapin_folio",
            "kernel.shmem_fault",
        ] {
            assert!(matches!(c.profile.lookup(e), crate::time::Lookup::Costed(..)), "{e}");
        }
    }

    /// A host profile that prices swap-out, swap-in and the shmem fault itself (as
    /// `calibrate` now does) does not price seed 001's loop twice: the table's counted
    /// instructions win for its own events, and the events whose work its functions
    /// include are left uncosted, with a note saying why.
    #[test]
    fn seed_001s_table_wins_over_a_host_that_prices_the_same_swap_work() {
        use crate::time::Lookup;
        let mut software = Profile::load(crate::time::profile::CALIBRATED).unwrap();
        for event in [
            "vmstat.pswpout",
            "vmstat.pswpin",
            "kernel.shmem_fault",
            "kernel.folio_remove_rmap_ptes",
        ] {
            software.cost.push(crate::time::profile::Cost {
                events: vec![event.into()],
                ns: Some(2000.0),
                quality: crate::time::Quality::Host,
                source: "foliolab calibrate on a host".into(),
                rows: Vec::new(),
                note: None,
                derived_from_seed: None,
                seed_relation: None,
            });
        }
        let table = crate::time::insns::Table::seed001_loop();
        let c = Costs::for_seed_insns("kunpeng-920", "001", &software, &table).unwrap();
        for e in ["vmstat.pswpout", "vmstat.pswpin", "kernel.folio_remove_rmap_ptes"] {
            assert!(matches!(c.profile.lookup(e), Lookup::NotCosted(_)), "{e}");
        }
        let Lookup::Costed(_, fault) = c.profile.lookup("kernel.shmem_fault") else {
            panic!("kernel.shmem_fault uncosted")
        };
        assert!(fault.source.starts_with(&table.kernel), "{}", fault.source);
        assert!(
            c.notes
                .iter()
                .any(|n| n.contains("kernel.folio_remove_rmap_ptes: their work is among")),
            "{:?}",
            c.notes
        );
    }

    /// A stored real-kernel row lands beside the model row with its key, and only there.
    #[test]
    fn a_stored_real_kernel_row_is_shown_beside_its_cell() {
        let row = |machine: &str, variant: &str| {
            Cell {
                seed: "003",
                experiment: "map_mem",
                machine,
                variant,
                unit: "ms",
                seed_value: 161.0,
                seed_stdev: None,
                model: Ok(150.0),
                figure: Figure::Level,
                unmodeled: None,
            }
            .row()
        };
        let mut r = Reproduction {
            rows: vec![
                row("altra-vm 64G", "before"),
                row("altra-vm 64G", "after"),
                row("m2-vm 16G", "before"),
            ],
            ..Reproduction::default()
        };
        let stored = serde_json::json!({"rows": [], "real_kernel": [
            {"seed": "003", "experiment": "map_mem", "variant": "before", "machine": "altra-vm 64G",
             "unit": "TLBI", "value": 2059.0, "kernel": "6.12.117 built, seed 003 reverted"}
        ]});
        assert_eq!(r.attach_real_kernel("run 7", &stored), Ok(1));
        assert_eq!(r.rows[0].real_kernel.value, Some(2059.0));
        assert!(r.rows[0].real_kernel.source.contains("run 7"));
        assert_eq!(r.rows[1].real_kernel, RealKernel::default());
        assert_eq!(r.rows[2].real_kernel.source, NOT_MEASURED);
        // A result without real-kernel rows attaches nothing; a malformed one is an error.
        assert_eq!(r.attach_real_kernel("run 8", &serde_json::json!({"rows": []})), Ok(0));
        assert!(r
            .attach_real_kernel("run 9", &serde_json::json!({"real_kernel": [{"seed": "003"}]}))
            .is_err());
    }

    /// Seed 004's cells take one measurement per compiler: the newer run's first, an
    /// older run's of the same compiler left, another compiler's after it.
    #[test]
    fn a_cell_takes_each_builds_newest_measurement() {
        let mut r = Reproduction {
            rows: vec![seed004_test_row()],
            ..Reproduction::default()
        };
        let stored = |build: &str, value: f64| {
            serde_json::json!({"real_kernel": [{"seed": "004",
                "experiment": "scenario 3: instructions, change against Original",
                "variant": "Modification 1", "unit": "instructions", "value": value,
                "kernel": format!("6.12 built with {build}"), "build": build, "change_pct": value / 1e8}]})
        };
        assert_eq!(r.attach_real_kernel("run 9", &stored("clang", 6.1e8)), Ok(1));
        assert_eq!(r.attach_real_kernel("run 8", &stored("clang", 5.0e8)), Ok(0));
        assert_eq!(r.attach_real_kernel("run 7", &stored("gcc", -6.0e5)), Ok(1));
        let row = &r.rows[0];
        assert_eq!(row.real_kernel.value, Some(6.1e8));
        assert_eq!(row.real_kernel.build.as_deref(), Some("clang"));
        assert_eq!(row.real_kernel_more.len(), 1);
        assert_eq!(row.real_kernel_more[0].value, Some(-6.0e5));
        assert_eq!(row.real_kernel_more[0].change_pct, Some(-6.0e5 / 1e8));
        assert!(row.real_kernel_more[0].source.contains("run 7"));
    }

    /// No model figure comes from the seed it is compared with: with every published
    /// figure altered, every seed figure moves and no model figure does.
    #[test]
    fn no_model_figure_is_derived_from_its_own_seed() {
        let software = Profile::load(crate::time::profile::CALIBRATED).unwrap();
        let kernel = DEFAULT;
        let run = || reproduce(&[], &software, kernel).unwrap();
        // The flag is per thread: both runs at once.
        let (plain, altered) = std::thread::scope(|s| {
            let altered = s.spawn(|| with_published_altered(run));
            (run(), altered.join().unwrap())
        });
        assert_eq!(plain.rows.len(), altered.rows.len());
        for (a, b) in plain.rows.iter().zip(&altered.rows) {
            assert_eq!(a.model_value, b.model_value, "{a:?}");
            assert_ne!(
                a.seed_value, b.seed_value,
                "a seed figure not read through published(): {a:?}"
            );
        }
    }
}
