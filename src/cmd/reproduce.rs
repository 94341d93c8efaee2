//! `foliolab reproduce [SEED...] [--json]`: every seed table, the seed's figures beside
//! the model's.

use crate::reproduce::{pct, reproduce, Reproduction, Row, Summary, Verdict};
use crate::time::Profile;
use std::process::ExitCode;

#[derive(clap::Args)]
pub struct Args {
    /// Seeds to reproduce (000, 001, 002, 003, 004, and `upstream`: changes since 6.18
    /// with a published arm64 table); all when none is given.
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
    #[arg(long, value_name = "6.1|6.12|6.18|7.0|7.1|7.2|7.3", default_value_t = crate::sim::kernels::DEFAULT, value_parser = crate::sim::kernels::parse_kernel)]
    pub kernel: crate::sim::kernels::Release,
    /// Also write the report as one self-contained page, DIR/index.html.
    #[arg(long, value_name = "DIR")]
    pub html: Option<std::path::PathBuf>,
}

pub fn main(a: Args, db: &super::StoreArgs) -> super::CmdResult {
    for s in &a.seeds {
        if !crate::reproduce::SEEDS.contains(&s.as_str()) {
            return Err(format!("unknown seed '{s}' ({})", crate::reproduce::SEEDS.join(", ")).into());
        }
    }
    let software = Profile::load(&a.software)?;
    let mut r = reproduce(&a.seeds, &software, a.kernel)?;
    for (run, stored) in real_kernel_runs(db) {
        r.attach_real_kernel(&run, &stored)?;
    }
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

/// The stored runs that measured seeds' experiments on real kernels, newest first,
/// each as `(its name, {"real_kernel": [...]})`: `validate --seeds` results, and
/// `kernel seed004` runs (one compiler's each: their real-kernel rows made from the
/// stored table). A store that cannot be read is said on stderr: the column then says
/// not measured.
fn real_kernel_runs(db: &super::StoreArgs) -> Vec<(String, serde_json::Value)> {
    let found = db.open().and_then(|store| {
        let mut out = Vec::new();
        for run in store.list()?.into_iter().rev() {
            let name = format!("{}, run {} at {}", run.kind, run.id, run.started_at);
            let rows = match run.kind.as_str() {
                "validate-seeds" => store.result(run.id)?,
                "kernel-seed004" => store
                    .result(run.id)?
                    .and_then(|v| serde_json::from_value::<super::seed004::Seed004>(v).ok())
                    .map(|s| serde_json::json!({ "real_kernel": s.real_kernel_rows() })),
                _ => None,
            };
            out.extend(rows.map(|v| (name, v)));
        }
        Ok(out)
    });
    found.unwrap_or_else(|e| {
        eprintln!("foliolab: real-kernel column: {e}");
        Vec::new()
    })
}

/// The verdict counts and each disagreement first; then each experiment as a table in
/// the seed's shape: a column per machine, per variant the seed's line, the model's
/// (each value with its change against the baseline, the first variant, when the
/// figures are levels not already in percent) and the verdict; then the notes.
pub fn text(r: &Reproduction) -> String {
    let mut s = summary_text(&r.summary);
    let mut experiments: Vec<(&str, &str)> = Vec::new();
    for row in &r.rows {
        if !experiments.contains(&(&row.seed, &row.experiment)) {
            experiments.push((&row.seed, &row.experiment));
        }
    }
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
        // One real-kernel line per build measured (seed 004: per compiler).
        let mut builds: Vec<Option<String>> = Vec::new();
        for k in rows
            .iter()
            .flat_map(|x| std::iter::once(&x.real_kernel).chain(&x.real_kernel_more))
        {
            if k.value.is_some() && !builds.contains(&k.build) {
                builds.push(k.build.clone());
            }
        }
        s += &format!("\nseed {seed}: {exp} ({unit})\n");
        let cell = |m: &str, v: &str| rows.iter().find(|x| x.machine == m && x.variant == v);
        // Levels change against the first variant's row; a change-only table's
        // baseline has no row (its figures are 0 by definition).
        let base = |m: &str| cell(m, variants[0]).filter(|b| b.baseline.is_none());
        let fmt = |value: f64, base: Option<f64>, stdev: Option<f64>| {
            let mut c = format_value(value);
            if let Some(sd) = stdev {
                c += &format!(" ±{}", format_value(sd));
            }
            if let Some(b) = base.filter(|b| unit != "%" && *b != 0.0) {
                c += &format!(" ({:+.1}%)", pct(value, b));
            }
            c
        };
        let w = 26;
        let vw = variants
            .iter()
            .copied()
            .chain(rows[0].baseline.as_deref())
            .map(|v| v.chars().count())
            .max()
            .unwrap_or(0)
            .max(13);
        let lw = vw + 8;
        let line = |label: String, cells: Vec<String>| {
            let mut l = format!("{label:<lw$}");
            for c in cells {
                l += &format!("{c:>w$}");
            }
            l + "\n"
        };
        s += &line(String::new(), machines.iter().map(|m| m.to_string()).collect());
        if let Some(b) = rows[0].baseline.as_deref() {
            s += &line(
                format!("{b:<vw$} seed"),
                machines
                    .iter()
                    .map(|m| {
                        let sd = rows.iter().find(|x| x.machine == *m).and_then(|x| x.baseline_stdev);
                        fmt(0.0, None, sd)
                    })
                    .collect(),
            );
        }
        for v in &variants {
            let of = |f: &dyn Fn(&Row, Option<&Row>) -> String| -> Vec<String> {
                machines
                    .iter()
                    .map(|m| cell(m, v).map_or(String::new(), |x| f(x, base(m).copied())))
                    .collect()
            };
            s += &line(
                format!("{v:<vw$} seed"),
                of(&|x, b| {
                    fmt(
                        x.seed_value,
                        b.filter(|b| b.variant != x.variant).map(|b| b.seed_value),
                        x.seed_stdev,
                    )
                }),
            );
            s += &line(
                format!("{:<vw$} model", ""),
                of(&|x, b| match x.model_value {
                    Some(mv) => fmt(
                        mv,
                        b.filter(|b| b.variant != x.variant).and_then(|b| b.model_value),
                        None,
                    ),
                    None => "n/a".into(),
                }),
            );
            for build in &builds {
                let label = match build {
                    Some(b) => format!("{:<vw$} real kernel, {b}", ""),
                    None => format!("{:<vw$} real kernel", ""),
                };
                s += &line(
                    label,
                    of(&|x, _| {
                        let k = std::iter::once(&x.real_kernel)
                            .chain(&x.real_kernel_more)
                            .find(|k| k.value.is_some() && k.build == *build);
                        match k.map(|k| (k.value, &k.unit, k.change_pct)) {
                            Some((Some(v), Some(u), pct)) => {
                                let mut c = format_value(v);
                                if u != unit {
                                    c += &format!(" {u}");
                                }
                                if let Some(p) = pct {
                                    c += &format!(" ({p:+.2}%)");
                                }
                                c
                            }
                            _ => "not measured".into(),
                        }
                    }),
                );
            }
            s += &line(format!("{:<vw$} verdict", ""), of(&|x, _| x.verdict.name().to_string()));
        }
        let mut sources: Vec<&str> = rows
            .iter()
            .flat_map(|x| std::iter::once(&x.real_kernel).chain(&x.real_kernel_more))
            .map(|k| k.source.as_str())
            .collect();
        sources.sort();
        sources.dedup();
        s += &format!("  real kernel: {}\n", sources.join("; "));
        let reasons: Vec<String> = rows
            .iter()
            .filter(|x| matches!(x.verdict, Verdict::NotModeled | Verdict::Disagrees))
            .filter_map(|x| {
                x.reason
                    .as_deref()
                    .map(|why| format!("{} {}: {why}", x.machine, x.variant))
            })
            .collect();
        for why in fold_reasons(reasons) {
            s += &format!("  {why}\n");
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

/// The verdict counts, and one line per disagreeing cell.
fn summary_text(sum: &Summary) -> String {
    let total: usize = sum.counts.values().sum();
    let counts: Vec<String> = Verdict::ALL
        .iter()
        .map(|v| format!("{} {}", sum.counts.get(v.name()).copied().unwrap_or(0), v.name()))
        .collect();
    let mut s = format!("verdicts over {total} cells: {}\n", counts.join(", "));
    for d in &sum.disagrees {
        s += &format!("  disagrees: {d}\n");
    }
    s
}

/// Reasons said once: `cell: why` lines with the same why folded into one naming
/// every cell.
fn fold_reasons(lines: Vec<String>) -> Vec<String> {
    let mut by_why: Vec<(String, Vec<String>)> = Vec::new();
    for l in lines {
        let (cell, why) = l
            .split_once(": ")
            .map(|(c, w)| (c.to_string(), w.to_string()))
            .unwrap_or_default();
        match by_why.iter_mut().find(|(w, _)| *w == why) {
            Some((_, cells)) => cells.push(cell),
            None => by_why.push((why, vec![cell])),
        }
    }
    by_why
        .into_iter()
        .map(|(why, cells)| format!("{}: {why}", cells.join("; ")))
        .collect()
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

#[cfg(test)]
mod tests {
    use super::*;
    use crate::reproduce::RealKernel;

    /// Seed 004's cells measured on kernels built with two compilers: a real-kernel line
    /// per compiler, each value with its percent, and both kernels named.
    #[test]
    fn each_compilers_real_kernel_gets_its_own_line() {
        let mut row = crate::reproduce::seed004_test_row();
        let built = |build: &str, value: f64, pct: f64| RealKernel {
            value: Some(value),
            unit: Some("instructions".into()),
            source: format!("6.12 built with {build} (run 1)"),
            build: Some(build.into()),
            change_pct: Some(pct),
        };
        row.real_kernel = built("clang", 614_794_297.0, 2.33);
        row.real_kernel_more = vec![built("gcc", -1_218_543.0, -0.0)];
        let r = Reproduction {
            rows: vec![row],
            ..Reproduction::default()
        };
        let t = text(&r);
        let line = |label: &str| {
            t.lines()
                .find(|l| l.trim_start().starts_with(label))
                .unwrap_or_else(|| panic!("no {label} line: {t}"))
                .to_string()
        };
        assert!(line("real kernel, clang").contains("(+2.33%)"), "{t}");
        assert!(
            line("real kernel, gcc").contains("(+0.00%)") || line("real kernel, gcc").contains("(-0.00%)"),
            "{t}"
        );
        assert!(
            t.contains("6.12 built with clang (run 1)") && t.contains("6.12 built with gcc (run 1)"),
            "{t}"
        );
    }
}
