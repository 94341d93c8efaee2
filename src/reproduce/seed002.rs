//! Seed 002: large anonymous folios in the fault path, measured on a real program (a
//! kernel build on Ampere Altra, order-4 folios: 64K on 4K pages). The model replays
//! a kernel build recorded on this project's x86_64 host with every THP size off
//! (`foliolab predict` checks such replays against the host, fault for fault), with
//! order-0 folios and with 64K: Linux 6.12's arm64 `mm/` directory cross-compiled by
//! gcc, after `make prepare` (a whole build's trace would not fit in the repository).
//!
//! The seed's figure is the change of the build's whole kernel time; the model times
//! only its anonymous-memory work. The rest of the kernel's work (syscalls, exec, file
//! faults, page cache), which large anon folios leave alone, is measured on this host
//! beside that work, in the same build (`scripts/kbuild-kernel-share`), as a ratio to
//! the anonymous work less its page data (zeroing and copying, whose time in this VM is
//! partly the hypervisor's), and priced by the model's own time of that work:
//!
//! ```text
//!   other     = (anonymous work - page data, modeled, order-0) x ratio (measured here)
//!   change(kernel time) = change(modeled anonymous work) / (modeled anonymous work + other)
//! ```

use super::{pct, published, variants, Breakdown, Cell, Costs, Figure, Reproduction};
use crate::hw::Granule;
use crate::mm::thp_sysfs::ThpKnobs;
use crate::sim::kernels::Release;
use crate::time::Profile;
use crate::trace::predict::Setting;

const SEED: &str = "002";
/// `foliolab record --no-aslr -o data/kbuild-6.12-arm64-mm.trc -- make -s -C SRC O=OUT
/// ARCH=arm64 CROSS_COMPILE=aarch64-linux-gnu- -j2 mm/`, with OUT configured and prepared
/// by `foliolab kernel build`'s 6.12 config and OUT/mm removed first.
const TRACE: &[u8] = include_bytes!("../../data/kbuild-6.12-arm64-mm.trc");
const TRACE_NAME: &str = "data/kbuild-6.12-arm64-mm.trc";
const SHARE_NAME: &str = "data/kbuild-6.12-arm64-mm-kernel-share.json";
const SHARE: &str = include_str!("../../data/kbuild-6.12-arm64-mm-kernel-share.json");

/// The kernel's other work beside the recorded build's anonymous-memory work on this
/// host, as `scripts/kbuild-kernel-share` measured it (perf's cpu-clock samples).
#[derive(serde::Deserialize)]
struct Share {
    host_kernel: String,
    runs: Vec<ShareRun>,
}

#[derive(serde::Deserialize)]
struct ShareRun {
    kernel_samples: u64,
    by_category: std::collections::BTreeMap<String, u64>,
    /// The other work's samples per sample of anonymous work less its page data.
    other_per_anon_work: f64,
}

impl Share {
    fn load() -> Share {
        serde_json::from_str(SHARE).expect("data/kbuild-6.12-arm64-mm-kernel-share.json is a valid table (tested)")
    }
    /// The share of all runs' kernel samples in `category`.
    fn of(&self, category: &str) -> f64 {
        let n: u64 = self
            .runs
            .iter()
            .map(|r| r.by_category.get(category).copied().unwrap_or(0))
            .sum();
        n as f64 / self.runs.iter().map(|r| r.kernel_samples).sum::<u64>() as f64
    }
    /// The runs' lowest, mean and highest ratio.
    fn range(&self) -> (f64, f64, f64) {
        let s: Vec<f64> = self.runs.iter().map(|r| r.other_per_anon_work).collect();
        let mean = s.iter().sum::<f64>() / s.len() as f64;
        (
            s.iter().copied().fold(f64::INFINITY, f64::min),
            mean,
            s.iter().copied().fold(0.0, f64::max),
        )
    }
}

pub fn run(r: &mut Reproduction, software: &Profile, kernel: Release) -> Result<(), String> {
    let costs = Costs::for_seed("altra-metal", SEED, software)?;
    // The seed adds large anon folios to a kernel without them: mthp is the experiment's.
    let v = variants(kernel, &[("mthp", "on")])?;
    let k = ThpKnobs::new(Granule::K4);
    let sizes: Vec<u64> = k.anon_orders().map(|o| k.size_kb(o)).collect();
    let mut runs = Vec::new();
    for setting in ["off", "64K"] {
        let knobs = Setting::parse(setting)?.knobs(&sizes)?;
        let rep = crate::trace::replay::replay(TRACE_NAME, std::io::Cursor::new(TRACE), &v, &knobs)
            .map_err(|e| e.to_string())?;
        runs.push(rep);
    }
    let (base_ns, base_by) = costs.time_ns(&runs[0].report.counters);
    let (large_ns, large_by) = costs.time_ns(&runs[1].report.counters);
    let model_anon = pct(large_ns, base_ns);
    let share = Share::load();
    let (lo, mean, hi) = share.range();
    // Page data: the memory-bound events calibrate also fits apart from the software.
    let page_data: f64 = crate::time::calibrate::MEMORY_BOUND
        .iter()
        .filter_map(|e| base_by.get(*e))
        .sum();
    let work_ns = base_ns - page_data;
    let whole = |ratio: f64| (large_ns - base_ns) / (base_ns + work_ns * ratio) * 100.0;
    for (experiment, seed_value, model, by) in [
        ("compile kernel time, % change", -34.0, Ok(whole(mean)), Some(large_by)),
        (
            "compile wall time, % change",
            -4.0,
            Err("wall time needs the build's user time, which the model does not model".to_string()),
            None,
        ),
    ] {
        let row = Cell {
            seed: SEED,
            experiment,
            machine: "altra-metal",
            variant: "large anon folios",
            unit: "%",
            seed_value: published(seed_value),
            seed_stdev: None,
            model,
            figure: Figure::Change {
                baseline: "order-0 folios",
                baseline_stdev: None,
            },
            unmodeled: None,
        }
        .row();
        if let Some(by) = by {
            r.breakdowns.push(Breakdown {
                seed: SEED.into(),
                experiment: experiment.into(),
                machine: "altra-metal".into(),
                variant: "order-0 folios".into(),
                by_event_ns: base_by.clone(),
            });
            r.breakdowns.push(Breakdown {
                seed: SEED.into(),
                experiment: experiment.into(),
                machine: "altra-metal".into(),
                variant: "large anon folios".into(),
                by_event_ns: by,
            });
        }
        r.rows.push(row);
    }
    let faults = |i: usize| runs[i].report.counters.get("model.faults").copied().unwrap_or(0);
    let mut notes = costs.notes;
    notes.push(format!(
        "the replayed build is {TRACE_NAME} ({} events: `{}` recorded on Linux {}): a kernel compile as the seed's, but one directory of it (mm/, 75 objects, after `make prepare`) where the seed's is a whole build",
        runs[0].events,
        crate::trace::format::Reader::new(TRACE_NAME, TRACE)
            .map(|r| r.header.command.join(" "))
            .unwrap_or_default(),
        crate::trace::format::Reader::new(TRACE_NAME, TRACE)
            .map(|r| r.header.host_kernel)
            .unwrap_or_default(),
    ));
    notes.push(format!(
        "anonymous faults: {} with order-0 folios, {} with 64K ({:+.1}%); modeled kernel time {:.1} ms and {:.1} ms; the seed: data-fault time more than halved",
        faults(0),
        faults(1),
        pct(faults(1) as f64, faults(0) as f64),
        base_ns / 1e6,
        large_ns / 1e6
    ));
    notes.push(format!(
        "kernel time: the model times the build's anonymous-memory work only (faults, copy-on-write, teardown), which changes by {model_anon:+.2}%; the rest of the seed's kernel time (syscalls, exec, file faults, page cache) large anon folios leave alone. Measured beside it in the same build on this host ({SHARE_NAME}, `scripts/kbuild-kernel-share`, perf cpu-clock samples, {} runs, x86-64 Linux {}), that rest is {mean:.3} ({lo:.3} to {hi:.3}) times the anonymous work less its page data (zeroing and copying, left out because this VM's hypervisor backs freed memory afresh, which makes their time its own: they took {:.1}% of the kernel samples there), so with order-0 folios the model's {:.1} ms of that work stand beside {:.1} ms of the rest, and the whole kernel time changes by {:+.2}% ({:+.2} to {:+.2}). The ratio is this host's: the seed's Altra on 6.3 is not measured (no arm64 machine here, and QEMU's time is no CPU's)",
        share.runs.len(),
        share.host_kernel,
        share.of("anon_page_data") * 100.0,
        work_ns / 1e6,
        work_ns * mean / 1e6,
        whole(mean),
        whole(hi),
        whole(lo),
    ));
    notes.push("why not the whole build: recording 6.12's mm/ took 43 s and 2.2 M events (2.9 MB of trace); the whole build of that config has 799 objects to mm/'s 75, so by objects about 24 M events and 31 MB of trace (an estimate, not recorded), too large to keep in the repository".into());
    notes.sort();
    notes.dedup();
    r.notes.insert(SEED.into(), notes);
    Ok(())
}

#[cfg(test)]
mod tests {
    use super::*;

    /// Each run's categories cover its kernel samples once, and its ratio is the
    /// script's formula over them (fault entry and exit split by the two kinds of
    /// fault's own samples), so an edited or truncated table fails here.
    #[test]
    fn the_kernel_share_table_is_its_own_samples_arithmetic() {
        let share = Share::load();
        assert!(!share.runs.is_empty());
        for r in &share.runs {
            let c = |k: &str| r.by_category[k] as f64;
            assert_eq!(r.by_category.values().sum::<u64>(), r.kernel_samples);
            let anon = c("anon_fault") + c("anon_cow");
            let part = anon / (anon + c("file_fault"));
            let work = anon + c("teardown") + c("fault_other") * part;
            let rest = c("other") + c("file_fault") + c("fault_other") * (1.0 - part);
            assert!(
                (rest / work - r.other_per_anon_work).abs() < 1e-4,
                "{}",
                r.other_per_anon_work
            );
        }
        let (lo, mean, hi) = share.range();
        assert!(0.0 < lo && lo <= mean && mean <= hi);
    }
}
