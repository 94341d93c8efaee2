//! `foliolab reproduce`: deterministic, and every row in the JSON shape.

use std::process::Command;

fn reproduce(seeds: &[&str]) -> Vec<u8> {
    let out = Command::new(env!("CARGO_BIN_EXE_foliolab"))
        .arg("reproduce")
        .args(seeds)
        .arg("--json")
        .output()
        .unwrap();
    assert!(out.status.success(), "{}", String::from_utf8_lossy(&out.stderr));
    out.stdout
}

/// The same figures twice, bit for bit (elapsed_s aside), for the seeds that run quickly.
#[test]
fn reproduce_is_deterministic() {
    let strip = |b: Vec<u8>| {
        let mut v: serde_json::Value = serde_json::from_slice(&b).unwrap();
        v.as_object_mut().unwrap().remove("elapsed_s");
        v
    };
    let a = strip(reproduce(&["001", "002", "003"]));
    let b = strip(reproduce(&["001", "002", "003"]));
    assert_eq!(a, b);
    let rows = a["rows"].as_array().unwrap();
    assert!(!rows.is_empty());
    for r in rows {
        for key in [
            "seed",
            "experiment",
            "machine",
            "variant",
            "unit",
            "seed_value",
            "model_value",
            "seed_stdev",
            "sign_agrees",
            "verdict",
        ] {
            assert!(r.get(key).is_some(), "{key} missing in {r}");
        }
        let v = r["verdict"].as_str().unwrap();
        assert!(["agrees", "noise", "disagrees", "not-modeled"].contains(&v), "{r}");
        // A verdict that is not agreement says why.
        if v == "disagrees" || v == "not-modeled" {
            assert!(r["reason"].as_str().is_some_and(|s| !s.is_empty()), "{r}");
        }
        // A seed no real kernel measures says why (002: a build's time on the seed's
        // machine); one `validate --seeds` measures points to it or shows its run.
        let real = r["real_kernel"]["source"].as_str().unwrap();
        assert_eq!(r["seed"] == "002", real.starts_with("none: "), "{r}");
        // An absent value is never a disagreement.
        if r["model_value"].is_null() {
            assert_eq!(v, "not-modeled", "{r}");
            assert_eq!(r["sign_agrees"], false, "{r}");
        }
    }
    let counts = &a["summary"]["counts"];
    let total: u64 = ["agrees", "noise", "disagrees", "not-modeled"]
        .iter()
        .map(|k| counts[k].as_u64().unwrap())
        .sum();
    assert_eq!(total as usize, rows.len());
    assert_eq!(
        a["summary"]["disagrees"].as_array().unwrap().len() as u64,
        counts["disagrees"].as_u64().unwrap()
    );
    // Seed 002 replays the recorded build: the model's anonymous-memory work falls with
    // 64K folios, and the rest of the build's kernel time (measured beside it on this
    // host) dilutes that change to the cell's figure, judged; wall time needs user
    // time, which the model does not have.
    let s002: Vec<&serde_json::Value> = rows.iter().filter(|r| r["seed"] == "002").collect();
    let kernel = s002
        .iter()
        .find(|r| r["experiment"] == "compile kernel time, % change" && r["variant"] == "large anon folios")
        .unwrap();
    assert!(kernel["model_value"].as_f64().unwrap() < -10.0, "{kernel}");
    assert_ne!(kernel["verdict"], "not-modeled");
    let notes = a["notes"]["002"].as_array().unwrap();
    let anon = notes.iter().find_map(|n| {
        let n = n.as_str()?;
        n.strip_prefix("kernel time: the model times the build's anonymous-memory work only (faults, copy-on-write, teardown), which changes by ")?
            .split('%')
            .next()?
            .parse::<f64>()
            .ok()
    });
    let anon = anon.expect("seed 002's kernel-time note gives the anonymous work's change");
    assert!(
        anon < kernel["model_value"].as_f64().unwrap(),
        "the whole changes less than its anonymous part"
    );
    assert!(s002
        .iter()
        .filter(|r| r["experiment"] == "compile wall time, % change")
        .all(|r| r["model_value"].is_null() && r["verdict"] == "not-modeled"));
    // A share is a level: no sign to agree on.
    assert!(rows
        .iter()
        .filter(|r| r["experiment"].as_str().unwrap().contains("share of cycles"))
        .all(|r| r["sign_agrees"] == false));
    assert!(notes
        .iter()
        .any(|n| n.as_str().unwrap().starts_with("anonymous faults: ")
            && n.as_str().unwrap().contains(" with order-0 folios, ")));
    // Seed 003's notes are said once, naming each machine they hold for.
    let notes003: Vec<&str> = a["notes"]["003"]
        .as_array()
        .unwrap()
        .iter()
        .map(|n| n.as_str().unwrap())
        .collect();
    let mut unique = notes003.clone();
    unique.dedup();
    assert_eq!(unique.len(), notes003.len());
    // One note per refusal, stand-in, software scaling and instruction-costed event
    // group: a dozen, not one per machine and event.
    assert!(notes003.len() < 14, "{notes003:#?}");
}

/// Seed 003's costs derived from its own series are refused and the refusal is said.
#[test]
fn seed_003_does_not_use_costs_derived_from_its_own_series() {
    let v: serde_json::Value = serde_json::from_slice(&reproduce(&["003"])).unwrap();
    let notes: Vec<&str> = v["notes"]["003"]
        .as_array()
        .unwrap()
        .iter()
        .map(|n| n.as_str().unwrap())
        .collect();
    assert!(
        notes.iter().any(|n| n.contains("altra-vm")
            && n.contains("arch.tlbi.vaale1is")
            && n.contains("its cost is derived from seed 003's own series")),
        "{notes:?}"
    );
    // What stands in for the refused costs is said, and map_mem's software work is
    // costed from instructions counted on the real kernel.
    assert!(notes.iter().any(|n| n.contains("kunpeng-920 stands in")), "{notes:?}");
    assert!(
        notes
            .iter()
            .any(|n| n.contains("arch.pte.write") && n.contains("instructions per count")),
        "{notes:?}"
    );
    // Every row has a real-kernel column, measured or saying how to measure it.
    for r in v["rows"].as_array().unwrap() {
        let rk = &r["real_kernel"];
        assert!(
            rk["value"].is_f64() || rk["source"].as_str().unwrap().starts_with("not measured"),
            "{r}"
        );
        // A disagreeing metal cell says where its time goes per table, seed and model.
        if r["machine"] == "altra-metal 512G" && r["verdict"] == "disagrees" {
            let why = r["reason"].as_str().unwrap();
            assert!(
                why.contains("per pte table") && why.contains("the model's Altra costs give"),
                "{why}"
            );
        }
    }
}

#[test]
fn an_unknown_seed_is_exit_2() {
    let out = Command::new(env!("CARGO_BIN_EXE_foliolab"))
        .args(["reproduce", "005"])
        .output()
        .unwrap();
    assert_eq!(out.status.code(), Some(2));
    assert!(String::from_utf8_lossy(&out.stderr).contains("unknown seed '005'"));
}

/// Seed 001's per-page figures: arm64 broadcasts one TLBI per page whatever the CPUs;
/// x86 sends an IPI to every other CPU the mm runs on; the deferred flush waits once
/// per 31 lazyfree folios, but per folio before a dirty one's swap-out, and once per
/// 512-page batch of a migration.
#[test]
fn seed_001_per_page_figures_scale_with_the_cpus_only_under_x86() {
    let v: serde_json::Value = serde_json::from_slice(&reproduce(&["001"])).unwrap();
    let rows = v["per_page"].as_array().unwrap();
    assert_eq!(rows.len(), 24);
    let get = |exp: &str, flavour: &str, cpus: u64, variant: &str, key: &str| {
        rows.iter()
            .find(|r| {
                r["experiment"].as_str().unwrap().contains(exp)
                    && r["flavour"] == flavour
                    && r["cpus"] == cpus
                    && r["variant"] == variant
            })
            .unwrap_or_else(|| panic!("no row {exp} {flavour} {cpus} {variant}"))[key]
            .as_f64()
            .unwrap()
    };
    for cpus in [8, 128] {
        assert_eq!(get("lazyfree", "arm64", cpus, "sync", "tlbi"), 1.0);
        assert_eq!(get("lazyfree", "arm64", cpus, "sync", "ipi"), 0.0);
        assert_eq!(get("lazyfree", "x86", cpus, "sync", "ipi"), (cpus - 1) as f64);
        let waits = get("lazyfree", "arm64", cpus, "deferred", "waits");
        assert!(waits > 1.0 / 31.0 && waits < 1.0 / 28.0, "{waits}");
        assert!(get("swap-out", "arm64", cpus, "deferred", "waits") >= 1.0);
        assert_eq!(get("migration", "arm64", cpus, "deferred", "waits"), 1.0 / 512.0);
        assert_eq!(get("migration", "x86", cpus, "sync", "ipi"), (cpus - 1) as f64);
    }
    assert!(
        get("lazyfree", "arm64", 128, "deferred", "flush_ns") < get("lazyfree", "arm64", 128, "sync", "flush_ns") / 2.0
    );
}
