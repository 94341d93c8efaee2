//! The output object of `foliolab run` / `native` / `boot` (../shared/spec/workload.md).

use serde::de::{self, Deserializer};
use serde::ser::SerializeSeq;
use serde::{Deserialize, Serialize, Serializer};
use std::collections::BTreeMap;

/// Counter deltas by stable name.
pub type Counters = BTreeMap<String, i64>;

/// What maps a run of pages.
#[derive(Clone, Copy, Debug, PartialEq, Eq, PartialOrd, Ord)]
pub enum PageKind {
    /// Mapped by a folio of this order.
    Order(u32),
    /// The shared zero page.
    Zero,
    /// A swap entry.
    Swap,
}

impl Serialize for PageKind {
    fn serialize<S: Serializer>(&self, s: S) -> Result<S::Ok, S::Error> {
        match self {
            PageKind::Order(o) => s.serialize_u32(*o),
            PageKind::Zero => s.serialize_str("zero"),
            PageKind::Swap => s.serialize_str("swap"),
        }
    }
}

impl<'de> Deserialize<'de> for PageKind {
    fn deserialize<D: Deserializer<'de>>(d: D) -> Result<Self, D::Error> {
        match serde_json::Value::deserialize(d)? {
            serde_json::Value::Number(n) => n
                .as_u64()
                .map(|o| PageKind::Order(o as u32))
                .ok_or_else(|| de::Error::custom("bad order")),
            serde_json::Value::String(s) if s == "zero" => Ok(PageKind::Zero),
            serde_json::Value::String(s) if s == "swap" => Ok(PageKind::Swap),
            v => Err(de::Error::custom(format!("bad page kind {v}"))),
        }
    }
}

/// A maximal run `[first_page, n_pages, kind]`.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub struct Run {
    pub first: u64,
    pub n: u64,
    pub kind: PageKind,
}

impl Serialize for Run {
    fn serialize<S: Serializer>(&self, s: S) -> Result<S::Ok, S::Error> {
        let mut seq = s.serialize_seq(Some(3))?;
        seq.serialize_element(&self.first)?;
        seq.serialize_element(&self.n)?;
        seq.serialize_element(&self.kind)?;
        seq.end()
    }
}

impl<'de> Deserialize<'de> for Run {
    fn deserialize<D: Deserializer<'de>>(d: D) -> Result<Self, D::Error> {
        let (first, n, kind) = <(u64, u64, PageKind)>::deserialize(d)?;
        Ok(Run { first, n, kind })
    }
}

/// Builds maximal runs from per-page kinds given in ascending page order.
#[derive(Default)]
pub struct RunBuilder {
    runs: Vec<Run>,
}

impl RunBuilder {
    pub fn push(&mut self, page: u64, kind: PageKind) {
        if let Some(last) = self.runs.last_mut() {
            if last.kind == kind && last.first + last.n == page {
                last.n += 1;
                return;
            }
        }
        self.runs.push(Run {
            first: page,
            n: 1,
            kind,
        });
    }
    pub fn finish(self) -> Vec<Run> {
        self.runs
    }
}

#[derive(Clone, Debug, Serialize, Deserialize)]
pub struct Phase {
    pub label: String,
    pub counters: Counters,
    /// Host: wall time inside the phase's ops, measured around each op by the process
    /// that ran it (a fork's is the caller's CPU time, an exit's the exiting process's
    /// time on its CPU: `native::oncpu`); None for a phase with an exit the host could
    /// not time; model with `--machine`: the phase's modeled time.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub time_ns: Option<f64>,
}

#[derive(Clone, Debug, Default, Serialize, Deserialize)]
#[serde(default)]
pub struct Report {
    /// "model" or "host".
    pub source: String,
    pub workload: String,
    /// Variant settings in force (model only).
    #[serde(skip_serializing_if = "BTreeMap::is_empty")]
    pub variants: BTreeMap<String, String>,
    pub counters: Counters,
    pub phases: Vec<Phase>,
    /// `"<proc>/<region>"` -> runs.
    pub layout: BTreeMap<String, Vec<Run>>,
    /// Counters that could not be read, with the reason.
    #[serde(skip_serializing_if = "BTreeMap::is_empty")]
    pub unavailable: BTreeMap<String, String>,
    /// Host only: defects of the runner's own measurement (a fault it took outside the
    /// workload's regions, lost samples), `file:line:col: what`. Empty on a sound run.
    #[serde(skip_serializing_if = "Vec::is_empty")]
    pub diagnostics: Vec<String>,
    /// Host only: faults the runner took on its own memory that the kernel explains (a
    /// page another process's compaction migrated), each with its proof. The workload's
    /// own counts exclude them; the global counters include them.
    #[serde(skip_serializing_if = "Vec::is_empty")]
    pub runner_notes: Vec<String>,
    /// Host only: the global counters' movement with the workload idle.
    #[serde(skip_serializing_if = "Option::is_none")]
    pub background: Option<Background>,
}

/// What other processes moved the host's global counters by while the workload's
/// processes sat idle after its last op: the measure of how far a global counter may
/// stray from the workload's own count.
#[derive(Clone, Debug, Default, Serialize, Deserialize)]
pub struct Background {
    /// Time spent inside the ops' counter windows.
    pub op_ms: f64,
    /// Length of the idle window (at least `op_ms`).
    pub window_ms: f64,
    /// The global counters that moved over the idle window, with their deltas.
    pub counters: Counters,
    /// Whether the workload ran `shrink`, which on the host (drop_caches) runs every
    /// process's deferred split queue, not only the workload's.
    #[serde(default)]
    pub shrink: bool,
    /// The global counters that moved inside the window of a `set` whose knob write
    /// started khugepaged, when the scan it runs on starting collapsed ranges (of any
    /// process on the host: its cursor is the host's, not the workload's), with their
    /// deltas and the ranges collapsed.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub start_scan: Option<StartScan>,
    /// `mthp.<size>kB.nr_anon` before the first op, where other processes held folios
    /// of that size.
    #[serde(default, skip_serializing_if = "Counters::is_empty")]
    pub held: Counters,
}

/// What khugepaged's scan on starting moved (see `Background::start_scan`).
#[derive(Clone, Debug, Default, PartialEq, Serialize, Deserialize)]
pub struct StartScan {
    pub collapsed: u64,
    pub counters: Counters,
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn runs_are_maximal_and_serialize_as_triples() {
        let mut b = RunBuilder::default();
        for p in 0..32 {
            b.push(p, PageKind::Order(4));
        }
        b.push(40, PageKind::Zero);
        b.push(41, PageKind::Zero);
        b.push(42, PageKind::Order(0));
        let runs = b.finish();
        assert_eq!(
            serde_json::to_string(&runs).unwrap(),
            r#"[[0,32,4],[40,2,"zero"],[42,1,0]]"#
        );
    }
}
