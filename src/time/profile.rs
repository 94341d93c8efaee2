//! Machine profiles: `machines/*.toml`, one file per machine, each merged over
//! `machines/common.toml`. Every cost names its source and a quality tag.

use serde::{Deserialize, Serialize};
use std::collections::BTreeMap;

/// The profiles built into the binary, by name.
pub const BUILTIN: &[(&str, &str)] = &[
    ("m2-vm", include_str!("../../machines/m2-vm.toml")),
    ("altra-vm", include_str!("../../machines/altra-vm.toml")),
    ("altra-metal", include_str!("../../machines/altra-metal.toml")),
    ("snapdragon-888", include_str!("../../machines/snapdragon-888.toml")),
    ("kunpeng-920", include_str!("../../machines/kunpeng-920.toml")),
    ("generic", include_str!("../../machines/generic.toml")),
    ("calibrated", include_str!("../../machines/calibrated.toml")),
];
const COMMON: &str = include_str!("../../machines/common.toml");

/// The core clocks a profile may state: real arm64 cores run from a few hundred MHz to
/// about 4 GHz; a clock outside (0, NaN, inf) would scale costs to nothing or infinity.
pub const CLOCK_GHZ: std::ops::RangeInclusive<f64> = 0.1..=10.0;
/// The largest cost of one event: a second, far above any mm event (a broadcast TLB
/// flush takes microseconds). With it a count (below 2^64) times a cost, scaled by a
/// clock ratio of at most 100, is below 2^108 picoseconds, so sums over any number of
/// events a report has stay far inside i128.
pub const MAX_COST_NS: f64 = 1e9;

/// The profile `foliolab calibrate` measures on this host.
pub const HOST: &str = "host";

/// The calibration committed with foliolab (`foliolab calibrate` on the project's
/// test machine), so that `reproduce` gives the same figures on every host.
pub const CALIBRATED: &str = "calibrated";

/// Where the host profile lives: in the user's data directory, since it describes the
/// machine it was measured on, not the project.
pub fn host_path() -> Option<std::path::PathBuf> {
    Some(crate::store::data_dir()?.join("machines/host.toml"))
}

/// How good a cost is (../shared/reference/costs.md).
#[derive(Clone, Copy, Debug, PartialEq, Eq, Deserialize, Serialize)]
pub enum Quality {
    /// Measured and published by the source.
    M,
    /// Derived by arithmetic from a published measurement (the note gives the formula).
    D,
    /// Vendor spec or documentation.
    V,
    /// A relative result only.
    R,
    /// No public number: the event stays uncosted.
    #[serde(rename = "NONE")]
    None,
    /// An explicit estimate, explained in the note.
    #[serde(rename = "EST")]
    Est,
    /// Measured on this host by `foliolab calibrate` (a fit to timed workloads).
    #[serde(rename = "HOST")]
    Host,
}

impl Quality {
    pub fn tag(self) -> &'static str {
        match self {
            Quality::M => "M",
            Quality::D => "D",
            Quality::V => "V",
            Quality::R => "R",
            Quality::None => "NONE",
            Quality::Est => "EST",
            Quality::Host => "HOST",
        }
    }
}

/// The cost of one or more events.
#[derive(Clone, Debug, Deserialize, Serialize)]
#[serde(deny_unknown_fields)]
pub struct Cost {
    pub events: Vec<String>,
    /// Nanoseconds per count; absent exactly when the quality is NONE.
    pub ns: Option<f64>,
    pub quality: Quality,
    /// Lore Message-ID, commit or page the number comes from.
    pub source: String,
    /// Row numbers in costs.md.
    #[serde(default)]
    pub rows: Vec<u32>,
    pub note: Option<String>,
    /// The seed whose own series the number is derived from: not usable to reproduce
    /// that seed's result.
    pub derived_from_seed: Option<String>,
    /// How the source relates to that seed (e.g. a sibling patch of its series).
    pub seed_relation: Option<String>,
}

impl Cost {
    /// Whether the number comes from `seed`'s own patch series.
    pub fn is_derived_from(&self, seed: &str) -> bool {
        self.derived_from_seed.as_deref() == Some(seed)
    }

    /// The cost in picoseconds, the unit of all arithmetic.
    pub fn ps(&self) -> Option<i128> {
        self.ns.map(|ns| (ns * 1000.0).round() as i128)
    }
}

#[derive(Clone, Debug, Deserialize, Serialize)]
#[serde(deny_unknown_fields)]
pub struct NotCosted {
    /// Event names; one ending in '*' is a prefix.
    pub events: Vec<String>,
    pub reason: String,
}

#[derive(Clone, Debug, Deserialize, Serialize)]
#[serde(deny_unknown_fields)]
pub struct Tlb {
    /// "none" when no public number exists.
    pub geometry: String,
    pub source: String,
    pub quality: Quality,
}

#[derive(Clone, Debug, Deserialize, Serialize)]
#[serde(deny_unknown_fields)]
pub struct Features {
    pub tlbi_range: bool,
    pub bbml2: bool,
    pub kpti: bool,
    /// ARM64_WORKAROUND_REPEAT_TLBI: "yes", "no" or "unknown" (not modeled).
    pub repeat_tlbi: String,
    pub note: String,
}

#[derive(Clone, Debug, Deserialize, Serialize)]
#[serde(deny_unknown_fields)]
struct Common {
    #[serde(default)]
    not_costed: Vec<NotCosted>,
    #[serde(default)]
    cost: Vec<Cost>,
}

fn one_node() -> u32 {
    1
}

/// One machine.
#[derive(Clone, Debug, Deserialize, Serialize)]
#[serde(deny_unknown_fields)]
pub struct Profile {
    pub name: String,
    pub description: String,
    pub cpus: u32,
    pub cpus_note: String,
    /// NUMA nodes (1 when the profile does not say).
    #[serde(default = "one_node")]
    pub nodes: u32,
    /// The core clock, for scaling software costs measured on another machine.
    pub clock_ghz: f64,
    pub clock_source: String,
    pub tlb: Tlb,
    pub features: Features,
    /// The machine's own costs, then (after loading) common.toml's for the events
    /// the machine does not cost itself.
    #[serde(default)]
    pub cost: Vec<Cost>,
    #[serde(default)]
    pub not_costed: Vec<NotCosted>,
    /// The machine whose costs stand in for this one's where they are refused (derived
    /// from the seed being reproduced); `generic` when absent.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub stand_in: Option<StandIn>,
}

/// A stand-in machine for refused costs, and why it is a fair one.
#[derive(Clone, Debug, Deserialize, Serialize)]
#[serde(deny_unknown_fields)]
pub struct StandIn {
    pub profile: String,
    pub why: String,
}

/// How a profile treats one counter.
pub enum Lookup<'a> {
    /// Costs this many picoseconds per count.
    Costed(i128, &'a Cost),
    /// Has an entry saying no public number exists.
    NoNumber(&'a Cost),
    /// A sum, composite or statistic: no time of its own.
    NotCosted(&'a NotCosted),
    /// Not mentioned by the profile.
    Unknown,
}

impl Profile {
    /// A built-in profile by name, `host` (written by `foliolab calibrate`), or a
    /// profile file when `name` ends in `.toml`.
    pub fn load(name: &str) -> Result<Profile, String> {
        if name == HOST {
            let path = host_path().ok_or("no HOME or XDG_DATA_HOME to find the host profile")?;
            let path = path.to_string_lossy();
            return Profile::read(&path).map_err(|e| format!("--machine host: {e} (run `foliolab calibrate` first)"));
        }
        if name.ends_with(".toml") {
            return Profile::read(name).map_err(|e| format!("--machine {e}"));
        }
        match BUILTIN.iter().find(|(n, _)| *n == name) {
            Some((_, text)) => Profile::parse(text).map_err(|e| format!("machines/{name}.toml: {e}")),
            None => {
                let known: Vec<_> = BUILTIN.iter().map(|(n, _)| *n).collect();
                Err(format!(
                    "unknown machine '{name}' (known: {}; or a path ending in .toml)",
                    known.join(", ")
                ))
            }
        }
    }

    /// Every built-in profile, in the order of `BUILTIN`.
    pub fn all() -> Result<Vec<Profile>, String> {
        BUILTIN.iter().map(|(n, _)| Profile::load(n)).collect()
    }

    /// A profile file, read with a size limit; errors are `PATH:LINE:COL: message`.
    fn read(path: &str) -> Result<Profile, String> {
        let text =
            crate::input::read_text(path, crate::input::MAX_PROFILE_BYTES).map_err(|e| format!("{path}:1:1: {e}"))?;
        Profile::parse(&text).map_err(|e| format!("{path}:{e}"))
    }

    /// Parse one profile, merge common.toml under it and check it. An error is
    /// `LINE:COL: message`, at the value at fault (or 1:1 when the text has none, as
    /// for a cost common.toml brings); a message quoting the text is cut short.
    pub fn parse(text: &str) -> Result<Profile, String> {
        let at = |offset: Option<usize>, msg: &str| {
            let (line, col) = crate::input::line_col(text, offset.unwrap_or(0));
            let msg = msg.trim_end();
            match msg.char_indices().nth(200) {
                Some((cut, _)) => format!("{line}:{col}: {}… ({} bytes)", &msg[..cut], msg.len()),
                None => format!("{line}:{col}: {msg}"),
            }
        };
        let mut p: Profile = toml::from_str(text).map_err(|e| {
            // The message alone: Display adds the offending line, which may be megabytes.
            at(e.span().map(|s| s.start), e.message())
        })?;
        let common: Common = toml::from_str(COMMON).map_err(|e| format!("common.toml: {e}"))?;
        let own: Vec<String> = p.cost.iter().flat_map(|c| c.events.clone()).collect();
        for mut c in common.cost {
            c.events.retain(|e| !own.contains(e));
            if !c.events.is_empty() {
                p.cost.push(c);
            }
        }
        p.not_costed.extend(common.not_costed);
        p.check_at()
            .map_err(|(key, msg)| at(key.and_then(|k| text.find(&k)), &msg))?;
        Ok(p)
    }

    /// Every cost has a source and a quality tag, a number exactly when it is not
    /// NONE, and a note when it is NONE, EST or D; no event is costed twice. The clock
    /// and every cost lie in the stated ranges (`CLOCK_GHZ`, `MAX_COST_NS`).
    pub fn check(&self) -> Result<(), String> {
        self.check_at().map_err(|(_, msg)| msg)
    }

    /// `check`, with the text to look for in the profile's file to find the value at
    /// fault (`"event"` for a cost).
    fn check_at(&self) -> Result<(), (Option<String>, String)> {
        if !(CLOCK_GHZ.contains(&self.clock_ghz)) {
            return Err((
                Some("clock_ghz".into()),
                format!(
                    "clock_ghz = {:?}: a core clock is a finite number from {} to {} GHz",
                    self.clock_ghz,
                    CLOCK_GHZ.start(),
                    CLOCK_GHZ.end()
                ),
            ));
        }
        if self.cpus == 0 || self.nodes == 0 {
            return Err((
                Some("cpus".into()),
                "a machine has at least one CPU and one node".into(),
            ));
        }
        let mut seen = BTreeMap::new();
        for c in &self.cost {
            let what = c.events.join(", ");
            let key = c.events.first().map(|e| format!("\"{e}\""));
            let fail = |msg: String| Err((key.clone(), msg));
            if c.events.is_empty() {
                return Err((None, "a cost entry with no events".into()));
            }
            if c.source.trim().is_empty() {
                return fail(format!("{what}: no source"));
            }
            match (c.quality, c.ns) {
                (Quality::None, Some(_)) => return fail(format!("{what}: quality NONE with a cost")),
                (Quality::None, None) => {}
                (_, None) => return fail(format!("{what}: quality {} without ns", c.quality.tag())),
                (_, Some(ns)) if !(0.0..=MAX_COST_NS).contains(&ns) => {
                    return fail(format!("{what}: cost {ns:?} ns is outside 0 to {MAX_COST_NS:e} ns"))
                }
                _ => {}
            }
            let needs_note = matches!(c.quality, Quality::None | Quality::Est | Quality::D);
            if needs_note && c.note.as_deref().is_none_or(|n| n.trim().is_empty()) {
                return fail(format!("{what}: quality {} needs a note", c.quality.tag()));
            }
            if c.seed_relation.is_some() && c.derived_from_seed.is_none() {
                return fail(format!("{what}: seed_relation without derived_from_seed"));
            }
            for e in &c.events {
                if seen.insert(e.clone(), ()).is_some() {
                    return Err((Some(format!("\"{e}\"")), format!("{e}: costed twice")));
                }
            }
        }
        Ok(())
    }

    /// How this profile treats `event`.
    pub fn lookup(&self, event: &str) -> Lookup<'_> {
        if let Some(c) = self.cost.iter().find(|c| c.events.iter().any(|e| e == event)) {
            return match c.ps() {
                Some(ps) => Lookup::Costed(ps, c),
                None => Lookup::NoNumber(c),
            };
        }
        let matches = |pat: &String| match pat.strip_suffix('*') {
            Some(prefix) => event.starts_with(prefix),
            None => pat == event,
        };
        match self.not_costed.iter().find(|n| n.events.iter().any(matches)) {
            Some(n) => Lookup::NotCosted(n),
            None => Lookup::Unknown,
        }
    }

    /// The model variants this machine sets, as `key=value`.
    pub fn variant_sets(&self) -> Vec<(String, String)> {
        let f = |b: bool| if b { "on" } else { "off" }.to_string();
        vec![
            ("cpus".into(), self.cpus.to_string()),
            ("nodes".into(), self.nodes.to_string()),
            ("tlbi-range".into(), f(self.features.tlbi_range)),
            ("bbml2".into(), f(self.features.bbml2)),
            ("kpti".into(), f(self.features.kpti)),
        ]
    }

    /// Costed events derived from `seed`'s own series (not usable to reproduce it).
    pub fn derived_from(&self, seed: &str) -> Vec<&Cost> {
        self.cost.iter().filter(|c| c.is_derived_from(seed)).collect()
    }

    /// This profile as usable to reproduce `seed`: every cost derived from that seed's
    /// own series is replaced by `fallback`'s cost for the event when that one is not
    /// derived from the seed too, else left without a number. Returns the notes saying
    /// what was replaced or refused.
    pub fn for_seed(&self, seed: &str, fallback: &Profile) -> (Profile, Vec<String>) {
        let mut p = self.clone();
        let mut notes = Vec::new();
        let mut kept = Vec::new();
        for c in std::mem::take(&mut p.cost) {
            if !c.is_derived_from(seed) {
                kept.push(c);
                continue;
            }
            for e in &c.events {
                let replacement = fallback
                    .cost
                    .iter()
                    .find(|f| f.events.contains(e) && f.ns.is_some() && !f.is_derived_from(seed));
                let mut r = match replacement {
                    Some(f) => {
                        notes.push(format!(
                            "{}: {e}: its cost is derived from seed {seed}'s own series; {}'s {} ns [{}] used instead",
                            self.name,
                            fallback.name,
                            f.ns.unwrap_or_default(),
                            f.quality.tag()
                        ));
                        f.clone()
                    }
                    None => {
                        notes.push(format!(
                            "{}: {e}: its cost is derived from seed {seed}'s own series and {} has none other: uncosted",
                            self.name, fallback.name
                        ));
                        Cost {
                            ns: None,
                            quality: Quality::None,
                            note: Some(format!("refused: derived from seed {seed}'s own series")),
                            ..c.clone()
                        }
                    }
                };
                r.events = vec![e.clone()];
                kept.push(r);
            }
        }
        p.cost = kept;
        (p, notes)
    }

    /// This profile with `software`'s measured costs for every event it has no number
    /// for, scaled by the ratio of the two clocks: the generic mm code is the same code
    /// on both, and only the core differs (but for the host's own `HOST_ONLY` costs).
    /// Returns it with the sentence saying so.
    pub fn with_software(&self, software: &Profile) -> (Profile, String) {
        let ratio = software.clock_ghz / self.clock_ghz;
        let why = format!(
            "generic mm software measured on {} ({:.2} GHz), scaled by the clock ratio to {} ({:.2} GHz): equal work per cycle assumed",
            software.description, software.clock_ghz, self.name, self.clock_ghz
        );
        let why = why.as_str();
        let mut p = self.clone();
        for c in &software.cost {
            let Some(ns) = c.ns else { continue };
            let missing: Vec<String> = c
                .events
                .iter()
                .filter(|e| !matches!(p.lookup(e), Lookup::Costed(..) | Lookup::NotCosted(_)))
                .filter(|e| !super::calibrate::HOST_ONLY.contains(&e.as_str()))
                .cloned()
                .collect();
            if missing.is_empty() {
                continue;
            }
            p.cost.retain_mut(|own| {
                own.events.retain(|e| !missing.contains(e));
                !own.events.is_empty()
            });
            p.cost.push(Cost {
                events: missing,
                ns: Some(ns * ratio),
                quality: Quality::Est,
                source: format!("{} ({}), scaled by {ratio:.3}", software.name, c.source),
                rows: Vec::new(),
                note: Some(why.to_string()),
                derived_from_seed: None,
                seed_relation: None,
            });
        }
        (p, why.to_string())
    }
}
