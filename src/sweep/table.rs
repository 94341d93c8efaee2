//! A sweep's results as one tidy table: a row per point, phase and counter.
//!
//! Columns: `point`, `input`, `target`, `kernel`, `machine`, one per swept variant key,
//! `phase` (`""` for the whole run), `counter`, `value`. Every counter of the report is
//! a row, zeros too (key for key as `--json`). With a machine, modeled time is rows too:
//! `time_ps.total` and `time_ps.<event>` for the run, `time_ps.total` per phase, in
//! exact integer picoseconds, recomputed from the stored report.

use super::point::Point;
use crate::report::Report;
use serde_json::Value;
use std::collections::BTreeMap;

#[derive(Clone, Debug, PartialEq, Eq)]
pub enum Column {
    Int(Vec<i64>),
    Str(Vec<String>),
}

#[derive(Clone, Debug, Default, PartialEq, Eq)]
pub struct Table {
    pub columns: Vec<(String, Column)>,
}

impl Table {
    pub fn rows(&self) -> usize {
        match self.columns.first() {
            Some((_, Column::Int(v))) => v.len(),
            Some((_, Column::Str(v))) => v.len(),
            None => 0,
        }
    }

    /// The table as CSV (fields quoted where they need it).
    pub fn write_csv(&self, w: &mut dyn std::io::Write) -> std::io::Result<()> {
        let quote = |s: &str| {
            if s.contains([',', '"', '\n']) {
                format!("\"{}\"", s.replace('"', "\"\""))
            } else {
                s.to_string()
            }
        };
        let names: Vec<String> = self.columns.iter().map(|(n, _)| quote(n)).collect();
        writeln!(w, "{}", names.join(","))?;
        for row in 0..self.rows() {
            let fields: Vec<String> = self
                .columns
                .iter()
                .map(|(_, c)| match c {
                    Column::Int(v) => v[row].to_string(),
                    Column::Str(v) => quote(&v[row]),
                })
                .collect();
            writeln!(w, "{}", fields.join(","))?;
        }
        Ok(())
    }
}

/// The table of `points` with their `results` (same order; failed points have none).
pub fn table(points: &[Point], results: &[Option<Value>]) -> Table {
    let mut keys: Vec<&str> = Vec::new();
    for (k, _) in points.iter().flat_map(|p| &p.variants) {
        if !keys.contains(&k.as_str()) {
            keys.push(k);
        }
    }
    let mut point = Vec::new();
    let mut strs: Vec<Vec<String>> = vec![Vec::new(); 4 + keys.len() + 2];
    let mut value = Vec::new();
    let mut machines: BTreeMap<(String, Vec<String>), Option<crate::time::Machine>> = BTreeMap::new();
    for (p, r) in points.iter().zip(results) {
        let Some(r) = r else { continue };
        let report: Report = serde_json::from_value(r.clone()).unwrap_or_default();
        let mut rows: Vec<(String, String, i64)> = Vec::new();
        let whole = std::iter::once(("", &report.counters));
        for (phase, counters) in whole.chain(report.phases.iter().map(|ph| (ph.label.as_str(), &ph.counters))) {
            rows.extend(counters.iter().map(|(k, &v)| (phase.to_string(), k.clone(), v)));
        }
        if let Some(m) = &p.machine {
            let machine = machines
                .entry((m.clone(), p.all_sets()))
                .or_insert_with(|| crate::time::Machine::load(Some(m), &p.all_sets()).ok().flatten());
            if let Some(machine) = machine {
                let t = crate::time::model(&machine.profile, &report);
                rows.push((String::new(), "time_ps.total".into(), t.total_ps as i64));
                rows.extend(
                    t.by_event
                        .iter()
                        .map(|(k, &ps)| (String::new(), format!("time_ps.{k}"), ps as i64)),
                );
                for (ph, &ps) in report.phases.iter().zip(&t.phases_ps) {
                    rows.push((ph.label.clone(), "time_ps.total".into(), ps as i64));
                }
            }
        }
        let kernel = p.kernel.clone().unwrap_or_else(|| {
            if p.target == super::spec::MODEL {
                crate::sim::kernels::DEFAULT.to_string()
            } else {
                String::new()
            }
        });
        let mut fixed = vec![
            p.input.path().to_string(),
            p.target.clone(),
            kernel,
            p.machine.clone().unwrap_or_default(),
        ];
        fixed.extend(keys.iter().map(|k| {
            p.variants
                .iter()
                .find(|(pk, _)| pk == k)
                .map(|(_, v)| v.clone())
                .unwrap_or_default()
        }));
        for (phase, counter, v) in rows {
            point.push(p.index as i64);
            for (col, s) in strs.iter_mut().zip(&fixed) {
                col.push(s.clone());
            }
            strs[fixed.len()].push(phase);
            strs[fixed.len() + 1].push(counter);
            value.push(v);
        }
    }
    let mut names: Vec<String> = ["input", "target", "kernel", "machine"].map(String::from).to_vec();
    names.extend(keys.iter().map(|k| k.to_string()));
    names.extend(["phase", "counter"].map(String::from));
    let mut columns = vec![("point".to_string(), Column::Int(point))];
    columns.extend(names.into_iter().zip(strs.into_iter().map(Column::Str)));
    columns.push(("value".into(), Column::Int(value)));
    Table { columns }
}
