//! The HTML reports in a real browser: headless Chromium opens a generated page from
//! disk (file://, so nothing may come from the network), its DOM must hold every chart
//! with drawn marks, and its screenshot must show them. Without `chromium` on PATH the
//! browser half prints SKIP; the page itself is still checked.

use foliolab::html;
use foliolab::reproduce::{Breakdown, PerPage, Reproduction, Row, Series, Summary, Verdict};
use std::collections::BTreeMap;
use std::path::{Path, PathBuf};
use std::process::Command;

/// The colours the report gives the seed's bars and the model's.
const SEED_RGB: [u8; 3] = [0x4e, 0x79, 0xa7];
const MODEL_RGB: [u8; 3] = [0xf2, 0x8e, 0x2b];

fn work_dir(name: &str) -> PathBuf {
    let d = Path::new(env!("CARGO_TARGET_TMPDIR")).join("html_report").join(name);
    let _ = std::fs::remove_dir_all(&d);
    std::fs::create_dir_all(&d).unwrap();
    d
}

fn chromium() -> Option<PathBuf> {
    std::env::split_paths(&std::env::var_os("PATH")?)
        .map(|d| d.join("chromium"))
        .find(|p| p.is_file())
}

/// What the browser made of a page: its DOM after loading, and a screenshot.
struct Rendered {
    dom: String,
    png: PathBuf,
}

/// Loads `page` in headless Chromium twice (DOM, then screenshot) with a fresh profile
/// in `dir`; `--no-sandbox` because the tests may run as root.
fn render(exe: &Path, page: &Path, dir: &Path, height: u32) -> Rendered {
    let url = format!("file://{}", page.canonicalize().unwrap().display());
    let png = dir.join("screenshot.png");
    let run = |action: &str| {
        let out = Command::new(exe)
            .args(["--headless", "--no-sandbox", "--disable-gpu", "--hide-scrollbars"])
            .arg(format!("--user-data-dir={}", dir.join("profile").display()))
            .arg(format!("--window-size=1280,{height}"))
            .arg(action)
            .arg(&url)
            .output()
            .expect("chromium runs");
        assert!(
            out.status.success(),
            "chromium {action}: {}",
            String::from_utf8_lossy(&out.stderr)
        );
        String::from_utf8(out.stdout).unwrap()
    };
    let dom = run("--dump-dom");
    run(&format!("--screenshot={}", png.display()));
    Rendered { dom, png }
}

/// The page's charts, each the text of its `<figure class="chart ...">`.
fn charts(html: &str) -> Vec<&str> {
    html.split("<figure class=\"chart ")
        .skip(1)
        .map(|f| &f[..f.find("</figure>").expect("a figure ends")])
        .collect()
}

/// Every chart has an SVG with drawn marks: bars (rects besides the background) or a
/// curve with its points.
fn check_charts(html: &str, expected: usize) {
    let charts = charts(html);
    assert_eq!(charts.len(), expected, "charts on the page");
    for c in &charts {
        let kind = &c[..c.find('"').unwrap()];
        assert!(c.contains("<svg"), "{kind}: no svg");
        assert!(!c.contains("chart not drawn"), "{kind}: {c}");
        let marks = if kind == "series" {
            c.matches("<polyline").count().min(c.matches("<circle").count())
        } else {
            c.matches("<rect").count() - 1
        };
        assert!(marks > 0, "{kind}: no marks drawn");
    }
}

/// How many pixels of the screenshot have each colour in `colors`; panics when the
/// image is (nearly) one colour.
fn pixels(png: &Path, colors: &[[u8; 3]]) -> Vec<usize> {
    let file = std::io::BufReader::new(std::fs::File::open(png).unwrap());
    let mut reader = png::Decoder::new(file).read_info().unwrap();
    let mut buf = vec![0; reader.output_buffer_size().unwrap()];
    let info = reader.next_frame(&mut buf).unwrap();
    let channels = info.color_type.samples();
    assert!(channels >= 3, "{:?}", info.color_type);
    let rgb: Vec<[u8; 3]> = buf[..info.buffer_size()]
        .chunks(channels)
        .map(|p| [p[0], p[1], p[2]])
        .collect();
    let luma: Vec<f64> = rgb
        .iter()
        .map(|p| p.iter().map(|&c| c as f64).sum::<f64>() / 3.0)
        .collect();
    let mean = luma.iter().sum::<f64>() / luma.len() as f64;
    let variance = luma.iter().map(|l| (l - mean).powi(2)).sum::<f64>() / luma.len() as f64;
    assert!(variance > 100.0, "screenshot is blank: luma variance {variance:.1}");
    colors.iter().map(|c| rgb.iter().filter(|p| *p == c).count()).collect()
}

fn row(
    seed: &str,
    experiment: &str,
    machine: &str,
    variant: &str,
    unit: &str,
    values: (f64, Option<f64>, Option<f64>),
) -> Row {
    let (seed_value, model_value, seed_stdev) = values;
    Row {
        seed: seed.into(),
        experiment: experiment.into(),
        machine: machine.into(),
        variant: variant.into(),
        unit: unit.into(),
        seed_value,
        model_value,
        seed_stdev,
        sign_agrees: model_value
            .is_some_and(|m| m.signum() == seed_value.signum() || variant == "baseline" || variant == "before"),
        baseline: None,
        baseline_stdev: None,
        verdict: match model_value {
            None => Verdict::NotModeled,
            Some(m) if m.signum() == seed_value.signum() => Verdict::Agrees,
            Some(_) => Verdict::Disagrees,
        },
        reason: model_value.is_none().then(|| "no model figure".to_string()),
        real_kernel: Default::default(),
        real_kernel_more: Vec::new(),
    }
}

/// Seed 000's percent tables (two machines, two folio orders) and seed 003's map_mem
/// times in ms, with a model figure missing, breakdowns and a curve per variant.
fn fixture() -> Reproduction {
    let mut rows = Vec::new();
    for (machine, o0, o9) in [
        ("Apple M2 VM", (-9.6, -7.1), (-4.9, -6.0)),
        ("Ampere Altra", (-0.2, 0.4), (-0.1, -2.5)),
    ] {
        for (exp, (seed, model)) in [("munmap, order-0 (pte-map)", o0), ("munmap, order-9 (pte-map)", o9)] {
            rows.push(row("000", exp, machine, "baseline", "%", (0.0, Some(0.0), Some(3.8))));
            rows.push(row(
                "000",
                exp,
                machine,
                "after-change",
                "%",
                (seed, Some(model), Some(0.6)),
            ));
        }
    }
    for (machine, before, after, model) in [
        ("Apple M2 VM, 16G", 11.0, 10.0, Some((9.5, 8.2))),
        ("Ampere Altra VM, 64G", 161.0, 104.0, Some((150.0, 97.0))),
        ("Ampere Altra Metal, 512G", 1654.0, 1223.0, None),
    ] {
        rows.push(row(
            "003",
            "map_mem",
            machine,
            "before",
            "ms",
            (before, model.map(|m| m.0), None),
        ));
        rows.push(row(
            "003",
            "map_mem",
            machine,
            "after",
            "ms",
            (after, model.map(|m| m.1), None),
        ));
    }
    let events = |scale: f64| -> BTreeMap<String, f64> {
        (0..11)
            .map(|i| (format!("arch.event{i}"), scale * (11 - i) as f64 * 1e5))
            .collect()
    };
    let breakdowns = [("baseline", 1.0), ("after-change", 0.7)]
        .into_iter()
        .map(|(variant, scale)| Breakdown {
            seed: "000".into(),
            experiment: "munmap, order-0 (pte-map)".into(),
            machine: "Apple M2 VM".into(),
            variant: variant.into(),
            by_event_ns: events(scale),
        })
        .collect();
    let series = [("seed before", 1.1), ("model before", 1.0), ("model after", 0.72)]
        .into_iter()
        .map(|(name, scale)| Series {
            seed: "003".into(),
            name: name.into(),
            x_label: "RAM (GiB)".into(),
            y_label: "map_mem (ms)".into(),
            points: [16.0, 64.0, 256.0, 512.0]
                .iter()
                .map(|&g| (g, g * 2.6 * scale))
                .collect(),
        })
        .collect();
    let per_page = vec![PerPage {
        seed: "001".into(),
        experiment: "reclaim: discard of lazyfree pages".into(),
        flavour: "x86".into(),
        cpus: 128,
        variant: "sync".into(),
        pages: 4096,
        tlbi: 128.0,
        ipi: 127.0,
        waits: 1.0,
        flushes: 1.0,
        machine: "calibrated".into(),
        flush_ns: None,
    }];
    let summary = Summary::of(&rows);
    Reproduction {
        rows,
        breakdowns,
        series,
        per_page,
        notes: BTreeMap::from([(
            "003".to_string(),
            vec!["Ampere Altra Metal: no profile for the 512G machine's fixmap costs".to_string()],
        )]),
        elapsed_s: 12.5,
        summary,
    }
}

#[test]
fn reproduce_page_renders_every_chart_in_a_browser() {
    let dir = work_dir("reproduce");
    let page = html::write_page(&dir, &html::reproduce_page(&fixture())).unwrap();
    let text = std::fs::read_to_string(&page).unwrap();
    // Nothing loaded from anywhere (the SVG namespace URI is a name, not a fetch).
    for fetch in ["src=", "href=", "@import", "url(", "<script"] {
        assert!(!text.contains(fetch), "{fetch}");
    }
    // Seed 000: a change chart per machine and a breakdown; seed 003: a change chart per
    // machine (the metal one with the seed's bar only) and the curves.
    check_charts(&text, 2 + 1 + 3 + 1);
    assert!(
        text.contains("n/a")
            && text.contains(">agrees</td>")
            && text.contains(">disagrees</td>")
            && text.contains("−35.4%"),
        "{text}"
    );
    assert!(
        text.contains("<h3>per page, reclaim: discard of lazyfree pages</h3>") && text.contains("<td>127.000</td>")
    );
    let Some(exe) = chromium() else {
        println!("SKIP reproduce_page_renders_every_chart_in_a_browser: chromium is not on PATH");
        return;
    };
    let shot = render(&exe, &page, &dir, 3000);
    check_charts(&shot.dom, 7);
    assert!(shot.dom.contains("per page, reclaim: discard of lazyfree pages"));
    let [seed, model] = pixels(&shot.png, &[SEED_RGB, MODEL_RGB])[..] else {
        unreachable!()
    };
    assert!(seed > 500 && model > 500, "seed {seed} and model {model} pixels");
}

#[test]
fn run_html_renders_in_a_browser() {
    let dir = work_dir("run");
    let out = Command::new(env!("CARGO_BIN_EXE_foliolab"))
        .args([
            "run",
            "workloads/seed000-munmap-64k.wl",
            "--each",
            "zap=per-pte,batched",
        ])
        .args(["--machine", "altra-metal", "--no-store", "--html"])
        .arg(&dir)
        .output()
        .unwrap();
    let stderr = String::from_utf8_lossy(&out.stderr);
    assert!(out.status.success(), "{stderr}");
    let page = dir.join("index.html");
    assert!(stderr.contains(&page.display().to_string()), "{stderr}");
    let text = std::fs::read_to_string(&page).unwrap();
    assert!(text.contains("arch.tlbi.vale1is") && text.contains("batched"));
    // The counter changes and the time breakdown.
    check_charts(&text, 2);
    let Some(exe) = chromium() else {
        println!("SKIP run_html_renders_in_a_browser: chromium is not on PATH");
        return;
    };
    let shot = render(&exe, &page, &dir, 2000);
    check_charts(&shot.dom, 2);
    pixels(&shot.png, &[]);
}
