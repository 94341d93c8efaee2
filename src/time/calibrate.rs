//! Calibration: this host's own costs for the generic mm software, measured.
//!
//! The fault path, the zap loop, rmap, folio allocation and freeing, page zeroing and
//! copying are the same C code on x86_64 and arm64, and this host runs it. Timed
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
];

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
    model
        .phases
        .iter()
        .zip(&host.phases)
        .filter_map(|(m, h)| {
            let ns = h.time_ns?;
            let counts: Vec<f64> = FEATURES
                .iter()
                .map(|(f, _)| m.counters.get(*f).copied().unwrap_or(0) as f64)
                .collect();
            (ns > 0.0 && counts.iter().any(|&c| c > 0.0)).then(|| Sample {
                workload: host.workload.clone(),
                phase: h.label.clone(),
                counts,
                ns,
            })
        })
        .collect()
}

/// The fitted cost of each feature in ns (0 for a feature no sample counts).
pub fn fit(samples: &[Sample]) -> Vec<f64> {
    let used: Vec<usize> = (0..FEATURES.len())
        .filter(|&f| samples.iter().any(|s| s.counts[f] > 0.0))
        .collect();
    if samples.is_empty() || used.is_empty() {
        return vec![0.0; FEATURES.len()];
    }
    let a = Array2::from_shape_fn((samples.len(), used.len()), |(i, j)| {
        samples[i].counts[used[j]] / samples[i].ns
    });
    let b = Array1::from_elem(samples.len(), 1.0);
    let (x, _) = nnls::nnls(a.view(), b.view());
    let mut costs = vec![0.0; FEATURES.len()];
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
    let median = if e.len() % 2 == 0 {
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
