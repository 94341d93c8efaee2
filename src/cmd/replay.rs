//! `foliolab replay TRACE [--set ...] [--thp ...] [--kernel K] [--machine M]
//! [--each KEY=V1,V2,...] [--json | --print]`.

use crate::sim::{kernels, variants, Variants};
use crate::trace::replay::{self, Replayed};
use std::process::ExitCode;

#[derive(clap::Args)]
#[command(after_help = format!("{}\n\nExamples:\n  foliolab replay data/sqlite3-cc-O2.trc --each thp=off,64K,16K+64K\n  foliolab replay data/sqlite3-cc-O2.trc --kernel 6.12 --machine m2-vm", variants::keys_help(variants::KEYS)))]
pub struct Args {
    /// A trace written by `foliolab record`.
    pub trace: String,
    /// A variant or machine setting, e.g. mthp=on, contpte=off (the keys are listed below).
    #[arg(long = "set", value_name = "KEY=VALUE")]
    pub sets: Vec<String>,
    /// The THP knobs in force, as `set` lines of a workload would write them, e.g.
    /// `--thp hugepages-64kB/enabled=always`, over the knobs the trace recorded.
    #[arg(long = "thp", value_name = "KNOB=VALUE")]
    pub thp: Vec<String>,
    /// The kernel release whose behaviour to model (default 7.3).
    #[arg(long, value_name = "6.1|6.12|6.18|7.0|7.1|7.2|7.3", value_parser = crate::sim::kernels::parse_kernel)]
    pub kernel: Option<crate::sim::kernels::Release>,
    /// Add modeled time on a machine profile (`foliolab machines`, or a .toml path).
    #[arg(long, value_name = "NAME|PATH.toml")]
    pub machine: Option<String>,
    /// Replay once per value of KEY and print the replays side by side: `thp` takes mTHP
    /// settings (`off`, `64K`, `16K+64K`: the sizes set to always, every other never),
    /// `kernel` releases, any other KEY a variant's values.
    #[arg(long, value_name = "KEY=V1,V2[,...]", conflicts_with = "print")]
    pub each: Option<String>,
    /// With --each, also show the counters every replay agrees on.
    #[arg(long, requires = "each")]
    pub all: bool,
    /// Print the report as JSON.
    #[arg(long)]
    pub json: bool,
    /// Print the trace's header and events as text, one per line, instead of replaying.
    #[arg(long, conflicts_with_all = ["json", "machine"])]
    pub print: bool,
}

pub fn main(a: Args, db: &super::StoreArgs) -> super::CmdResult {
    let machine = crate::time::Machine::load(a.machine.as_deref(), &a.sets)?;
    let sets = machine.as_ref().map_or(&a.sets, |m| &m.sets);
    let kernel = a.kernel.unwrap_or(kernels::DEFAULT);
    let v = Variants::from_sets(&kernels::with_preset(kernel, kernels::Scope::Run, sets))?;
    let knobs = parse_thp(&a.thp)?;
    if a.print {
        let file = std::fs::File::open(&a.trace).map_err(|e| format!("{}: {e}", a.trace))?;
        return print(&a.trace, file);
    }
    if let Some(each) = &a.each {
        return main_each(&a, each, sets, &v, &knobs, machine.as_ref(), db);
    }
    let r = replay_one(&a.trace, &v, &knobs, machine.as_ref(), db)?;
    if a.json {
        let mut j = serde_json::to_value(&r)?;
        if let Some(m) = &machine {
            let t = crate::time::annotate(&r.report, &crate::time::model(&m.profile, &r.report), &m.applied);
            j["time"] = t["time"].clone();
        }
        super::emit(&(serde_json::to_string_pretty(&j)? + "\n"))?;
        return Ok(ExitCode::SUCCESS);
    }
    let text = match &machine {
        Some(m) => m.render(&r.report, false, crate::cmd::run::summary),
        None => crate::cmd::run::summary(&r.report),
    };
    super::emit(&(text + &processes(&r)))?;
    Ok(ExitCode::SUCCESS)
}

/// One replay of `trace`, timed on stderr and kept in the results store.
fn replay_one(
    trace: &str,
    v: &Variants,
    knobs: &[(String, String)],
    machine: Option<&crate::time::Machine>,
    db: &super::StoreArgs,
) -> Result<Replayed, Box<dyn std::error::Error>> {
    let file = std::fs::File::open(trace).map_err(|e| format!("{trace}: {e}"))?;
    let start = std::time::Instant::now();
    let cpu0 = crate::trace::record::cpu_ns(libc::RUSAGE_SELF);
    let r = replay::replay(trace, file, v, knobs)?;
    let secs = start.elapsed().as_secs_f64();
    // CPU time too: on a busy machine the wall-clock rate measures the scheduler.
    let cpu = (crate::trace::record::cpu_ns(libc::RUSAGE_SELF) - cpu0) as f64 / 1e9;
    eprintln!(
        "foliolab: replayed {} events in {secs:.2} s ({:.1} M events/s; {cpu:.2} s of CPU, {:.1} M events/s)",
        r.events,
        r.events as f64 / secs / 1e6,
        r.events as f64 / cpu.max(1e-9) / 1e6
    );
    let result = match machine {
        Some(m) => crate::time::annotate(&r.report, &crate::time::model(&m.profile, &r.report), &m.applied),
        None => serde_json::to_value(&r.report)?,
    };
    let knob_text: Vec<String> = knobs.iter().map(|(k, v)| format!("{k}={v}")).collect();
    super::record(
        db,
        &crate::store::NewRun {
            kind: "replay",
            workload: Some((trace, &knob_text.join(" "))),
            machine: machine.map(|m| m.profile.name.as_str()),
            host_kernel: None,
            wall_ms: secs * 1e3,
            result,
        },
    );
    Ok(r)
}

/// `--each KEY=V1,V2,...`: a replay per value, side by side.
fn main_each(
    a: &Args,
    each: &str,
    sets: &[String],
    v: &Variants,
    knobs: &[(String, String)],
    machine: Option<&crate::time::Machine>,
    db: &super::StoreArgs,
) -> super::CmdResult {
    type Column = (String, Variants, Vec<(String, String)>);
    let (title, columns): (String, Vec<Column>) = if let Some(list) = each.strip_prefix("thp=") {
        let g = v.machine().granule;
        let k = crate::mm::thp_sysfs::ThpKnobs::new(g);
        let sizes: Vec<u64> = k.anon_orders().map(|o| k.size_kb(o)).collect();
        let names: Vec<&str> = list.split(',').collect();
        if names.len() < 2 {
            return Err(format!("--each {each}: expected at least two values").into());
        }
        let columns = names
            .iter()
            .map(|n| {
                let s = crate::trace::predict::Setting::parse(n)?;
                let mut col = knobs.to_vec();
                col.extend(s.knobs(&sizes)?);
                Ok((n.to_string(), v.clone(), col))
            })
            .collect::<Result<Vec<_>, String>>()?;
        ("thp: the mTHP sizes set to always (every other never)".into(), columns)
    } else if each.starts_with("kernel=") {
        let (title, cols) = super::run::each_kernel(each, a.kernel.is_some(), sets)?;
        (title, cols.into_iter().map(|(l, v)| (l, v, knobs.to_vec())).collect())
    } else {
        let (key, values) = super::run::parse_each(each, sets)?;
        let columns = values
            .iter()
            .map(|value| {
                let mut v = v.clone();
                v.set(key.name, value).map(|()| (value.to_string(), v, knobs.to_vec()))
            })
            .collect::<Result<Vec<_>, _>>()?;
        (format!("{}: {}", key.name, key.about), columns)
    };
    let mut runs = Vec::with_capacity(columns.len());
    for (label, v, knobs) in columns {
        runs.push((label, replay_one(&a.trace, &v, &knobs, machine, db)?));
    }
    if a.json {
        let runs: Vec<&Replayed> = runs.iter().map(|(_, r)| r).collect();
        super::emit(&(serde_json::to_string_pretty(&serde_json::json!({ "runs": runs }))? + "\n"))?;
    } else {
        let reports: Vec<(String, crate::report::Report)> = runs.into_iter().map(|(l, r)| (l, r.report)).collect();
        super::emit(&crate::compare::compare(&title, &reports, a.all))?;
    }
    Ok(ExitCode::SUCCESS)
}

/// `--thp KNOB=VALUE` pairs, checked against the model's knobs when the replay starts.
pub fn parse_thp(thp: &[String]) -> Result<Vec<(String, String)>, String> {
    thp.iter()
        .map(|s| {
            s.split_once('=')
                .map(|(k, v)| (k.to_string(), v.to_string()))
                .ok_or_else(|| format!("--thp {s}: expected KNOB=VALUE"))
        })
        .collect()
}

/// The per-process table: recorded faults by kind and the model's faults.
pub fn processes(r: &Replayed) -> String {
    use std::fmt::Write;
    let mut s =
        String::from("\nprocesses (recorded faults by mapping kind; the model's faults on anonymous memory):\n");
    let _ = writeln!(
        s,
        "  {:>5}  {:<16} {:>12} {:>12} {:>10} {:>12}",
        "proc", "comm", "anon", "file/shared", "unmapped", "model"
    );
    for l in &r.processes {
        let _ = writeln!(
            s,
            "  {:>5}  {:<16} {:>12} {:>12} {:>10} {:>12}",
            l.proc, l.comm, l.anon_faults, l.other_faults, l.unmapped_faults, l.model_faults
        );
    }
    for d in &r.report.diagnostics {
        let _ = writeln!(s, "note: {d}");
    }
    s
}

/// `--print`: the header as JSON, then `<n> <event>` lines, then the trailer.
fn print(path: &str, file: std::fs::File) -> super::CmdResult {
    use std::io::Write;
    let mut r = crate::trace::format::Reader::new(path, std::io::BufReader::new(file))?;
    let mut out = std::io::BufWriter::new(std::io::stdout().lock());
    let mut go = || -> Result<(), Box<dyn std::error::Error>> {
        writeln!(out, "header {}", serde_json::to_string(&r.header)?)?;
        let mut n = 0u64;
        while let Some(e) = r.next_event()? {
            n += 1;
            writeln!(out, "{n} {e}")?;
        }
        writeln!(
            out,
            "end {}",
            serde_json::to_string(r.trailer().expect("after the last event"))?
        )?;
        Ok(out.flush()?)
    };
    match go() {
        Err(e)
            if e.downcast_ref::<std::io::Error>()
                .is_some_and(|e| e.kind() == std::io::ErrorKind::BrokenPipe) => {}
        r => r?,
    }
    Ok(ExitCode::SUCCESS)
}
