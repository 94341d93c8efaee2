//! `foliolab runs [--json]`: the results store's contents, one line per recorded result.

use crate::store::RunInfo;
use std::process::ExitCode;

#[derive(clap::Args)]
pub struct Args {
    /// Print the list as JSON.
    #[arg(long)]
    pub json: bool,
}

pub fn main(a: Args, db: &super::StoreArgs) -> super::CmdResult {
    let runs = db.open()?.list()?;
    if a.json {
        super::emit(&(serde_json::to_string_pretty(&runs)? + "\n"))?;
    } else {
        super::emit(&table(&runs))?;
    }
    Ok(ExitCode::SUCCESS)
}

/// One line per run: id, when, what, which workload, the variants set away from their
/// defaults, the machine, the host kernel for host runs, and the wall time.
fn table(runs: &[RunInfo]) -> String {
    let defaults = crate::sim::Variants::default();
    let mut s = format!(
        "{:>5}  {:<20}  {:<9}  {:<40}  {:<24}  {:>10}\n",
        "id", "started (UTC)", "kind", "workload", "variants / machine / kernel", "wall ms"
    );
    for r in runs {
        let mut what: Vec<String> = r
            .variants
            .as_object()
            .into_iter()
            .flatten()
            .filter(|(k, v)| defaults.all().get(k.as_str()).map(String::as_str) != v.as_str())
            .map(|(k, v)| format!("{k}={}", v.as_str().unwrap_or_default()))
            .collect();
        what.extend(r.machine.iter().map(|m| format!("machine={m}")));
        what.extend(r.host_kernel.iter().map(|k| format!("kernel={k}")));
        s += &format!(
            "{:>5}  {:<20}  {:<9}  {:<40}  {:<24}  {:>10.1}\n",
            r.id,
            r.started_at.get(..19).unwrap_or(&r.started_at),
            r.kind,
            r.workload.as_deref().unwrap_or("-"),
            what.join(" "),
            r.wall_ms
        );
    }
    s
}
