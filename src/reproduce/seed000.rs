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
use crate::time::insns::Table;
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

/// The benchmark's workload: 1 GiB (`pmds` 2M ranges: 512) populated with `folio`
/// folios, then the measured phase. Order-9 folios are pte-mapped as David
/// Hildenbrand's benchmark (the contpte v5 cover's "Thanks to David for sharing his
/// benchmarks") does "by temporarily splitting the VMAs": one page's vm_flags changed
/// and changed back (MADV_DONTFORK/MADV_DOFORK in the copy Dev Jain published,
/// <20250718090244.21092-1-dev.jain@arm.com>; the January 2024 version was not found;
/// here MADV_NOHUGEPAGE/MADV_HUGEPAGE, the same split and merge), so the PMD is split
/// with set_ptes and no pte changes after: every 64K block stays contiguous. (An
/// mprotect of one page and back would unfold its block for good, the folio then
/// zapped in two batches; Debian's 6.12 does so too.)
fn workload(bench: &str, folio: &str, pmds: u64) -> String {
    let mut w = String::new();
    let size = 2 * pmds;
    match folio {
        "order-0" => w += &format!("mmap buf {size}M nohugepage populate\n"),
        _ => {
            w += &format!("mmap buf {size}M hugepage\ntouch buf\n");
            for i in 0..pmds {
                w += &format!(
                    "madvise buf {}M 4K nohugepage\nmadvise buf {}M 4K hugepage\n",
                    2 * i,
                    2 * i
                );
            }
        }
    }
    w + &match bench {
        "dontneed" => format!("mark measured\nmadvise buf 0 {size}M dontneed step=4K\n"),
        _ => "mark measured\nmunmap buf\n".to_string(),
    }
}

/// The kernels compared, as variant sets: (name, sets).
const KERNELS: &[(&str, &[(&str, &str)])] = &[
    // The seed's before and after: 03/16's loop with nr = 1 is the per-pte path.
    ("per-pte", &[("zap", "per-pte"), ("contpte", "off")]),
    // The contpte v5 cover's baseline, contpte-basic and contpte-batch. The series'
    // contpte_ptep_get reads all 16 entries of a block (the early exit is 093ae7a033cf,
    // 6.17), so `ptep_get=full-scan` whatever `--kernel` says.
    ("batched", &[("zap", "batched"), ("contpte", "off")]),
    (
        "contpte-basic",
        &[("zap", "per-pte"), ("contpte", "on"), ("ptep_get", "full-scan")],
    ),
    (
        "contpte-batch",
        &[("zap", "batched"), ("contpte", "on"), ("ptep_get", "full-scan")],
    ),
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
        "; the model's two kernels differ in modeled time in {}",
        differ.join(", ")
    )
}

/// The seed's author on how far its machines' figures for this code can be trusted
/// to agree: the M2 VM's standing in the v5 cover, and the same kernel binary moving
/// opposite ways on Altra and the M2 VM two days before.
const AUTHOR: &str = "the seed's author shows the M2 VM's figures \"for reference, although experience suggests this might not be the most reliable for performance numbers of this sort\" (v5 cover), and when the same kernel binary went opposite ways on Altra and on the M2 VM two days before (fork order-0: -1.3 % and +17 %) said \"We know this code is very sensitive - 1 cycle makes a big difference. So could easily be code layout, branch prediction, etc...\" (Ryan Roberts, 2024-01-31 11:49, in \"Re: [PATCH v3 00/15] mm/memory: optimize fork() with PTE-mapped THP\", thread <20240129124649.189745-1-david@redhat.com>)";

/// Why a disagreeing cell cannot agree: when the seed's own figures for the same two
/// kernels go opposite ways on the other machine (outside its noise there) while the
/// model's change has one sign on both, no model whose counts do not depend on the
/// machine and whose software times differ between machines by clock alone can agree
/// with both; said with the author's word on these figures.
fn machines_split(here: &super::Row, other: &super::Row) -> String {
    let (Some(m), Some(o)) = (here.model_value, other.model_value) else {
        return String::new();
    };
    let seed_split = here.seed_value.signum() != other.seed_value.signum() && other.verdict != super::Verdict::Noise;
    if !seed_split || m.signum() != o.signum() {
        return ": what moves this cell the other way on this machine is not modeled".to_string();
    }
    format!(
        ". The seed's own figures for these two kernels go opposite ways on {} ({:+}) and here ({:+}), where the model's change has one sign on both ({m:+.2}, {o:+.2}): its counts are the same on both machines and its software times differ between them by clock alone (an assumed IPC of 2 on each), so no figure it could give agrees with both; what makes one machine slower with the same instructions (each core's time for them, the code's layout) is not modeled. And {AUTHOR}",
        other.machine, other.seed_value, here.seed_value
    )
}

pub fn run(r: &mut Reproduction, software: &Profile, kernel: Release) -> Result<(), String> {
    let mut notes = vec![
        "the seed's table: v4 03/16 on arm64, where pte_batch_remaining() is the generic one returning 1 (arm64's override is 16/16 of the series), so zap_pte_range clears pte by pte before and after: both sides are the model's zap=per-pte, contpte off; the seed calls its figures code-generation effects (\"equivalent (and equally performant)\"), and the model counts the same work on both sides".to_string(),
        "the contpte table: the contpte series' own munmap figures, Ryan Roberts, \"[PATCH v5 00/25] Transparent Contiguous PTEs for User Mappings\" <20240202080756.1453939-1-ryan.roberts@arm.com> (2024-02-02): baseline = the model's zap=batched (10ebac4f95e7) with contpte off; contpte-basic = contpte on, arm64 clearing pte by pte and unfolding each block first = the model's zap=per-pte with contpte on (its per-pte rmap removal comes with it); contpte-batch = zap=batched with contpte on; both with the series' contpte_ptep_get, which reads all 16 entries of a block (ptep_get=full-scan). No block is unfolded before the munmap, so the series' folding (patch 25, in neither) has nothing to do".to_string(),
        "folio_pte_batch's steps (kernel.folio_pte_batch.reads: the baseline reads each of a folio's 511 ptes after the first, contpte-batch steps over a contiguous block in one contpte_ptep_get) are timed from the instructions Debian's 6.12 guest ran for them (data/seed000-munmap-insns.json), at each machine's ns per kernel instruction; the host-calibrated time per pte zapped (kernel.zap_pte_range.ptes, equal in all four kernels) already holds x86's own step, so the steps are counted twice there and the model's changes are the smaller for it. The same guest runs 21 % fewer kernel instructions for the whole munmap with every block contiguous than with none (workloads/seed000-munmap-order9-64m.wl against ...-nocont-64m.wl)".to_string(),
        "both tables give % changes only: the model's are changes of the modeled time of the measured phase; a change inside the seed's spread (its stdev plus the baseline's) is noise".to_string(),
    ];
    let mut counts: BTreeMap<(&str, &str, &str), Counters> = BTreeMap::new();
    for bench in ["dontneed", "munmap"] {
        for folio in ["order-0", "order-9"] {
            let name = format!("seed000-{bench}-{folio}.wl");
            let w = parse_str(&name, &workload(bench, folio, 512)).map_err(|e| e.to_string())?;
            for &(k, sets) in KERNELS {
                // The contpte table is munmap's only.
                if bench == "dontneed" && k != "per-pte" {
                    continue;
                }
                let c = phase_counts(&w, kernel, sets, "measured")?;
                counts.insert((bench, folio, k), c);
            }
        }
    }
    let mut costs = BTreeMap::new();
    for m in ["m2-vm", "altra-metal"] {
        let c = Costs::for_seed_insns(m, SEED, software, &Table::seed000_munmap())?;
        notes.extend(c.notes.iter().cloned());
        costs.insert(m, c);
    }
    let tables: Vec<(&str, &str, &str, &[Published])> =
        std::iter::once(("per-pte", "per-pte", "after-change (v4 03/16)", SEED_CELLS))
            .chain(CONTPTE_CELLS.iter().map(|&(k, cells)| ("batched", k, k, cells)))
            .collect();
    // Each row's index and what pairs it with the other machine's.
    let mut judged: Vec<(usize, &str, &str, &str, String)> = Vec::new();
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
            judged.push((r.rows.len(), name, folio, variant, experiment.clone()));
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
    for (i, name, folio, variant, experiment) in &judged {
        if r.rows[*i].verdict != super::Verdict::Disagrees {
            continue;
        }
        let other = judged
            .iter()
            .find(|(_, n, f, v, e)| n != name && f == folio && v == variant && e == experiment)
            .map(|(j, ..)| r.rows[*j].clone());
        if let Some(other) = other {
            let why = machines_split(&r.rows[*i], &other);
            r.rows[*i].reason.get_or_insert_with(String::new).push_str(&why);
        }
    }
    r.notes.insert(SEED.into(), notes);
    Ok(())
}

#[cfg(test)]
mod tests {
    use super::*;

    fn counts(k: &str, pmds: u64) -> Counters {
        let sets = KERNELS.iter().find(|(n, _)| *n == k).unwrap().1;
        let w = parse_str("seed000-munmap-order-9.wl", &workload("munmap", "order-9", pmds)).unwrap();
        phase_counts(&w, Release(7, 3), sets, "measured").unwrap()
    }

    /// The contpte table's order-9 munmap: contpte-batch zaps each folio in one batch,
    /// stepping over its 32 contiguous blocks with one full 16-entry contpte_ptep_get
    /// each, where the baseline reads each pte; both issue the same TLBIs and barriers.
    #[test]
    fn contpte_batch_reads_each_block_once_and_flushes_as_the_baseline_does() {
        let (base, batch) = (counts("batched", 4), counts("contpte-batch", 4));
        let c = |m: &Counters, k: &str| m.get(k).copied().unwrap_or(0);
        assert_eq!(c(&base, "kernel.folio_pte_batch.reads"), 4 * 511);
        assert_eq!(c(&batch, "kernel.folio_pte_batch.reads"), 4 * 31);
        assert_eq!(c(&batch, "kernel.zap_present_ptes"), 4);
        assert_eq!(c(&batch, "kernel.contpte_ptep_get"), 4 * 32);
        assert_eq!(c(&batch, "arch.contpte.ptep_get.reads"), 4 * 32 * 16);
        let hw = |m: &Counters| -> Vec<(String, i64)> {
            m.iter()
                .filter(|(k, _)| k.starts_with("arch.tlbi.") || k.starts_with("arch.dsb.") || *k == "arch.isb")
                .map(|(k, v)| (k.clone(), *v))
                .collect()
        };
        assert!(c(&base, "arch.tlbi.total") > 0);
        assert_eq!(hw(&base), hw(&batch));
    }

    fn row(machine: &str, seed: f64, model: f64) -> super::super::Row {
        Cell {
            seed: SEED,
            experiment: "munmap",
            machine,
            variant: "contpte-batch",
            unit: "%",
            seed_value: seed,
            seed_stdev: Some(0.1),
            model: Ok(model),
            figure: Figure::Change {
                baseline: "baseline",
                baseline_stdev: Some(0.3),
            },
            unmodeled: None,
        }
        .row()
    }

    /// A cell whose machines the seed has going opposite ways, the model one way on
    /// both, says no figure can agree with both and gives the author's word; one whose
    /// machines agree in the seed says only that what moves it is not modeled.
    #[test]
    fn a_disagreement_the_seeds_machines_split_on_says_so_with_the_authors_word() {
        let (altra, m2) = (
            row("Ampere Altra order-9", 2.7, -14.0),
            row("Apple M2 VM order-9", -3.9, -15.0),
        );
        let why = machines_split(&altra, &m2);
        assert!(
            why.contains("opposite ways on Apple M2 VM order-9 (-3.9) and here (+2.7)"),
            "{why}"
        );
        assert!(why.contains("<20240129124649.189745-1-david@redhat.com>"), "{why}");
        let same = machines_split(&altra, &row("Apple M2 VM order-9", 3.9, -15.0));
        assert!(!same.contains("opposite") && same.contains("not modeled"), "{same}");
    }
}
