//! `foliolab reproduce`: every seed's tables, the seed's figures beside the model's.
//!
//! Each seed module runs its experiment in both variants on the seed's machines (the
//! model's counts, costed with the machine profiles) and returns rows in the shape of
//! the seed's own tables. A figure the model cannot produce is a row with no model
//! value and a note saying why, never a guess.

use serde::{Deserialize, Serialize};
use std::collections::BTreeMap;

/// One cell pair of a seed table: the seed's figure and the model's.
#[derive(Clone, Debug, Serialize, Deserialize, PartialEq)]
pub struct Row {
    pub seed: String,
    pub experiment: String,
    pub machine: String,
    pub variant: String,
    pub unit: String,
    pub seed_value: f64,
    /// None where the model cannot produce the figure (the notes say why).
    pub model_value: Option<f64>,
    pub seed_stdev: Option<f64>,
    /// Whether the model's change against the baseline variant has the seed's sign
    /// (true for the baseline itself; false when the model has no value).
    pub sign_agrees: bool,
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
}

mod seed000;
mod seed001;
mod seed002;
mod seed003;
mod seed004;

use crate::report::{Counters, Report};
use crate::sim::kernels::{with_preset, Release, Scope, KERNELS};
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
}

impl Costs {
    pub fn for_seed(machine: &str, seed: &str, software: &Profile) -> Result<Costs, String> {
        let generic = Profile::load("generic")?;
        let (p, mut notes) = Profile::load(machine)?.for_seed(seed, &generic);
        let (profile, why) = p.with_software(software);
        notes.push(format!("{machine}: {why}"));
        Ok(Costs { profile, notes })
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

/// Percent change of `v` against `base`.
pub fn pct(v: f64, base: f64) -> f64 {
    (v - base) / base * 100.0
}

/// Whether two changes have the same sign (a zero change agrees with nothing but zero).
pub fn same_sign(a: f64, b: f64) -> bool {
    a.signum() == b.signum() || (a == 0.0 && b == 0.0)
}

/// Runs every seed asked for (all when `seeds` is empty) with `software`'s costs for the
/// generic mm code, on `kernel`'s preset (each experiment sets the keys it varies).
pub fn reproduce(seeds: &[String], software: &Profile, kernel: Release) -> Result<Reproduction, String> {
    let start = std::time::Instant::now();
    let want = |s: &str| seeds.is_empty() || seeds.iter().any(|x| x == s);
    let n = ["000", "001", "002", "003", "004"].iter().filter(|s| want(s)).count();
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
    if kernel != *KERNELS.last().expect("a preset") {
        for notes in r.notes.values_mut() {
            notes.push(format!(
                "kernel preset {kernel}: every variant the experiment does not set is {kernel}'s (`foliolab kernels`)"
            ));
        }
    }
    r.elapsed_s = start.elapsed().as_secs_f64();
    Ok(r)
}
