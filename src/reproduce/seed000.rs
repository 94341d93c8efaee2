//! Seed 000: madvise(MADV_DONTNEED) of each page, and munmap, of 1 GiB populated with
//! order-0 and with pte-mapped order-9 folios; Apple M2 VM and Ampere Altra (bare
//! metal). Two tables, each against the experiment its figures come from:
//!
//! - the seed's own, v4 03/16 "Batch-clear PTE ranges during zap_pte_range()": the
//!   core-mm loop batched by pte_batch_remaining(), whose default returns 1; arm64's
//!   override came later in the series (16/16), so on arm64 03/16 runs its loop with
//!   nr = 1, clearing pte by pte: the model's zap=per-pte on both sides, contpte off
//!   (the series' contpte patches come after 03/16);
//! - with contpte: the contpte v5 cover's munmap table (Ryan Roberts, "[PATCH v5
//!   00/25] Transparent Contiguous PTEs for User Mappings",
//!   <20240202080756.1453939-1-ryan.roberts@arm.com>, 2024-02-02), whose baseline has
//!   David Hildenbrand's batched zap (10ebac4f95e7) and no contpte, "contpte-basic"
//!   contpte with arm64 clearing pte by pte (each block unfolded first), and
//!   "contpte-batch" arm64's batched clear.

use super::{phase_counts, published, Breakdown, Cell, Costs, Figure, Reproduction};
use crate::report::Counters;
use crate::sim::kernels::Release;
use crate::time::Profile;
use crate::workload::parse_str;
use std::collections::BTreeMap;

const SEED: &str = "000";
/// One published cell: (machine profile, its name in the source, bench, folio,
/// baseline stdev, change %, its stdev).
type Published = (&'static str, &'static str, &'static str, &'static str, f64, f64, f64);
/// The seed's tables (v4 03/16).
const SEED_CELLS: &[Published] = &[
    ("m2-vm", "Apple M2 VM", "dontneed", "order-0", 7.5, -9.6, 3.1),
    ("m2-vm", "Apple M2 VM", "dontneed", "order-9", 7.9, -4.9, 8.1),
    ("altra-metal", "Ampere Altra", "dontneed", "order-0", 0.1, -0.2, 0.1),
    ("altra-metal", "Ampere Altra", "dontneed", "order-9", 0.0, -0.1, 0.0),
    ("m2-vm", "Apple M2 VM", "munmap", "order-0", 3.8, -1.9, 0.2),
    ("m2-vm", "Apple M2 VM", "munmap", "order-9", 6.4, -4.7, 0.8),
    ("altra-metal", "Ampere Altra", "munmap", "order-0", 0.9, -0.2, 0.6),
    ("altra-metal", "Ampere Altra", "munmap", "order-9", 0.1, -3.2, 0.2),
];
/// The contpte v5 cover's MUNMAP tables, per configuration.
const CONTPTE_CELLS: &[(&str, &[Published])] = &[
    (
        "contpte-basic",
        &[
            ("altra-metal", "Ampere Altra", "munmap", "order-0", 0.5, 1.8, 0.3),
            ("altra-metal", "Ampere Altra", "munmap", "order-9", 0.3, 1104.8, 0.1),
            ("m2-vm", "Apple M2 VM", "munmap", "order-0", 0.6, 1.6, 0.6),
            ("m2-vm", "Apple M2 VM", "munmap", "order-9", 0.4, 233.6, 0.7),
        ],
    ),
    (
        "contpte-batch",
        &[
            ("altra-metal", "Ampere Altra", "munmap", "order-0", 0.5, -0.3, 0.4),
            ("altra-metal", "Ampere Altra", "munmap", "order-9", 0.3, 2.7, 0.1),
            ("m2-vm", "Apple M2 VM", "munmap", "order-0", 0.6, 1.9, 0.3),
            ("m2-vm", "Apple M2 VM", "munmap", "order-9", 0.4, -3.9, 0.4),
        ],
    ),
];

/// The benchmark's workload: 1 GiB populated with `folio` folios, then the measured
/// phase. Order-9 folios are pte-mapped by splitting each PMD mapping with an
/// mprotect of one page there and back (the folios stay whole), as the seed's
/// "pte-mapped order-9" setting has them.
fn workload(bench: &str, folio: &str) -> String {
    let mut w = String::new();
    match folio {
        "order-0" => w += "mmap buf 1G nohugepage populate\n",
        _ => {
            w += "mmap buf 1G hugepage\ntouch buf\n";
            for i in 0..512 {
                w += &format!("mprotect buf {}M 4K r\n", 2 * i);
            }
            w += "mprotect buf 0 1G rw\n";
        }
    }
    w + match bench {
        "dontneed" => "mark measured\nmadvise buf 0 1G dontneed step=4K\n",
        _ => "mark measured\nmunmap buf\n",
    }
}

/// The kernels compared, as variant sets: (name, zap, contpte).
const KERNELS: &[(&str, &str, &str)] = &[
    // The seed's before and after: 03/16's loop with nr = 1 is the per-pte path.
    ("per-pte", "per-pte", "off"),
    // The contpte v5 cover's baseline, contpte-basic and contpte-batch.
    ("batched", "batched", "off"),
    ("contpte-basic", "per-pte", "on"),
    ("contpte-batch", "batched", "on"),
];

/// Why a cell whose two kernels do the same counted work can still change.
const CODEGEN: &str = "no counted event differs between the two kernels on arm64: the change is in the instructions per pte (code generation), which the model does not count";

/// Why the model's change of a cell is no measure of the seed's: the two kernels do
/// the same counted work, or differ only in events with no cost.
fn unmodeled(a: &Counters, b: &Counters, base_ns: f64, after_ns: f64) -> Option<String> {
    if a == b {
        return Some(CODEGEN.to_string());
    }
    let differ: Vec<&str> = a
        .keys()
        .chain(b.keys())
        .filter(|k| a.get(*k) != b.get(*k))
        .map(String::as_str)
        .collect::<std::collections::BTreeSet<_>>()
        .into_iter()
        .collect();
    (base_ns == after_ns).then(|| {
        format!(
            "the two kernels differ only in events with no cost ({}), and in instructions per pte, which the model does not count",
            differ.join(", ")
        )
    })
}

/// For a disagreeing cell: the events whose modeled time differs between the two
/// kernels, so the reader sees all the model has to move the figure with.
fn time_differs(base: &BTreeMap<String, f64>, after: &BTreeMap<String, f64>) -> String {
    let at = |m: &BTreeMap<String, f64>, k: &str| m.get(k).copied().unwrap_or(0.0);
    let differ: Vec<String> = base
        .keys()
        .chain(after.keys())
        .collect::<std::collections::BTreeSet<_>>()
        .into_iter()
        .filter(|k| at(base, k) != at(after, k))
        .map(|k| format!("{k} {:+.0} ns", at(after, k) - at(base, k)))
        .collect();
    format!(
        "; the model's two kernels differ in modeled time only in {}: nothing the model counts moves the other way, so what does on this machine is not modeled",
        differ.join(", ")
    )
}

pub fn run(r: &mut Reproduction, software: &Profile, kernel: Release) -> Result<(), String> {
    let mut notes = vec![
        "the seed's table: v4 03/16 on arm64, where pte_batch_remaining() is the generic one returning 1 (arm64's override is 16/16 of the series), so zap_pte_range clears pte by pte before and after: both sides are the model's zap=per-pte, contpte off; the seed calls its figures code-generation effects (\"equivalent (and equally performant)\"), and the model counts the same work on both sides".to_string(),
        "the contpte table: the contpte series' own munmap figures, Ryan Roberts, \"[PATCH v5 00/25] Transparent Contiguous PTEs for User Mappings\" <20240202080756.1453939-1-ryan.roberts@arm.com> (2024-02-02): baseline = the model's zap=batched (10ebac4f95e7) with contpte off; contpte-basic = contpte on, arm64 clearing pte by pte and unfolding each block first = the model's zap=per-pte with contpte on (its per-pte rmap removal comes with it); contpte-batch = zap=batched with contpte on. The model's contpte folds blocks again after mprotect as 6.18 does (the series' patch 25, not in contpte-basic or contpte-batch)".to_string(),
        "both tables give % changes only: the model's are changes of the modeled time of the measured phase; a change inside the seed's spread (its stdev plus the baseline's) is noise".to_string(),
    ];
    let mut counts: BTreeMap<(&str, &str, &str), Counters> = BTreeMap::new();
    for bench in ["dontneed", "munmap"] {
        for folio in ["order-0", "order-9"] {
            let name = format!("seed000-{bench}-{folio}.wl");
            let w = parse_str(&name, &workload(bench, folio)).map_err(|e| e.to_string())?;
            for &(k, zap, contpte) in KERNELS {
                // The contpte table is munmap's only.
                if bench == "dontneed" && k != "per-pte" {
                    continue;
                }
                let c = phase_counts(&w, kernel, &[("zap", zap), ("contpte", contpte)], "measured")?;
                counts.insert((bench, folio, k), c);
            }
        }
    }
    let mut costs = BTreeMap::new();
    for m in ["m2-vm", "altra-metal"] {
        let c = Costs::for_seed(m, SEED, software)?;
        notes.extend(c.notes.iter().cloned());
        costs.insert(m, c);
    }
    let tables: Vec<(&str, &str, &str, &[Published])> =
        std::iter::once(("per-pte", "per-pte", "after-change (v4 03/16)", SEED_CELLS))
            .chain(CONTPTE_CELLS.iter().map(|&(k, cells)| ("batched", k, k, cells)))
            .collect();
    for (base, changed, variant, cells) in tables {
        for &(machine, name, bench, folio, base_sd, change, sd) in cells {
            let costs = &costs[machine];
            let experiment = match base {
                "per-pte" => format!("{bench} microbench, % change (the seed's: v4 03/16, contpte off)"),
                _ => format!("{bench} microbench, % change (contpte v5 cover: contpte on)"),
            };
            let column = format!("{name} {folio}");
            let (b, a) = (&counts[&(bench, folio, base)], &counts[&(bench, folio, changed)]);
            let (base_ns, base_by) = costs.time_ns(b);
            let (after_ns, after_by) = costs.time_ns(a);
            let model = if base_ns > 0.0 {
                Ok(super::pct(after_ns, base_ns))
            } else {
                Err("the measured phase has no costed event on this machine".to_string())
            };
            let mut row = Cell {
                seed: SEED,
                experiment: &experiment,
                machine: &column,
                variant,
                unit: "%",
                seed_value: published(change),
                seed_stdev: Some(published(sd)),
                model,
                figure: Figure::Change {
                    baseline: if base == "per-pte" {
                        "baseline"
                    } else {
                        "baseline (zap batched, contpte off)"
                    },
                    baseline_stdev: Some(published(base_sd)),
                },
                unmodeled: unmodeled(a, b, base_ns, after_ns),
            }
            .row();
            if row.verdict == super::Verdict::Disagrees {
                let why = time_differs(&base_by, &after_by);
                row.reason.get_or_insert_with(String::new).push_str(&why);
            }
            r.rows.push(row);
            for (v, by) in [("baseline", base_by), (variant, after_by)] {
                r.breakdowns.push(Breakdown {
                    seed: SEED.into(),
                    experiment: experiment.clone(),
                    machine: column.clone(),
                    variant: v.into(),
                    by_event_ns: by,
                });
            }
        }
    }
    r.notes.insert(SEED.into(), notes);
    Ok(())
}
