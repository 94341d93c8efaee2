//! `foliolab native [--target T] WORKLOAD... [--json]`: run workloads on the host
//! kernel, or on a real arm64 kernel under QEMU (one boot for all of them).

use crate::native::qemu::{self, Target};
use crate::report::Report;
use std::process::ExitCode;

#[derive(clap::Args)]
pub struct Args {
    /// The workload files.
    #[arg(required = true)]
    pub workloads: Vec<String>,
    /// Where to run: this host's kernel, or Linux 6.12 arm64 under QEMU (4K or 16K
    /// pages; set up by scripts/setup-qemu).
    #[arg(long, value_enum, default_value = "host")]
    pub target: Target,
    /// With a QEMU target: boot this kernel instead of Debian's, a key from
    /// `foliolab kernel build` or a kernel build directory (Image, System.map, .config).
    #[arg(long, value_name = "KEY|DIR")]
    pub image: Option<String>,
    /// Print the report as JSON (`{"runs": [...]}` for several workloads).
    #[arg(long)]
    pub json: bool,
}

/// Runs `workloads` on the host (None) or a guest kernel, a result per workload.
pub fn run_on(
    guest: Option<&qemu::GuestKernel>,
    workloads: &[crate::workload::Workload],
) -> Result<Vec<Result<Report, String>>, Box<dyn std::error::Error>> {
    match guest {
        None => Ok(workloads
            .iter()
            .map(|w| crate::native::run(w).map_err(|e| e.to_string()))
            .collect()),
        Some(k) => Ok(qemu::run_guest(k, workloads)?.reports),
    }
}

pub fn main(a: Args, db: &super::StoreArgs) -> super::CmdResult {
    let workloads = a
        .workloads
        .iter()
        .map(|p| crate::workload::parse_file(p))
        .collect::<Result<Vec<_>, _>>()?;
    let guest = qemu::resolve(a.target, a.image.as_deref())?;
    if let Some(why) = guest.as_ref().and_then(qemu::guest_missing) {
        return Err(qemu::QemuError::NotSetUp(why).into());
    }
    let start = std::time::Instant::now();
    let reports = run_on(guest.as_ref(), &workloads)?
        .into_iter()
        .collect::<Result<Vec<_>, _>>()?;
    // A batch's wall time is shared out evenly: the guest boots once for all of them.
    let wall = start.elapsed() / reports.len().max(1) as u32;
    for (w, r) in workloads.iter().zip(&reports) {
        super::record_report(db, "native", w, r, None, wall);
    }
    if a.json {
        let json = match &reports[..] {
            [one] => serde_json::to_string_pretty(one)?,
            all => serde_json::to_string_pretty(&serde_json::json!({ "runs": all }))?,
        };
        super::emit(&(json + "\n"))?;
    } else {
        for r in &reports {
            super::emit(&text(r))?;
        }
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
