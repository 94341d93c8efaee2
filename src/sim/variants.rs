//! Per-run choices: the seed variants (before/after) and the machine's shape, set
//! with `--set key=value`.

use crate::arch::arm64::pgtable::PtepGetVariant;
use crate::hw::{Granule, MachineConfig};
use crate::mm::rmap::TlbBatchVariant;
use crate::mm::ZapVariant;
use std::collections::BTreeMap;

/// Every key with its default and allowed values.
pub const KEYS: &[(&str, &str, &str)] = &[
    ("zap", "batched", "per-pte|batched (seed 000)"),
    ("tlb-batch", "deferred", "sync|deferred (seed 001)"),
    ("contpte", "on", "on|off"),
    ("ptep_get", "early-exit", "full-scan|early-exit|mod1|mod2 (seed 004)"),
    ("granule", "4K", "4K|16K|64K"),
    ("ram", "16G", "a size from 64M to 256T (48-bit PA), e.g. 16G or 1T"),
    ("cpus", "8", "1..=256"),
    ("tlbi-range", "off", "on|off (FEAT_TLBIRANGE)"),
    ("bbml2", "off", "on|off (BBML2_NOABORT)"),
    ("kpti", "off", "on|off"),
    ("hafdbs", "on", "on|off (hardware AF/dirty)"),
    ("checks", "off", "on|off (architectural checkers)"),
];

#[derive(Clone, Debug, PartialEq, Eq)]
pub struct Variants {
    values: BTreeMap<String, String>,
}

impl Default for Variants {
    fn default() -> Self {
        Variants {
            values: KEYS.iter().map(|(k, d, _)| (k.to_string(), d.to_string())).collect(),
        }
    }
}

/// Parse a size like 16G, 512M, 1T or 4096.
pub fn parse_size(s: &str) -> Option<u64> {
    let (num, mul) = match s.chars().last()? {
        'K' | 'k' => (&s[..s.len() - 1], 1u64 << 10),
        'M' | 'm' => (&s[..s.len() - 1], 1 << 20),
        'G' | 'g' => (&s[..s.len() - 1], 1 << 30),
        'T' | 't' => (&s[..s.len() - 1], 1 << 40),
        _ => (s, 1),
    };
    num.parse::<u64>().ok()?.checked_mul(mul)
}

fn on_off(v: &str) -> Option<bool> {
    match v {
        "on" | "1" | "true" => Some(true),
        "off" | "0" | "false" => Some(false),
        _ => None,
    }
}

impl Variants {
    /// Apply `key=value` settings, refusing unknown keys and values.
    pub fn from_sets(sets: &[String]) -> Result<Variants, String> {
        let mut v = Variants::default();
        for s in sets {
            let (k, val) = s
                .split_once('=')
                .ok_or_else(|| format!("--set {s}: expected key=value"))?;
            v.set(k, val)?;
        }
        Ok(v)
    }

    pub fn set(&mut self, k: &str, val: &str) -> Result<(), String> {
        let Some((_, _, allowed)) = KEYS.iter().find(|(key, _, _)| *key == k) else {
            let known: Vec<_> = KEYS.iter().map(|(k, _, _)| *k).collect();
            return Err(format!("unknown variant '{k}' (known: {})", known.join(", ")));
        };
        let ok = match k {
            "zap" => matches!(val, "per-pte" | "batched"),
            "tlb-batch" => matches!(val, "sync" | "deferred"),
            "ptep_get" => matches!(val, "full-scan" | "early-exit" | "mod1" | "mod2"),
            "granule" => Granule::parse(val).is_some(),
            "ram" => parse_size(val).is_some_and(|r| (64 << 20..=1 << 48).contains(&r)),
            "cpus" => val.parse::<usize>().is_ok_and(|n| (1..=256).contains(&n)),
            _ => on_off(val).is_some(),
        };
        if !ok {
            return Err(format!("invalid value '{val}' for variant '{k}' ({allowed})"));
        }
        self.values.insert(k.to_string(), val.to_string());
        Ok(())
    }

    pub fn get(&self, k: &str) -> &str {
        &self.values[k]
    }
    fn flag(&self, k: &str) -> bool {
        on_off(self.get(k)).unwrap()
    }
    pub fn all(&self) -> &BTreeMap<String, String> {
        &self.values
    }

    pub fn machine(&self) -> MachineConfig {
        let mut cfg = MachineConfig {
            granule: Granule::parse(self.get("granule")).unwrap(),
            ram_bytes: parse_size(self.get("ram")).unwrap(),
            ncpus: self.get("cpus").parse().unwrap(),
            ..MachineConfig::default()
        };
        cfg.features.tlbi_range = self.flag("tlbi-range");
        cfg.features.bbml2 = self.flag("bbml2");
        cfg.features.kpti = self.flag("kpti");
        cfg.features.hafdbs = self.flag("hafdbs");
        cfg
    }
    pub fn zap(&self) -> ZapVariant {
        if self.get("zap") == "per-pte" {
            ZapVariant::PerPte
        } else {
            ZapVariant::Batched
        }
    }
    pub fn tlb_batch(&self) -> TlbBatchVariant {
        if self.get("tlb-batch") == "sync" {
            TlbBatchVariant::Sync
        } else {
            TlbBatchVariant::Deferred
        }
    }
    pub fn contpte(&self) -> bool {
        self.flag("contpte")
    }
    pub fn checks(&self) -> bool {
        self.flag("checks")
    }
    pub fn ptep_get(&self) -> PtepGetVariant {
        match self.get("ptep_get") {
            "full-scan" => PtepGetVariant::FullScan,
            "mod1" => PtepGetVariant::Mod1,
            "mod2" => PtepGetVariant::Mod2,
            _ => PtepGetVariant::EarlyExit,
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn defaults_and_overrides() {
        let v = Variants::from_sets(&["zap=per-pte".into(), "granule=16K".into()]).unwrap();
        assert_eq!(v.zap(), ZapVariant::PerPte);
        assert_eq!(v.tlb_batch(), TlbBatchVariant::Deferred);
        assert_eq!(
            Variants::from_sets(&["tlb-batch=sync".into()]).unwrap().tlb_batch(),
            TlbBatchVariant::Sync
        );
        assert_eq!(v.machine().granule, Granule::K16);
        assert!(v.contpte());
    }

    #[test]
    fn bad_settings_are_refused_with_the_allowed_values() {
        let e = Variants::from_sets(&["zap=sometimes".into()]).unwrap_err();
        assert!(e.contains("per-pte|batched"), "{e}");
        assert!(Variants::from_sets(&["frob=1".into()])
            .unwrap_err()
            .contains("unknown variant"));
        assert!(Variants::from_sets(&["zap".into()]).is_err());
        for ram in ["32M", "257T"] {
            let e = Variants::from_sets(&[format!("ram={ram}")]).unwrap_err();
            assert!(e.contains("64M to 256T"), "{e}");
        }
        assert!(Variants::from_sets(&["ram=256T".into()]).is_ok());
    }
}
