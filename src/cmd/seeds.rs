//! `foliolab validate --seeds`: each seed's before and after on real arm64 kernels,
//! Debian's 6.1 (before seeds 000-003) and 6.12 (after them, before seed 004) under
//! QEMU, against the model under the matching `--kernel` preset.
//!
//! Seeds 000, 001, 002 and 004 are small workloads (`workloads/kernels/`), run in one
//! boot per kernel and judged as `validate` judges any workload; their tables show the
//! counters the seed is about, in the phase it measures. Seed 003 is the boot itself:
//! the TLBIs and barriers map_mem issues while building the linear map, on guests of
//! several RAM sizes, against `foliolab boot --ram SIZE --kernel K`.

use super::validate::{compare, Comparison};
use crate::native::qemu::{self, MapMem, Target};
use crate::report::Report;
use crate::sim::kernels::Release;
use crate::workload::Workload;
use serde::Serialize;
use std::fmt::Write as _;

/// The kernels, oldest first, and the QEMU target that runs each.
const KERNELS: [(Release, Target); 2] = [
    (Release(6, 1), Target::QemuArm64_61),
    (Release(6, 12), Target::QemuArm64),
];

/// A seed's workload: its seed, file, text, the phase the seed is about, and the
/// counters its table shows.
struct SeedWorkload {
    seed: &'static str,
    path: &'static str,
    text: &'static str,
    phase: &'static str,
    keys: &'static [&'static str],
}

const ZAP_KEYS: &[&str] = &[
    "arch.tlbi.total",
    "arch.dsb.ish",
    "arch.dsb.ishst",
    "arch.isb",
    "kernel.folio_remove_rmap_ptes",
    "kernel.page_remove_rmap",
    "kernel.__contpte_try_unfold",
    "kernel.contpte_get_and_clear_full_ptes",
];
const RECLAIM_KEYS: &[&str] = &[
    "vmstat.pglazyfreed",
    "arch.tlbi.total",
    "arch.tlbi.vale1is",
    "arch.dsb.ish",
    "arch.dsb.ishst",
];
const FAULT_KEYS: &[&str] = &[
    "proc.main.minflt",
    "vmstat.thp_fault_alloc",
    "mthp.64kB.anon_fault_alloc",
];
const PTEP_GET_KEYS: &[&str] = &["kernel.contpte_ptep_get", "arch.tlbi.total", "arch.dsb.ish"];

macro_rules! seed_workload {
    ($seed:literal, $file:literal, $phase:literal, $keys:expr) => {
        SeedWorkload {
            seed: $seed,
            path: concat!("workloads/kernels/", $file),
            text: include_str!(concat!("../../workloads/kernels/", $file)),
            phase: $phase,
            keys: $keys,
        }
    };
}

const WORKLOADS: &[SeedWorkload] = &[
    seed_workload!("000", "seed000-thp-munmap.wl", "munmap", ZAP_KEYS),
    seed_workload!("000", "seed000-thp-dontneed.wl", "dontneed", ZAP_KEYS),
    seed_workload!("000", "seed000-64k-munmap.wl", "munmap", ZAP_KEYS),
    seed_workload!("000", "seed000-64k-dontneed.wl", "dontneed", ZAP_KEYS),
    seed_workload!("001", "seed001-pageout-order0.wl", "pageout", RECLAIM_KEYS),
    seed_workload!("001", "seed001-pageout-64k.wl", "pageout", RECLAIM_KEYS),
    seed_workload!("002", "seed002-fault.wl", "start", FAULT_KEYS),
    seed_workload!("002", "seed002-fault-64k.wl", "start", FAULT_KEYS),
    seed_workload!("004", "seed004-mlock.wl", "mlock-munlock", PTEP_GET_KEYS),
];

/// Guest RAM sizes whose boot map_mem is measured (seed 003), in MiB.
const BOOT_RAM_MIB: &[u64] = &[1024, 2048, 4096];
/// map_mem's counters the seed 003 table shows.
const BOOT_KEYS: &[&str] = &[
    "arch.tlbi.total",
    "arch.tlbi.vaale1is",
    "arch.dsb.ish",
    "arch.dsb.ishst",
    "arch.isb",
];

/// One cell pair: the guest's count and the model's, None where a side has none.
#[derive(Debug, Serialize, Clone, PartialEq)]
pub struct Cell {
    pub kernel: String,
    pub guest: Option<i64>,
    pub model: Option<i64>,
}

#[derive(Debug, Serialize, Clone)]
pub struct SeedRow {
    pub seed: String,
    /// A workload and its phase, or `boot <RAM>`.
    pub experiment: String,
    pub counter: String,
    pub cells: Vec<Cell>,
}

/// A workload's verdict on one kernel, as `validate` gives it.
#[derive(Debug, Serialize)]
pub struct SeedVerdict {
    pub seed: String,
    pub kernel: String,
    pub comparison: Comparison,
}

#[derive(Debug, Serialize, Default)]
pub struct Seeds {
    pub rows: Vec<SeedRow>,
    pub verdicts: Vec<SeedVerdict>,
    pub notes: Vec<String>,
}

impl Seeds {
    /// Every judged workload agrees or does not apply, and every boot count agrees.
    pub fn ok(&self) -> bool {
        self.verdicts
            .iter()
            .all(|v| v.comparison.ok() || v.comparison.not_applicable.is_some())
            && self
                .rows
                .iter()
                .filter(|r| r.seed == "003")
                .all(|r| r.cells.iter().all(|c| c.guest == c.model))
    }
}

/// Why the seeds cannot run here, if they cannot.
pub fn missing() -> Option<String> {
    KERNELS.iter().find_map(|&(_, t)| qemu::missing(t))
}

/// The model's map_mem of `target`'s `ram`-byte guest under `kernel`'s preset.
fn model_map_mem(target: Target, kernel: Release, ram: u64, guest: &MapMem) -> Result<crate::report::Counters, String> {
    let spec = super::boot::guest_spec(target, kernel, ram, guest, &[])?;
    Ok(super::boot::model_report(&spec)?.counters)
}

fn phase<'r>(r: &'r Report, label: &str) -> Option<&'r crate::report::Counters> {
    if label == "start" {
        return Some(&r.counters);
    }
    r.phases.iter().find(|p| p.label == label).map(|p| &p.counters)
}

/// Runs every seed on both kernels and the model.
pub fn run() -> Result<Seeds, Box<dyn std::error::Error>> {
    let workloads: Vec<Workload> = WORKLOADS
        .iter()
        .map(|s| crate::workload::parse_str(s.path, s.text).map_err(|e| e.to_string()))
        .collect::<Result<_, _>>()?;
    let mut out = Seeds::default();
    // (seed workload index, kernel index) -> (guest, model) reports.
    let mut reports: Vec<Vec<(Option<Report>, Option<Report>)>> = Vec::new();
    let mut boots: Vec<Vec<(MapMem, crate::report::Counters)>> = Vec::new();
    for &(kernel, target) in &KERNELS {
        let v = super::validate::target_variants(target, Some(kernel), &[])?;
        let batch = qemu::run_batch(target, &workloads)?;
        eprintln!(
            "{}: one boot ran {} workloads in {:.1} s",
            target.source(),
            workloads.len(),
            batch.wall.as_secs_f64()
        );
        let mut mine = Vec::new();
        for (w, guest) in workloads.iter().zip(batch.reports) {
            let model = crate::sim::run(w, &v)
                .map_err(|e| e.to_string())
                .and_then(|r| qemu::as_guest_measures(r, w, &v));
            let c = match (&model, &guest) {
                (_, Err(e)) if qemu::not_applicable(e).is_some() => Comparison {
                    workload: w.path.clone(),
                    not_applicable: Some(e.clone()),
                    ..Comparison::default()
                },
                (Ok(m), Ok(g)) => compare(m, g),
                (Err(e), _) => Comparison {
                    workload: w.path.clone(),
                    error: Some(format!("model: {e}")),
                    ..Comparison::default()
                },
                (_, Err(e)) => Comparison {
                    workload: w.path.clone(),
                    error: Some(format!("guest: {e}")),
                    ..Comparison::default()
                },
            };
            out.verdicts.push(SeedVerdict {
                seed: WORKLOADS[mine.len()].seed.into(),
                kernel: kernel.to_string(),
                comparison: c,
            });
            mine.push((guest.ok(), model.ok()));
        }
        reports.push(mine);
        let mut sizes = Vec::new();
        for &mib in BOOT_RAM_MIB {
            let ram = mib << 20;
            let guest = match (mib, &batch.map_mem) {
                (2048, Some(m)) => m.clone(),
                _ => qemu::boot_map_mem(&target.guest_kernel().expect("a QEMU target"), ram)?,
            };
            let model = model_map_mem(target, kernel, ram, &guest)?;
            sizes.push((guest, model));
        }
        boots.push(sizes);
    }
    for (i, s) in WORKLOADS.iter().enumerate() {
        for key in s.keys {
            let cells: Vec<Cell> = KERNELS
                .iter()
                .enumerate()
                .map(|(k, (kernel, _))| {
                    let (g, m) = &reports[k][i];
                    let get = |r: &Option<Report>| {
                        let r = r.as_ref()?;
                        if r.unavailable.contains_key(*key) {
                            return None;
                        }
                        phase(r, s.phase).map(|c| c.get(*key).copied().unwrap_or(0))
                    };
                    // A counter the guest cannot measure has no model cell either.
                    let guest = get(g);
                    Cell {
                        kernel: kernel.to_string(),
                        guest,
                        model: guest.and(get(m)),
                    }
                })
                .collect();
            out.rows.push(SeedRow {
                seed: s.seed.into(),
                experiment: format!("{} ({})", s.path.trim_start_matches("workloads/kernels/"), s.phase),
                counter: key.to_string(),
                cells,
            });
        }
    }
    for (j, &mib) in BOOT_RAM_MIB.iter().enumerate() {
        for key in BOOT_KEYS {
            let cells = KERNELS
                .iter()
                .enumerate()
                .map(|(k, (kernel, _))| {
                    let (g, m) = &boots[k][j];
                    Cell {
                        kernel: kernel.to_string(),
                        guest: Some(g.counters.get(*key).copied().unwrap_or(0)),
                        model: Some(m.get(*key).copied().unwrap_or(0)),
                    }
                })
                .collect();
            out.rows.push(SeedRow {
                seed: "003".into(),
                experiment: format!("boot {}G, map_mem", mib >> 10),
                counter: key.to_string(),
                cells,
            });
        }
    }
    out.notes.push(
        "seed 004 (6.17) is in no released Debian kernel: 6.12 is its before side, checked against the model's ptep_get=full-scan; the after side exists in the model only".into(),
    );
    out.notes
        .push("6.1 has no mTHP: the 64K workloads are N/A there (no hugepages-64kB knob), on the model too".into());
    Ok(out)
}

/// The seed tables: a row per counter, per kernel the guest's count and the model's.
pub fn text(s: &Seeds) -> String {
    let mut out = String::new();
    let mut seed = "";
    for r in &s.rows {
        if r.seed != seed {
            seed = &r.seed;
            let _ = write!(out, "\nseed {seed}\n{:<44} {:<34}", "experiment", "counter");
            for c in &r.cells {
                let _ = write!(out, " {:>10} {:>10}", format!("{} guest", c.kernel), "model");
            }
            out.push('\n');
        }
        let _ = write!(out, "{:<44} {:<34}", r.experiment, r.counter);
        let mut all_agree = true;
        for c in &r.cells {
            let f = |v: Option<i64>| v.map_or("-".to_string(), |v| v.to_string());
            all_agree &= c.guest == c.model;
            let _ = write!(out, " {:>10} {:>10}", f(c.guest), f(c.model));
        }
        let _ = writeln!(out, "  {}", if all_agree { "" } else { "DIFFERS" });
    }
    let _ = writeln!(out, "\nverdicts (every counter, as `validate --target` judges):");
    for v in &s.verdicts {
        let c = &v.comparison;
        let why = c
            .not_applicable
            .as_ref()
            .or(c.error.as_ref())
            .map_or(String::new(), |w| format!(": {w}"));
        let verdict = if c.not_applicable.is_some() {
            "N/A"
        } else if c.ok() {
            "PASS"
        } else {
            "FAIL"
        };
        let _ = writeln!(
            out,
            "  seed {} {:<5} {:<40} {verdict}{why}",
            v.seed, v.kernel, c.workload
        );
        if verdict == "FAIL" && c.error.is_none() {
            for r in c.rows.iter().filter(|r| !r.ok) {
                let _ = writeln!(out, "      {:<40} model {:>8} guest {:>8}", r.counter, r.model, r.host);
            }
            for l in &c.layout_mismatches {
                let _ = writeln!(out, "      layout {}", l.region);
            }
        }
    }
    for n in &s.notes {
        let _ = writeln!(out, "note: {n}");
    }
    out
}
