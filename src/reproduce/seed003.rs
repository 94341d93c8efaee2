//! Seed 003: map_mem() time, before (each linear-map table fixmapped twice: once to
//! zero it, once to populate it) and after (once), on the seed's four machine/RAM
//! columns, and the model's time against RAM size.

use super::{published, Breakdown, Cell, Costs, Figure, Reproduction, Series};
use crate::cmd::boot::{boot, Spec};
use crate::hw::Granule;
use crate::report::Counters;
use crate::sim::kernels::{with_preset, Release, Scope};
use crate::time::Profile;

const SEED: &str = "003";
/// The experiment's name: also the key a stored real-kernel measurement of it names.
pub(crate) const EXPERIMENT: &str = "map_mem";
/// (machine profile, RAM in GiB, before ms, after ms), from the seed's table.
const COLUMNS: &[(&str, u64, f64, f64)] = &[
    ("m2-vm", 16, 11.0, 10.0),
    ("altra-vm", 64, 161.0, 104.0),
    ("altra-vm", 256, 656.0, 438.0),
    ("altra-metal", 512, 1654.0, 1223.0),
];
/// The seed's before and after, as `boot --set pgtable-fixmap=` names them.
const VARIANTS: [(&str, &str); 2] = [("before", "alloc-and-populate"), ("after", "once")];
/// RAM sizes of the time-against-RAM curve, beyond the table's columns.
const CURVE_GIB: &[u64] = &[1, 4, 16, 64, 256, 512];

/// map_mem's counts for `gib` of RAM under `fixmap` (Debian's default rodata=full, 4K).
fn counts(gib: u64, fixmap: &str, kernel: Release) -> Result<Counters, String> {
    let mut spec = Spec::new(Granule::K4, gib << 30);
    spec.set_all(&with_preset(kernel, Scope::Boot, &[format!("pgtable-fixmap={fixmap}")]))?;
    let b = boot(&spec)?;
    let c = b
        .map_mem
        .iter_nonzero()
        .map(|(k, v)| (k.to_string(), v as i64))
        .collect();
    // The process goes on to other seeds: free the tables (one boot at a time).
    drop(b);
    Ok(c)
}

pub fn run(r: &mut Reproduction, software: &Profile, kernel: Release) -> Result<(), String> {
    let mut sizes: Vec<u64> = COLUMNS.iter().map(|c| c.1).chain(CURVE_GIB.iter().copied()).collect();
    sizes.sort();
    sizes.dedup();
    let mut measured = std::collections::BTreeMap::new();
    for &gib in &sizes {
        for (name, fixmap) in VARIANTS {
            measured.insert((gib, name), counts(gib, fixmap, kernel)?);
        }
    }
    let mut notes = Vec::new();
    for &(machine, gib, before, after) in COLUMNS {
        let costs = Costs::for_seed(machine, SEED, software)?.with_map_mem_insns()?;
        notes.extend(costs.notes.iter().cloned());
        let column = format!("{machine} {gib}G");
        let mut base: Option<(f64, f64)> = None;
        for ((name, _), seed_ms) in VARIANTS.iter().zip([before, after]) {
            let (ns, by) = costs.time_ns(&measured[&(gib, *name)]);
            let ms = ns / 1e6;
            let seed_ms = published(seed_ms);
            let figure = match base {
                None => Figure::Level,
                Some((seed_base, model_base)) => Figure::LevelChange {
                    seed_base,
                    model_base: Some(model_base),
                },
            };
            base.get_or_insert((seed_ms, ms));
            r.rows.push(
                Cell {
                    seed: SEED,
                    experiment: EXPERIMENT,
                    machine: &column,
                    variant: name,
                    unit: "ms",
                    seed_value: seed_ms,
                    seed_stdev: None,
                    model: Ok(ms),
                    figure,
                    unmodeled: None,
                }
                .row(),
            );
            r.breakdowns.push(Breakdown {
                seed: SEED.into(),
                experiment: EXPERIMENT.into(),
                machine: column.clone(),
                variant: name.to_string(),
                by_event_ns: by,
            });
        }
    }
    explain_metal(r);
    let costs = Costs::for_seed("altra-metal", SEED, software)?.with_map_mem_insns()?;
    for (name, _) in VARIANTS {
        r.series.push(Series {
            seed: SEED.into(),
            name: format!("model {name}, altra-metal costs"),
            x_label: "RAM (GiB)".into(),
            y_label: "map_mem (ms)".into(),
            points: CURVE_GIB
                .iter()
                .map(|&g| (g as f64, costs.time_ns(&measured[&(g, name)]).0 / 1e6))
                .collect(),
        });
    }
    notes.sort();
    notes.dedup();
    r.notes.insert(SEED.into(), notes);
    Ok(())
}

/// Says why a disagreeing metal 512G cell disagrees, from the seed's own columns: its
/// map_mem per GiB is higher on the metal machine than on the 256G VM of the same
/// cores, where the model's Altra costs (the same cores, clock and kernel) make both
/// the same per GiB. What slows the metal machine is not known, so not modeled.
fn explain_metal(r: &mut Reproduction) {
    let per_gib = |r: &Reproduction, column: &str, variant: &str| {
        let gib: f64 = column.split(' ').nth(1)?.trim_end_matches('G').parse().ok()?;
        let row = r
            .rows
            .iter()
            .find(|x| x.seed == SEED && x.machine == column && x.variant == variant)?;
        Some((row.seed_value / gib, row.model_value? / gib))
    };
    for (name, _) in VARIANTS {
        let (Some((seed_vm, model_vm)), Some((seed_metal, model_metal))) =
            (per_gib(r, "altra-vm 256G", name), per_gib(r, "altra-metal 512G", name))
        else {
            continue;
        };
        let why = format!(
            "; the seed's map_mem per GiB is ×{:.2} on the metal 512G machine what it is on the 256G VM of the same cores ({seed_metal:.2} against {seed_vm:.2} ms/GiB), the model's ×{:.2}: its Altra costs are one machine's, and what makes the metal machine slower per GiB (memory placement, NUMA, firmware: the seed does not say) is not modeled",
            seed_metal / seed_vm,
            model_metal / model_vm
        );
        for row in r.rows.iter_mut().filter(|x| {
            x.seed == SEED
                && x.machine == "altra-metal 512G"
                && x.variant == name
                && x.verdict == super::Verdict::Disagrees
        }) {
            row.reason.get_or_insert_with(String::new).push_str(&why);
        }
    }
}
