//! Seed 004: contpte_ptep_get stopping early once young and dirty are known, in the
//! seed's three scenarios (mlock/munlock of 256 MiB of 64K folios, 500 times): the
//! original full scan against the thread's modifications 1 and 2.
//!
//! The model counts contpte_ptep_get's instructions exactly (per call, from the
//! measured table of tools/seed004); the rest of the benchmark's instructions and time
//! are not modeled, so each variant's total is the seed's original total plus the
//! model's change, and the overhead is the model's contpte_ptep_get time over that.

use super::{same_sign, Costs, Reproduction, Row};
use crate::sim;
use crate::sim::kernels::Release;
use crate::time::Profile;
use crate::workload::parse_str;

const SEED: &str = "004";
const SCENARIOS: &[(&str, &str)] = &[
    ("1", include_str!("../../workloads/seed004-scenario1.wl")),
    ("2", include_str!("../../workloads/seed004-scenario2.wl")),
    ("3", include_str!("../../workloads/seed004-scenario3.wl")),
];
/// The seed's variants as `ptep_get=` names them.
const VARIANTS: &[(&str, &str)] = &[
    ("Original", "full-scan"),
    ("Modification 1", "mod1"),
    ("Modification 2", "mod2"),
];
/// Per scenario, per variant: (instructions, test time s, overhead %), from the seed.
const TABLE: [[(f64, f64, f64); 3]; 3] = [
    [
        (37912436160.0, 4.2797, 21.31),
        (18303833386.0, 2.2687, 4.72),
        (18731580031.0, 2.2949, 4.80),
    ],
    [
        (36701270862.0, 3.2335, 32.26),
        (38729716276.0, 3.5732, 41.35),
        (36115790086.0, 3.0874, 33.57),
    ],
    [
        (36706279735.0, 3.2008, 31.94),
        (38305241759.0, 3.5389, 41.30),
        (36750881878.0, 3.1249, 34.59),
    ],
];
/// The seed names no machine: the generic profile's cost per instruction is used.
const MACHINE: &str = "generic";
const INSNS: &str = "kernel.contpte_ptep_get.insns";

/// A table of the seed's: its name, unit, and which of (instructions, s, overhead %)
/// it shows.
type Part = (&'static str, &'static str, fn(&(f64, f64, f64)) -> f64);

pub fn run(r: &mut Reproduction, software: &Profile, kernel: Release) -> Result<(), String> {
    let costs = Costs::for_seed(MACHINE, SEED, software)?;
    let mut notes = costs.notes.clone();
    notes.push(format!(
        "the seed's machine is not named: {MACHINE}'s cost per instruction; only contpte_ptep_get's instructions are modeled, so each total is the seed's Original total plus the model's change"
    ));
    notes.push(
        "the merged upstream early-exit version is modification 2's code (ptep_get=early-exit counts the same)".into(),
    );
    for (si, (scenario, text)) in SCENARIOS.iter().enumerate() {
        let w = parse_str(&format!("workloads/seed004-scenario{scenario}.wl"), text).map_err(|e| e.to_string())?;
        let mut insns = Vec::new();
        for (_, v) in VARIANTS {
            let vs = super::variants(kernel, &[("ptep_get", v)])?;
            let rep = sim::run(&w, &vs).map_err(|e| e.to_string())?;
            insns.push(rep.counters.get(INSNS).copied().unwrap_or(0));
        }
        let ns_of = |n: i64| costs.time_ns(&[(INSNS.to_string(), n)].into()).0;
        let (base_insns, base_s, _) = TABLE[si][0];
        // Per variant: (instructions, s, overhead %), the model's.
        let model: Vec<(f64, f64, f64)> = insns
            .iter()
            .map(|&n| {
                let s = base_s + ns_of(n - insns[0]) / 1e9;
                (base_insns + (n - insns[0]) as f64, s, ns_of(n) / 1e9 / s * 100.0)
            })
            .collect();
        let parts: [Part; 3] = [
            ("instructions", "instructions", |t| t.0),
            ("test time", "s", |t| t.1),
            ("overhead of contpte_ptep_get()", "%", |t| t.2),
        ];
        for (what, unit, get) in parts {
            for (vi, (name, _)) in VARIANTS.iter().enumerate() {
                let (seed_v, model_v) = (get(&TABLE[si][vi]), get(&model[vi]));
                let (seed_base, model_base) = (get(&TABLE[si][0]), get(&model[0]));
                r.rows.push(Row {
                    seed: SEED.into(),
                    experiment: format!("scenario {scenario}: {what}"),
                    machine: MACHINE.into(),
                    variant: name.to_string(),
                    unit: unit.into(),
                    seed_value: seed_v,
                    model_value: Some(model_v),
                    seed_stdev: None,
                    sign_agrees: same_sign(model_v - model_base, seed_v - seed_base),
                });
            }
        }
    }
    r.notes.insert(SEED.into(), notes);
    Ok(())
}
