//! `foliolab predict [--mthp SETTING ...] [--dir DIR] [-- COMMAND...]`.

use crate::trace::predict::{self, Setting};
use std::process::ExitCode;

#[derive(clap::Args)]
pub struct Args {
    /// An mTHP setting to predict and measure: sizes set to always, joined by `+`
    /// (default: 64K and 16K+64K); `off`, the program run again as recorded, always
    /// comes first.
    #[arg(long = "mthp", value_name = "64K|16K+64K|...")]
    pub mthp: Vec<String>,
    /// Keep the traces in DIR (default: a temporary directory, removed afterwards).
    #[arg(long, value_name = "DIR")]
    pub dir: Option<std::path::PathBuf>,
    /// Print the result as JSON.
    #[arg(long)]
    pub json: bool,
    /// The program to record (default: the reference build, the C compile of the
    /// SQLite amalgamation that rusqlite bundles).
    #[arg(last = true, value_name = "COMMAND")]
    pub command: Vec<String>,
}

pub fn main(a: Args) -> super::CmdResult {
    let names = if a.mthp.is_empty() {
        vec!["64K".to_string(), "16K+64K".to_string()]
    } else {
        a.mthp.clone()
    };
    // `off` first: the program run again as recorded, its own run-to-run variation.
    let settings = std::iter::once("off")
        .chain(names.iter().map(String::as_str).filter(|n| *n != "off"))
        .map(Setting::parse)
        .collect::<Result<Vec<_>, _>>()?;
    let tmp = std::env::temp_dir().join(format!("foliolab-predict-{}", std::process::id()));
    let dir = a.dir.clone().unwrap_or_else(|| tmp.clone());
    std::fs::create_dir_all(&dir).map_err(|e| format!("{}: {e}", dir.display()))?;
    let command = if a.command.is_empty() {
        predict::reference_build(&dir.join("sqlite3.o"))?
    } else {
        a.command.clone()
    };
    // Measured on this host: the model takes the host's release, as `validate` does.
    let v = super::validate::target_variants(crate::native::qemu::Target::Host, None, &[])?;
    let paths = crate::native::HostPaths::default();
    let r = predict::predict(&command, &settings, &dir, &paths.thp, &paths.lock, &v);
    if a.dir.is_none() {
        let _ = std::fs::remove_dir_all(&tmp);
    }
    let r = r?;
    if a.json {
        super::emit(&(serde_json::to_string_pretty(&r)? + "\n"))?;
    } else {
        super::emit(&r.render())?;
    }
    Ok(ExitCode::SUCCESS)
}
