//! `foliolab reproduce [SEED...] [--json]`: every seed table, the seed's figures beside
//! the model's.

use crate::reproduce::{pct, reproduce, Reproduction, Row};
use crate::time::Profile;
use std::process::ExitCode;

#[derive(clap::Args)]
pub struct Args {
    /// Seeds to reproduce (000, 001, 002, 003, 004); all when none is given.
    pub seeds: Vec<String>,
    /// The profile whose measured costs stand for the generic mm software on every
    /// machine (scaled by clock): the calibration committed with foliolab, or `host`
    /// after `foliolab calibrate`.
    #[arg(long, default_value = crate::time::profile::CALIBRATED, value_name = "PROFILE")]
    pub software: String,
    /// Print `{"rows": [...], "elapsed_s": t}` (and the breakdowns, series and notes).
    #[arg(long)]
    pub json: bool,
    /// The kernel release whose behaviour to model (`foliolab kernels` lists what each
    /// preset sets); a `--set` of the same key wins.
    #[arg(long, value_name = "6.1|6.12|6.18", default_value = "6.18", value_parser = crate::sim::kernels::parse_kernel)]
    pub kernel: crate::sim::kernels::Release,
    /// Also write the report as one self-contained page, DIR/index.html.
    #[arg(long, value_name = "DIR")]
    pub html: Option<std::path::PathBuf>,
}

pub fn main(a: Args, db: &super::StoreArgs) -> super::CmdResult {
    for s in &a.seeds {
        if !["000", "001", "002", "003", "004"].contains(&s.as_str()) {
            return Err(format!("unknown seed '{s}' (000, 001, 002, 003, 004)").into());
        }
    }
    let software = Profile::load(&a.software)?;
    let r = reproduce(&a.seeds, &software, a.kernel)?;
    super::record(
        db,
        &crate::store::NewRun {
            kind: "reproduce",
            workload: None,
            machine: None,
            host_kernel: None,
            wall_ms: r.elapsed_s * 1e3,
            result: serde_json::to_value(&r)?,
        },
    );
    if let Some(dir) = &a.html {
        let path = crate::html::write_page(dir, &crate::html::reproduce_page(&r))?;
        eprintln!("foliolab: wrote {}", path.display());
    }
    if a.json {
        super::emit(&(serde_json::to_string_pretty(&r)? + "\n"))?;
    } else {
        super::emit(&text(&r))?;
    }
    Ok(ExitCode::SUCCESS)
}

/// Each experiment as a table in the seed's shape: a column per machine, per variant
/// the seed's line and the model's, each value with its change against the baseline
/// (the first variant) unless the unit is already a percentage; then whether the model
/// agrees on the sign of each change, and the notes.
pub fn text(r: &Reproduction) -> String {
    let mut s = String::new();
    let mut experiments: Vec<(&str, &str)> = Vec::new();
    for row in &r.rows {
        if !experiments.contains(&(&row.seed, &row.experiment)) {
            experiments.push((&row.seed, &row.experiment));
        }
    }
    let mut noted = Vec::new();
    for (seed, exp) in experiments {
        let rows: Vec<&Row> = r
            .rows
            .iter()
            .filter(|x| x.seed == seed && x.experiment == exp)
            .collect();
        let mut machines: Vec<&str> = Vec::new();
        let mut variants: Vec<&str> = Vec::new();
        for x in &rows {
            if !machines.contains(&x.machine.as_str()) {
                machines.push(&x.machine);
            }
            if !variants.contains(&x.variant.as_str()) {
                variants.push(&x.variant);
            }
        }
        let unit = &rows[0].unit;
        s += &format!("\nseed {seed}: {exp} ({unit})\n");
        let cell = |m: &str, v: &str| rows.iter().find(|x| x.machine == m && x.variant == v);
        let base = |m: &str| cell(m, variants[0]);
        let fmt = |value: f64, base: f64, stdev: Option<f64>| {
            let mut c = format_value(value);
            if let Some(sd) = stdev {
                c += &format!(" ±{}", format_value(sd));
            }
            if unit != "%" && base != 0.0 {
                c += &format!(" ({:+.1}%)", pct(value, base));
            }
            c
        };
        let w = 26;
        s += &format!("{:<20}", "");
        for m in &machines {
            s += &format!("{m:>w$}");
        }
        s.push('\n');
        for v in &variants {
            for (who, first) in [("seed", true), ("model", false)] {
                s += &format!(
                    "{:<20}",
                    if first {
                        format!("{v:<13} {who}")
                    } else {
                        format!("{:<13} {who}", "")
                    }
                );
                for m in &machines {
                    let text = match (cell(m, v), base(m)) {
                        (Some(x), Some(b)) if first => fmt(x.seed_value, b.seed_value, x.seed_stdev),
                        (Some(x), Some(b)) => match (x.model_value, b.model_value) {
                            (Some(mv), Some(bv)) => fmt(mv, bv, None),
                            _ => "n/a".into(),
                        },
                        _ => String::new(),
                    };
                    s += &format!("{text:>w$}");
                }
                s.push('\n');
            }
        }
        s += &format!("{:<20}", "sign agrees");
        for m in &machines {
            let all = variants.iter().filter_map(|v| cell(m, v)).all(|x| x.sign_agrees);
            s += &format!("{:>w$}", if all { "yes" } else { "NO" });
        }
        s.push('\n');
        if !noted.contains(&seed) {
            noted.push(seed);
        }
    }
    s += &per_page_text(r);
    for (seed, notes) in &r.notes {
        if notes.is_empty() {
            continue;
        }
        s += &format!("\nnotes, seed {seed}:\n");
        for n in notes {
            s += &format!("  - {n}\n");
        }
    }
    s + &format!("\nreproduced in {:.1} s\n", r.elapsed_s)
}

/// Seed 001's per-page figures: a table per experiment, a line per flavour, machine
/// size and variant.
fn per_page_text(r: &Reproduction) -> String {
    let mut s = String::new();
    let mut experiments: Vec<(&str, &str)> = Vec::new();
    for p in &r.per_page {
        if !experiments.contains(&(&p.seed, &p.experiment)) {
            experiments.push((&p.seed, &p.experiment));
        }
    }
    for (seed, exp) in experiments {
        s += &format!("\nseed {seed}: per page, {exp}\n");
        s += &format!(
            "{:<8}{:>5}  {:<9}{:>8}{:>8}{:>8}{:>9}{:>12}  {}\n",
            "flavour", "cpus", "variant", "TLBIs", "IPIs", "waits", "flushes", "flush ns", "costed on"
        );
        for p in r.per_page.iter().filter(|p| p.seed == seed && p.experiment == exp) {
            let ns = p.flush_ns.map_or("n/a".to_string(), |v| format!("{v:.1}"));
            s += &format!(
                "{:<8}{:>5}  {:<9}{:>8.3}{:>8.3}{:>8.3}{:>9.3}{:>12}  {}\n",
                p.flavour, p.cpus, p.variant, p.tlbi, p.ipi, p.waits, p.flushes, ns, p.machine
            );
        }
    }
    s
}

/// A figure with as many digits as it deserves.
fn format_value(v: f64) -> String {
    match v.abs() {
        x if x >= 100.0 => format!("{v:.0}"),
        x if x >= 1.0 => format!("{v:.2}"),
        _ => format!("{v:.3}"),
    }
}
