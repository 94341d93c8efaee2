//! `foliolab run WORKLOAD [--set variant=value ...] [--json]`.

use crate::report::Report;
use crate::sim::{self, Variants};
use crate::workload;
use std::process::ExitCode;

#[derive(clap::Args)]
pub struct Args {
    /// The workload file.
    pub workload: String,
    /// A variant or machine setting, e.g. zap=per-pte, contpte=off, granule=16K.
    #[arg(long = "set", value_name = "KEY=VALUE")]
    pub sets: Vec<String>,
    /// Print the report as JSON.
    #[arg(long)]
    pub json: bool,
    /// Add modeled time on a machine profile (`foliolab machines`, or a .toml path);
    /// its features become variant defaults that `--set` overrides.
    #[arg(long, value_name = "NAME|PATH.toml")]
    pub machine: Option<String>,
}

pub fn main(a: Args) -> super::CmdResult {
    let machine = crate::time::Machine::load(a.machine.as_deref(), &a.sets)?;
    let v = Variants::from_sets(machine.as_ref().map_or(&a.sets, |m| &m.sets))?;
    let w = workload::parse_file(&a.workload)?;
    let r = sim::run(&w, &v)?;
    if let Some(m) = &machine {
        super::emit(&m.render(&r, a.json, summary))?;
    } else if a.json {
        super::emit(&(serde_json::to_string_pretty(&r)? + "\n"))?;
    } else {
        super::emit(&summary(&r))?;
    }
    Ok(ExitCode::SUCCESS)
}

/// A readable rendering of a report: non-zero counters, phases and layouts.
pub fn summary(r: &Report) -> String {
    use std::fmt::Write;
    let mut s = String::new();
    let _ = writeln!(s, "{} ({})", r.workload, r.source);
    let changed: Vec<_> = r.variants.iter().map(|(k, v)| format!("{k}={v}")).collect();
    if !changed.is_empty() {
        let _ = writeln!(s, "variants: {}", changed.join(" "));
    }
    let w = r.counters.keys().map(|k| k.len()).max().unwrap_or(0);
    let _ = writeln!(s, "\ncounters (non-zero):");
    for (k, v) in r.counters.iter().filter(|(_, v)| **v != 0) {
        let _ = writeln!(s, "  {k:<w$}  {v:>12}");
    }
    if r.phases.len() > 1 {
        for p in &r.phases {
            let _ = writeln!(s, "\nphase {}:", p.label);
            for (k, v) in p.counters.iter().filter(|(_, v)| **v != 0) {
                let _ = writeln!(s, "  {k:<w$}  {v:>12}");
            }
        }
    }
    let _ = writeln!(s, "\nlayout ([first page, pages, order|zero|swap]):");
    for (region, runs) in &r.layout {
        let shown: Vec<String> = runs.iter().take(8).map(|x| serde_json::to_string(x).unwrap()).collect();
        let more = if runs.len() > 8 {
            format!(" ... ({} runs)", runs.len())
        } else {
            String::new()
        };
        let _ = writeln!(s, "  {region}: {}{more}", shown.join(" "));
    }
    for (k, why) in &r.unavailable {
        let _ = writeln!(s, "unavailable: {k}: {why}");
    }
    s
}
