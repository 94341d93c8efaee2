//! Modeled time: a report's counts times a machine profile's costs.
//!
//! All arithmetic is in integer picoseconds, so the result is exact and the same on
//! every host; nanoseconds are only produced for output.

pub mod calibrate;
pub mod insns;
pub mod ipi;
pub mod profile;

pub use profile::{Lookup, Profile, Quality};

use crate::report::{Counters, Report};
use serde_json::{Map, Value};
use std::collections::BTreeMap;

/// The modeled time of one report on one machine.
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct Modeled {
    pub machine: String,
    pub total_ps: i128,
    /// Event -> picoseconds, non-zero only.
    pub by_event: BTreeMap<String, i128>,
    /// One per phase of the report, in order.
    pub phases_ps: Vec<i128>,
    /// Counted (non-zero) events without a cost, sorted.
    pub uncosted: Vec<String>,
    /// Contributing events whose cost is derived from a seed's own series -> the seed.
    pub seed_derived: BTreeMap<String, String>,
}

/// The picoseconds of `c` on `p`, in checked arithmetic: a checked profile's costs
/// (`profile::MAX_COST_NS`) keep every product and sum far inside i128, so an overflow
/// is a defect of that bound, not an input to wrap.
fn counters_ps(p: &Profile, c: &Counters, by_event: &mut BTreeMap<String, i128>) -> i128 {
    const BOUND: &str = "picoseconds stay inside i128 for costs below MAX_COST_NS";
    let mut total: i128 = 0;
    for (k, &n) in c {
        if let Lookup::Costed(ps, _) = p.lookup(k) {
            let t = (n as i128).checked_mul(ps).expect(BOUND);
            if t != 0 {
                let e = by_event.entry(k.clone()).or_default();
                *e = e.checked_add(t).expect(BOUND);
                total = total.checked_add(t).expect(BOUND);
            }
        }
    }
    total
}

/// Cost `r`'s counters on machine `p`.
pub fn model(p: &Profile, r: &Report) -> Modeled {
    let mut by_event = BTreeMap::new();
    let total_ps = counters_ps(p, &r.counters, &mut by_event);
    let phases_ps = r
        .phases
        .iter()
        .map(|ph| counters_ps(p, &ph.counters, &mut BTreeMap::new()))
        .collect();
    let counted = r
        .counters
        .iter()
        .chain(r.phases.iter().flat_map(|ph| ph.counters.iter()))
        .filter(|(_, n)| **n != 0)
        .map(|(k, _)| k);
    let mut uncosted: Vec<String> = counted
        .filter(|k| matches!(p.lookup(k), Lookup::NoNumber(_) | Lookup::Unknown))
        .cloned()
        .collect();
    uncosted.sort();
    uncosted.dedup();
    let seed_derived = by_event
        .keys()
        .filter_map(|k| match p.lookup(k) {
            Lookup::Costed(_, c) => c.derived_from_seed.clone().map(|s| (k.clone(), s)),
            _ => None,
        })
        .collect();
    Modeled {
        machine: p.name.clone(),
        total_ps,
        by_event,
        phases_ps,
        uncosted,
        seed_derived,
    }
}

/// Picoseconds as a JSON number of nanoseconds.
fn ns(ps: i128) -> Value {
    match i64::try_from(ps / 1000) {
        Ok(ns) if ps % 1000 == 0 => Value::from(ns),
        _ => Value::from(ps as f64 / 1000.0),
    }
}

/// Nanoseconds as text with a unit.
pub fn human(ps: i128) -> String {
    let ns = ps as f64 / 1000.0;
    match ns.abs() {
        x if x >= 1e9 => format!("{:.3} s", ns / 1e9),
        x if x >= 1e6 => format!("{:.3} ms", ns / 1e6),
        x if x >= 1e3 => format!("{:.3} us", ns / 1e3),
        _ => format!("{ns:.3} ns"),
    }
}

/// The variants to run with: the machine's settings, except where `sets` gives the
/// key itself, then `sets`. Returns them with the machine settings that took effect.
pub fn variant_sets(p: &Profile, sets: &[String]) -> (Vec<String>, BTreeMap<String, String>) {
    let user: Vec<&str> = sets.iter().filter_map(|s| s.split_once('=')).map(|(k, _)| k).collect();
    let applied: BTreeMap<String, String> = p
        .variant_sets()
        .into_iter()
        .filter(|(k, _)| !user.contains(&k.as_str()))
        .collect();
    let all = applied
        .iter()
        .map(|(k, v)| format!("{k}={v}"))
        .chain(sets.iter().cloned())
        .collect();
    (all, applied)
}

/// The report as JSON with `time` at the top level and `time_ns` in each phase.
pub fn annotate(r: &Report, m: &Modeled, applied: &BTreeMap<String, String>) -> Value {
    let mut v = serde_json::to_value(r).expect("a report serializes");
    if let Some(phases) = v.get_mut("phases").and_then(Value::as_array_mut) {
        for (ph, &ps) in phases.iter_mut().zip(&m.phases_ps) {
            if let Some(o) = ph.as_object_mut() {
                o.insert("time_ns".into(), ns(ps));
            }
        }
    }
    let mut t = Map::new();
    t.insert("total_ns".into(), ns(m.total_ps));
    t.insert(
        "by_event".into(),
        Value::Object(m.by_event.iter().map(|(k, &ps)| (k.clone(), ns(ps))).collect()),
    );
    t.insert("machine".into(), Value::from(m.machine.clone()));
    t.insert("uncosted".into(), Value::from(m.uncosted.clone()));
    t.insert(
        "machine_variants".into(),
        Value::Object(
            applied
                .iter()
                .map(|(k, v)| (k.clone(), Value::from(v.clone())))
                .collect(),
        ),
    );
    t.insert(
        "derived_from_seed".into(),
        Value::Object(
            m.seed_derived
                .iter()
                .map(|(k, s)| (k.clone(), Value::from(s.clone())))
                .collect(),
        ),
    );
    v.as_object_mut()
        .expect("a report is an object")
        .insert("time".into(), Value::Object(t));
    v
}

/// The text rendering: total, the top events by share, phases, what is uncosted.
pub fn summary(r: &Report, m: &Modeled, applied: &BTreeMap<String, String>) -> String {
    use std::fmt::Write;
    let mut s = String::new();
    let _ = writeln!(s, "\nmodeled time on {}: {}", m.machine, human(m.total_ps));
    if !applied.is_empty() {
        let set: Vec<_> = applied.iter().map(|(k, v)| format!("{k}={v}")).collect();
        let _ = writeln!(s, "  machine set variants: {}", set.join(" "));
    }
    let mut top: Vec<_> = m.by_event.iter().collect();
    top.sort_by(|a, b| b.1.cmp(a.1).then(a.0.cmp(b.0)));
    let w = top.iter().map(|(k, _)| k.len()).max().unwrap_or(0);
    for (k, &ps) in top.iter().take(8) {
        let share = if m.total_ps == 0 { 0 } else { ps * 1000 / m.total_ps };
        let seed = match m.seed_derived.get(*k) {
            Some(sd) => format!("  (cost derived from seed {sd}'s series)"),
            None => String::new(),
        };
        let _ = writeln!(
            s,
            "  {k:<w$}  {:>14}  {:>3}.{}%{seed}",
            human(ps),
            share / 10,
            share % 10
        );
    }
    if top.len() > 8 {
        let _ = writeln!(s, "  ... {} more events", top.len() - 8);
    }
    if r.phases.len() > 1 {
        for (ph, &ps) in r.phases.iter().zip(&m.phases_ps) {
            let _ = writeln!(s, "  phase {}: {}", ph.label, human(ps));
        }
    }
    if !m.uncosted.is_empty() {
        let _ = writeln!(s, "  uncosted (counted, no public number): {}", m.uncosted.join(" "));
    }
    s
}

/// A `--machine` choice for `run`: the profile and the variant settings to run with.
pub struct Machine {
    pub profile: Profile,
    /// The machine's settings (where `--set` does not give the key) then `--set`'s.
    pub sets: Vec<String>,
    /// The machine settings that took effect.
    pub applied: BTreeMap<String, String>,
}

impl Machine {
    /// `None` without `--machine`.
    pub fn load(name: Option<&str>, sets: &[String]) -> Result<Option<Machine>, String> {
        let Some(name) = name else { return Ok(None) };
        let mut profile = Profile::load(name)?;
        // The generic mm software: this project's calibration, scaled by clock, for
        // what the machine's own profile has no number for.
        if profile.name != profile::CALIBRATED && profile.name != profile::HOST {
            profile = profile.with_software(&Profile::load(profile::CALIBRATED)?).0;
        }
        let (sets, applied) = variant_sets(&profile, sets);
        Ok(Some(Machine { profile, sets, applied }))
    }

    /// The output of `run` for report `r`: JSON with `time`, or `text(r)` followed by
    /// the time summary.
    pub fn render(&self, r: &Report, json: bool, text: fn(&Report) -> String) -> String {
        let m = model(&self.profile, r);
        if json {
            let v = annotate(r, &m, &self.applied);
            serde_json::to_string_pretty(&v).expect("JSON values serialize") + "\n"
        } else {
            text(r) + &summary(r, &m, &self.applied)
        }
    }
}

#[cfg(test)]
mod tests;
