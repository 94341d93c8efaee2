//! `foliolab validate WORKLOAD... [--json]`: run each workload on the model and on the
//! host, and compare. Per-process faults and the layout must match exactly; global
//! counters (`vmstat.*`, `mthp.*`) get a small tolerance, since other processes on the
//! host move them too.

use crate::report::{Report, Run};
use crate::workload::Workload;
use serde::Serialize;
use std::collections::BTreeMap;
use std::process::ExitCode;

#[derive(clap::Args)]
pub struct Args {
    /// Workload files.
    #[arg(required = true)]
    pub workloads: Vec<String>,
    /// Print the comparisons as JSON.
    #[arg(long)]
    pub json: bool,
}

/// Runs a workload on one side; the error is reported as that side's failure.
pub type Runner<'a> = dyn FnMut(&Workload) -> Result<Report, String> + 'a;

/// The model executor, with the default variants.
pub fn model_runner() -> Box<Runner<'static>> {
    Box::new(|w: &Workload| crate::sim::run(w, &crate::sim::Variants::default()).map_err(|e| e.to_string()))
}

fn host_runner() -> Box<Runner<'static>> {
    Box::new(|w: &Workload| crate::native::run(w).map_err(|e| e.to_string()))
}

/// Global counters get `max(TOL_ABS, |model| * TOL_PCT / 100)`.
pub const TOL_ABS: i64 = 4;
pub const TOL_PCT: i64 = 2;

/// The allowed |model - host| for `key`: None for exact keys.
pub fn tolerance(key: &str, model: i64) -> Option<i64> {
    (key.starts_with("vmstat.") || key.starts_with("mthp.")).then(|| TOL_ABS.max(model.abs() * TOL_PCT / 100))
}

#[derive(Debug, Serialize, PartialEq, Eq)]
pub struct Row {
    pub counter: String,
    pub model: i64,
    pub host: i64,
    pub diff: i64,
    /// The tolerance applied (None: exact).
    pub tolerance: Option<i64>,
    pub ok: bool,
}

#[derive(Debug, Serialize, PartialEq, Eq)]
pub struct LayoutDiff {
    pub region: String,
    pub model: Option<Vec<RunTriple>>,
    pub host: Option<Vec<RunTriple>>,
}

/// A run as its JSON triple text, for printing and comparing.
pub type RunTriple = String;

#[derive(Debug, Default, Serialize)]
pub struct Comparison {
    pub workload: String,
    pub rows: Vec<Row>,
    pub layout_mismatches: Vec<LayoutDiff>,
    pub layout_regions: usize,
    /// Counters left out of the comparison, with why.
    pub not_compared: BTreeMap<String, String>,
    /// A side that failed to run.
    pub error: Option<String>,
}

impl Comparison {
    pub fn ok(&self) -> bool {
        self.error.is_none() && self.layout_mismatches.is_empty() && self.rows.iter().all(|r| r.ok)
    }
    /// The counters a tolerance was applied to.
    pub fn tolerant(&self) -> Vec<&str> {
        self.rows
            .iter()
            .filter(|r| r.tolerance.is_some())
            .map(|r| r.counter.as_str())
            .collect()
    }
}

/// Global counters that only the workload's own splits and swap-out attempts move on a
/// quiet host, compared exactly against saved host results (a live run still allows
/// the tolerance). split_deferred is left out: other processes partially unmap the
/// mTHPs a workload's knobs let them fault, and move it in most saved runs.
pub fn exact_global(key: &str) -> bool {
    let stat = key.rsplit('.').next().unwrap_or("");
    matches!(
        key,
        "vmstat.thp_split_pmd"
            | "vmstat.thp_split_page"
            | "vmstat.thp_deferred_split_page"
            | "vmstat.thp_swpout_fallback"
    ) || (key.starts_with("mthp.") && matches!(stat, "split" | "swpout_fallback"))
}

impl Comparison {
    /// The `exact_global` counters that differ, one line each.
    pub fn global_mismatches(&self) -> Vec<String> {
        self.rows
            .iter()
            .filter(|r| exact_global(&r.counter) && r.model != r.host)
            .map(|r| format!("{}: model {} host {}", r.counter, r.model, r.host))
            .collect()
    }

    /// What breaks the exact part of the contract (per-process faults and layouts),
    /// one line each; empty when model and host agree on it.
    pub fn exact_mismatches(&self) -> Vec<String> {
        let mut out: Vec<String> = self
            .rows
            .iter()
            .filter(|r| r.tolerance.is_none() && !r.ok)
            .map(|r| format!("{}: model {} host {}", r.counter, r.model, r.host))
            .collect();
        for l in &self.layout_mismatches {
            out.push(format!("layout {}: model {:?} host {:?}", l.region, l.model, l.host));
        }
        out.extend(self.error.iter().cloned());
        out
    }
}

/// Compares a model report with a host report (the pure core of `validate`).
pub fn compare(model: &Report, host: &Report) -> Comparison {
    let mut c = Comparison {
        workload: host.workload.clone(),
        ..Comparison::default()
    };
    let keys: std::collections::BTreeSet<&String> = model.counters.keys().chain(host.counters.keys()).collect();
    for key in keys {
        let (m, h) = (model.counters.get(key), host.counters.get(key));
        if let Some(why) = host.unavailable.get(key) {
            c.not_compared.insert(key.clone(), format!("host: {why}"));
            continue;
        }
        let tol = tolerance(key, m.copied().unwrap_or(0));
        let (m, h) = match (m, h, key.starts_with("proc.")) {
            (Some(m), Some(h), _) => (*m, *h),
            // A process that took no faults may be left out by either side.
            (m, h, true) => (m.copied().unwrap_or(0), h.copied().unwrap_or(0)),
            (None, Some(_), false) => {
                c.not_compared.insert(key.clone(), "not modelled".into());
                continue;
            }
            (Some(_), None, false) => {
                c.not_compared.insert(key.clone(), "model only".into());
                continue;
            }
            (None, None, false) => unreachable!("key from one of the maps"),
        };
        let diff = h - m;
        c.rows.push(Row {
            counter: key.clone(),
            model: m,
            host: h,
            diff,
            tolerance: tol,
            ok: diff.abs() <= tol.unwrap_or(0),
        });
    }
    if let Some(why) = host.unavailable.get("layout") {
        c.not_compared.insert("layout".into(), format!("host: {why}"));
        return c;
    }
    let regions: std::collections::BTreeSet<&String> = model.layout.keys().chain(host.layout.keys()).collect();
    c.layout_regions = regions.len();
    let triples = |runs: &Vec<Run>| {
        runs.iter()
            .map(|r| serde_json::to_string(r).unwrap_or_default())
            .collect()
    };
    for region in regions {
        let (m, h) = (model.layout.get(region), host.layout.get(region));
        if m != h {
            c.layout_mismatches.push(LayoutDiff {
                region: region.clone(),
                model: m.map(triples),
                host: h.map(triples),
            });
        }
    }
    c
}

/// Runs every workload on both sides and compares.
pub fn validate(paths: &[String], model: &mut Runner, host: &mut Runner) -> Vec<Comparison> {
    paths
        .iter()
        .map(|p| {
            let fail = |e: String| Comparison {
                workload: p.clone(),
                error: Some(e),
                ..Comparison::default()
            };
            let w = match crate::workload::parse_file(p) {
                Ok(w) => w,
                Err(e) => return fail(e.to_string()),
            };
            match (model(&w), host(&w)) {
                (Ok(m), Ok(h)) => compare(&m, &h),
                (Err(e), _) => fail(format!("model: {e}")),
                (_, Err(e)) => fail(format!("host: {e}")),
            }
        })
        .collect()
}

/// The side-by-side table and verdict of one comparison.
pub fn table(c: &Comparison) -> String {
    let mut s = format!("== {}\n", c.workload);
    if let Some(e) = &c.error {
        return s + &format!("   ERROR: {e}\nverdict: FAIL\n");
    }
    s += &format!(
        "   {:<44} {:>10} {:>10} {:>8}  tolerance\n",
        "counter", "model", "host", "diff"
    );
    for r in &c.rows {
        let tol = r.tolerance.map_or("exact".to_string(), |t| format!("±{t}"));
        let mark = if r.ok { "  " } else { "! " };
        s += &format!(
            "{mark} {:<44} {:>10} {:>10} {:>8}  {tol}\n",
            r.counter, r.model, r.host, r.diff
        );
    }
    for (k, why) in &c.not_compared {
        s += &format!("   not compared: {k} ({why})\n");
    }
    for d in &c.layout_mismatches {
        let show = |l: &Option<Vec<String>>| l.as_ref().map_or("(absent)".into(), |v| v.join(","));
        s += &format!(
            "!  layout {}:\n     model: {}\n     host:  {}\n",
            d.region,
            show(&d.model),
            show(&d.host)
        );
    }
    let tolerant = c.tolerant();
    if !tolerant.is_empty() {
        s += &format!(
            "   tolerance max({TOL_ABS}, {TOL_PCT}% of model) applied to {} global counters: {}\n",
            tolerant.len(),
            tolerant.join(" ")
        );
    }
    let layout_ok = c.layout_regions - c.layout_mismatches.len();
    s += &format!("   layout: {layout_ok}/{} regions match\n", c.layout_regions);
    s + &format!("verdict: {}\n", if c.ok() { "PASS" } else { "FAIL" })
}

pub fn main(a: Args) -> super::CmdResult {
    let results = validate(&a.workloads, &mut *model_runner(), &mut *host_runner());
    if a.json {
        super::emit(&(serde_json::to_string_pretty(&results)? + "\n"))?;
    } else {
        for c in &results {
            super::emit(&table(c))?;
        }
    }
    Ok(if results.iter().all(Comparison::ok) {
        ExitCode::SUCCESS
    } else {
        ExitCode::FAILURE
    })
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::report::PageKind;

    fn report(source: &str, counters: &[(&str, i64)], layout: &[(&str, Vec<Run>)]) -> Report {
        Report {
            source: source.into(),
            workload: "w.wl".into(),
            counters: counters.iter().map(|(k, v)| (k.to_string(), *v)).collect(),
            layout: layout.iter().map(|(k, v)| (k.to_string(), v.clone())).collect(),
            ..Report::default()
        }
    }

    fn run(first: u64, n: u64, order: u32) -> Run {
        Run {
            first,
            n,
            kind: PageKind::Order(order),
        }
    }

    #[test]
    fn exact_keys_and_layout_must_match() {
        let m = report(
            "model",
            &[("proc.main.minflt", 1024)],
            &[("main/buf", vec![run(0, 16384, 4)])],
        );
        let h = report(
            "host",
            &[("proc.main.minflt", 1024)],
            &[("main/buf", vec![run(0, 16384, 4)])],
        );
        assert!(compare(&m, &h).ok());
        let h2 = report(
            "host",
            &[("proc.main.minflt", 1025)],
            &[("main/buf", vec![run(0, 16384, 4)])],
        );
        let c = compare(&m, &h2);
        assert!(!c.ok());
        assert_eq!(
            c.rows[0],
            Row {
                counter: "proc.main.minflt".into(),
                model: 1024,
                host: 1025,
                diff: 1,
                tolerance: None,
                ok: false
            }
        );
        let h3 = report(
            "host",
            &[("proc.main.minflt", 1024)],
            &[("main/buf", vec![run(0, 16383, 4), run(16383, 1, 0)])],
        );
        let c = compare(&m, &h3);
        assert!(!c.ok());
        assert_eq!(
            c.layout_mismatches[0].host.as_ref().unwrap(),
            &["[0,16383,4]", "[16383,1,0]"]
        );
        assert!(table(&c).contains("verdict: FAIL"));
    }

    #[test]
    fn a_region_on_one_side_only_is_a_mismatch() {
        let m = report("model", &[], &[("main/a", vec![]), ("main/b", vec![run(0, 1, 0)])]);
        let h = report("host", &[], &[("main/a", vec![])]);
        let c = compare(&m, &h);
        assert_eq!(c.layout_mismatches.len(), 1);
        assert_eq!(c.layout_mismatches[0].region, "main/b");
        assert_eq!(c.layout_mismatches[0].host, None);
        assert_eq!(c.layout_regions, 2);
    }

    #[test]
    fn global_counters_get_the_stated_tolerance() {
        assert_eq!(tolerance("proc.main.minflt", 1000), None);
        assert_eq!(tolerance("vmstat.pgfault", 10), Some(4));
        assert_eq!(tolerance("mthp.64kB.anon_fault_alloc", 1000), Some(20));
        let m = report("model", &[("vmstat.pgfault", 1000), ("mthp.64kB.split", 0)], &[]);
        let ok = report("host", &[("vmstat.pgfault", 1020), ("mthp.64kB.split", 4)], &[]);
        let c = compare(&m, &ok);
        assert!(c.ok());
        assert_eq!(c.tolerant(), ["mthp.64kB.split", "vmstat.pgfault"]);
        let bad = report("host", &[("vmstat.pgfault", 1021), ("mthp.64kB.split", 0)], &[]);
        assert!(!compare(&m, &bad).ok());
        assert!(table(&compare(&m, &ok)).contains("applied to 2 global counters: mthp.64kB.split vmstat.pgfault"));
    }

    #[test]
    fn one_sided_and_unavailable_keys() {
        let m = report(
            "model",
            &[("arch.tlbi.vae1is", 3), ("proc.child.minflt", 0), ("vmstat.pgfault", 5)],
            &[],
        );
        let mut h = report(
            "host",
            &[("mthp.8kB.split", 0), ("proc.main.minflt", 0)],
            &[("main/a", vec![])],
        );
        h.unavailable.insert("vmstat.pgfault".into(), "not root".into());
        h.unavailable.insert("layout".into(), "no PFNs".into());
        let c = compare(&m, &h);
        assert!(c.ok(), "{c:?}");
        assert_eq!(c.not_compared["arch.tlbi.vae1is"], "model only");
        assert_eq!(c.not_compared["mthp.8kB.split"], "not modelled");
        assert_eq!(c.not_compared["vmstat.pgfault"], "host: not root");
        assert_eq!(c.not_compared["layout"], "host: no PFNs");
        // Absent process counters count as zero faults, on either side.
        assert_eq!(c.rows.len(), 2);
        let h2 = report("host", &[("proc.child.minflt", 2)], &[]);
        assert!(!compare(&report("model", &[], &[]), &h2).ok());
    }

    #[test]
    fn validate_reports_a_failing_side_and_a_bad_workload() {
        let dir = std::env::temp_dir().join(format!("foliolab-validate-{}", std::process::id()));
        std::fs::create_dir_all(&dir).unwrap();
        let good = dir.join("good.wl");
        std::fs::write(&good, "mmap a 64K\ntouch a\n").unwrap();
        let bad = dir.join("bad.wl");
        std::fs::write(&bad, "touch a\n").unwrap();
        let paths = [good.display().to_string(), bad.display().to_string()];
        let canned = |source: &'static str| {
            move |w: &Workload| Ok(report(source, &[("proc.main.minflt", 16)], &[]).with_workload(&w.path))
        };
        let res = validate(&paths, &mut canned("model"), &mut canned("host"));
        assert!(res[0].ok(), "{:?}", res[0]);
        assert!(res[1]
            .error
            .as_ref()
            .unwrap()
            .contains("bad.wl:1:7: region 'a' is not mapped"));
        // The real model agrees on the faults; the canned host has no layout.
        let res = validate(&paths[..1], &mut *model_runner(), &mut canned("host"));
        assert!(res[0].error.is_none(), "{:?}", res[0].error);
        assert!(res[0].rows.iter().any(|r| r.counter == "proc.main.minflt" && r.ok));
        assert_eq!(res[0].layout_mismatches.len(), 1);
        assert!(table(&res[0]).ends_with("verdict: FAIL\n"));
        std::fs::remove_dir_all(&dir).unwrap();
    }

    impl Report {
        fn with_workload(mut self, path: &str) -> Report {
            self.workload = path.into();
            self
        }
    }
}
