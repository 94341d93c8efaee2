//! `foliolab compare ID|FILE ... [--all] [--json]`: stored runs or saved JSON reports side
//! by side, one column per run, each value with its change against the first column, as
//! mmtests' compare-kernels.sh prints them.

use crate::compare::{pct, sections};
use crate::report::Report;
use std::process::ExitCode;

#[derive(clap::Args)]
pub struct Args {
    /// Run ids from `foliolab runs`, or JSON files from `run --json`/`native --json`
    /// (a `{"runs": [...]}` file from `run --each --json` gives one column per run).
    #[arg(required = true, num_args = 2.., value_name = "ID|FILE")]
    pub runs: Vec<String>,
    /// Also show the counters every run agrees on.
    #[arg(long)]
    pub all: bool,
    /// Print the comparison as JSON.
    #[arg(long)]
    pub json: bool,
}

pub fn main(a: Args, db: &super::StoreArgs) -> super::CmdResult {
    let columns = load(&a.runs, db)?;
    if a.json {
        super::emit(&(serde_json::to_string_pretty(&json(&columns, a.all))? + "\n"))?;
    } else {
        let title = format!("compare: {} runs, change against the first", columns.len());
        super::emit(&crate::compare::compare(&title, &columns, a.all))?;
    }
    Ok(ExitCode::SUCCESS)
}

/// Each argument's report(s), named by id or file, plus the variants that set the
/// columns apart.
fn load(args: &[String], db: &super::StoreArgs) -> Result<Vec<(String, Report)>, String> {
    let mut store = None;
    let mut columns = Vec::new();
    for arg in args {
        let (name, value) = match arg.parse::<i64>() {
            Ok(id) => {
                let s = match &mut store {
                    Some(s) => s,
                    None => store.insert(db.open().map_err(|e| e.to_string())?),
                };
                let v = s
                    .result(id)
                    .map_err(|e| e.to_string())?
                    .ok_or_else(|| format!("no run {id} in the results store"))?;
                (format!("#{id}"), v)
            }
            Err(_) => {
                let text = crate::input::read_text(arg, crate::input::MAX_REPORT_BYTES)
                    .map_err(|e| format!("{arg}:1:1: {e}"))?;
                let v: serde_json::Value = serde_json::from_str(&text)
                    .map_err(|e| format!("{arg}:{}:{}: not JSON: {e}", e.line(), e.column()))?;
                (arg.clone(), v)
            }
        };
        let reports = match value.get("runs").and_then(|r| r.as_array()) {
            Some(runs) => runs.clone(),
            None => vec![value],
        };
        let n = reports.len();
        for (i, v) in reports.into_iter().enumerate() {
            let time = v.get("time").cloned();
            let mut r: Report = serde_json::from_value(v).map_err(|e| format!("{arg}:1:1: not a report: {e}"))?;
            add_modeled_time(&mut r, time.as_ref());
            if r.source.is_empty() {
                return Err(format!("{arg}:1:1: not a report (no \"source\")"));
            }
            let name = if n > 1 { format!("{name}[{i}]") } else { name.clone() };
            columns.push((name, r));
        }
    }
    // Name each column by what sets it apart: the variants not shared by every run.
    let differing: Vec<String> = {
        let mut keys: Vec<&String> = columns.iter().flat_map(|(_, r)| r.variants.keys()).collect();
        keys.sort();
        keys.dedup();
        keys.into_iter()
            .filter(|k| {
                columns
                    .iter()
                    .any(|(_, r)| r.variants.get(*k) != columns[0].1.variants.get(*k))
            })
            .cloned()
            .collect()
    };
    for (name, r) in &mut columns {
        let tags: Vec<String> = differing
            .iter()
            .filter_map(|k| r.variants.get(k).map(|v| format!("{k}={v}")))
            .collect();
        if !tags.is_empty() {
            *name = format!("{name} {}", tags.join(" "));
        }
    }
    Ok(columns)
}

/// A report's modeled time (`run --machine`), as rows beside its counters:
/// `time.total_ns` and `time.<event>_ns`, rounded to whole nanoseconds.
fn add_modeled_time(r: &mut Report, time: Option<&serde_json::Value>) {
    let Some(t) = time else { return };
    let ns = |v: &serde_json::Value| v.as_f64().map(|x| x.round() as i64);
    if let Some(total) = t.get("total_ns").and_then(ns) {
        r.counters.insert("time.total_ns".into(), total);
    }
    for (event, v) in t.get("by_event").and_then(|b| b.as_object()).into_iter().flatten() {
        if let Some(x) = ns(v) {
            r.counters.insert(format!("time.{event}_ns"), x);
        }
    }
}

/// `{"columns": [...], "sections": [{"label", "rows": [{"counter", "values", "pct"}]}]}`,
/// `pct` against the first column (null from a zero base).
pub(crate) fn json(columns: &[(String, Report)], all: bool) -> serde_json::Value {
    let sections: Vec<serde_json::Value> = sections(columns, all)
        .into_iter()
        .map(|s| {
            let rows: Vec<serde_json::Value> = s
                .rows
                .into_iter()
                .map(|(counter, values)| {
                    let p: Vec<Option<f64>> = values.iter().map(|&v| pct(v, values[0])).collect();
                    serde_json::json!({"counter": counter, "values": values, "pct": p})
                })
                .collect();
            serde_json::json!({"label": s.label, "rows": rows})
        })
        .collect();
    let names: Vec<&String> = columns.iter().map(|(n, _)| n).collect();
    serde_json::json!({"columns": names, "sections": sections})
}
