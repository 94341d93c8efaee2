//! `foliolab kernels [--json]`: the presets `--kernel` selects, a row per upstream
//! change with its value under each preset and the commit behind it.

use crate::sim::kernels::{table, Scope, CHANGES, DEFAULT, KERNELS, NOT_MODELED};
use std::process::ExitCode;

#[derive(clap::Args)]
pub struct Args {
    /// Print `{"kernels": [...], "default": "7.3", "changes": [{"key", "scope", "before", "after",
    /// "since", "commits", "what"}], "not_modeled": [{"what", "since", "commit", "why"}]}`.
    #[arg(long)]
    pub json: bool,
}

pub fn main(a: Args) -> super::CmdResult {
    if a.json {
        let changes: Vec<_> = CHANGES
            .iter()
            .map(|c| {
                serde_json::json!({
                    "key": c.key,
                    "scope": match c.scope { Scope::Run => "run", Scope::Boot => "boot" },
                    "before": c.before,
                    "after": c.after,
                    "since": c.release.to_string(),
                    "commits": c.commit.split(' ').collect::<Vec<_>>(),
                    "what": c.what,
                })
            })
            .collect();
        let kernels: Vec<String> = KERNELS.iter().map(ToString::to_string).collect();
        let not_modeled: Vec<_> = NOT_MODELED
            .iter()
            .map(|u| serde_json::json!({ "what": u.what, "since": u.since, "commit": u.commit, "why": u.why }))
            .collect();
        let j = serde_json::json!({
            "kernels": kernels,
            "default": DEFAULT.to_string(),
            "changes": changes,
            "not_modeled": not_modeled,
        });
        super::emit(&(serde_json::to_string_pretty(&j)? + "\n"))?;
    } else {
        super::emit(&table())?;
    }
    Ok(ExitCode::SUCCESS)
}
