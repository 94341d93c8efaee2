//! Software costs from instructions counted on a real arm64 kernel.
//!
//! The QEMU plugin counts the instructions each kernel function runs in a window
//! (`kernel.insns.<function>`). For map_mem on Debian's 6.12 guest, the measured table
//! `data/arm64-map-mem-insns.json` holds those counts beside the model's counts of the
//! same boot; the instructions one model event stands for are the instructions of the
//! functions that do its work, divided by the model's count of the event:
//!
//! ```text
//!   insns(event) = sum over its functions f of guest insns(f) / model count(event)
//!   ns(event, machine) = insns(event) * machine's kernel.insns cost (ns per instruction)
//! ```
//!
//! The map_mem table is for map_mem, where the loop over ptes is the whole work: at run
//! time the same pte store is part of work the per-pte kernel counters stand for
//! (costed by calibration), so these costs apply to a boot's map_mem only. The same
//! holds for seed 001's table (`data/seed001-shmem-loop-insns.json`): the swap and
//! shmem work of that benchmark's loop, measured on the same guest, applied to that
//! loop only, and for seed 000's (`data/seed000-munmap-insns.json`): folio_pte_batch's
//! steps in a munmap of pte-mapped THPs, which contpte's batched zap takes 16 ptes at a
//! time and a kernel without contpte one at a time.

use super::profile::{Cost, Lookup, NotCosted, Profile, Quality};
use serde::Deserialize;
use std::collections::BTreeMap;

const MAP_MEM: &str = include_str!("../../data/arm64-map-mem-insns.json");
const SEED001_LOOP: &str = include_str!("../../data/seed001-shmem-loop-insns.json");
const SEED000_MUNMAP: &str = include_str!("../../data/seed000-munmap-insns.json");

/// Model events of one kind of work and the guest functions whose instructions they
/// stand for, shared equally by every count of any of them.
#[derive(Debug, Deserialize)]
#[serde(deny_unknown_fields)]
pub struct EventInsns {
    pub events: Vec<String>,
    pub functions: Vec<String>,
    /// Why these functions are this event's work.
    pub why: String,
    /// Other model events whose work is among these functions (swap-out's zram write
    /// for `vmstat.pswpout`): a cost of their own would count that work twice, so a
    /// profile costed from this table leaves them uncosted, saying why.
    #[serde(default)]
    pub covers: Vec<String>,
}

/// The measured table.
#[derive(Debug, Deserialize)]
#[serde(deny_unknown_fields)]
pub struct Table {
    /// The command that measured it.
    pub command: String,
    /// The guest kernel.
    pub kernel: String,
    /// Every kernel instruction of the window.
    pub window_insns: i64,
    /// The guest's instructions per function in the window (those the events use).
    pub guest_insns: BTreeMap<String, i64>,
    /// The model's counts of the same boot.
    pub model_counts: BTreeMap<String, i64>,
    pub events: Vec<EventInsns>,
    /// Which of the window's instructions no event here stands for, and why.
    pub not_used: String,
}

impl Table {
    /// map_mem's table, built into the binary.
    pub fn map_mem() -> Table {
        serde_json::from_str(MAP_MEM).expect("data/arm64-map-mem-insns.json is a valid table (tested)")
    }

    /// Seed 001's swap-in and page-out loop's table, built into the binary.
    pub fn seed001_loop() -> Table {
        serde_json::from_str(SEED001_LOOP).expect("data/seed001-shmem-loop-insns.json is a valid table (tested)")
    }

    /// Seed 000's munmap of pte-mapped THPs, its folio_pte_batch steps, built into the
    /// binary.
    pub fn seed000_munmap() -> Table {
        serde_json::from_str(SEED000_MUNMAP).expect("data/seed000-munmap-insns.json is a valid table (tested)")
    }

    /// Instructions per count of each event, with the sentence saying where they come
    /// from. An event whose functions or count the table lacks is an error.
    pub fn per_event(&self) -> Result<Vec<(String, f64, String)>, String> {
        let mut out = Vec::new();
        for e in &self.events {
            let what = e.events.join(", ");
            let mut n = 0;
            for ev in &e.events {
                n += self
                    .model_counts
                    .get(ev)
                    .ok_or_else(|| format!("{ev}: no model count in the table"))?;
            }
            if n <= 0 {
                return Err(format!("{what}: the model counts none in the table"));
            }
            let mut insns = 0;
            for f in &e.functions {
                insns += self
                    .guest_insns
                    .get(f)
                    .ok_or_else(|| format!("{what}: no guest count of {f}"))?;
            }
            let per = insns as f64 / n as f64;
            // A long list is the table's to show, not every note's.
            let functions = match e.functions.len() {
                0..=12 => e.functions.join(" + "),
                k => format!("the {k} functions the table lists"),
            };
            let why = format!(
                "{per:.2} instructions per count: {functions} ({insns} instructions) over the model's {n} {what} ({}; `{}`): {}",
                self.kernel,
                self.command,
                e.why
            );
            out.extend(e.events.iter().map(|ev| (ev.clone(), per, why.clone())));
        }
        Ok(out)
    }
}

impl Profile {
    /// This profile with a cost for each of `table`'s events it has no number for: the
    /// event's instructions times the profile's time per kernel instruction (its
    /// `kernel.insns` cost). Unchanged when the profile has no such cost.
    pub fn with_kernel_insns(&self, table: &Table) -> Result<Profile, String> {
        let (ns_per_insn, per_insn) = match self.lookup("kernel.insns") {
            Lookup::Costed(_, c) => (c.ns.unwrap_or_default(), c.clone()),
            _ => return Ok(self.clone()),
        };
        let mut p = self.clone();
        for e in &table.events {
            p.cost.retain_mut(|c| {
                c.events.retain(|ev| !e.covers.contains(ev));
                !c.events.is_empty()
            });
            if !e.covers.is_empty() {
                // First: before the shared patterns (`vmstat.*`) that would answer for it.
                p.not_costed.insert(
                    0,
                    NotCosted {
                        events: e.covers.clone(),
                        reason: format!(
                            "their work is among the functions whose instructions {} cost ({})",
                            e.events.join(" and "),
                            table.kernel
                        ),
                    },
                );
            }
        }
        for (event, insns, why) in table.per_event()? {
            if matches!(p.lookup(&event), Lookup::Costed(..) | Lookup::NotCosted(_)) {
                continue;
            }
            p.cost.retain_mut(|c| {
                c.events.retain(|e| *e != event);
                !c.events.is_empty()
            });
            p.cost.push(Cost {
                events: vec![event],
                ns: Some(insns * ns_per_insn),
                quality: Quality::Est,
                source: format!("{} (QEMU plugin); {}", table.kernel, per_insn.source),
                rows: Vec::new(),
                note: Some(format!(
                    "{why}; times {ns_per_insn} ns per kernel instruction ({})",
                    per_insn.note.as_deref().unwrap_or("")
                )),
                derived_from_seed: None,
                seed_relation: None,
            });
        }
        Ok(p)
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    /// Every event of the built-in table has its functions and a count, and a profile
    /// with a time per instruction costs each at instructions times that time.
    #[test]
    fn the_built_in_tables_cost_their_events_per_instruction() {
        for (t, event) in [
            (Table::map_mem(), "arch.pte.write"),
            (Table::seed001_loop(), "kernel.shmem_writeout"),
            (Table::seed000_munmap(), "kernel.folio_pte_batch.reads"),
        ] {
            let per = t.per_event().unwrap();
            assert!(per.iter().any(|(e, n, _)| e == event && *n > 1.0), "{per:?}");
            let p = Profile::load("altra-vm").unwrap().with_kernel_insns(&t).unwrap();
            let ns_per_insn = 1.0 / (3.0 * 2.0);
            for (e, n, _) in &per {
                let Lookup::Costed(ps, c) = p.lookup(e) else {
                    panic!("{e} uncosted")
                };
                assert_eq!(c.quality, Quality::Est);
                assert!((ps as f64 / 1e3 - n * ns_per_insn).abs() < 1e-3 * n, "{e}: {ps} ps");
            }
        }
    }

    /// Seed 001's table counts what the model counts in the same loop: each of its
    /// events once per page and round (100 rounds of 256 pages).
    #[test]
    fn the_seed001_table_matches_the_models_loop() {
        let w = crate::workload::parse_str(
            "workloads/seed001-shmem-loop.wl",
            include_str!("../../workloads/seed001-shmem-loop.wl"),
        )
        .unwrap();
        let sets = [
            "shmem-swapin=cluster".to_string(),
            "fault-dirty=write".to_string(),
            "tlb-batch=sync".to_string(),
        ];
        let v = crate::sim::Variants::from_sets(&sets).unwrap();
        let rep = crate::sim::run(&w, &v).unwrap();
        let lp = rep.phases.iter().find(|p| p.label == "loop").unwrap();
        for (event, n) in &Table::seed001_loop().model_counts {
            assert_eq!(lp.counters.get(event).copied().unwrap_or(0), *n, "{event}");
        }
    }

    /// Seed 000's table counts what the model counts in the same munmap: one
    /// folio_pte_batch step per pte but a folio's first (511 per folio) when no block is
    /// contiguous, as on the guest.
    #[test]
    fn the_seed000_table_matches_the_models_munmap() {
        let w = crate::workload::parse_str(
            "workloads/seed000-munmap-order9-nocont-64m.wl",
            include_str!("../../workloads/seed000-munmap-order9-nocont-64m.wl"),
        )
        .unwrap();
        let sets = crate::sim::kernels::with_preset(
            crate::sim::kernels::Release(6, 12),
            crate::sim::kernels::Scope::Run,
            &[],
        );
        let v = crate::sim::Variants::from_sets(&sets).unwrap();
        let rep = crate::sim::run(&w, &v).unwrap();
        let m = rep.phases.iter().find(|p| p.label == "measured").unwrap();
        let t = Table::seed000_munmap();
        for (event, n) in &t.model_counts {
            assert_eq!(m.counters.get(event).copied().unwrap_or(0), *n, "{event}");
        }
        assert_eq!(t.model_counts["kernel.folio_pte_batch.reads"], 32 * 511);
    }

    /// A profile with no time per instruction gains nothing.
    #[test]
    fn without_a_time_per_instruction_nothing_is_costed() {
        let host = Profile::load(super::super::profile::CALIBRATED).unwrap();
        let p = host.with_kernel_insns(&Table::map_mem()).unwrap();
        assert!(!matches!(p.lookup("arch.pte.write"), Lookup::Costed(..)));
    }
}
