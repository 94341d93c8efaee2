//! Seed 002: large anonymous folios in the fault path, measured on a real program (a
//! kernel build on Ampere Altra, order-4 folios: 64K on 4K pages). The model replays
//! a recorded real build instead: the C compile of the SQLite amalgamation, recorded
//! on this project's x86_64 host with every THP size off (`foliolab predict` checks
//! such replays against the host, fault for fault), with order-0 folios and with 64K.

use super::{pct, same_sign, variants, Breakdown, Costs, Reproduction, Row};
use crate::hw::Granule;
use crate::mm::thp_sysfs::ThpKnobs;
use crate::sim::kernels::Release;
use crate::time::Profile;
use crate::trace::predict::Setting;

const SEED: &str = "002";
/// `foliolab record --no-aslr -o data/sqlite3-cc-O2.trc -- cc -O2 -c sqlite3.c`.
const TRACE: &[u8] = include_bytes!("../../data/sqlite3-cc-O2.trc");
const TRACE_NAME: &str = "data/sqlite3-cc-O2.trc";

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
    let model_kernel = pct(large_ns, base_ns);
    let experiment = "compile kernel time, % change";
    for (variant, seed_value, model, by) in [
        ("order-0 folios", 0.0, 0.0, base_by),
        ("large anon folios", -34.0, model_kernel, large_by),
    ] {
        r.rows.push(Row {
            seed: SEED.into(),
            experiment: experiment.into(),
            machine: "altra-metal".into(),
            variant: variant.into(),
            unit: "%".into(),
            seed_value,
            model_value: Some(model),
            seed_stdev: None,
            sign_agrees: same_sign(model, seed_value),
        });
        r.breakdowns.push(Breakdown {
            seed: SEED.into(),
            experiment: experiment.into(),
            machine: "altra-metal".into(),
            variant: variant.into(),
            by_event_ns: by,
        });
    }
    for (variant, seed_value) in [("order-0 folios", 0.0), ("large anon folios", -4.0)] {
        r.rows.push(Row {
            seed: SEED.into(),
            experiment: "compile wall time, % change".into(),
            machine: "altra-metal".into(),
            variant: variant.into(),
            unit: "%".into(),
            seed_value,
            model_value: None,
            seed_stdev: None,
            sign_agrees: false,
        });
    }
    let faults = |i: usize| runs[i].report.counters.get("model.faults").copied().unwrap_or(0);
    let mut notes = costs.notes;
    notes.push(format!(
        "the replayed build is {TRACE_NAME} ({} events: `{}` recorded on Linux {}), not the seed's kernel build",
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
    notes.push("wall time: the model times the kernel's work only; the build's user time is not modelled".into());
    notes.push(
        "kernel time: the model's is the anonymous-memory work it models (faults, zap, teardown at exit); the seed's also holds syscalls, file I/O and exec, which large anonymous folios leave alone, so the model's change is the larger"
            .into(),
    );
    notes.sort();
    notes.dedup();
    r.notes.insert(SEED.into(), notes);
    Ok(())
}
