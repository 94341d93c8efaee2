//! HTML reports: one self-contained page per report (inline CSS, charts as inline SVG
//! drawn by plotters, no script), so it opens from file:// with no network. Text in
//! the SVG is left to the browser's fonts; nothing here needs a font file.

use crate::compare;
use crate::report::Report;
use crate::reproduce::{Breakdown, Reproduction, Row, Series, Verdict};
use plotters::chart::MeshStyle;
use plotters::coord::ranged1d::{AsRangedCoord, DefaultFormatting, KeyPointHint, Ranged, ValueFormatter};
use plotters::coord::types::RangedCoordf64;
use plotters::prelude::*;
use serde_json::Value;
use std::collections::BTreeMap;
use std::fmt::Write;
use std::path::{Path, PathBuf};

/// The seed's figures and the model's, in the same colours in every table and chart.
const SEED: RGBColor = RGBColor(0x4e, 0x79, 0xa7);
const MODEL: RGBColor = RGBColor(0xf2, 0x8e, 0x2b);
/// Everything else (runs, events, curves); none of it blue or orange, so a colour
/// never reads as seed or model where it is not.
const PALETTE: [RGBColor; 8] = [
    RGBColor(0x59, 0xa1, 0x4f),
    RGBColor(0xb0, 0x7a, 0xa1),
    RGBColor(0x76, 0xb7, 0xb2),
    RGBColor(0xed, 0xc9, 0x48),
    RGBColor(0xe1, 0x57, 0x59),
    RGBColor(0x9c, 0x75, 0x5f),
    RGBColor(0xff, 0x9d, 0xa7),
    RGBColor(0x3b, 0x4f, 0x6b),
];
const OTHER: RGBColor = RGBColor(0xba, 0xb0, 0xac);
/// Events in a stacked bar before the rest is summed as "other".
const TOP_EVENTS: usize = 8;
/// Notes per seed shown unfolded.
const MAX_OPEN_NOTES: usize = 8;
/// Counters in `run`'s change chart.
const TOP_COUNTERS: usize = 12;
/// Two charts side by side on a 1280-pixel screen.
const CHART_W: u32 = 540;
const FONT: &str = "sans-serif";

type Drawn = Result<String, Box<dyn std::error::Error>>;

const CSS: &str = r#"
body { font: 15px/1.45 system-ui, "Liberation Sans", "DejaVu Sans", sans-serif; color: #222;
  margin: 0 auto; max-width: 1180px; padding: 1.5em 2em 4em; background: #fafafa; }
h1 { font-size: 1.6em; margin: 0 0 .2em; }
h2 { font-size: 1.3em; margin: 2em 0 .5em; padding-bottom: .2em; border-bottom: 2px solid #ddd; }
h3 { font-size: 1.05em; margin: 1.4em 0 .4em; }
.sub { color: #666; margin: 0 0 1em; }
table { border-collapse: collapse; margin: .4em 0 1em; background: #fff; font-variant-numeric: tabular-nums; }
th, td { padding: .25em .55em; border: 1px solid #e2e2e2; }
/* A seed with many machines scrolls sideways instead of spilling out of the page. */
table.seedtable { display: block; overflow-x: auto; width: max-content; max-width: 100%; }
thead th { background: #f0f0f0; font-weight: 600; }
tbody th { text-align: left; font-weight: 500; white-space: nowrap; }
td { text-align: right; white-space: nowrap; }
tbody tr:nth-child(even) { background: #f8f8f8; }
td.seed, th.seed { box-shadow: inset 3px 0 0 #4e79a7; }
td.model, th.model { box-shadow: inset 3px 0 0 #f28e2b; }
td.agree { color: #2e7d32; text-align: center; } td.disagree { color: #c62828; text-align: center; font-weight: 700; }
td.na { color: #999; text-align: center; }
.sd, .chg { color: #777; font-size: .88em; }
tr.section th { background: #eef2f7; text-align: left; }
.charts { display: flex; flex-wrap: wrap; gap: 1em; align-items: flex-start; }
figure.chart { margin: 0; background: #fff; border: 1px solid #e2e2e2; border-radius: 6px; padding: .6em .8em; max-width: 100%; }
figure.chart svg { display: block; max-width: 100%; height: auto; }
figcaption { font-weight: 600; margin-bottom: .3em; }
.legend { display: flex; flex-wrap: wrap; gap: .3em 1.1em; font-size: .9em; margin: .2em 0 .4em; }
.sw { display: inline-block; width: .9em; height: .9em; border-radius: 2px; margin-right: .35em; vertical-align: -.1em; }
summary { cursor: pointer; color: #555; margin: .4em 0; }
ul.notes { background: #fff8e1; border-left: 4px solid #edc948; padding: .5em 1em .5em 2em; }
.error { color: #c62828; }
"#;

/// `s` safe inside HTML text and attribute values.
fn esc(s: &str) -> String {
    s.replace('&', "&amp;")
        .replace('<', "&lt;")
        .replace('>', "&gt;")
        .replace('"', "&quot;")
}

fn css_color(c: RGBColor) -> String {
    format!("#{:02x}{:02x}{:02x}", c.0, c.1, c.2)
}

/// A number for a table: integers grouped by thousands, else up to three significant
/// digits.
pub(crate) fn num(v: f64) -> String {
    if v.fract() == 0.0 && v.abs() < 1e15 {
        let digits = format!("{}", v.abs() as u64);
        let mut grouped = String::new();
        for (i, c) in digits.chars().enumerate() {
            if i > 0 && (digits.len() - i) % 3 == 0 {
                grouped.push(',');
            }
            grouped.push(c);
        }
        return if v < 0.0 { format!("−{grouped}") } else { grouped };
    }
    let decimals = (2 - v.abs().log10().floor() as i32).clamp(0, 6) as usize;
    let s = format!("{v:.decimals$}");
    let s = if s.contains('.') {
        s.trim_end_matches('0').trim_end_matches('.')
    } else {
        &s
    };
    s.replace('-', "−")
}

/// A change in percent (or percentage points), signed.
fn signed_pct(p: f64, unit: &str) -> String {
    let s = format!("{p:+.1}{unit}");
    s.replace('-', "−")
}

/// A chart legend as HTML (readable at any zoom, never over the bars).
fn legend(items: &[(String, RGBColor)]) -> String {
    let mut s = String::from("<div class=\"legend\">");
    for (name, c) in items {
        let _ = write!(
            s,
            "<span><span class=\"sw\" style=\"background:{}\"></span>{}</span>",
            css_color(*c),
            esc(name)
        );
    }
    s + "</div>"
}

/// A page under construction: its body and how many charts it has (their ids).
struct Page {
    body: String,
    charts: usize,
}

impl Page {
    fn new() -> Page {
        Page {
            body: String::new(),
            charts: 0,
        }
    }

    /// A chart as a figure with id `chart-N` and class `chart KIND`, the count a test
    /// checks; a chart that could not be drawn says why in its place.
    fn chart(&mut self, kind: &str, caption: &str, legend_items: &[(String, RGBColor)], svg: Drawn) {
        self.charts += 1;
        let svg = svg.unwrap_or_else(|e| format!("<p class=\"error\">chart not drawn: {}</p>", esc(&e.to_string())));
        let _ = writeln!(
            self.body,
            "<figure class=\"chart {kind}\" id=\"chart-{}\"><figcaption>{}</figcaption>{}{svg}</figure>",
            self.charts,
            esc(caption),
            legend(legend_items)
        );
    }

    fn finish(self, title: &str) -> String {
        format!(
            "<!DOCTYPE html>\n<html lang=\"en\"><head><meta charset=\"utf-8\">\
             <meta name=\"viewport\" content=\"width=device-width, initial-scale=1\">\
             <title>{}</title><style>{CSS}</style></head>\n<body>\n{}</body></html>\n",
            esc(title),
            self.body
        )
    }
}

/// One series of a bar chart: its name, colour, and a value per category (None: no bar).
struct Bars {
    name: String,
    color: RGBColor,
    values: Vec<Option<f64>>,
}

/// An axis labelled at given values only: the category rows of a bar chart (category i
/// sits at y = n - 1 - i .. n - i, labelled in the middle), or a log axis at the data's
/// own x values (RAM sizes) rather than at powers of ten.
struct Ticks<R>(R, Vec<f64>);

impl<R: Ranged<ValueType = f64>> Ranged for Ticks<R> {
    type FormatOption = DefaultFormatting;
    type ValueType = f64;

    fn map(&self, v: &f64, limit: (i32, i32)) -> i32 {
        self.0.map(v, limit)
    }

    fn key_points<H: KeyPointHint>(&self, _: H) -> Vec<f64> {
        self.1.clone()
    }

    fn range(&self) -> std::ops::Range<f64> {
        self.0.range()
    }
}

/// `lo..hi` covering `values` and 0, with a margin so no bar touches the frame.
fn padded(values: impl Iterator<Item = f64>) -> std::ops::Range<f64> {
    let (lo, hi) = values.fold((0.0f64, 0.0f64), |(lo, hi), v| (lo.min(v), hi.max(v)));
    let pad = ((hi - lo) * 0.08).max(1e-9);
    (if lo < 0.0 { lo - pad } else { 0.0 })..(if hi > 0.0 { hi + pad } else { pad })
}

/// Room for the longest category name left of a horizontal bar chart, in pixels.
fn label_room(categories: &[String]) -> u32 {
    categories.iter().map(|c| c.chars().count()).max().unwrap_or(0) as u32 * 8 + 20
}

/// Horizontal bars, one row per category (first at the top): side by side per group
/// when `stacked` is false, else stacked left to right.
fn bar_chart(categories: &[String], groups: &[Bars], x_label: &str, stacked: bool) -> Drawn {
    let n = categories.len();
    let per_row = if stacked { 1 } else { groups.len().max(1) };
    let height = 70 + n as u32 * (per_row as u32 * 14 + 14);
    let totals: Vec<f64> = (0..n)
        .map(|i| groups.iter().filter_map(|g| g.values[i]).sum())
        .collect();
    let range = if stacked {
        padded(totals.iter().copied())
    } else {
        padded(groups.iter().flat_map(|g| g.values.iter().flatten().copied()))
    };
    let mut svg = String::new();
    {
        // Long category names widen the chart rather than squeeze its bars.
        let width = CHART_W.max(label_room(categories) + 340);
        let root = SVGBackend::with_string(&mut svg, (width, height)).into_drawing_area();
        root.fill(&WHITE)?;
        let y = Ticks(
            RangedCoordf64::from(0.0..n as f64),
            (0..n).map(|i| i as f64 + 0.5).collect(),
        );
        let mut chart = ChartBuilder::on(&root)
            .margin(10)
            .x_label_area_size(42)
            .y_label_area_size(label_room(categories))
            .build_cartesian_2d(range.clone(), y)?;
        let label_of = |v: &f64| {
            let i = n as f64 - 1.0 - v.floor();
            categories.get(i as usize).cloned().unwrap_or_default()
        };
        house_style(&mut chart.configure_mesh())
            .disable_y_mesh()
            .y_labels(n)
            .y_label_formatter(&label_of)
            .x_labels(6)
            .x_desc(x_label)
            .x_label_formatter(&|v| num(*v))
            .draw()?;
        let slot = 0.8 / per_row as f64;
        let mut stack = vec![0.0; n];
        for (g, bars) in groups.iter().enumerate() {
            let rects = bars.values.iter().enumerate().filter_map(|(i, v)| {
                let v = (*v)?;
                let top = (n - i) as f64 - 0.1 - if stacked { 0.0 } else { g as f64 * slot };
                let from = if stacked { stack[i] } else { 0.0 };
                if stacked {
                    stack[i] += v;
                }
                Some(Rectangle::new(
                    [(from, top - slot), (from + v, top)],
                    bars.color.filled(),
                ))
            });
            chart.draw_series(rects.collect::<Vec<_>>())?;
        }
        chart.draw_series(std::iter::once(PathElement::new(
            vec![(0.0, 0.0), (0.0, n as f64)],
            BLACK.stroke_width(1),
        )))?;
        root.present()?;
    }
    Ok(svg)
}

/// Curves of `(x, y)` points on a log x axis when every x is positive and they span a
/// decade (RAM sizes), else a linear one.
fn line_chart(series: &[&Series], colors: &[RGBColor]) -> Drawn {
    let xs = || series.iter().flat_map(|s| s.points.iter().map(|p| p.0));
    let (x_lo, x_hi) = xs().fold((f64::MAX, f64::MIN), |(lo, hi), x| (lo.min(x), hi.max(x)));
    let y = padded(series.iter().flat_map(|s| s.points.iter().map(|p| p.1)));
    if x_lo > 0.0 && x_hi >= 10.0 * x_lo {
        let mut ticks: Vec<f64> = xs().collect();
        ticks.sort_by(f64::total_cmp);
        ticks.dedup();
        let log = (x_lo / 1.3..x_hi * 1.3).log_scale().into();
        draw_lines(series, colors, Ticks::<LogCoord<f64>>(log, ticks), y)
    } else {
        draw_lines(series, colors, padded(xs()), y)
    }
}

fn draw_lines<X>(series: &[&Series], colors: &[RGBColor], x: X, y: std::ops::Range<f64>) -> Drawn
where
    X: AsRangedCoord<Value = f64>,
    X::CoordDescType: ValueFormatter<f64>,
{
    let first = series.first().ok_or("no series")?;
    let mut svg = String::new();
    {
        let root = SVGBackend::with_string(&mut svg, (CHART_W, 380)).into_drawing_area();
        root.fill(&WHITE)?;
        let mut chart = ChartBuilder::on(&root)
            .margin(14)
            .x_label_area_size(46)
            .y_label_area_size(70)
            .build_cartesian_2d(x, y)?;
        house_style(&mut chart.configure_mesh())
            .x_desc(first.x_label.as_str())
            .y_desc(first.y_label.as_str())
            .x_label_formatter(&|v| num(*v))
            .y_label_formatter(&|v| num(*v))
            .draw()?;
        for (s, &c) in series.iter().zip(colors) {
            chart.draw_series(std::iter::once(PathElement::new(s.points.clone(), c.stroke_width(2))))?;
            chart.draw_series(s.points.iter().map(|&p| Circle::new(p, 4, c.filled())))?;
        }
        root.present()?;
    }
    Ok(svg)
}

/// The fonts and grid of every chart's axes.
fn house_style<'m, 'a, 'b, X, Y, DB>(m: &'m mut MeshStyle<'a, 'b, X, Y, DB>) -> &'m mut MeshStyle<'a, 'b, X, Y, DB>
where
    X: Ranged,
    Y: Ranged,
    DB: DrawingBackend,
{
    m.label_style((FONT, 15))
        .axis_desc_style((FONT, 16))
        .light_line_style(TRANSPARENT)
        .bold_line_style(RGBColor(0xe4, 0xe4, 0xe4))
}

/// A time unit for nanosecond values up to `max_ns`: its name and size in ns.
fn time_unit(max_ns: f64) -> (&'static str, f64) {
    match max_ns {
        x if x >= 1e9 => ("s", 1e9),
        x if x >= 1e6 => ("ms", 1e6),
        x if x >= 1e3 => ("µs", 1e3),
        _ => ("ns", 1.0),
    }
}

/// Events by their total time over `maps`, largest first: the first TOP_EVENTS get a
/// colour each, by rank, in every chart drawn from the same ranking.
fn ranked_events<'a>(maps: impl Iterator<Item = &'a BTreeMap<String, f64>>) -> Vec<&'a str> {
    let mut totals: BTreeMap<&str, f64> = BTreeMap::new();
    for by_event in maps {
        for (e, ns) in by_event {
            *totals.entry(e).or_default() += ns;
        }
    }
    let mut events: Vec<(&str, f64)> = totals.into_iter().collect();
    events.sort_by(|a, b| b.1.total_cmp(&a.1).then(a.0.cmp(b.0)));
    events.into_iter().map(|e| e.0).collect()
}

/// A stacked bar per `(label, event -> ns)`: the top events of `ranked` in their
/// colours, the rest as "other"; each bar labelled with its total.
fn time_breakdown(page: &mut Page, caption: &str, bars: &[(String, &BTreeMap<String, f64>)], ranked: &[&str]) {
    let top = &ranked[..ranked.len().min(TOP_EVENTS)];
    let max = bars.iter().map(|(_, b)| b.values().sum::<f64>()).fold(0.0, f64::max);
    let (unit, scale) = time_unit(max);
    let mut groups: Vec<Bars> = top
        .iter()
        .zip(PALETTE)
        .map(|(e, color)| Bars {
            name: e.to_string(),
            color,
            values: bars.iter().map(|(_, b)| b.get(*e).map(|ns| ns / scale)).collect(),
        })
        .collect();
    groups.push(Bars {
        name: "other".into(),
        color: OTHER,
        values: bars
            .iter()
            .map(|(_, b)| {
                let rest = b.iter().filter(|(e, _)| !top.contains(&e.as_str()));
                Some(rest.map(|(_, ns)| ns / scale).sum())
            })
            .collect(),
    });
    // An event none of these bars has takes no room in the legend.
    groups.retain(|g| g.values.iter().flatten().any(|v| *v != 0.0));
    let labels: Vec<String> = bars
        .iter()
        .map(|(l, b)| format!("{l} ({} {unit})", num(b.values().sum::<f64>() / scale)))
        .collect();
    let items: Vec<(String, RGBColor)> = groups.iter().map(|g| (g.name.clone(), g.color)).collect();
    let svg = bar_chart(&labels, &groups, &format!("modeled time ({unit})"), true);
    page.chart("stacked", caption, &items, svg);
}

fn seed_model_legend() -> Vec<(String, RGBColor)> {
    vec![("seed (published)".into(), SEED), ("model".into(), MODEL)]
}

/// `items` in order of first appearance, once each.
fn firsts<'a>(items: impl Iterator<Item = &'a str>) -> Vec<&'a str> {
    let mut out: Vec<&str> = Vec::new();
    for i in items {
        if !out.contains(&i) {
            out.push(i);
        }
    }
    out
}

fn is_percent(unit: &str) -> bool {
    unit.trim_start().starts_with('%')
}

/// A value's change against its baseline's: in percent, or for a figure that already
/// is a percent, the difference in points.
fn change(value: f64, base: f64, unit: &str) -> Option<f64> {
    if is_percent(unit) {
        Some(value - base)
    } else {
        (base != 0.0).then(|| (value - base) * 100.0 / base.abs())
    }
}

/// One experiment of one seed: its rows, machines and variants in the seed's order,
/// the first variant the baseline.
struct Experiment<'a> {
    name: &'a str,
    rows: Vec<&'a Row>,
    machines: Vec<&'a str>,
    variants: Vec<&'a str>,
}

impl<'a> Experiment<'a> {
    fn of(seed: &str, rows: &'a [Row]) -> Vec<Experiment<'a>> {
        let mine: Vec<&Row> = rows.iter().filter(|r| r.seed == seed).collect();
        firsts(mine.iter().map(|r| r.experiment.as_str()))
            .into_iter()
            .map(|name| {
                let rows: Vec<&Row> = mine.iter().copied().filter(|r| r.experiment == name).collect();
                Experiment {
                    name,
                    machines: firsts(rows.iter().map(|r| r.machine.as_str())),
                    variants: firsts(rows.iter().map(|r| r.variant.as_str())),
                    rows,
                }
            })
            .collect()
    }

    fn row(&self, machine: &str, variant: &str) -> Option<&'a Row> {
        self.rows
            .iter()
            .copied()
            .find(|r| r.machine == machine && r.variant == variant)
    }

    /// The seed's change and the model's for `row` against its machine's baseline.
    fn changes(&self, row: &Row) -> (Option<f64>, Option<f64>) {
        if row.baseline.is_some() {
            // Already changes: in percent they chart as they are; others have no percent.
            return match is_percent(&row.unit) {
                true => (Some(row.seed_value), row.model_value),
                false => (None, None),
            };
        }
        let base = self.row(&row.machine, self.variants[0]);
        let seed = base.and_then(|b| change(row.seed_value, b.seed_value, &row.unit));
        let model = base
            .and_then(|b| Some((row.model_value?, b.model_value?)))
            .and_then(|(v, b)| change(v, b, &row.unit));
        (seed, model)
    }

    /// The table in the seed's shape: a row per variant, a column group per machine
    /// with the seed's figure and the model's (and their changes where the unit is not
    /// already a percent), and whether the signs agree.
    fn table(&self) -> String {
        let deltas = self.rows.iter().any(|r| r.baseline.is_none() && !is_percent(&r.unit));
        let span = if deltas { 5 } else { 3 };
        // One unit for the whole table goes in its header, not in every cell.
        let units = firsts(self.rows.iter().map(|r| r.unit.as_str()));
        let shared = match units[..] {
            [u] if !is_percent(u) => format!(" ({})", esc(u)),
            _ => String::new(),
        };
        let mut s = String::from("<table class=\"seedtable\"><thead><tr><th rowspan=\"2\">variant</th>");
        for m in &self.machines {
            let _ = write!(s, "<th colspan=\"{span}\">{}</th>", esc(m));
        }
        s.push_str("</tr><tr>");
        for _ in &self.machines {
            let _ = write!(
                s,
                "<th class=\"seed\">seed{shared}</th><th class=\"model\">model{shared}</th>"
            );
            if deltas {
                s.push_str("<th class=\"seed\">seed Δ</th><th class=\"model\">model Δ</th>");
            }
            s.push_str("<th>verdict</th>");
        }
        s.push_str("</tr></thead><tbody>");
        for (vi, v) in self.variants.iter().enumerate() {
            let _ = write!(
                s,
                "<tr><th>{}{}</th>",
                esc(v),
                if vi == 0 && !v.contains("baseline") && self.rows.iter().all(|r| r.baseline.is_none()) {
                    " <span class=\"sd\">(baseline)</span>"
                } else {
                    ""
                }
            );
            for m in &self.machines {
                let Some(r) = self.row(m, v) else {
                    let _ = write!(s, "<td colspan=\"{span}\" class=\"na\">—</td>");
                    continue;
                };
                let value = |x: f64| match () {
                    _ if is_percent(&r.unit) => format!("{}%", num(x)),
                    _ if shared.is_empty() => format!("{} {}", num(x), esc(&r.unit)),
                    _ => num(x),
                };
                let sd = r
                    .seed_stdev
                    .map_or(String::new(), |d| format!(" <span class=\"sd\">± {}</span>", num(d)));
                let _ = write!(s, "<td class=\"seed\">{}{sd}</td>", value(r.seed_value));
                match r.model_value {
                    Some(x) => {
                        let _ = write!(s, "<td class=\"model\">{}</td>", value(x));
                    }
                    None => {
                        s.push_str("<td class=\"model na\" title=\"the model has no figure (see the notes)\">n/a</td>")
                    }
                }
                if deltas {
                    let (seed, model) = self.changes(r);
                    for (class, c) in [("seed", seed), ("model", model)] {
                        let text = match (vi, c) {
                            (0, _) => String::new(),
                            (_, Some(p)) if is_percent(&r.unit) => signed_pct(p, " pts"),
                            (_, Some(p)) => signed_pct(p, "%"),
                            (_, None) => "n/a".into(),
                        };
                        let _ = write!(s, "<td class=\"{class} chg\">{text}</td>");
                    }
                }
                let class = match r.verdict {
                    Verdict::Agrees | Verdict::Noise => "agree",
                    Verdict::Disagrees => "disagree",
                    Verdict::NotModeled => "na",
                };
                let _ = write!(
                    s,
                    "<td class=\"{class}\" title=\"{}\">{}</td>",
                    esc(r.reason.as_deref().unwrap_or("")),
                    r.verdict.name()
                );
            }
            s.push_str("</tr>");
        }
        s + "</tbody></table>\n"
    }
}

/// The changes of one machine's rows in `exps` against their baselines, seed beside
/// model (in points for a figure that is a percent, as the tables give them).
/// Categories where neither changes are left out.
fn change_chart(page: &mut Page, seed: &str, machine: &str, exps: &[Experiment]) {
    let mut cats = Vec::new();
    let (mut seeds, mut models) = (Vec::new(), Vec::new());
    for e in exps {
        // A change-only table has no baseline row: every variant is a change.
        let first = usize::from(e.rows.iter().all(|r| r.baseline.is_none()));
        for v in &e.variants[first..] {
            let Some(r) = e.row(machine, v) else { continue };
            let (s, m) = e.changes(r);
            if s.unwrap_or(0.0) == 0.0 && m.unwrap_or(0.0) == 0.0 {
                continue;
            }
            // Name only what tells the bars apart.
            cats.push(match (exps.len(), e.variants.len()) {
                (1, _) => v.to_string(),
                (_, 2) => e.name.to_string(),
                _ => format!("{}: {v}", e.name),
            });
            seeds.push(s);
            models.push(m);
        }
    }
    if cats.is_empty() {
        return;
    }
    let groups = [
        Bars {
            name: "seed".into(),
            color: SEED,
            values: seeds,
        },
        Bars {
            name: "model".into(),
            color: MODEL,
            values: models,
        },
    ];
    let svg = bar_chart(
        &cats,
        &groups,
        "change against the baseline (%, or pts for a figure in %)",
        false,
    );
    page.chart(
        "changes",
        &format!("seed {seed}, {machine}: change against the baseline"),
        &seed_model_legend(),
        svg,
    );
}

/// The `reproduce` page: per seed, each experiment's table, the changes seed against
/// model per machine, modeled time by event per variant, the seed's curves, its notes.
pub fn reproduce_page(r: &Reproduction) -> String {
    let mut page = Page::new();
    let mut seeds: Vec<&str> = r
        .rows
        .iter()
        .map(|x| x.seed.as_str())
        .chain(r.breakdowns.iter().map(|b| b.seed.as_str()))
        .chain(r.series.iter().map(|s| s.seed.as_str()))
        .chain(r.per_page.iter().map(|p| p.seed.as_str()))
        .chain(r.notes.keys().map(String::as_str))
        .collect();
    seeds.sort();
    seeds.dedup();
    let counts: Vec<String> = Verdict::ALL
        .iter()
        .map(|v| format!("{} {}", r.summary.counts.get(v.name()).copied().unwrap_or(0), v.name()))
        .collect();
    let _ = writeln!(
        page.body,
        "<h1>foliolab reproduce</h1><p class=\"sub\">{} seeds, {} published figures: {}; {:.1} s.</p>{}",
        seeds.len(),
        r.rows.len(),
        counts.join(", "),
        r.elapsed_s,
        legend(&seed_model_legend())
    );
    if !r.summary.disagrees.is_empty() {
        page.body.push_str("<ul class=\"notes\">");
        for d in &r.summary.disagrees {
            let _ = write!(page.body, "<li>disagrees: {}</li>", esc(d));
        }
        page.body.push_str("</ul>\n");
    }
    for seed in seeds {
        let _ = writeln!(page.body, "<section id=\"seed-{0}\"><h2>seed {0}</h2>", esc(seed));
        if let Some(notes) = r.notes.get(seed).filter(|n| !n.is_empty()) {
            // A long list (one refused cost per line) folds away behind its count.
            let long = notes.len() > MAX_OPEN_NOTES;
            if long {
                let _ = write!(page.body, "<details><summary>{} notes</summary>", notes.len());
            }
            page.body.push_str("<ul class=\"notes\">");
            for n in notes {
                let _ = write!(page.body, "<li>{}</li>", esc(n));
            }
            page.body.push_str(if long { "</ul></details>\n" } else { "</ul>\n" });
        }
        let exps = Experiment::of(seed, &r.rows);
        for e in &exps {
            let _ = writeln!(page.body, "<h3>{}</h3>{}", esc(e.name), e.table());
        }
        per_page_tables(&mut page, seed, &r.per_page);
        page.body.push_str("<div class=\"charts\">");
        for machine in firsts(exps.iter().flat_map(|e| e.machines.iter().copied())) {
            change_chart(&mut page, seed, machine, &exps);
        }
        // One chart per experiment, a bar per machine and variant, event colours the
        // same throughout the seed.
        let mine: Vec<&Breakdown> = r.breakdowns.iter().filter(|b| b.seed == seed).collect();
        let ranked = ranked_events(mine.iter().map(|b| &b.by_event_ns));
        for exp in firsts(mine.iter().map(|b| b.experiment.as_str())) {
            let of_exp: Vec<&&Breakdown> = mine.iter().filter(|b| b.experiment == exp).collect();
            let one_machine = firsts(of_exp.iter().map(|b| b.machine.as_str())).len() == 1;
            let bars: Vec<(String, &BTreeMap<String, f64>)> = of_exp
                .iter()
                .map(|b| {
                    let label = if one_machine {
                        b.variant.clone()
                    } else {
                        format!("{} · {}", b.machine, b.variant)
                    };
                    (label, &b.by_event_ns)
                })
                .collect();
            time_breakdown(&mut page, &format!("{exp}: modeled time by event"), &bars, &ranked);
        }
        let curves: Vec<&Series> = r.series.iter().filter(|s| s.seed == seed).collect();
        if !curves.is_empty() {
            let colors = series_colors(&curves);
            let items: Vec<(String, RGBColor)> = curves
                .iter()
                .map(|s| s.name.clone())
                .zip(colors.iter().copied())
                .collect();
            let caption = format!("seed {seed}: {} against {}", curves[0].y_label, curves[0].x_label);
            page.chart("series", &caption, &items, line_chart(&curves, &colors));
        }
        page.body.push_str("</div></section>\n");
    }
    page.finish("foliolab reproduce")
}

/// Seed 001's per-page figures: a table per experiment, a row per flavour, machine
/// size and variant.
fn per_page_tables(page: &mut Page, seed: &str, rows: &[crate::reproduce::PerPage]) {
    let mine: Vec<&crate::reproduce::PerPage> = rows.iter().filter(|p| p.seed == seed).collect();
    for exp in firsts(mine.iter().map(|p| p.experiment.as_str())) {
        let _ = write!(
            page.body,
            "<h3>per page, {}</h3><table><tr><th>flavour</th><th>CPUs</th><th>variant</th><th>TLBIs</th><th>IPIs</th><th>waits</th><th>flushes</th><th>flush ns</th><th>costed on</th></tr>",
            esc(exp)
        );
        for p in mine.iter().filter(|p| p.experiment == exp) {
            let ns = p.flush_ns.map_or("n/a".to_string(), |v| format!("{v:.1}"));
            let _ = write!(
                page.body,
                "<tr><td>{}</td><td>{}</td><td>{}</td><td>{:.3}</td><td>{:.3}</td><td>{:.3}</td><td>{:.3}</td><td>{ns}</td><td>{}</td></tr>",
                esc(&p.flavour),
                p.cpus,
                esc(&p.variant),
                p.tlbi,
                p.ipi,
                p.waits,
                p.flushes,
                esc(&p.machine)
            );
        }
        page.body.push_str("</table>\n");
    }
}

/// A curve named for the seed or the model takes their colour, darker for each further
/// curve of the same; any other a colour of its own.
fn series_colors(curves: &[&Series]) -> Vec<RGBColor> {
    let (mut seen_seed, mut seen_model, mut others) = (0, 0, PALETTE.iter().cycle());
    curves
        .iter()
        .map(|s| {
            let lower = s.name.to_lowercase();
            let (base, seen) = if lower.contains("seed") {
                (SEED, &mut seen_seed)
            } else if lower.contains("model") {
                (MODEL, &mut seen_model)
            } else {
                return *others.next().expect("the palette cycles");
            };
            let k = 1.0 - 0.3 * (*seen % 3) as f64;
            *seen += 1;
            let shade = |c: u8| (c as f64 * k) as u8;
            RGBColor(shade(base.0), shade(base.1), shade(base.2))
        })
        .collect()
}

/// The `run --html` page: the largest changes as a chart and modeled time by event for
/// the runs that have it, then the runs side by side (a single run's non-zero counters,
/// else those that differ, each with its change against the first run) (`time[i]` is run
/// i's `time` object from `crate::time::annotate`).
pub fn run_page(runs: &[(String, Report)], time: &[Option<Value>]) -> String {
    let mut page = Page::new();
    let Some((_, first)) = runs.first() else {
        return page.finish("foliolab run");
    };
    let title = format!("foliolab run: {}", first.workload);
    let names: Vec<&str> = runs.iter().map(|(n, _)| n.as_str()).collect();
    let _ = writeln!(
        page.body,
        "<h1>{}</h1><p class=\"sub\">{} ({}); {} run{}: {}</p>",
        esc(&title),
        esc(&first.workload),
        esc(&first.source),
        runs.len(),
        if runs.len() == 1 { "" } else { "s" },
        esc(&names.join(", "))
    );
    // One run differs from nothing: show what it counted.
    let mut sections = compare::sections(runs, runs.len() == 1);
    if runs.len() == 1 {
        for sec in &mut sections {
            sec.rows.retain(|(_, v)| v[0] != 0);
        }
    }
    let mut t = String::from("<table class=\"runtable\"><thead><tr><th>counter</th>");
    for n in &names {
        let _ = write!(t, "<th>{}</th>", esc(n));
    }
    t.push_str("</tr></thead><tbody>");
    for sec in sections.iter().filter(|s| !s.rows.is_empty()) {
        let _ = write!(
            t,
            "<tr class=\"section\"><th colspan=\"{}\">{}</th></tr>",
            runs.len() + 1,
            esc(&sec.label)
        );
        for (name, values) in &sec.rows {
            let _ = write!(t, "<tr><th>{}</th>", esc(name));
            for (i, &v) in values.iter().enumerate() {
                let chg = match compare::pct(v, values[0]) {
                    _ if i == 0 => String::new(),
                    Some(p) => format!(" <span class=\"chg\">({})</span>", signed_pct(p, "%")),
                    None if v == 0 => String::new(),
                    None => " <span class=\"chg\">(new)</span>".into(),
                };
                let _ = write!(t, "<td>{}{chg}</td>", num(v as f64));
            }
            t.push_str("</tr>");
        }
    }
    t.push_str("</tbody></table>\n");
    if sections.iter().all(|s| s.rows.is_empty()) {
        t = "<p>No counter differs between the runs.</p>\n".into();
    }
    page.body.push_str("<div class=\"charts\">");
    if runs.len() > 1 {
        // The whole run's counters with the largest change in any run.
        let mut rows: Vec<(&String, Vec<Option<f64>>)> = sections[0]
            .rows
            .iter()
            .map(|(name, v)| (name, v[1..].iter().map(|&x| compare::pct(x, v[0])).collect()))
            .collect();
        let biggest = |c: &[Option<f64>]| c.iter().flatten().fold(0.0f64, |m, p| m.max(p.abs()));
        rows.retain(|(_, c)| biggest(c) > 0.0);
        rows.sort_by(|a, b| biggest(&b.1).total_cmp(&biggest(&a.1)));
        rows.truncate(TOP_COUNTERS);
        if !rows.is_empty() {
            let cats: Vec<String> = rows.iter().map(|(n, _)| n.to_string()).collect();
            let groups: Vec<Bars> = names[1..]
                .iter()
                .zip(PALETTE.iter().cycle())
                .enumerate()
                .map(|(i, (n, &color))| Bars {
                    name: n.to_string(),
                    color,
                    values: rows.iter().map(|(_, c)| c[i]).collect(),
                })
                .collect();
            let items: Vec<(String, RGBColor)> = groups.iter().map(|g| (g.name.clone(), g.color)).collect();
            let svg = bar_chart(&cats, &groups, &format!("change against {} (%)", names[0]), false);
            page.chart("changes", "the counters that change most", &items, svg);
        }
    }
    let timed: Vec<(String, BTreeMap<String, f64>)> = runs
        .iter()
        .zip(time)
        .filter_map(|((name, _), t)| {
            let by_event = t.as_ref()?.get("by_event")?.as_object()?;
            Some((
                name.clone(),
                by_event
                    .iter()
                    .filter_map(|(k, v)| Some((k.clone(), v.as_f64()?)))
                    .collect(),
            ))
        })
        .collect();
    if !timed.is_empty() {
        let machine = time
            .iter()
            .flatten()
            .find_map(|t| t.get("machine")?.as_str())
            .unwrap_or("?");
        let bars: Vec<(String, &BTreeMap<String, f64>)> = timed.iter().map(|(n, b)| (n.clone(), b)).collect();
        let ranked = ranked_events(bars.iter().map(|(_, b)| *b));
        time_breakdown(
            &mut page,
            &format!("modeled time by event on {machine}"),
            &bars,
            &ranked,
        );
    }
    page.body.push_str("</div>");
    // Counted events the machine has no cost for are not in the time; say which.
    let uncosted = firsts(
        time.iter()
            .flatten()
            .filter_map(|t| t.get("uncosted")?.as_array())
            .flatten()
            .filter_map(Value::as_str),
    );
    if !uncosted.is_empty() {
        let _ = writeln!(
            page.body,
            "<p class=\"sub\">Counted but not in the modeled time (no public cost): {}</p>",
            esc(&uncosted.join(", "))
        );
    }
    let _ = writeln!(page.body, "<h2>counters</h2>{t}");
    page.finish(&title)
}

/// Writes `html` to `dir/index.html`, creating `dir`; returns the file's path.
pub fn write_page(dir: &Path, html: &str) -> Result<PathBuf, String> {
    std::fs::create_dir_all(dir).map_err(|e| format!("{}: {e}", dir.display()))?;
    let path = dir.join("index.html");
    std::fs::write(&path, html).map_err(|e| format!("{}: {e}", path.display()))?;
    Ok(path)
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn numbers_read_well() {
        assert_eq!(num(37912436160.0), "37,912,436,160");
        assert_eq!(num(-1654.0), "−1,654");
        assert_eq!(num(9.6), "9.6");
        assert_eq!(num(-0.2), "−0.2");
        assert_eq!(num(0.123456), "0.123");
        assert_eq!(signed_pct(-11.04, "%"), "−11.0%");
    }

    #[test]
    fn changes_are_relative_except_for_percent_figures() {
        assert_eq!(change(10.0, 11.0, "ms").map(|p| (p * 10.0).round()), Some(-91.0));
        assert_eq!(change(-9.6, 0.0, "%"), Some(-9.6));
        assert_eq!(change(1.0, 0.0, "ms"), None);
    }

    #[test]
    fn text_is_escaped() {
        let r = Reproduction {
            notes: BTreeMap::from([("000".into(), vec!["<b>&".into()])]),
            ..Default::default()
        };
        let page = reproduce_page(&r);
        assert!(page.contains("&lt;b&gt;&amp;"), "{page}");
        assert!(!page.contains("<b>&"));
    }
}
