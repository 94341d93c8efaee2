//! Seed 001: reclaim that flushes the TLB per page (ptep_clear_flush: a TLBI and a
//! DSB ISH waiting for it) against the batched, deferred flush (TLBIs issued without
//! waiting, one DSB at the batch's end). The seed gives ptep_clear_flush's share of
//! the cycles of its swap-in/page-out microbenchmark on an 8-core Snapdragon 888 and a
//! ~100-core Kunpeng 920, and the benchmark's speed-up on the Snapdragon.

use super::{pct, phase_counts, published, Breakdown, Cell, Costs, Figure, PerPage, Reproduction};
use crate::report::Counters;
use crate::sim::kernels::Release;
use crate::time::Profile;
use crate::workload::parse_str;

const SEED: &str = "001";
/// The experiments' names: also the keys stored real-kernel measurements name.
pub(crate) const SHARE_EXPERIMENT: &str = "ptep_clear_flush share of cycles, before the change";
pub(crate) const SPEEDUP_EXPERIMENT: &str = "microbenchmark elapsed time, % change";
/// The seed's benchmark itself: shared anonymous memory read back and paged out.
const WORKLOAD_PATH: &str = "workloads/seed001-shmem-loop.wl";
const WORKLOAD: &str = include_str!("../../workloads/seed001-shmem-loop.wl");
/// The kernel behaviour the seed's benchmark ran on (the series' base, 6.5-rc): a
/// shmem page read back from zram came through the swap cache with the cluster
/// readahead (before 6.14), and its read fault mapped it clean (before 6.15), so the
/// page-out's unmap found no dirty pte to wait for.
const SEED_KERNEL: &[(&str, &str)] = &[("shmem-swapin", "cluster"), ("fault-dirty", "write")];
/// The work ptep_clear_flush does that the deferred batch takes out of the loop.
const FLUSH_EVENTS: &[&str] = &[
    "arch.dsb.ishst",
    "arch.tlbi.vae1is",
    "arch.tlbi.vale1is",
    "arch.dsb.ish",
    "kernel.ptep_clear_flush",
];

/// The loop's swap I/O and shmem work, whose time the share's denominator needs: its
/// instructions counted on Debian's 6.12 guest (`time::insns::Table::seed001_loop`).
const SWAP_AND_SHMEM_WORK: &[&str] = &[
    "kernel.shmem_fault",
    "kernel.shmem_swapin_folio",
    "kernel.shmem_writeout",
];

/// The per-page experiments: the workload, its phase, the vmstat counter of its
/// pages, and the machine it needs beyond the CPUs.
struct PerPageExperiment {
    name: &'static str,
    path: &'static str,
    src: &'static str,
    phase: &'static str,
    pages: &'static str,
    sets: &'static [(&'static str, &'static str)],
}

const PER_PAGE: &[PerPageExperiment] = &[
    PerPageExperiment {
        name: "reclaim: swap-out of written pages to zram",
        path: "workloads/seed001-swapout-threads.wl",
        src: include_str!("../../workloads/seed001-swapout-threads.wl"),
        phase: "pageout",
        pages: "vmstat.pswpout",
        sets: &[],
    },
    PerPageExperiment {
        name: "reclaim: discard of lazyfree pages",
        path: "workloads/seed001-lazyfree-threads.wl",
        src: include_str!("../../workloads/seed001-lazyfree-threads.wl"),
        phase: "pageout",
        pages: "vmstat.pglazyfreed",
        sets: &[],
    },
    PerPageExperiment {
        name: "migration: move_pages to the other node",
        path: "workloads/seed001-migrate-threads.wl",
        src: include_str!("../../workloads/seed001-migrate-threads.wl"),
        phase: "migrate",
        pages: "vmstat.pgmigrate_success",
        sets: &[("nodes", "2")],
    },
];

/// The events of the flush work, by flavour: what the per-page time sums (the DSB
/// ISHST before the TLBIs, the TLBIs, the DSB ISH waiting for them).
const ARM64_FLUSH: &[&str] = &[
    "arch.dsb.ishst",
    "arch.tlbi.vale1is",
    "arch.tlbi.vae1is",
    "arch.tlbi.aside1is",
    "arch.dsb.ish",
];
const X86_FLUSH: &[&str] = &["arch.ipi", "arch.tlbi.vale1", "arch.tlbi.aside1", "arch.dsb.nsh"];

/// The machine each flavour and size is costed on: seed 001's own two for arm64; this
/// host's calibration for x86, the only machine with a measured IPI.
fn per_page_machine(flavour: &str, cpus: usize) -> &'static str {
    match (flavour, cpus) {
        ("x86", _) => "calibrated",
        (_, 8) => "snapdragon-888",
        _ => "kunpeng-920",
    }
}

/// Seed 001's per-page figures: each experiment on 8 and 128 CPUs, with arm64's and
/// x86's shootdown, before and after.
fn per_page(r: &mut Reproduction, software: &Profile, kernel: Release) -> Result<Vec<String>, String> {
    let mut notes = vec![
        "per page: the process has a thread running on every CPU (`threads all`); with a single thread x86 sends no IPI at all (the mm is on one CPU), while arm64 broadcasts the same TLBIs".to_string(),
        "per page, x86: each IPI is charged this host's measured round trip to one CPU (a 2-vCPU KVM guest, where an IPI exits to the hypervisor), as if the targets of one round were served one after another; x86 sends a round's IPIs together and waits once, so for many CPUs this is an upper bound (no send-to-many cost was measurable on two CPUs)".to_string(),
        "per page on 128 CPUs, arm64: costed with kunpeng-920's measured TLBI and DSB, taken on a machine of about 100 cores; no public figure gives their growth with the CPU count (costs.md §1b), so the 128-CPU time is that machine's".to_string(),
    ];
    let c = |counts: &Counters, k: &str| counts.get(k).copied().unwrap_or(0) as f64;
    for e in PER_PAGE {
        let (experiment, path, pages_key) = (e.name, e.path, e.pages);
        let w = parse_str(path, e.src).map_err(|e| e.to_string())?;
        for flavour in ["arm64", "x86"] {
            for cpus in [8usize, 128] {
                let machine = per_page_machine(flavour, cpus);
                let costs = Costs::for_seed(machine, SEED, software)?;
                for variant in ["sync", "deferred"] {
                    let n = cpus.to_string();
                    let mut sets = vec![("tlb-batch", variant), ("tlb-flush", flavour), ("cpus", n.as_str())];
                    sets.extend_from_slice(e.sets);
                    let counts = phase_counts(&w, kernel, &sets, e.phase)?;
                    let pages = c(&counts, pages_key);
                    if pages == 0.0 {
                        return Err(format!("{path}: no page reclaimed ({pages_key} is 0)"));
                    }
                    let tlbi = c(&counts, "arch.tlbi.total");
                    let waits = c(&counts, "arch.dsb.ish") + c(&counts, "kernel.flush_tlb_multi");
                    let flushes = [
                        "kernel.ptep_clear_flush",
                        "kernel.arch_tlbbatch_flush",
                        "kernel.arch_flush_tlb_batched_pending",
                    ]
                    .iter()
                    .map(|k| c(&counts, k))
                    .sum::<f64>();
                    let events = if flavour == "x86" { X86_FLUSH } else { ARM64_FLUSH };
                    let (_, by) = costs.time_ns(&counts);
                    let uncosted: Vec<&str> = events
                        .iter()
                        .copied()
                        .filter(|e| {
                            c(&counts, e) > 0.0 && !matches!(costs.profile.lookup(e), crate::time::Lookup::Costed(..))
                        })
                        .collect();
                    let flush_ns = uncosted
                        .is_empty()
                        .then(|| events.iter().filter_map(|e| by.get(*e)).sum::<f64>() / pages);
                    if !uncosted.is_empty() {
                        notes.push(format!(
                            "per page, {flavour} on {machine}: no cost for {}, so no time",
                            uncosted.join(", ")
                        ));
                    }
                    r.per_page.push(PerPage {
                        seed: SEED.into(),
                        experiment: experiment.to_string(),
                        flavour: flavour.into(),
                        cpus,
                        variant: variant.into(),
                        pages: pages as u64,
                        tlbi: tlbi / pages,
                        ipi: c(&counts, "arch.ipi") / pages,
                        waits: waits / pages,
                        flushes: flushes / pages,
                        machine: machine.into(),
                        flush_ns,
                    });
                }
            }
        }
    }
    Ok(notes)
}

pub fn run(r: &mut Reproduction, software: &Profile, kernel: Release) -> Result<(), String> {
    let w = parse_str(WORKLOAD_PATH, WORKLOAD).map_err(|e| e.to_string())?;
    let mut phase = std::collections::BTreeMap::new();
    for batch in ["sync", "deferred"] {
        let mut sets = vec![("tlb-batch", batch)];
        sets.extend_from_slice(SEED_KERNEL);
        phase.insert(batch, phase_counts(&w, kernel, &sets, "loop")?);
    }
    let mut notes = vec![
        "a broadcast TLBI's cost against the CPU count has no public curve (costs.md §1b): each machine's TLBI and DSB costs are its own, not scaled by its CPUs".to_string(),
        format!("the seed's benchmark (patch 4/4's commit text), as the seed ran it: 1 MiB MAP_SHARED|MAP_ANONYMOUS (shmem) written, then every page read back (a swap-in) and MADV_PAGEOUT, on zram, on one CPU ({WORKLOAD_PATH}: 100 rounds where the seed ran 10,000, every round after the first the same work). Its kernel's behaviour (the series' base, 6.5-rc) is set over the preset: shmem-swapin=cluster and fault-dirty=write (`foliolab kernels`)"),
        "the loop's swap and shmem work (reclaim, the swap cache, zram's write and read, the shmem fault) is timed from the instructions Debian's 6.12 guest ran for the same loop (data/seed001-shmem-loop-insns.json), at each machine's ns per kernel instruction (an assumed IPC of 2). The workload writes one byte per page, so the guest's zram compresses each page with LZ4 (about 10,000 of the 28,000 instructions per page and round are LZ4 and zsmalloc's); the seed's benchmark fills its pages with 0x88, which zram stores as same-filled pages (a scan of the page and, on reading, a fill; no compression), so that part of the denominator is the compressing path's, more than the seed's zram did".to_string(),
    ];
    let table = crate::time::insns::Table::seed001_loop();
    for (machine, share) in [("snapdragon-888", 5.36), ("kunpeng-920", 16.99)] {
        let costs = Costs::for_seed_insns(machine, SEED, software, &table)?;
        notes.extend(costs.notes.iter().cloned());
        // Said, not silently left at zero: the swap I/O and shmem work of the loop
        // that no cost covers is missing from the share's denominator.
        let uncosted: Vec<String> = (SWAP_AND_SHMEM_WORK.iter())
            .filter(|k| !matches!(costs.profile.lookup(k), crate::time::Lookup::Costed(..)))
            .filter_map(|k| phase["sync"].get(*k).filter(|n| **n > 0).map(|n| format!("{k} {n}")))
            .collect();
        if !uncosted.is_empty() {
            notes.push(format!(
                "{machine}, the loop before the change: no time for {} (the machine has no ns per kernel instruction); the share's denominator leaves them out",
                uncosted.join(", ")
            ));
        }
        let (total, by) = costs.time_ns(&phase["sync"]);
        // The flush's instructions must be costed; its kernel function is a name for them.
        let uncosted: Vec<&str> = FLUSH_EVENTS
            .iter()
            .copied()
            .filter(|e| e.starts_with("arch."))
            .filter(|e| phase["sync"].get(*e).copied().unwrap_or(0) > 0 && !by.contains_key(*e))
            .collect();
        let model = if uncosted.is_empty() && total > 0.0 {
            let flush: f64 = FLUSH_EVENTS.iter().filter_map(|e| by.get(*e)).sum();
            Ok(flush / total * 100.0)
        } else {
            Err(format!(
                "no public cost for {} on {machine} (the profile says so)",
                uncosted.join(", ")
            ))
        };
        r.rows.push(
            Cell {
                seed: SEED,
                experiment: SHARE_EXPERIMENT,
                machine,
                variant: "sync",
                unit: "%",
                seed_value: published(share),
                seed_stdev: None,
                model,
                figure: Figure::Level,
                unmodeled: None,
            }
            .row(),
        );
        r.breakdowns.push(Breakdown {
            seed: SEED.into(),
            experiment: "swap-in and page-out loop, before the change".into(),
            machine: machine.into(),
            variant: "sync".into(),
            by_event_ns: by,
        });
    }
    // The speed-up was measured on the Snapdragon 888 only: 0:14.69 -> 0:13.80.
    let costs = Costs::for_seed_insns("snapdragon-888", SEED, software, &table)?;
    let (sync, _) = costs.time_ns(&phase["sync"]);
    let (deferred, by_def) = costs.time_ns(&phase["deferred"]);
    let tlb_costed = by_def.keys().any(|k| k.starts_with("arch.tlbi") || k == "arch.dsb.ish");
    let model = if tlb_costed {
        Ok(pct(deferred, sync))
    } else {
        Err(format!(
            "snapdragon-888 has no TLBI or DSB cost: the two variants differ only in uncosted work ({sync:.0} ns against {deferred:.0} ns modeled)"
        ))
    };
    r.rows.push(
        Cell {
            seed: SEED,
            experiment: SPEEDUP_EXPERIMENT,
            machine: "snapdragon-888",
            variant: "deferred",
            unit: "%",
            seed_value: pct(published(13.80), published(14.69)),
            seed_stdev: None,
            model,
            figure: Figure::Change {
                baseline: "sync",
                baseline_stdev: None,
            },
            unmodeled: None,
        }
        .row(),
    );
    r.breakdowns.push(Breakdown {
        seed: SEED.into(),
        experiment: "swap-in and page-out loop".into(),
        machine: "snapdragon-888".into(),
        variant: "deferred".into(),
        by_event_ns: by_def,
    });
    notes.extend(per_page(r, software, kernel)?);
    r.notes.insert(SEED.into(), notes);
    Ok(())
}
