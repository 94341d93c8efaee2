//! Seed 004: contpte_ptep_get stopping early once young and dirty are known, in the
//! seed's three scenarios (mlock/munlock of 256 MiB of 64K folios, 500 times): the
//! original full scan against the thread's modifications 1 and 2.
//!
//! The model counts contpte_ptep_get's instructions exactly (per call, from the
//! measured table of tools/seed004, for the compiler the seed's kernel was built with);
//! the rest of the benchmark's instructions and time are not modeled, so only the
//! modifications' changes against the original compare: the model has no totals, and
//! none is made up from the seed's. The instruction changes are judged by sign and by
//! their distance from the seed's in points of the seed's Original total.

use super::{published, Cell, Costs, Figure, Reproduction};
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
pub(crate) const TABLE: [[(f64, f64, f64); 3]; 3] = [
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
/// The mlock walk of the seed's kernel: its totals' differences imply 48 to 52
/// contpte_ptep_get calls per block per mlock+munlock (tools/seed004/README.md); 6.6 to
/// 6.10's folio_mlock_step reads each pte again (16 from GUP, 18 from each walk: 52),
/// where 6.11+'s folio_pte_batch makes 20.
const MLOCK_WALK: &str = "per-pte";
/// The compiler of the seed's kernel: a 2025 Android phone's, and Android builds its
/// kernels with clang only (AOSP's kernel build, LLVM=1, since Android 11's GKI). The
/// per-call counts are clang 14's of our code (`contpte-insns=clang`).
const COMPILER: &str = "clang";
/// Issue 37's target for the instruction changes: within 2 points of the seed's, in
/// percent of the seed's Original total.
const POINTS: f64 = 2.0;
/// The seed names no machine: the generic profile's cost per instruction is used.
const MACHINE: &str = "generic";
const INSNS: &str = "kernel.contpte_ptep_get.insns";
const CALLS: &str = "arch.contpte.ptep_get";

/// A seed 004 row's experiment: the key a stored real-kernel measurement of it names.
pub(crate) fn experiment(scenario: impl std::fmt::Display, what: &str) -> String {
    format!("scenario {scenario}: {what}, change against Original")
}

pub fn run(r: &mut Reproduction, software: &Profile, kernel: Release) -> Result<(), String> {
    let costs = Costs::for_seed(MACHINE, SEED, software)?;
    let mut notes = costs.notes.clone();
    notes.push(format!(
        "only contpte_ptep_get's instructions are modeled (per call, measured by tools/seed004 of our code compiled with clang 14 -O2, contpte-insns={COMPILER}); the rest of the benchmark's instructions and time are not, so the model has no totals: both tables show each modification's change against Original only, the seed's (its totals' difference) beside the model's, and an instruction change agrees when its sign is the seed's and it is within {POINTS} points of the seed's Original total from the seed's; time is the model's instructions at {MACHINE}'s cost per instruction (the seed's machine is not named). The overhead of contpte_ptep_get() is a share of the benchmark's total, which the model does not have"
    ));
    notes.push(
        "the merged upstream early-exit version is modification 2's code (ptep_get=early-exit counts the same)".into(),
    );
    notes.push(format!(
        "the seed's kernel (a 2025 Qualcomm phone's, not named) walks as 6.6 to 6.10 do: mlock-walk={MLOCK_WALK}, folio_mlock_step (dc68badcede4, 6.6) reading every pte of a folio, 52 contpte_ptep_get calls per 64K block per mlock+munlock where the seed's totals imply 48 to 52; 6.11's folio_pte_batch version (Lance Yang, <20240603140745.83880-1-ioworker0@gmail.com>) makes 20"
    ));
    notes.push(format!("compiler: contpte-insns={COMPILER}: the seed's kernel is a 2025 Android phone's, and Android builds its kernels with clang only, so the per-call counts are clang 14's (-O2, the kernel's flags add only a constant pointer-authentication pair per call): clang's full scan takes 11 instructions per clean pte and 12 per dirty one (187 and 203 per call: each pte is read as the kernel reads it, a READ_ONCE of the pte_t struct, which clang compiles to a load and a store to the stack; our three variants are the clang-built 6.12 kernels' contpte_ptep_get instruction for instruction) and modification 1's loop more than that (206 in scenario 2, 202 in scenario 3), as the seed found. With GCC 12 (contpte-insns=gcc, the default, as Debian builds its kernels) the full scan is branch-free at 13 per pte (214), and both modifications are cheaper than it in every scenario. The real-kernel lines are 6.12 built here with each compiler (`foliolab kernel seed004`): the change of the whole benchmark's instructions, made by 6.12's mlock walk with 20 contpte_ptep_get calls per block against the 52 modeled here, so about 20/52 of the model's change"));
    // The nine model runs (each scenario under each variant) are most of reproduce's
    // time: they run on every core.
    let mut runs = Vec::new();
    for (scenario, text) in SCENARIOS {
        let w = parse_str(&format!("workloads/seed004-scenario{scenario}.wl"), text).map_err(|e| e.to_string())?;
        for (_, v) in VARIANTS {
            runs.push((
                w.clone(),
                super::variants(
                    kernel,
                    &[("ptep_get", v), ("mlock-walk", MLOCK_WALK), ("contpte-insns", COMPILER)],
                )?,
            ));
        }
    }
    let counted = super::par_map(&runs, |(w, vs)| {
        sim::run(w, vs)
            .map(|rep| [INSNS, CALLS].map(|k| rep.counters.get(k).copied().unwrap_or(0)))
            .map_err(|e| e.to_string())
    });
    let counted = counted.into_iter().collect::<Result<Vec<_>, _>>()?;
    for (si, (scenario, _)) in SCENARIOS.iter().enumerate() {
        let runs = &counted[si * VARIANTS.len()..(si + 1) * VARIANTS.len()];
        let insns: Vec<i64> = runs.iter().map(|r| r[0]).collect();
        let ns_of = |n: i64| costs.time_ns(&[(INSNS.to_string(), n)].into()).0;
        let seed = |vi: usize| {
            let (i, t, o) = TABLE[si][vi];
            (published(i), published(t), published(o))
        };
        for (vi, (name, _)) in VARIANTS.iter().enumerate().skip(1) {
            let (s, s0) = (seed(vi), seed(0));
            let d = insns[vi] - insns[0];
            let change = || Figure::Change {
                baseline: "Original",
                baseline_stdev: None,
            };
            // Per part of the table: what, its unit, the seed's change, the model's
            // (or why none) and how the change is shown.
            type Part<'a> = (&'a str, &'a str, f64, Result<f64, String>, Figure);
            let parts: [Part; 3] = [
                (
                    "instructions",
                    "instructions",
                    s.0 - s0.0,
                    Ok(d as f64),
                    Figure::ChangeOfTotal {
                        baseline: "Original",
                        total: s0.0,
                        points: POINTS,
                    },
                ),
                ("test time", "s", s.1 - s0.1, Ok(ns_of(d) / 1e9), change()),
                (
                    "overhead of contpte_ptep_get()",
                    "points",
                    s.2 - s0.2,
                    Err("a share of the benchmark's total, which the model does not model".into()),
                    change(),
                ),
            ];
            for (what, unit, seed_value, model, figure) in parts {
                let mut row = Cell {
                    seed: SEED,
                    experiment: &experiment(*scenario, what),
                    machine: MACHINE,
                    variant: name,
                    unit,
                    seed_value,
                    seed_stdev: None,
                    model,
                    figure,
                    unmodeled: (what == "test time")
                        .then(|| outside_ptep_get(TABLE[si][0], TABLE[si][vi], ns_of(d)))
                        .flatten(),
                }
                .row();
                if row.verdict == super::Verdict::Disagrees {
                    let calls = runs[vi][1];
                    let why = disagreement(scenario, what, name, (seed_value, row.model_value), calls, &r.rows);
                    row.reason.get_or_insert_with(String::new).push_str(&why);
                }
                r.rows.push(row);
            }
        }
    }
    r.notes.insert(SEED.into(), notes);
    Ok(())
}

/// The seed's own split of a time change, when it puts the cell's sign outside what
/// the model counts: the overhead column makes each test time contpte_ptep_get's part
/// (time × overhead) and the rest, whose code is the same in all three kernels. Where
/// the two parts move opposite ways, the whole follows the rest, and the model's change
/// (contpte_ptep_get's time, the only time it has) has the sign of the seed's
/// contpte_ptep_get part, the sign is decided by time the model does not count.
fn outside_ptep_get(original: (f64, f64, f64), variant: (f64, f64, f64), model_ns: f64) -> Option<String> {
    let part = |(_, t, o): (f64, f64, f64)| t * o / 100.0;
    let ptep_get = part(variant) - part(original);
    let total = variant.1 - original.1;
    let rest = total - ptep_get;
    (!super::same_sign(total, ptep_get) && super::same_sign(model_ns, ptep_get)).then(|| {
        format!(
            "the seed's own overhead column splits its time change of {} s into contpte_ptep_get's {} s (test time × overhead, the model's sign) and the rest of the benchmark's {} s, whose code is the same in every variant's kernel: the rest decides this cell's sign, and the model times contpte_ptep_get only (what moves the rest between two builds of the same code, their layout or the phone's clocks, is not modeled)",
            super::fig(total),
            super::fig(ptep_get),
            super::fig(rest)
        )
    })
}

/// Why a seed 004 cell disagrees: a time whose instructions agree is the cost per
/// instruction (the seed's machine is not named, so generic's assumed one); otherwise
/// the instructions, per call: the seed's change at the model's calls against the
/// model's, and what the real kernel built with the seed's compiler measured.
fn disagreement(
    scenario: &str,
    what: &str,
    variant: &str,
    (seed_value, model_value): (f64, Option<f64>),
    calls: i64,
    rows: &[super::Row],
) -> String {
    let instructions = rows
        .iter()
        .find(|r| r.seed == SEED && r.variant == variant && r.experiment == experiment(scenario, "instructions"));
    match instructions.filter(|r| what == "test time" && r.verdict == super::Verdict::Agrees) {
        Some(_) => format!("; the instruction change agrees: the time is it at {MACHINE}'s assumed cost per instruction (IPC 2 at a nominal 3.0 GHz), and the seed's phone (not named) ran those instructions at another rate"),
        None => {
            // The instruction change, this cell's or its time's instructions'.
            let (seed, model) = match instructions.filter(|_| what != "instructions") {
                Some(r) => (r.seed_value, r.model_value),
                None => (seed_value, model_value),
            };
            let per_call = |x: f64| super::fig(x / calls as f64);
            format!(
                "; per call, at the model's {} calls: the seed's instruction change is {}, the model's {}. The model's per-call counts are the clang-built kernel's code, instruction for instruction (contpte-insns={COMPILER}, tools/seed004/README.md), with {MLOCK_WALK} mlock walk's 52 calls per block, and its block states are the real kernel's: 6.12 built with clang and run under QEMU with the hardware access flag (`foliolab kernel seed004 --cc clang`, the real-kernel line) counts the model's per-call change in every cell of this table, this one included (the access flag set by hardware on the one pte read in scenario 2, tools/seed004/README.md). The difference is the seed's kernel's build or its phone (neither named), which is not modeled",
                super::fig(calls as f64),
                per_call(seed),
                model.map_or("not modeled".into(), per_call)
            )
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    /// Of the seed's six time changes only scenario 3's Modification 2 moves against its
    /// own contpte_ptep_get part (which rose with the model's +1 instruction per call).
    #[test]
    fn only_scenario_3s_modification_2_time_is_decided_outside_contpte_ptep_get() {
        let decided_outside: Vec<(usize, usize)> = (0..3)
            .flat_map(|si| (1..3).map(move |vi| (si, vi)))
            // A model change with the sign of the seed's contpte_ptep_get part.
            .filter(|&(si, vi)| {
                let part = |(_, t, o): (f64, f64, f64)| t * o;
                let sign = part(TABLE[si][vi]) - part(TABLE[si][0]);
                outside_ptep_get(TABLE[si][0], TABLE[si][vi], sign).is_some()
            })
            .collect();
        assert_eq!(decided_outside, [(2, 2)]);
        let why = outside_ptep_get(TABLE[2][0], TABLE[2][2], 1.0).unwrap();
        assert!(why.contains("time change of -0.0759 s"), "{why}");
        assert!(why.contains("contpte_ptep_get's 0.05857 s"), "{why}");
        assert!(why.contains("benchmark's -0.1345 s"), "{why}");
    }

    /// A model change against the seed's contpte_ptep_get part stays a disagreement.
    #[test]
    fn a_model_change_against_the_seeds_contpte_ptep_get_part_is_not_excused() {
        assert_eq!(outside_ptep_get(TABLE[2][0], TABLE[2][2], -1.0), None);
        assert_eq!(outside_ptep_get(TABLE[2][0], TABLE[2][2], 0.0), None);
    }
}
