//! `foliolab record -o TRACE [--no-aslr] -- COMMAND...`.

use crate::trace::record::{self, Options};
use std::process::ExitCode;

#[derive(clap::Args)]
pub struct Args {
    /// The trace file to write.
    #[arg(short, long, value_name = "TRACE")]
    pub output: std::path::PathBuf,
    /// Run the program without address-space randomization (ADDR_NO_RANDOMIZE), so
    /// another run of it maps the same addresses.
    #[arg(long)]
    pub no_aslr: bool,
    /// The program and its arguments.
    #[arg(last = true, required = true, value_name = "COMMAND")]
    pub command: Vec<String>,
}

pub fn main(a: Args) -> super::CmdResult {
    let o = Options {
        command: &a.command,
        output: &a.output,
        no_aslr: a.no_aslr,
    };
    let r = match record::record(&o, std::path::Path::new(crate::native::THP_DIR)) {
        Ok(r) => r,
        Err(e) => {
            let _ = std::fs::remove_file(&a.output);
            return Err(e.into());
        }
    };
    let t = &r.trailer;
    eprintln!(
        "foliolab: recorded {} events in {:.2} s (the program's CPU {:.2} s, the recorder's {:.2} s) into {} ({} bytes, {:.2} bytes/event); the program exited {}",
        t.events,
        t.wall_ns as f64 / 1e9,
        t.cpu_ns as f64 / 1e9,
        t.recorder_cpu_ns as f64 / 1e9,
        a.output.display(),
        r.bytes,
        r.bytes as f64 / t.events.max(1) as f64,
        t.status
    );
    if t.still_running > 0 {
        eprintln!(
            "foliolab: note: {} of its processes were still running when the program exited; what they did after is not in the trace",
            t.still_running
        );
    }
    Ok(ExitCode::SUCCESS)
}
