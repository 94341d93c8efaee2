//! Reports side by side, in the style of mmtests' compare-kernels: one column per run,
//! each value after the first with its change against the first column, so what a
//! variant changes shows at a glance.

use crate::report::{Counters, Report, Run};
use std::fmt::Write;

/// Layout runs shown per region before the rest is summed up.
const SHOWN_RUNS: usize = 8;

/// A region's layout runs as a line: the first few, then how many there are.
pub fn layout_line(runs: &[Run]) -> String {
    let shown: Vec<String> = runs
        .iter()
        .take(SHOWN_RUNS)
        .map(|r| serde_json::to_string(r).expect("a run serializes"))
        .collect();
    let more = if runs.len() > SHOWN_RUNS {
        format!(" ... ({} runs)", runs.len())
    } else {
        String::new()
    };
    shown.join(" ") + &more
}

/// `value` with its change against `base`: `1234 (  -3.20%)`. A change from zero has no
/// percentage.
fn cell(value: i64, base: i64) -> String {
    let change = match pct(value, base) {
        Some(p) => format!("{p:7.2}%"),
        None if value == 0 => format!("{:7.2}%", 0.0),
        None => format!("{:>8}", "new"),
    };
    format!("{value} ({change})")
}

/// `value`'s change against `base` in percent; None from a zero base.
pub fn pct(value: i64, base: i64) -> Option<f64> {
    (base != 0).then(|| (value - base) as f64 * 100.0 / base.unsigned_abs() as f64)
}

/// A section as text: its label and, per counter, its cells.
type TextSection = (String, Vec<(String, Vec<String>)>);

/// One block of rows: the whole run's counters, or one phase's.
pub struct Section {
    pub label: String,
    /// `(counter, value per column)`.
    pub rows: Vec<(String, Vec<i64>)>,
}

/// Rows of counters, one per name in any run; a name all runs agree on is left out
/// unless `all`. A counter a run lacks counts as 0.
fn counter_rows(sets: &[&Counters], all: bool) -> Vec<(String, Vec<i64>)> {
    let mut names: Vec<&String> = sets.iter().flat_map(|c| c.keys()).collect();
    names.sort();
    names.dedup();
    names
        .into_iter()
        .filter_map(|name| {
            let values: Vec<i64> = sets.iter().map(|c| c.get(name).copied().unwrap_or(0)).collect();
            let same = values.iter().all(|&v| v == values[0]);
            (all || !same).then(|| (name.clone(), values))
        })
        .collect()
}

/// The counters, then each phase's (phases matched by position and label), that differ
/// between `columns` (all of them with `all`).
pub fn sections(columns: &[(String, Report)], all: bool) -> Vec<Section> {
    let Some((_, first)) = columns.first() else {
        return Vec::new();
    };
    let mut sections = vec![Section {
        label: "counters".to_string(),
        rows: counter_rows(&columns.iter().map(|(_, r)| &r.counters).collect::<Vec<_>>(), all),
    }];
    if first.phases.len() > 1 {
        for (i, phase) in first.phases.iter().enumerate() {
            let empty = Counters::new();
            let sets: Vec<&Counters> = columns
                .iter()
                .map(|(_, r)| {
                    r.phases
                        .get(i)
                        .filter(|p| p.label == phase.label)
                        .map_or(&empty, |p| &p.counters)
                })
                .collect();
            sections.push(Section {
                label: format!("phase {}", phase.label),
                rows: counter_rows(&sets, all),
            });
        }
    }
    sections
}

/// The comparison of `columns` (a name and a report each, the first the baseline) under
/// `title`: counters, then each phase's, that differ between the runs (every one with
/// `all`), then the layouts of the regions where they differ.
pub fn compare(title: &str, columns: &[(String, Report)], all: bool) -> String {
    let mut s = String::new();
    let _ = writeln!(s, "{title}");
    let Some((_, first)) = columns.first() else {
        return s;
    };
    let _ = writeln!(s, "{} ({})", first.workload, first.source);
    let sections: Vec<TextSection> = sections(columns, all)
        .into_iter()
        .map(|sec| {
            let rows = sec
                .rows
                .into_iter()
                .map(|(name, values)| {
                    let cells = values
                        .iter()
                        .enumerate()
                        .map(|(i, &v)| if i == 0 { v.to_string() } else { cell(v, values[0]) })
                        .collect();
                    (name, cells)
                })
                .collect();
            (sec.label, rows)
        })
        .collect();
    let name_w = sections
        .iter()
        .flat_map(|(_, rows)| rows.iter().map(|(n, _)| n.len() + 2))
        .max()
        .unwrap_or(0);
    let widths: Vec<usize> = columns
        .iter()
        .enumerate()
        .map(|(i, (name, _))| {
            sections
                .iter()
                .flat_map(|(_, rows)| rows.iter().map(move |(_, cells)| cells[i].len()))
                .chain([name.len()])
                .max()
                .unwrap_or(0)
        })
        .collect();
    let row = |s: &mut String, name: &str, cells: &[String]| {
        let _ = write!(s, "{name:<name_w$}");
        for (c, w) in cells.iter().zip(&widths) {
            let _ = write!(s, "  {c:>w$}");
        }
        s.push('\n');
    };
    let names: Vec<String> = columns.iter().map(|(n, _)| n.clone()).collect();
    s.push('\n');
    row(&mut s, "", &names);
    for (label, rows) in sections.iter().filter(|(_, rows)| !rows.is_empty()) {
        let _ = writeln!(s, "{label}:");
        for (name, cells) in rows {
            row(&mut s, &format!("  {name}"), cells);
        }
    }
    if sections.iter().all(|(_, rows)| rows.is_empty()) {
        let _ = writeln!(s, "(no counter differs)");
    }
    let mut regions: Vec<&String> = columns.iter().flat_map(|(_, r)| r.layout.keys()).collect();
    regions.sort();
    regions.dedup();
    let layouts: Vec<(&String, Vec<&[Run]>)> = regions
        .into_iter()
        .map(|k| {
            let per_run: Vec<&[Run]> = columns
                .iter()
                .map(|(_, r)| r.layout.get(k).map_or(&[][..], |v| v.as_slice()))
                .collect();
            (k, per_run)
        })
        .filter(|(_, per_run)| per_run.iter().any(|l| *l != per_run[0]))
        .collect();
    if !layouts.is_empty() {
        let _ = writeln!(s, "\nlayout where it differs ([first page, pages, order|zero|swap]):");
        let col_w = names.iter().map(|n| n.len()).max().unwrap_or(0);
        for (region, per_run) in layouts {
            let _ = writeln!(s, "  {region}:");
            for (name, runs) in names.iter().zip(per_run) {
                let _ = writeln!(s, "    {name:<col_w$}  {}", layout_line(runs));
            }
        }
    }
    s
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::report::{PageKind, Phase};

    fn report(counters: &[(&str, i64)]) -> Report {
        Report {
            source: "model".into(),
            workload: "w.wl".into(),
            counters: counters.iter().map(|&(k, v)| (k.to_string(), v)).collect(),
            ..Default::default()
        }
    }

    #[test]
    fn cells_show_the_change_against_the_first_column() {
        assert_eq!(cell(9680, 10000), "9680 (  -3.20%)");
        assert_eq!(cell(25, 10), "25 ( 150.00%)");
        assert_eq!(cell(0, 0), "0 (   0.00%)");
        assert_eq!(cell(7, 0), "7 (     new)");
        assert_eq!(cell(-5, -10), "-5 (  50.00%)");
    }

    #[test]
    fn counters_equal_in_every_run_are_hidden_unless_all() {
        let cols = vec![
            (
                "per-pte".to_string(),
                report(&[("arch.tlbi", 100), ("vmstat.pgfault", 16)]),
            ),
            (
                "batched".to_string(),
                report(&[("arch.tlbi", 25), ("vmstat.pgfault", 16)]),
            ),
        ];
        assert_eq!(
            compare("zap: how zap clears ptes", &cols, false),
            "zap: how zap clears ptes\n\
             w.wl (model)\n\
             \n\
             \x20            per-pte        batched\n\
             counters:\n\
             \x20 arch.tlbi      100  25 ( -75.00%)\n"
        );
        let all = compare("t", &cols, true);
        assert!(all.contains("  vmstat.pgfault       16  16 (   0.00%)\n"), "{all}");
    }

    #[test]
    fn phases_and_layouts_show_only_where_they_differ() {
        let mut a = report(&[]);
        let mut b = report(&[]);
        for (r, tlbi) in [(&mut a, 4), (&mut b, 2)] {
            r.phases = vec![
                Phase {
                    label: "start".into(),
                    counters: Counters::from([("arch.tlbi".to_string(), 1)]),
                    time_ns: None,
                },
                Phase {
                    label: "unmap".into(),
                    counters: Counters::from([("arch.tlbi".to_string(), tlbi)]),
                    time_ns: None,
                },
            ];
        }
        let run = |kind| Run { first: 0, n: 16, kind };
        a.layout.insert("main/a".into(), vec![run(PageKind::Order(4))]);
        b.layout.insert("main/a".into(), vec![run(PageKind::Order(0))]);
        a.layout.insert("main/b".into(), vec![run(PageKind::Zero)]);
        b.layout.insert("main/b".into(), vec![run(PageKind::Zero)]);
        let out = compare("t", &[("x".into(), a), ("y".into(), b)], false);
        assert!(!out.contains("phase start"), "{out}");
        assert!(out.contains("phase unmap:\n  arch.tlbi  4  2 ( -50.00%)\n"), "{out}");
        assert!(out.ends_with("  main/a:\n    x  [0,16,4]\n    y  [0,16,0]\n"), "{out}");
        assert!(!out.contains("main/b"), "{out}");
    }

    #[test]
    fn identical_runs_say_so() {
        let cols = vec![
            ("a".to_string(), report(&[("c", 1)])),
            ("b".to_string(), report(&[("c", 1)])),
        ];
        assert!(compare("t", &cols, false).ends_with("(no counter differs)\n"));
    }
}
