//! `foliolab native [--target T] WORKLOAD... [--json]`: run workloads on the host
//! kernel, or on a real arm64 kernel under QEMU (one boot for all of them).

use crate::native::qemu::{self, Target};
use crate::report::Report;
use std::process::ExitCode;

#[derive(clap::Args)]
pub struct Args {
    /// The workload files.
    #[arg(required_unless_present = "program")]
    pub workloads: Vec<String>,
    /// A static aarch64 program (and its arguments, space-separated) for a QEMU target's
    /// runner to run instead of workloads, one that marks its own windows (e.g. seed
    /// 004's benchmark, tools/seed004/bench.c); its windows' counters are printed.
    #[arg(long, conflicts_with = "workloads")]
    pub program: Vec<String>,
    /// Where to run: this host's kernel, an arm64 kernel under QEMU (4K or 16K pages),
    /// or Linux 6.18 x86-64 under QEMU (qemu-x86_64; set up by scripts/setup-qemu).
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
    if !a.program.is_empty() {
        return programs(&a, guest.as_ref());
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

/// `--program`: the programs in one boot of `guest` (the target's kernel or
/// `--image`), their windows' counters printed.
fn programs(a: &Args, guest: Option<&qemu::GuestKernel>) -> super::CmdResult {
    let Some(guest) = guest else {
        return Err("--program runs on a QEMU target's runner only".into());
    };
    let programs: Vec<qemu::Program> = a
        .program
        .iter()
        .map(|p| {
            let mut words = p.split_whitespace().map(String::from);
            qemu::Program {
                path: words.next().unwrap_or_default().into(),
                args: words.collect(),
            }
        })
        .collect();
    let runs = qemu::run_programs(guest, &programs)?;
    if a.json {
        super::emit(&(serde_json::to_string_pretty(&serde_json::json!({ "programs": runs }))? + "\n"))?;
    } else {
        for r in &runs {
            super::emit(&format!("{} (exit status {})\n", r.program, r.status))?;
            for (i, w) in r.windows.iter().enumerate() {
                super::emit(&format!("  window {i}\n{}", insns_text(w, 10)))?;
            }
        }
    }
    let failed = runs.iter().any(|r| r.status != 0);
    Ok(if failed { ExitCode::FAILURE } else { ExitCode::SUCCESS })
}

/// `c`'s instruction counts for people: the totals, then the `top` functions with the
/// most kernel instructions (every function's are in `--json`).
fn insns_text(c: &crate::report::Counters, top: usize) -> String {
    let mut s = String::new();
    for k in [qemu::INSNS_KEY, qemu::USER_INSNS_KEY] {
        s += &format!("    {k:<48} {:>14}\n", c.get(k).copied().unwrap_or(0));
    }
    let mut per: Vec<(&String, &i64)> = c
        .iter()
        .filter(|(k, v)| qemu::insns_function(k).is_some() && **v != 0)
        .collect();
    per.sort_by(|a, b| b.1.cmp(a.1).then(a.0.cmp(b.0)));
    for (k, v) in per.iter().take(top) {
        s += &format!("    {k:<48} {v:>14}\n");
    }
    if per.len() > top {
        s += &format!("    ({} more functions: --json)\n", per.len() - top);
    }
    s
}

/// The report for people: per-process faults and the counters that moved, phases,
/// layout, then what could not be read.
pub fn text(r: &Report) -> String {
    let mut s = format!("{} ({})\n", r.workload, r.source);
    // Instructions per function are hundreds of keys: the largest ten here. A
    // process's major faults are shown when it took some.
    for (k, v) in r
        .counters
        .iter()
        .filter(|(k, v)| ((k.starts_with("proc.") && !k.ends_with(".majflt")) || **v != 0) && !qemu::is_insns(k))
    {
        s += &format!("  {k:<48} {v:>12}\n");
    }
    if r.counters.contains_key(qemu::INSNS_KEY) {
        s += &insns_text(&r.counters, 10);
    }
    for p in &r.phases {
        let moved: Vec<String> = p
            .counters
            .iter()
            .filter(|(k, v)| **v != 0 && qemu::insns_function(k).is_none())
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
