//! Calibration: this host's own costs for the generic mm software, measured.
//!
//! The fault path, the zap loop, rmap, folio allocation and freeing, page zeroing and
//! copying, swap-out and swap-in, reclaim's scan, collapse and shmem's page cache are
//! the same C code on x86_64 and arm64, and this host runs it. Timed
//! workloads (each phase's wall time, measured around every op by the process that
//! ran it) are set against the model's counts of the same phases, and a non-negative
//! least-squares fit, weighted so that every phase counts by its relative error, gives
//! a cost per event. The model's counts come from a run with `contpte=off`: an x86_64
//! host has no contiguous bit, so that is the software it executes.
//!
//! ```text
//!   phase i:  t_i  ~  sum_f  count_{i,f} * cost_f        (cost_f >= 0)
//!   fit:      minimise  sum_i ((sum_f count_{i,f} cost_f - t_i) / t_i)^2
//! ```
//!
//! With counted instructions (`--target qemu-x86_64` set up): the same phases run on
//! the host's release under QEMU, whose plugin counts the kernel's instructions per
//! function per op exactly. The software features' instructions per count come from
//! a regression of each phase's kernel instructions (less the page zeroing and
//! copying functions', which QEMU counts per byte moved) on the model's counts, the
//! same weighted NNLS; the host's time is then those instructions at one fitted cost
//! per instruction, plus page zeroing and copying fitted apart (memory-bound), and
//! so is any feature no counted phase has (`fitted_apart`):
//!
//! ```text
//!   guest:  insns_i  ~  sum_f  count_{i,f} * insns_f      (software features)
//!   host:   t_i  ~  ns_per_insn * sum_f count_{i,f} insns_f + sum_a count_{i,a} * cost_a   (a apart)
//! ```

use super::profile::{Cost, Features, Profile, Quality, Tlb};
use crate::report::Report;
use ndarray::{Array1, Array2};

/// The events fitted, each with what one count stands for on the host. TLBI and DSB
/// are arm64's; an x86_64 host's own TLB flushing is folded into the per-pte costs.
/// A pte store itself (arch.pte.write) is not fitted: it is a nanosecond store inside
/// work the per-pte kernel counters already stand for, and a fit would hand it that
/// work's time (which map_mem, whose loop is little else than stores, does not have).
pub const FEATURES: &[(&str, &str)] = &[
    (
        "vmstat.pgfault",
        "a page fault: exception entry and return, handle_mm_fault",
    ),
    ("kernel.folio_alloc", "a folio allocated for a fault"),
    ("arch.page.zero", "a page zeroed (clear_page)"),
    ("arch.page.copy", "a page copied (copy-on-write)"),
    ("kernel.zap_pte_range.ptes", "a pte visited by zap_pte_range"),
    (
        "kernel.change_pte_range.ptes",
        "a pte visited by change_pte_range (mprotect)",
    ),
    ("kernel.folio_remove_rmap_ptes", "a folio_remove_rmap_ptes call"),
    ("kernel.folio_free", "a folio freed to the buddy allocator"),
    ("kernel.syscall", "a system call made by an op"),
    (
        "vmstat.pswpout",
        "a page written to swap (swap_writeout: zram compresses and stores it)",
    ),
    (
        "vmstat.pswpin",
        "a page read from swap (swap_read_folio: zram decompresses it)",
    ),
    (
        "vmstat.pgscan_anon",
        "an anonymous page scanned by reclaim (taken off the LRU, its references checked through the rmap)",
    ),
    (
        "vmstat.thp_collapse_alloc",
        "a collapse's own work beyond the pages it copies (lru_add_drain_all, the scan, isolation, the pmd's flush)",
    ),
    (
        "kernel.shmem_fault",
        "a shmem fault: shmem_get_folio's page-cache lookup or insert, its charge and LRU add",
    ),
    (
        "kernel.dup_mmap",
        "a fork: the caller's CPU time in fork(), copy_process and dup_mmap with the page tables it copies",
    ),
    (
        "kernel.exit_mmap",
        "an exit beyond the pages it frees: the exiting process's time on its CPU, do_exit and exit_mmap's teardown",
    ),
    (
        "kernel.swapon",
        "a swapon: the zram device sized, the swap header written, the swap area and its maps set up",
    ),
];

/// Features whose fitted time is this host's, not the mm software an arm64 machine
/// shares with it: a fork copies, and an exit tears down, the runner's own address
/// space (its binary, heap and perf ring: an exit is 1.0 to 1.7 ms on the CPU here
/// whatever the workload), and a swapon's is zram's setup waiting on the block layer. The host profile prices them; another
/// machine's profile takes none of them from it (`Profile::with_software`).
pub const HOST_ONLY: &[&str] = &["kernel.dup_mmap", "kernel.exit_mmap", "kernel.swapon"];

/// The features whose time is the memory moved, fitted on host time alone: their
/// instructions under QEMU are its count of `rep stos`/`rep movs` iterations, one per
/// byte, which says nothing of the host's time.
pub const MEMORY_BOUND: &[&str] = &["arch.page.zero", "arch.page.copy"];

/// The x86-64 kernel's page zeroing and copying functions (arch/x86/lib), whose
/// instructions the instruction regression leaves out (`MEMORY_BOUND`).
pub const MEMORY_BOUND_FUNCTIONS: &[&str] = &[
    "clear_page_erms",
    "clear_page_rep",
    "clear_page_orig",
    "copy_page",
    "copy_mc_enhanced_fast_string",
    "copy_mc_fragile",
];

/// A phase's kernel instructions less the memory-bound functions' (`MEMORY_BOUND_FUNCTIONS`):
/// the software the features other than `MEMORY_BOUND` stand for.
pub fn software_insns(c: &crate::report::Counters) -> Option<f64> {
    let total = *c.get(crate::native::qemu::INSNS_KEY)?;
    let moved: i64 = MEMORY_BOUND_FUNCTIONS
        .iter()
        .filter_map(|f| c.get(&format!("{}.{f}", crate::native::qemu::INSNS_KEY)))
        .sum();
    Some((total - moved) as f64)
}

/// Features whose host time is not their instructions, priced on host time though the
/// guest counts them: a swapon ran 88K kernel instructions on the guest, tens of us at
/// the host's ns per instruction, and takes 0.6 ms on the host alone (zram's setup and
/// the swap header's write wait on the block layer). Their instructions stay in the
/// regression, so that they land on no other feature.
pub const NOT_INSNS: &[&str] = &["kernel.swapon"];

/// The software features' instructions per count: the weighted NNLS of `insns`, each
/// phase's software instructions in place of its time, on the model's counts of the
/// features the guest's instructions can price (0 for the rest: `MEMORY_BOUND`, and
/// those no counted phase has).
pub fn fit_insns(insns: &[Sample]) -> Vec<f64> {
    let apart: Vec<usize> = fitted_apart(insns)
        .into_iter()
        .filter(|&f| !NOT_INSNS.contains(&FEATURES[f].0))
        .collect();
    let soft: Vec<Sample> = insns
        .iter()
        .map(|s| Sample {
            counts: s
                .counts
                .iter()
                .enumerate()
                .map(|(f, &n)| if apart.contains(&f) { 0.0 } else { n })
                .collect(),
            ..s.clone()
        })
        .collect();
    fit(&soft)
}

/// The features the guest's instructions cannot price, fitted on host time apart: the
/// `MEMORY_BOUND` and `NOT_INSNS` ones, and any no counted phase has (the guest cannot
/// run `memlimit`, so reclaim's scan is timed on the host only; its fork and exit
/// twins take the per-mm work of a fork and an exit out of the guest's side).
pub fn fitted_apart(insns: &[Sample]) -> Vec<usize> {
    (0..FEATURES.len())
        .filter(|&f| {
            let name = FEATURES[f].0;
            MEMORY_BOUND.contains(&name) || NOT_INSNS.contains(&name) || insns.iter().all(|s| s.counts[f] == 0.0)
        })
        .collect()
}

/// The costs in ns per count when the software features cost `per_count` instructions
/// each: one ns per instruction and the `apart` features' own costs (`fitted_apart`),
/// fitted by the weighted NNLS on the host's times of `timed`. Returns the costs and
/// the ns per instruction.
pub fn fit_counted(timed: &[Sample], per_count: &[f64], apart: &[usize]) -> (Vec<f64>, f64) {
    let per_count: Vec<f64> = (per_count.iter().enumerate())
        .map(|(f, &n)| if apart.contains(&f) { 0.0 } else { n })
        .collect();
    let reduced: Vec<Sample> = timed
        .iter()
        .map(|s| Sample {
            counts: std::iter::once(predict(&per_count, &s.counts))
                .chain(apart.iter().map(|&b| s.counts[b]))
                .collect(),
            ..s.clone()
        })
        .collect();
    let x = fit(&reduced);
    let mut costs: Vec<f64> = per_count.iter().map(|n| n * x[0]).collect();
    for (j, &b) in apart.iter().enumerate() {
        costs[b] = x[1 + j];
    }
    (costs, x[0])
}

/// Phases shorter than this are left out of the fit: a phase of a few system calls
/// takes microseconds, and its time there is mostly cold caches and TLB misses of the
/// runner's own code, which no count of the model stands for.
pub const MIN_FIT_NS: f64 = 100_000.0;

/// One timed phase: its model counts and its measured time on the host.
#[derive(Clone, Debug)]
pub struct Sample {
    pub workload: String,
    pub phase: String,
    pub counts: Vec<f64>,
    pub ns: f64,
}

/// The phases of a model report and a host report of one workload, paired by
/// position (both run the same ops, so they have the same marks).
pub fn samples(model: &Report, host: &Report) -> Vec<Sample> {
    paired(model, host, |p| p.time_ns)
}

/// The phases of a model report and a `qemu-x86_64` report of one workload, each with
/// its software instructions (`software_insns`) in place of a time.
pub fn insns_samples(model: &Report, guest: &Report) -> Vec<Sample> {
    paired(model, guest, |p| software_insns(&p.counters))
}

/// The model's counts of each phase, with `measure` of the other report's phase.
fn paired(model: &Report, other: &Report, measure: impl Fn(&crate::report::Phase) -> Option<f64>) -> Vec<Sample> {
    model
        .phases
        .iter()
        .zip(&other.phases)
        .filter_map(|(m, h)| {
            let ns = measure(h)?;
            let counts: Vec<f64> = FEATURES
                .iter()
                .map(|(f, _)| m.counters.get(*f).copied().unwrap_or(0) as f64)
                .collect();
            (ns > 0.0 && counts.iter().any(|&c| c > 0.0)).then(|| Sample {
                workload: other.workload.clone(),
                phase: h.label.clone(),
                counts,
                ns,
            })
        })
        .collect()
}

/// The fitted cost of each feature (each of the samples' counts: `FEATURES`, or
/// `fit_counted`'s reduced ones) in ns (0 for a feature no sample counts).
pub fn fit(samples: &[Sample]) -> Vec<f64> {
    let n = samples.first().map_or(FEATURES.len(), |s| s.counts.len());
    let used: Vec<usize> = (0..n).filter(|&f| samples.iter().any(|s| s.counts[f] > 0.0)).collect();
    if samples.is_empty() || used.is_empty() {
        return vec![0.0; n];
    }
    let a = Array2::from_shape_fn((samples.len(), used.len()), |(i, j)| {
        samples[i].counts[used[j]] / samples[i].ns
    });
    let b = Array1::from_elem(samples.len(), 1.0);
    let (x, _) = nnls::nnls(a.view(), b.view());
    let mut costs = vec![0.0; n];
    for (j, &f) in used.iter().enumerate() {
        costs[f] = x[j];
    }
    costs
}

/// The predicted time of a phase's counts.
pub fn predict(costs: &[f64], counts: &[f64]) -> f64 {
    costs.iter().zip(counts).map(|(c, n)| c * n).sum()
}

/// The `host` profile for the fitted costs.
pub fn host_profile(name: &str, costs: &[f64], what: &str, clock_ghz: f64, fit_note: &str) -> Profile {
    let cost = FEATURES
        .iter()
        .zip(costs)
        .filter(|(_, &ns)| ns > 0.0)
        .map(|((event, means), &ns)| Cost {
            events: vec![event.to_string()],
            ns: Some((ns * 1000.0).round() / 1000.0),
            quality: Quality::Host,
            source: format!("foliolab calibrate on {what}"),
            rows: Vec::new(),
            note: Some(format!("{means}; {fit_note}")),
            derived_from_seed: None,
            seed_relation: None,
        })
        .collect();
    Profile {
        name: name.into(),
        description: format!("this host, measured by foliolab calibrate: {what}"),
        cpus: std::thread::available_parallelism().map_or(1, |n| n.get() as u32),
        cpus_note: "the CPUs this host shows".into(),
        nodes: 1,
        clock_ghz,
        clock_source: "/proc/cpuinfo (cpu MHz of the first CPU)".into(),
        tlb: Tlb {
            geometry: "none".into(),
            source: "not an arm64 machine: the host profile costs the generic mm software only".into(),
            quality: Quality::None,
        },
        features: Features {
            tlbi_range: false,
            bbml2: false,
            kpti: false,
            repeat_tlbi: "no".into(),
            note: "x86_64: no TLBI, DSB or contiguous bit; arm64 profiles take only the software costs from here"
                .into(),
        },
        cost,
        not_costed: Vec::new(),
        stand_in: None,
    }
}

/// The median and the worst of `errors` by magnitude.
pub fn median_and_worst(errors: &[f64]) -> (f64, f64) {
    let mut e: Vec<f64> = errors.iter().map(|x| x.abs()).collect();
    e.sort_by(f64::total_cmp);
    if e.is_empty() {
        return (0.0, 0.0);
    }
    let mid = e.len() / 2;
    let median = if e.len().is_multiple_of(2) {
        (e[mid - 1] + e[mid]) / 2.0
    } else {
        e[mid]
    };
    (median, e[e.len() - 1])
}

#[cfg(test)]
mod tests {
    use super::*;

    fn sample(counts: &[f64], ns: f64) -> Sample {
        let mut c = vec![0.0; FEATURES.len()];
        c[..counts.len()].copy_from_slice(counts);
        Sample {
            workload: "w".into(),
            phase: "p".into(),
            counts: c,
            ns,
        }
    }

    /// Times made from known costs give those costs back, and nothing for an event no
    /// sample counts.
    #[test]
    fn a_fit_recovers_the_costs_that_made_the_times() {
        let truth = [800.0, 150.0, 90.0];
        let rows = [
            [1000.0, 1000.0, 1000.0],
            [1000.0, 1000.0, 16000.0],
            [1000.0, 0.0, 0.0],
            [500.0, 250.0, 8000.0],
        ];
        let samples: Vec<Sample> = rows
            .iter()
            .map(|r| sample(r, r.iter().zip(&truth).map(|(n, c)| n * c).sum()))
            .collect();
        let costs = fit(&samples);
        for (got, want) in costs.iter().zip(truth) {
            assert!((got - want).abs() < 1e-6 * want, "{costs:?}");
        }
        assert!(costs[3..].iter().all(|&c| c == 0.0));
    }

    /// Instructions made from known per-count figures give those back, the memory-bound
    /// features none; host times made from them at one ns per instruction, plus zeroing
    /// at its own cost, give that ns per instruction and the zeroing cost.
    #[test]
    fn counted_instructions_give_costs_at_one_ns_per_instruction() {
        let per = [900.0, 2500.0, 0.0, 0.0, 40.0];
        let zero = FEATURES.iter().position(|(f, _)| *f == "arch.page.zero").unwrap();
        let rows = [
            [1000.0, 1000.0, 1000.0, 0.0, 0.0],
            [1000.0, 1000.0, 16000.0, 0.0, 512.0],
            [1000.0, 0.0, 0.0, 0.0, 0.0],
            [500.0, 250.0, 8000.0, 0.0, 4096.0],
        ];
        assert_eq!(zero, 2);
        // The guest counts zeroing's instructions too: they must not go to any feature.
        let insns: Vec<Sample> = rows
            .iter()
            .map(|r| sample(r, predict(&per, r) + 4096.0 * r[zero]))
            .collect();
        let got = fit_insns(&insns);
        assert_eq!(got[zero], 0.0);
        let soft_only: Vec<Sample> = rows.iter().map(|r| sample(r, predict(&per, r))).collect();
        for (g, w) in fit_insns(&soft_only).iter().zip(per) {
            assert!((g - w).abs() < 1e-6 * w.max(1.0), "{g} {w}");
        }
        let (ns_per_insn, zero_ns) = (0.25, 700.0);
        let timed: Vec<Sample> = rows
            .iter()
            .map(|r| sample(r, ns_per_insn * predict(&per, r) + zero_ns * r[zero]))
            .collect();
        let (costs, k) = fit_counted(&timed, &fit_insns(&soft_only), &fitted_apart(&soft_only));
        assert!((k - ns_per_insn).abs() < 1e-6, "{k}");
        assert!(
            (costs[0] - 225.0).abs() < 1e-3 && (costs[zero] - zero_ns).abs() < 1e-3,
            "{costs:?}"
        );
    }

    /// A feature no counted phase has (reclaim's scan: the guest cannot run `memlimit`)
    /// has no instructions per count, so it is fitted on host time apart, like zeroing,
    /// and gets its host cost; not the 0 the instruction regression gives it.
    #[test]
    fn a_feature_the_guest_never_counts_is_fitted_apart_on_host_time() {
        let at = |name: &str| FEATURES.iter().position(|(f, _)| *f == name).unwrap();
        let (fault, zero, scan) = (at("vmstat.pgfault"), at("arch.page.zero"), at("vmstat.pgscan_anon"));
        let row = |faults: f64, zeroed: f64, scans: f64| {
            let mut r = vec![0.0; FEATURES.len()];
            r[fault] = faults;
            r[zero] = zeroed;
            r[scan] = scans;
            r
        };
        let guest: Vec<Sample> = [row(1000.0, 1000.0, 0.0), row(300.0, 0.0, 0.0)]
            .iter()
            .map(|r| sample(r, 2000.0 * r[fault]))
            .collect();
        let apart = fitted_apart(&guest);
        // Zeroing is counted but memory-bound; every other feature but the fault, uncounted.
        assert_eq!(apart, (0..FEATURES.len()).filter(|&f| f != fault).collect::<Vec<_>>());
        let per_count = fit_insns(&guest);
        assert!(
            (per_count[fault] - 2000.0).abs() < 1e-6 && per_count[scan] == 0.0,
            "{per_count:?}"
        );
        // Host: 0.25 ns per instruction, 700 ns a page zeroed, 90 ns a page scanned.
        let timed: Vec<Sample> = [
            row(1000.0, 1000.0, 0.0),
            row(400.0, 0.0, 0.0),
            row(200.0, 200.0, 5000.0),
            row(50.0, 0.0, 20000.0),
        ]
        .iter()
        .map(|r| sample(r, 0.25 * 2000.0 * r[fault] + 700.0 * r[zero] + 90.0 * r[scan]))
        .collect();
        let (costs, k) = fit_counted(&timed, &per_count, &apart);
        assert!((k - 0.25).abs() < 1e-6, "{k}");
        assert!(
            (costs[scan] - 90.0).abs() < 1e-6 && (costs[zero] - 700.0).abs() < 1e-6,
            "{costs:?}"
        );
    }

    /// A `NOT_INSNS` feature (swapon) the guest counts keeps its instructions in the
    /// regression, so the fault's instructions per count are not polluted by them, and
    /// is priced at its host time, not at those instructions.
    #[test]
    fn a_feature_whose_time_is_not_its_instructions_is_priced_on_host_time() {
        let at = |name: &str| FEATURES.iter().position(|(f, _)| *f == name).unwrap();
        let (fault, swapon) = (at("vmstat.pgfault"), at("kernel.swapon"));
        let row = |faults: f64, swapons: f64| {
            let mut r = vec![0.0; FEATURES.len()];
            r[fault] = faults;
            r[swapon] = swapons;
            r
        };
        let rows = [row(1000.0, 0.0), row(300.0, 1.0), row(50.0, 1.0)];
        let guest: Vec<Sample> = rows
            .iter()
            .map(|r| sample(r, 2000.0 * r[fault] + 90_000.0 * r[swapon]))
            .collect();
        let per_count = fit_insns(&guest);
        assert!((per_count[fault] - 2000.0).abs() < 1e-6, "{per_count:?}");
        let apart = fitted_apart(&guest);
        assert!(apart.contains(&swapon) && !apart.contains(&fault), "{apart:?}");
        // Host: 0.25 ns per instruction; a swapon 600 us, not 90,000 x 0.25 ns.
        let timed: Vec<Sample> = rows
            .iter()
            .map(|r| sample(r, 0.25 * 2000.0 * r[fault] + 600_000.0 * r[swapon]))
            .collect();
        let (costs, k) = fit_counted(&timed, &per_count, &apart);
        assert!((k - 0.25).abs() < 1e-6, "{k}");
        assert!((costs[swapon] - 600_000.0).abs() < 1e-3, "{costs:?}");
    }

    #[test]
    fn median_and_worst_are_of_magnitudes() {
        assert_eq!(median_and_worst(&[0.1, -0.5, 0.2]), (0.2, 0.5));
        assert_eq!(median_and_worst(&[0.1, -0.3]), (0.2, 0.3));
    }

    /// The written profile parses back as a profile that costs the fitted events.
    #[test]
    fn the_host_profile_round_trips() {
        let mut costs = vec![0.0; FEATURES.len()];
        costs[0] = 812.5;
        costs[2] = 95.25;
        let p = host_profile("host", &costs, "AMD EPYC, Linux 6.18", 2.6, "fit of 20 phases");
        let text = toml::to_string(&p).unwrap();
        let back = Profile::parse(&text).unwrap();
        assert!(matches!(
            back.lookup("vmstat.pgfault"),
            super::super::Lookup::Costed(812_500, _)
        ));
        assert!(matches!(
            back.lookup("arch.page.zero"),
            super::super::Lookup::Costed(95_250, _)
        ));
    }
}
