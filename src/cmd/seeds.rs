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

impl Cell {
    /// `key` in `phase` of the guest's and the model's reports. A counter the guest
    /// cannot measure has no model cell either; an instruction count has no model
    /// cell (the model counts none).
    fn of(kernel: String, guest: Option<&Report>, model: Option<&Report>, phase_label: &str, key: &str) -> Cell {
        let get = |r: Option<&Report>| {
            let r = r?;
            if r.unavailable.contains_key(key) {
                return None;
            }
            phase(r, phase_label).map(|c| c.get(key).copied().unwrap_or(0))
        };
        let guest_value = get(guest);
        Cell {
            kernel,
            guest: guest_value,
            model: guest_value.and(get(model)).filter(|_| !qemu::is_insns(key)),
        }
    }
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
    /// The seeds on kernels built from 6.12's source, before (a patch of ours that
    /// undoes the seed's change) and after (6.12 as it is): cells `before` and `after`.
    pub built: Vec<SeedRow>,
    /// The kernels those were measured on.
    pub built_kernels: Vec<BuiltKernel>,
    /// Why the built kernels were not measured, if they were not.
    pub built_skipped: Option<String>,
}

/// A kernel built for a seed's side.
#[derive(Debug, Serialize, Clone)]
pub struct BuiltKernel {
    pub seed: String,
    pub side: String,
    /// `foliolab kernel build`'s key.
    pub key: String,
    /// The patch applied to 6.12 (tools/kernel/patches/), if any.
    pub patch: Option<String>,
    /// Seconds the build took (a cache lookup's when it was cached).
    pub build_s: f64,
    pub cached: bool,
}

impl Seeds {
    /// The guest's count of `counter` on `side` in the built-kernel row of `seed` and
    /// `experiment`.
    fn built_guest(&self, seed: &str, experiment: &str, counter: &str, side: &str) -> Option<i64> {
        self.built
            .iter()
            .find(|r| r.seed == seed && r.experiment == experiment && r.counter == counter)?
            .cells
            .iter()
            .find(|c| c.kernel == side)?
            .guest
    }

    /// The built kernel of `seed`'s `side`, as reproduce's source names it.
    fn built_kernel(&self, seed: &str, side: &str) -> String {
        let k = self
            .built_kernels
            .iter()
            .find(|k| k.side == side && k.seed.contains(seed));
        match k {
            Some(k) => format!(
                "6.12.117 built with gcc, 4K, {} (kernel {})",
                k.patch.as_deref().unwrap_or("no patch"),
                k.key
            ),
            None => "6.12.117 built with gcc, 4K".into(),
        }
    }

    /// The rows `reproduce` shows in its real-kernel column from the built kernels,
    /// keyed as its seed 003 and seed 001 rows are: seed 003's map_mem TLBIs on a 4G
    /// guest per side (the seed's table is milliseconds on larger machines: the count
    /// is the mechanism, said in the unit); seed 001's share of the seed's own loop's
    /// instructions spent in ptep_clear_flush before the change, and the loop's
    /// instruction change after it (the seed's are shares of cycles and elapsed time:
    /// a TLBI's wait is one instruction, so instructions show the work moved, not its
    /// time). Empty where the section was skipped.
    pub fn real_kernel_rows(&self) -> Vec<serde_json::Value> {
        let mut out = Vec::new();
        let map_mem = format!("boot {}G, map_mem", BOOT_RAM_MIB[BOOT_RAM_MIB.len() - 1] >> 10);
        for side in ["before", "after"] {
            if let Some(v) = self.built_guest("003", &map_mem, "arch.tlbi.total", side) {
                out.push(serde_json::json!({
                    "seed": "003",
                    "experiment": crate::reproduce::seed003::EXPERIMENT,
                    "variant": side,
                    "unit": format!("TLBIs, {}", map_mem.trim_end_matches(", map_mem")),
                    "value": v,
                    "kernel": self.built_kernel("003", side),
                }));
            }
        }
        let exp = experiment_name(&SEED001_LOOPS[0]);
        let total = |side: &str| -> Option<i64> {
            Some(
                self.built_guest("001", &exp, qemu::INSNS_KEY, side)?
                    + self.built_guest("001", &exp, qemu::USER_INSNS_KEY, side)?,
            )
        };
        let flush = self.built_guest("001", &exp, "kernel.insns.ptep_clear_flush", "before");
        if let (Some(flush), Some(before)) = (flush, total("before")) {
            out.push(serde_json::json!({
                "seed": "001",
                "experiment": crate::reproduce::seed001::SHARE_EXPERIMENT,
                "variant": "sync",
                "unit": "% of insns",
                "value": (flush as f64 / before as f64 * 1e4).round() / 100.0,
                "kernel": format!("{}, {}", self.built_kernel("001", "before"), SEED001_LOOPS[0].path),
            }));
        }
        if let (Some(before), Some(after)) = (total("before"), total("after")) {
            out.push(serde_json::json!({
                "seed": "001",
                "experiment": crate::reproduce::seed001::SPEEDUP_EXPERIMENT,
                "variant": "deferred",
                "unit": "% insns",
                "value": (crate::reproduce::pct(after as f64, before as f64) * 100.0).round() / 100.0,
                "kernel": format!("{} against {}, {}", self.built_kernel("001", "after"), self.built_kernel("001", "before"), SEED001_LOOPS[0].path),
            }));
        }
        out
    }

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
            && self
                .built
                .iter()
                .all(|r| r.cells.iter().all(|c| c.model.is_none() || c.guest == c.model))
    }
}

/// Why the seeds cannot run here, if they cannot.
pub fn missing() -> Option<String> {
    KERNELS.iter().find_map(|&(_, t)| qemu::missing(t))
}

/// The model's map_mem of `guest_kernel`'s `ram`-byte guest under `kernel`'s preset
/// and `sets`.
fn model_map_mem(
    guest_kernel: &qemu::GuestKernel,
    kernel: Release,
    ram: u64,
    guest: &MapMem,
    sets: &[String],
) -> Result<crate::report::Counters, String> {
    let spec = super::boot::guest_spec(guest_kernel, kernel, ram, guest, sets)?;
    Ok(super::boot::model_report(&spec)?.counters)
}

fn phase<'r>(r: &'r Report, label: &str) -> Option<&'r crate::report::Counters> {
    if label == "start" {
        return Some(&r.counters);
    }
    r.phases.iter().find(|p| p.label == label).map(|p| &p.counters)
}

/// The model's report of `w` under `v`, in the guest's measures.
fn model_run(w: &Workload, v: &crate::sim::Variants) -> Result<Report, String> {
    crate::sim::run(w, v)
        .map_err(|e| e.to_string())
        .and_then(|r| qemu::as_guest_measures(r, w, v))
}

/// `validate`'s verdict on `w` from the model's and the guest's reports.
fn verdict(w: &Workload, model: &Result<Report, String>, guest: &Result<Report, String>) -> Comparison {
    match (model, guest) {
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
    }
}

/// A seed workload's rows' experiment: its file and the phase shown.
fn experiment_name(s: &SeedWorkload) -> String {
    let file = s
        .path
        .trim_start_matches("workloads/kernels/")
        .trim_start_matches("workloads/");
    format!("{file} ({})", s.phase)
}

/// Why seed 000 has no built before/after pair, said with the built kernels.
const SEED000_ON_612: &str = "built kernels, seed 000: its change (v4 03/16, batch-clearing ptes in zap_pte_range) cannot be undone on 6.12: 03/16 was never merged as posted, and on arm64 its batch stays one pte (the arm64 override came later in its series), so its before and after issue the same TLBIs and barriers there; 6.12 has instead the batched zap merged for 6.9 (10ebac4f95e7: zap_present_ptes batches a folio's ptes with folio_pte_batch and clears them with get_and_clear_full_ptes) and arm64's contpte implementation of that helper (contpte_get_and_clear_full_ptes), so a patch taking the batch out would write a zap path neither kernel ever had, not restore a before. The nearest pair of real kernels stays Debian's 6.1 (per-pte zap, no contpte) against 6.12 (batched zap, contpte), in the tables above";

/// Runs every seed on both Debian kernels and the model (`run_built` adds kernels
/// built from source).
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
            let model = model_run(w, &v);
            let c = verdict(w, &model, &guest);
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
            let model = model_map_mem(&target.guest_kernel().expect("a QEMU target"), kernel, ram, &guest, &[])?;
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
                    Cell::of(kernel.to_string(), g.as_ref(), m.as_ref(), s.phase, key)
                })
                .collect();
            out.rows.push(SeedRow {
                seed: s.seed.into(),
                experiment: experiment_name(s),
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

/// Adds the built-kernel section to `out`, or why it is skipped.
pub fn run_built(out: &mut Seeds) -> Result<(), Box<dyn std::error::Error>> {
    match built_missing() {
        Some(why) => out.built_skipped = Some(why),
        None => built(out)?,
    }
    Ok(())
}

/// A seed's before side on 6.12 built from source: our patch that undoes the seed's
/// change, and the model's variant for it; the after side is 6.12 as it is and the
/// model's 6.12 preset.
struct BeforePatch {
    seed: &'static str,
    /// The patch's file name in tools/kernel/patches/, and its text.
    name: &'static str,
    text: &'static str,
    /// The model's before side, a `--set` on the 6.12 preset.
    model: &'static str,
}

const SEED003_BEFORE: BeforePatch = BeforePatch {
    seed: "003",
    name: "seed003-before.patch",
    text: include_str!("../../tools/kernel/patches/seed003-before.patch"),
    model: "pgtable-fixmap=alloc-and-populate",
};
const SEED001_BEFORE: BeforePatch = BeforePatch {
    seed: "001",
    name: "seed001-before.patch",
    text: include_str!("../../tools/kernel/patches/seed001-before.patch"),
    model: "tlb-batch=sync",
};

/// The counters shown from seed 001's loops.
const SEED001_KEYS: &[&str] = &[
    "arch.tlbi.total",
    "arch.tlbi.vale1is",
    "arch.dsb.ish",
    "arch.dsb.ishst",
    "vmstat.pswpout",
    "vmstat.pswpin",
    "kernel.insns",
    "kernel.insns.ptep_clear_flush",
    "kernel.insns.try_to_unmap_one",
    "kernel.insns.set_tlb_ubc_flush_pending",
    "kernel.insns.try_to_unmap_flush_dirty",
    "kernel.insns.shrink_folio_list",
    "user.insns",
];

/// Seed 001's benchmark as the seed ran it (1 MiB of shared anonymous memory read back
/// from zram and paged out, 100 rounds), and in its nearest private-memory shape (10
/// rounds), the shape measured before the workload language had shared memory.
const SEED001_LOOPS: [SeedWorkload; 2] = [
    SeedWorkload {
        seed: "001",
        path: "workloads/seed001-shmem-loop.wl",
        text: include_str!("../../workloads/seed001-shmem-loop.wl"),
        phase: "loop",
        keys: SEED001_KEYS,
    },
    seed_workload!("001", "seed001-swap-loop.wl", "loop", SEED001_KEYS),
];

/// Why the seeds cannot be measured on built kernels here, if they cannot: 6.12's
/// source or gcc (scripts/setup-kbuild), or QEMU (scripts/setup-qemu).
pub fn built_missing() -> Option<String> {
    crate::kbuild::missing("6.12", crate::kbuild::Compiler::Gcc).or_else(|| {
        qemu::guest_missing(&Target::QemuArm64.guest_kernel()?).map(|w| format!("{w} (run scripts/setup-qemu)"))
    })
}

/// 6.12 built with gcc and 4K pages, with `patch` (a cache hit after the first time).
fn build_612(side: &str, patch: Option<&BeforePatch>) -> Result<(qemu::GuestKernel, BuiltKernel), String> {
    let mut patches = Vec::new();
    if let Some(p) = patch {
        // The patch's bytes from the binary, so the key is the same as a build with
        // tools/kernel/patches/ from a checkout, wherever this runs.
        let dir = crate::kbuild::cache_dir().join("patches");
        let path = dir.join(p.name);
        if std::fs::read(&path).ok().as_deref() != Some(p.text.as_bytes()) {
            let tmp = dir.join(format!(".{}.{}", p.name, std::process::id()));
            std::fs::create_dir_all(&dir)
                .and_then(|()| std::fs::write(&tmp, p.text))
                .and_then(|()| std::fs::rename(&tmp, &path))
                .map_err(|e| format!("{}: {e}", path.display()))?;
        }
        patches.push(path);
    }
    let spec = crate::kbuild::Spec {
        source: "6.12".into(),
        patches,
        compiler: crate::kbuild::Compiler::Gcc,
        page_size: crate::kbuild::PageSize::K4,
        fragments: Vec::new(),
    };
    let built = crate::kbuild::build(&spec, &mut |l| eprintln!("kernel build: {l}")).map_err(|e| e.to_string())?;
    let kernel = qemu::GuestKernel::image(&built.key).map_err(|e| e.to_string())?;
    let record = BuiltKernel {
        seed: patch.map_or("003 001", |p| p.seed).into(),
        side: side.into(),
        key: built.key,
        patch: patch.map(|p| format!("tools/kernel/patches/{}", p.name)),
        build_s: built.build_s,
        cached: built.cached,
    };
    Ok((kernel, record))
}

/// Seeds 003 and 001 on 6.12 built from source, before and after, beside the model's
/// before and after.
fn built(out: &mut Seeds) -> Result<(), Box<dyn std::error::Error>> {
    let release = Release(6, 12);
    let (after, record) = build_612("after", None)?;
    out.built_kernels.push(record);
    // Seed 003: map_mem at boot, per RAM size.
    let (before, record) = build_612("before", Some(&SEED003_BEFORE))?;
    out.built_kernels.push(record);
    let sides = [(&before, vec![SEED003_BEFORE.model.to_string()]), (&after, Vec::new())];
    for &mib in BOOT_RAM_MIB {
        let ram = mib << 20;
        let mut measured = Vec::new();
        for (kernel, sets) in &sides {
            let guest = qemu::boot_map_mem(kernel, ram)?;
            let model = model_map_mem(kernel, release, ram, &guest, sets)?;
            measured.push((guest, model));
        }
        for key in BOOT_KEYS.iter().chain(&[qemu::INSNS_KEY]) {
            let cells = ["before", "after"]
                .iter()
                .zip(&measured)
                .map(|(side, (g, m))| Cell {
                    kernel: side.to_string(),
                    guest: Some(g.counters.get(*key).copied().unwrap_or(0)),
                    model: (!qemu::is_insns(key)).then(|| m.get(*key).copied().unwrap_or(0)),
                })
                .collect();
            out.built.push(SeedRow {
                seed: "003".into(),
                experiment: format!("boot {}G, map_mem", mib >> 10),
                counter: key.to_string(),
                cells,
            });
        }
    }
    // Seed 001: its benchmark's loop, both shapes in one boot per side.
    let (before, record) = build_612("before", Some(&SEED001_BEFORE))?;
    out.built_kernels.push(record);
    let workloads: Vec<Workload> = SEED001_LOOPS
        .iter()
        .map(|s| crate::workload::parse_str(s.path, s.text).map_err(|e| e.to_string()))
        .collect::<Result<_, _>>()?;
    // Per side: (side, per workload (guest, model)).
    let mut reports = Vec::new();
    for (side, kernel, sets) in [
        ("before", &before, vec![SEED001_BEFORE.model.to_string()]),
        ("after", &after, Vec::new()),
    ] {
        let v = super::validate::guest_variants(Some(kernel), Some(release), &sets)?;
        let batch = qemu::run_guest(kernel, &workloads)?;
        let mut mine = Vec::new();
        for (w, guest) in workloads.iter().zip(batch.reports) {
            let model = model_run(w, &v);
            out.verdicts.push(SeedVerdict {
                seed: "001".into(),
                kernel: format!("6.12 {side} ({})", kernel.label()),
                comparison: verdict(w, &model, &guest),
            });
            mine.push((guest.ok(), model.ok()));
        }
        reports.push((side, mine));
    }
    for (i, s) in SEED001_LOOPS.iter().enumerate() {
        for key in s.keys {
            out.built.push(SeedRow {
                seed: "001".into(),
                experiment: experiment_name(s),
                counter: key.to_string(),
                cells: reports
                    .iter()
                    .map(|(side, r)| Cell::of(side.to_string(), r[i].0.as_ref(), r[i].1.as_ref(), s.phase, key))
                    .collect(),
            });
        }
    }
    out.notes.push(format!(
        "built kernels, seed 001: {} is the seed's benchmark as it ran it (1 MiB of MAP_SHARED|MAP_ANONYMOUS, shmem, read back from zram and paged out; 100 rounds where the seed ran 10,000); {} is its nearest private-memory shape, 10 rounds",
        SEED001_LOOPS[0].path, SEED001_LOOPS[1].path
    ));
    out.notes.push(SEED000_ON_612.into());
    Ok(())
}

/// The seed tables: a row per counter, per kernel the guest's count and the model's.
pub fn text(s: &Seeds) -> String {
    let mut out = table(&s.rows, "");
    out += "\nbuilt kernels (6.12.117 from source, gcc, 4K): before = 6.12 with our patch that undoes the seed's change, after = 6.12; the model's before is its 6.12 preset with the variant named\n";
    match &s.built_skipped {
        Some(why) => {
            let _ = writeln!(out, "  skipped: {why}");
        }
        None => {
            for k in &s.built_kernels {
                let _ = writeln!(
                    out,
                    "  seed {:<7} {:<6} {}  {}  ({} {:.1} s)",
                    k.seed,
                    k.side,
                    k.key,
                    k.patch.as_deref().unwrap_or("no patch"),
                    if k.cached { "cached, lookup" } else { "built in" },
                    k.build_s
                );
            }
            let _ = writeln!(
                out,
                "  model before: seed 003 {}, seed 001 {}",
                SEED003_BEFORE.model, SEED001_BEFORE.model
            );
            out += &table(&s.built, " (built)");
        }
    }
    verdicts(s, out)
}

/// Rows as one table per seed: per cell, the guest's count and the model's.
fn table(rows: &[SeedRow], title: &str) -> String {
    let mut out = String::new();
    let mut seed = "";
    for r in rows {
        if r.seed != seed {
            seed = &r.seed;
            let _ = write!(out, "\nseed {seed}{title}\n{:<44} {:<40}", "experiment", "counter");
            for c in &r.cells {
                let _ = write!(out, " {:>10} {:>10}", format!("{} guest", c.kernel), "model");
            }
            out.push('\n');
        }
        let _ = write!(out, "{:<44} {:<40}", r.experiment, r.counter);
        let mut all_agree = true;
        for c in &r.cells {
            let f = |v: Option<i64>| v.map_or("-".to_string(), |v| v.to_string());
            // An instruction count has no model cell: the model counts none.
            all_agree &= c.guest == c.model || (c.model.is_none() && qemu::is_insns(&r.counter));
            let _ = write!(out, " {:>10} {:>10}", f(c.guest), f(c.model));
        }
        let _ = writeln!(out, "  {}", if all_agree { "" } else { "DIFFERS" });
    }
    out
}

/// `out`, then every verdict and note.
fn verdicts(s: &Seeds, mut out: String) -> String {
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

#[cfg(test)]
mod tests {
    use super::*;

    fn row(seed: &str, experiment: &str, counter: &str, before: i64, after: i64) -> SeedRow {
        let cell = |side: &str, v: i64| Cell {
            kernel: side.into(),
            guest: Some(v),
            model: None,
        };
        SeedRow {
            seed: seed.into(),
            experiment: experiment.into(),
            counter: counter.into(),
            cells: vec![cell("before", before), cell("after", after)],
        }
    }

    /// The built seed 003 and 001 rows land beside reproduce's rows of the same
    /// experiment and variant: every seed 003 cell, seed 001's share and speed-up.
    #[test]
    fn built_rows_fill_reproduces_seed_003_and_001_cells() {
        let shmem = experiment_name(&SEED001_LOOPS[0]);
        let s = Seeds {
            built: vec![
                row("003", "boot 4G, map_mem", "arch.tlbi.total", 4111, 2059),
                row("001", &shmem, "kernel.insns", 900, 880),
                row("001", &shmem, "user.insns", 100, 100),
                row("001", &shmem, "kernel.insns.ptep_clear_flush", 50, 0),
            ],
            ..Seeds::default()
        };
        let rows = s.real_kernel_rows();
        assert_eq!(rows.len(), 4, "{rows:?}");
        assert_eq!(rows[0]["value"], 4111);
        assert_eq!(rows[1]["value"], 2059);
        assert_eq!(rows[2]["value"], 5.0, "50 of 1000 instructions");
        assert_eq!(rows[3]["value"], -2.0, "1000 to 980");
        let software = crate::time::Profile::load(crate::time::profile::CALIBRATED).unwrap();
        let seeds = ["001".to_string(), "003".to_string()];
        let mut r = crate::reproduce::reproduce(&seeds, &software, crate::sim::kernels::DEFAULT).unwrap();
        let stored = serde_json::json!({ "real_kernel": rows });
        let attached = r.attach_real_kernel("run 1", &stored).unwrap();
        let seed003 = r.rows.iter().filter(|x| x.seed == "003").count();
        assert_eq!(attached, seed003 + 3, "every seed 003 cell, and seed 001's three");
    }

    /// Without the built section (skipped), no real-kernel row: nothing is made up.
    #[test]
    fn no_built_rows_no_real_kernel_rows() {
        assert!(Seeds::default().real_kernel_rows().is_empty());
    }
}
