//! `foliolab ab WORKLOAD... --image A --image B [...] [--json]`: the same workloads on
//! two or more guest kernels (built ones by key or directory, or a QEMU target's own
//! Debian kernel by the target's name), one boot per kernel, all at once, and per workload one
//! table in `compare`'s shape: a column per kernel, every counter that differs with
//! its change against the first kernel. Each guest report is recorded in the results
//! store as a `native` run, and the whole comparison as an `ab` run.

use crate::native::qemu::{self, GuestKernel, Target};
use std::process::ExitCode;

#[derive(clap::Args)]
pub struct Args {
    /// The workload files.
    #[arg(required = true)]
    pub workloads: Vec<String>,
    /// A kernel: a key from `foliolab kernel build`, a kernel build directory, or a
    /// QEMU target's name for Debian's kernel (qemu-arm64, qemu-arm64-16k,
    /// qemu-arm64-6.1). Two or more; the first is the baseline.
    #[arg(long = "image", value_name = "KEY|DIR|TARGET", required = true, num_args = 1)]
    pub images: Vec<String>,
    /// Also show the counters every kernel agrees on.
    #[arg(long)]
    pub all: bool,
    /// Print `{"kernels": [...], "workloads": [{"workload", "columns", "sections", "errors"}]}`.
    #[arg(long)]
    pub json: bool,
}

/// `--image`'s kernel: a target's name is Debian's kernel of that target.
fn kernel(arg: &str) -> Result<GuestKernel, qemu::QemuError> {
    use clap::ValueEnum;
    match Target::from_str(arg, false) {
        Ok(Target::Host) => Err(qemu::QemuError::Run(
            "--image host: the host is not a guest kernel".into(),
        )),
        Ok(t) => Ok(t.guest_kernel().expect("a QEMU target")),
        Err(_) => GuestKernel::image(arg),
    }
}

pub fn main(a: Args, db: &super::StoreArgs) -> super::CmdResult {
    if a.images.len() < 2 {
        return Err("ab compares two or more kernels: give --image at least twice".into());
    }
    let workloads = a
        .workloads
        .iter()
        .map(|p| crate::workload::parse_file(p))
        .collect::<Result<Vec<_>, _>>()?;
    let kernels = a.images.iter().map(|i| kernel(i)).collect::<Result<Vec<_>, _>>()?;
    for k in &kernels {
        if let Some(why) = qemu::guest_missing(k) {
            return Err(qemu::QemuError::NotSetUp(why).into());
        }
    }
    let start = std::time::Instant::now();
    // Columns are named as the user named the kernels, so a table reads as the command.
    let names: Vec<String> = a.images.clone();
    // The kernels boot at once, one QEMU each (a guest's counts do not depend on the
    // host's load): the A/B table comes in the time of the slowest boot, not the sum.
    let runs: Vec<_> = std::thread::scope(|s| {
        let handles: Vec<_> = kernels
            .iter()
            .map(|k| s.spawn(|| super::validate::run_guest_batch(k, &workloads, k.granule.page_size())))
            .collect();
        handles
            .into_iter()
            .map(|h| h.join().expect("a guest's runner thread panicked"))
            .collect()
    });
    let mut per_kernel = Vec::new();
    for super::validate::GuestBatch { results, share, .. } in runs {
        for (w, r) in workloads.iter().zip(&results) {
            if let Ok(r) = r {
                super::record_report(db, "native", w, r, None, share);
            }
        }
        per_kernel.push(results);
    }
    let mut failed = false;
    let mut text = String::new();
    let mut json = Vec::new();
    for (i, w) in workloads.iter().enumerate() {
        let mut columns = Vec::new();
        let mut errors = serde_json::Map::new();
        for (name, results) in names.iter().zip(&per_kernel) {
            match &results[i] {
                Ok(r) => columns.push((name.clone(), r.clone())),
                Err(e) => {
                    failed |= qemu::not_applicable(e).is_none();
                    errors.insert(name.clone(), e.clone().into());
                }
            }
        }
        let title = format!("ab: {} on {} kernels, change against the first", w.path, names.len());
        text += &crate::compare::compare(&title, &columns, a.all);
        for (name, e) in &errors {
            text += &format!("{name}: {}\n", e.as_str().unwrap_or_default());
        }
        text.push('\n');
        let mut table = super::compare::json(&columns, a.all);
        table["workload"] = w.path.clone().into();
        table["errors"] = errors.into();
        json.push(table);
    }
    let kernels_json: Vec<serde_json::Value> = names
        .iter()
        .zip(&kernels)
        .map(|(name, k)| {
            serde_json::json!({
                "name": name,
                "source": k.source,
                "release": k.release.to_string(),
                "granule": k.granule.name(),
                "provenance": k.provenance,
            })
        })
        .collect();
    let out = serde_json::json!({"kernels": kernels_json, "workloads": json});
    super::record(
        db,
        &crate::store::NewRun {
            kind: "ab",
            workload: None,
            machine: None,
            host_kernel: None,
            wall_ms: start.elapsed().as_secs_f64() * 1e3,
            result: out.clone(),
        },
    );
    if a.json {
        super::emit(&(serde_json::to_string_pretty(&out)? + "\n"))?;
    } else {
        super::emit(&text)?;
    }
    Ok(if failed { ExitCode::from(2) } else { ExitCode::SUCCESS })
}
