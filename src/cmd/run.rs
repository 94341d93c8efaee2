//! `foliolab run WORKLOAD [--set variant=value ...] [--json]`.

use crate::compare;
use crate::report::Report;
use crate::sim::{self, kernels, variants, Variants};
use crate::workload;
use std::process::ExitCode;

#[derive(clap::Args)]
#[command(after_help = format!("{}\n\nExamples:\n  foliolab run workloads/seed000-munmap-64k.wl --each zap=per-pte,batched\n  foliolab run workloads/mthp-fault-64k.wl --machine altra-metal\n  foliolab run workloads/seed001-pageout-order0.wl --each kernel=6.1,6.12,6.18 --json", variants::keys_help(variants::KEYS)))]
pub struct Args {
    /// The workload file.
    pub workload: String,
    /// A variant or machine setting, e.g. zap=per-pte, contpte=off, granule=16K (the keys are listed below).
    #[arg(long = "set", value_name = "KEY=VALUE")]
    pub sets: Vec<String>,
    /// The kernel release whose behaviour to model (`foliolab kernels` lists what each
    /// preset sets; default 7.3); a `--set` of the same key wins. `--each
    /// kernel=6.1,6.12,6.18` runs the workload under each instead.
    #[arg(long, value_name = "6.1|6.12|6.18|7.0|7.1|7.2|7.3", value_parser = crate::sim::kernels::parse_kernel)]
    pub kernel: Option<crate::sim::kernels::Release>,
    /// Run once per value of KEY and print the runs side by side (JSON: {"runs": [...]});
    /// KEY may be `kernel`, a column per release preset.
    #[arg(long, value_name = "KEY=V1,V2[,...]")]
    pub each: Option<String>,
    /// With --each, also show the counters every run agrees on.
    #[arg(long, requires = "each")]
    pub all: bool,
    /// Print the report as JSON.
    #[arg(long)]
    pub json: bool,
    /// Add modeled time on a machine profile (`foliolab machines`, or a .toml path);
    /// its features become variant defaults that `--set` overrides.
    #[arg(long, value_name = "NAME|PATH.toml")]
    pub machine: Option<String>,
    /// Also write the runs as an HTML page, DIR/index.html (DIR is created).
    #[arg(long, value_name = "DIR")]
    pub html: Option<std::path::PathBuf>,
}

pub fn main(a: Args, db: &super::StoreArgs) -> super::CmdResult {
    let machine = crate::time::Machine::load(a.machine.as_deref(), &a.sets)?;
    let sets = machine.as_ref().map_or(&a.sets, |m| &m.sets);
    let kernel = a.kernel.unwrap_or(kernels::DEFAULT);
    let v = Variants::from_sets(&kernels::with_preset(kernel, kernels::Scope::Run, sets))?;
    let each = match a.each.as_deref() {
        Some(e) if e.starts_with("kernel=") => Some(each_kernel(e, a.kernel.is_some(), sets)?),
        Some(e) => {
            let (key, values) = parse_each(e, sets)?;
            let columns = values
                .iter()
                .map(|value| {
                    let mut v = v.clone();
                    v.set(key.name, value).map(|()| (value.to_string(), v))
                })
                .collect::<Result<Vec<_>, _>>()?;
            Some((format!("{}: {}", key.name, key.about), columns))
        }
        None => None,
    };
    let w = workload::parse_file(&a.workload)?;
    let Some((title, columns)) = each else {
        let start = std::time::Instant::now();
        let r = sim::run(&w, &v)?;
        let stored = super::record_report(db, "run", &w, &r, machine.as_ref(), start.elapsed());
        if let Some(m) = &machine {
            super::emit(&m.render(&r, a.json, summary))?;
        } else if a.json {
            super::emit(&(serde_json::to_string_pretty(&r)? + "\n"))?;
        } else {
            super::emit(&summary(&r))?;
        }
        if let Some(dir) = &a.html {
            write_html(dir, &[("run".to_string(), r)], machine.as_ref())?;
        }
        return Ok(status(stored));
    };
    let mut runs = Vec::with_capacity(columns.len());
    let mut stored = true;
    for (label, v) in columns {
        let start = std::time::Instant::now();
        let key = a.each.as_deref().and_then(|e| e.split_once('=')).map_or("", |(k, _)| k);
        let r = sim::run(&w, &v).map_err(|e| e.in_column(key, &label))?;
        stored &= super::record_report(db, "run", &w, &r, machine.as_ref(), start.elapsed());
        runs.push((label, r));
    }
    if a.json {
        let runs: Vec<&Report> = runs.iter().map(|(_, r)| r).collect();
        super::emit(&(serde_json::to_string_pretty(&serde_json::json!({ "runs": runs }))? + "\n"))?;
    } else {
        super::emit(&compare::compare(&title, &runs, a.all))?;
    }
    if let Some(dir) = &a.html {
        write_html(dir, &runs, machine.as_ref())?;
    }
    Ok(status(stored))
}

/// Success, or `EXIT_NOT_STORED` when a result that was to be stored was not: the
/// output is complete, but a script relying on the store must know.
fn status(stored: bool) -> ExitCode {
    if stored {
        ExitCode::SUCCESS
    } else {
        ExitCode::from(super::EXIT_NOT_STORED)
    }
}

/// `--html DIR`: the runs' page, with their modeled time on the machine if one is given.
fn write_html(
    dir: &std::path::Path,
    runs: &[(String, Report)],
    machine: Option<&crate::time::Machine>,
) -> Result<(), String> {
    let time: Vec<_> = runs
        .iter()
        .map(|(_, r)| {
            machine.map(|m| crate::time::annotate(r, &crate::time::model(&m.profile, r), &m.applied)["time"].take())
        })
        .collect();
    let path = crate::html::write_page(dir, &crate::html::run_page(runs, &time))?;
    eprintln!("foliolab: wrote {}", path.display());
    Ok(())
}

/// `--each kernel=K1,K2[,...]`: a column per release preset (not with `--kernel`), the
/// user's `--set`s over each.
pub(crate) fn each_kernel(
    each: &str,
    kernel_given: bool,
    sets: &[String],
) -> Result<(String, Vec<(String, Variants)>), String> {
    if kernel_given {
        return Err("--each kernel=...: also given with --kernel".into());
    }
    let list = each.trim_start_matches("kernel=");
    let releases = list
        .split(',')
        .map(kernels::parse_kernel)
        .collect::<Result<Vec<_>, _>>()?;
    if releases.len() < 2 {
        return Err(format!("--each {each}: expected at least two values"));
    }
    if (1..releases.len()).any(|i| releases[..i].contains(&releases[i])) {
        return Err(format!("--each {each}: a release given twice"));
    }
    let columns = releases
        .into_iter()
        .map(|k| {
            let v = Variants::from_sets(&kernels::with_preset(k, kernels::Scope::Run, sets))?;
            Ok((k.to_string(), v))
        })
        .collect::<Result<Vec<_>, String>>()?;
    Ok((
        "kernel: the release whose behaviour is modelled (`foliolab kernels`)".into(),
        columns,
    ))
}

/// `--each KEY=V1,V2[,...]`: a known key not also given with `--set`, and its values.
pub(crate) fn parse_each<'e>(each: &'e str, sets: &[String]) -> Result<(&'static variants::Key, Vec<&'e str>), String> {
    let (name, list) = each
        .split_once('=')
        .ok_or_else(|| format!("--each {each}: expected KEY=V1,V2[,...]"))?;
    let key = variants::key(name).ok_or_else(|| {
        let known: Vec<_> = variants::KEYS.iter().map(|k| k.name).collect();
        let hint = crate::suggest::hint(name, known.iter().copied());
        format!("--each {name}: unknown variant{hint} (known: {})", known.join(", "))
    })?;
    if variants::split_sets(sets)?.iter().any(|&(k, _)| k == name) {
        return Err(format!("--each {name}: also given with --set"));
    }
    let values: Vec<&str> = list.split(',').collect();
    if values.len() < 2 {
        return Err(format!("--each {each}: expected at least two values"));
    }
    let mut probe = Variants::default();
    // 1G and 1024M are one machine: sizes are compared by value.
    let same =
        |a: &str, b: &str| a == b || (name == "ram" && variants::parse_ram(a).ok() == variants::parse_ram(b).ok());
    for (i, value) in values.iter().enumerate() {
        probe
            .set(name, value)
            .map_err(|e| format!("--each {name}={value}: {e}"))?;
        if let Some(first) = values[..i].iter().find(|v| same(v, value)) {
            return Err(format!("--each {name}: value '{value}' given twice (as '{first}')"));
        }
    }
    Ok((key, values))
}

/// A readable rendering of a report: non-zero counters, phases and layouts.
pub fn summary(r: &Report) -> String {
    use std::fmt::Write;
    let mut s = String::new();
    let _ = writeln!(s, "{} ({})", r.workload, r.source);
    let changed: Vec<_> = r.variants.iter().map(|(k, v)| format!("{k}={v}")).collect();
    if !changed.is_empty() {
        let _ = writeln!(s, "variants: {}", changed.join(" "));
    }
    let w = r.counters.keys().map(|k| k.len()).max().unwrap_or(0);
    let _ = writeln!(s, "\ncounters (non-zero):");
    for (k, v) in r.counters.iter().filter(|(_, v)| **v != 0) {
        let _ = writeln!(s, "  {k:<w$}  {v:>12}");
    }
    if r.phases.len() > 1 {
        for p in &r.phases {
            let _ = writeln!(s, "\nphase {}:", p.label);
            for (k, v) in p.counters.iter().filter(|(_, v)| **v != 0) {
                let _ = writeln!(s, "  {k:<w$}  {v:>12}");
            }
        }
    }
    if !r.layout.is_empty() {
        let _ = writeln!(s, "\nlayout ([first page, pages, order|zero|swap]):");
    }
    for (region, runs) in &r.layout {
        let _ = writeln!(s, "  {region}: {}", compare::layout_line(runs));
    }
    for (k, why) in &r.unavailable {
        let _ = writeln!(s, "unavailable: {k}: {why}");
    }
    s
}
