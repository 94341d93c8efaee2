//! `foliolab native WORKLOAD [--json]`: run a workload on the host kernel.

use crate::report::Report;
use std::process::ExitCode;

#[derive(clap::Args)]
pub struct Args {
    /// The workload file.
    pub workload: String,
    /// Print the report as JSON.
    #[arg(long)]
    pub json: bool,
}

pub fn main(a: Args, db: &super::StoreArgs) -> super::CmdResult {
    let w = crate::workload::parse_file(&a.workload)?;
    let start = std::time::Instant::now();
    let report = crate::native::run(&w)?;
    super::record_report(db, "native", &w, &report, start.elapsed());
    if a.json {
        super::emit(&(serde_json::to_string_pretty(&report)? + "\n"))?;
    } else {
        super::emit(&text(&report))?;
    }
    Ok(ExitCode::SUCCESS)
}

/// The report for people: per-process faults and the counters that moved, phases,
/// layout, then what could not be read.
pub fn text(r: &Report) -> String {
    let mut s = format!("{} ({})\n", r.workload, r.source);
    for (k, v) in r.counters.iter().filter(|(k, v)| k.starts_with("proc.") || **v != 0) {
        s += &format!("  {k:<48} {v:>12}\n");
    }
    for p in &r.phases {
        let moved: Vec<String> = p
            .counters
            .iter()
            .filter(|(_, v)| **v != 0)
            .map(|(k, v)| format!("{k}={v}"))
            .collect();
        s += &format!("phase {}: {}\n", p.label, moved.join(" "));
    }
    for (region, runs) in &r.layout {
        s += &format!("layout {region}: {}\n", serde_json::to_string(runs).unwrap_or_default());
    }
    for (k, why) in &r.unavailable {
        s += &format!("unavailable {k}: {why}\n");
    }
    s
}
