//! `foliolab sweep SPEC.toml [--jobs N] [--out TABLE.csv] [--ray ADDRESS]`: every point
//! of the spec's product (`sweep::spec`), on every core or on a Ray cluster, each kept in
//! the results store as it finishes; a rerun runs only the points not stored.

use crate::sweep::{self, Spec};
use std::process::ExitCode;

#[derive(clap::Args)]
pub struct Args {
    /// The sweep spec: workloads, traces, [variants], kernels, machines, targets, sets.
    pub spec: std::path::PathBuf,
    /// Points run at once (default: every core).
    #[arg(long, short)]
    pub jobs: Option<usize>,
    /// Write the table (a row per point, phase and counter) as CSV; Parquet is the
    /// Python package's (`foliolab.sweep(...).to_parquet`).
    #[arg(long, value_name = "PATH.csv")]
    pub out: Option<std::path::PathBuf>,
    /// Send each point to this Ray cluster as a task (e.g. 127.0.0.1:6379), through
    /// the Python package (`pip install ./python[ray]`), whose Ray backend this is.
    #[arg(long, value_name = "ADDRESS")]
    pub ray: Option<String>,
}

pub fn main(a: Args, db: &super::StoreArgs) -> super::CmdResult {
    if let Some(address) = &a.ray {
        return ray(&a, address, db);
    }
    if let Some(out) = a.out.as_ref().filter(|o| o.extension().is_none_or(|e| e != "csv")) {
        return Err(format!(
            "--out {}: the CLI writes .csv (Parquet: foliolab.sweep in Python)",
            out.display()
        )
        .into());
    }
    let (spec, dir) = Spec::load(&a.spec)?;
    let points = spec.points(&dir)?;
    let mut store = if db.no_store {
        crate::store::Store::open(std::path::Path::new(":memory:"))?
    } else {
        db.open()?
    };
    let jobs = a
        .jobs
        .unwrap_or_else(|| std::thread::available_parallelism().map_or(1, |n| n.get()));
    let bar = indicatif::ProgressBar::new(points.len() as u64).with_style(
        indicatif::ProgressStyle::with_template("sweep {bar:30} {pos}/{len} points, {eta} left")
            .expect("a valid template"),
    );
    let start = std::time::Instant::now();
    let o = sweep::run_local(points, &mut store, jobs, &mut |done, _| bar.set_position(done as u64))?;
    bar.finish_and_clear();
    let secs = start.elapsed().as_secs_f64();
    let mut text = format!(
        "{} points: {} run, {} already stored, {} failed; {secs:.2} s on {jobs} thread(s)",
        o.points.len(),
        o.ran,
        o.stored,
        o.failed.len(),
    );
    if o.ran > 0 {
        text += &format!(", {:.2} ms per point run", secs * 1e3 / o.ran as f64);
    }
    text += "\n";
    for (i, why) in &o.failed {
        text += &format!("point {i} ({}): {why}\n", o.points[*i].input.path());
    }
    let table = sweep::table::table(&o.points, &o.results);
    if let Some(out) = &a.out {
        let mut f = std::io::BufWriter::new(std::fs::File::create(out).map_err(|e| format!("{}: {e}", out.display()))?);
        table.write_csv(&mut f)?;
        std::io::Write::flush(&mut f)?;
        text += &format!("table: {} rows in {}\n", table.rows(), out.display());
    }
    super::emit(&text)?;
    if !o.failed.is_empty() {
        return Err(format!(
            "{} point(s) failed (the others are stored; a rerun runs only those)",
            o.failed.len()
        )
        .into());
    }
    Ok(ExitCode::SUCCESS)
}

/// `--ray`: the Python package's sweep, which sends each point to the cluster.
fn ray(a: &Args, address: &str, db: &super::StoreArgs) -> super::CmdResult {
    let python = std::env::var("FOLIOLAB_PYTHON").unwrap_or_else(|_| "python3".into());
    let mut cmd = std::process::Command::new(&python);
    cmd.args(["-m", "foliolab", "sweep"])
        .arg(&a.spec)
        .args(["--ray", address]);
    if let Some(out) = &a.out {
        cmd.arg("--out").arg(out);
    }
    if let Some(db) = &db.db {
        cmd.arg("--db").arg(db);
    }
    let status = cmd.status().map_err(|e| format!("--ray: running {python}: {e}"))?;
    match status.code() {
        Some(0) => Ok(ExitCode::SUCCESS),
        Some(c) => Ok(ExitCode::from(c.clamp(1, 255) as u8)),
        None => Err(format!("--ray: {python} -m foliolab was killed ({status})").into()),
    }
}
