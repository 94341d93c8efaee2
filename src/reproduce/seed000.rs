//! Seed 000: madvise(MADV_DONTNEED) of each page, and munmap, of 1 GiB populated with
//! order-0 and with pte-mapped order-9 folios, zap_pte_range clearing pte by pte
//! (baseline) or a folio's batch at once (after-change); Apple M2 VM and Ampere Altra
//! (bare metal). The seed predates contpte: its setting is contpte=off; the same runs
//! with contpte on are shown beside it.

use super::{pct, phase_counts, same_sign, Breakdown, Costs, Reproduction, Row};
use crate::sim::kernels::Release;
use crate::time::Profile;
use crate::workload::parse_str;

const SEED: &str = "000";
/// (machine profile, its name in the seed, bench, folio, baseline stdev, after mean, after stdev)
const CELLS: &[(&str, &str, &str, &str, f64, f64, f64)] = &[
    ("m2-vm", "Apple M2 VM", "dontneed", "order-0", 7.5, -9.6, 3.1),
    ("m2-vm", "Apple M2 VM", "dontneed", "order-9", 7.9, -4.9, 8.1),
    ("altra-metal", "Ampere Altra", "dontneed", "order-0", 0.1, -0.2, 0.1),
    ("altra-metal", "Ampere Altra", "dontneed", "order-9", 0.0, -0.1, 0.0),
    ("m2-vm", "Apple M2 VM", "munmap", "order-0", 3.8, -1.9, 0.2),
    ("m2-vm", "Apple M2 VM", "munmap", "order-9", 6.4, -4.7, 0.8),
    ("altra-metal", "Ampere Altra", "munmap", "order-0", 0.9, -0.2, 0.6),
    ("altra-metal", "Ampere Altra", "munmap", "order-9", 0.1, -3.2, 0.2),
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

pub fn run(r: &mut Reproduction, software: &Profile, kernel: Release) -> Result<(), String> {
    let mut notes = vec![
        "the seed reports percent changes only; so does the model (modeled time of the measured phase)".to_string(),
    ];
    for contpte in ["off", "on"] {
        let mut counts = std::collections::BTreeMap::new();
        for bench in ["dontneed", "munmap"] {
            for folio in ["order-0", "order-9"] {
                let name = format!("seed000-{bench}-{folio}.wl");
                let w = parse_str(&name, &workload(bench, folio)).map_err(|e| e.to_string())?;
                for zap in ["per-pte", "batched"] {
                    let c = phase_counts(&w, kernel, &[("zap", zap), ("contpte", contpte)], "measured")?;
                    counts.insert((bench, folio, zap), c);
                }
            }
        }
        for &(machine, seed_name, bench, folio, base_sd, after, after_sd) in CELLS {
            let costs = Costs::for_seed(machine, SEED, software)?;
            notes.extend(costs.notes.iter().cloned());
            let experiment = format!("{bench} microbench, % change (contpte {contpte})");
            let column = format!("{seed_name} {folio}");
            let (base_ns, base_by) = costs.time_ns(&counts[&(bench, folio, "per-pte")]);
            let (after_ns, after_by) = costs.time_ns(&counts[&(bench, folio, "batched")]);
            let model_after = pct(after_ns, base_ns);
            for (variant, seed_value, sd, model, by) in [
                ("baseline", 0.0, base_sd, 0.0, base_by),
                ("after-change", after, after_sd, model_after, after_by),
            ] {
                r.rows.push(Row {
                    seed: SEED.into(),
                    experiment: experiment.clone(),
                    machine: column.clone(),
                    variant: variant.into(),
                    unit: "%".into(),
                    seed_value,
                    model_value: Some(model),
                    seed_stdev: Some(sd),
                    sign_agrees: same_sign(model, seed_value),
                });
                r.breakdowns.push(Breakdown {
                    seed: SEED.into(),
                    experiment: experiment.clone(),
                    machine: column.clone(),
                    variant: variant.into(),
                    by_event_ns: by,
                });
            }
        }
    }
    notes.sort();
    notes.dedup();
    r.notes.insert(SEED.into(), notes);
    Ok(())
}
