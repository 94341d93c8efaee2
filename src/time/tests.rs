use super::*;
use crate::report::Phase;

#[test]
fn every_profile_parses_and_every_cost_is_sourced() {
    let all = Profile::all().unwrap();
    assert_eq!(all.len(), profile::BUILTIN.len());
    for p in &all {
        assert!(p.cpus >= 1);
        assert!(!p.tlb.geometry.is_empty() && !p.tlb.source.is_empty(), "{}", p.name);
        assert!(matches!(p.features.repeat_tlbi.as_str(), "yes" | "no" | "unknown"));
        for c in &p.cost {
            assert!(!c.source.trim().is_empty(), "{}: {:?}", p.name, c.events);
            if matches!(c.quality, Quality::Est | Quality::None) {
                assert!(
                    c.note.as_deref().is_some_and(|n| !n.is_empty()),
                    "{}: {:?}",
                    p.name,
                    c.events
                );
            }
            assert_eq!(c.ns.is_none(), c.quality == Quality::None, "{}: {:?}", p.name, c.events);
        }
        // The common NONE entries reach every profile.
        assert!(matches!(
            p.lookup("vmstat.pgfault"),
            Lookup::NoNumber(_) | Lookup::Costed(..)
        ));
        assert!(matches!(p.lookup("arch.tlbi.total"), Lookup::NotCosted(_)));
        assert!(matches!(p.lookup("mthp.64kB.anon_fault_alloc"), Lookup::NotCosted(_)));
        assert!(matches!(p.lookup("no.such.event"), Lookup::Unknown));
    }
}

#[test]
fn bad_profiles_are_refused() {
    let base = profile::BUILTIN[0].1;
    let est_without_note = format!(
        "{base}\n[[cost]]\nevents = [\"kernel.folio_ref_atomic\"]\nns = 1.0\nquality = \"EST\"\nsource = \"x\"\n"
    );
    assert!(Profile::parse(&est_without_note).unwrap_err().contains("needs a note"));
    let none_with_ns = format!(
        "{base}\n[[cost]]\nevents = [\"kernel.folio_ref_atomic\"]\nns = 1.0\nquality = \"NONE\"\nsource = \"x\"\nnote = \"n\"\n"
    );
    assert!(Profile::parse(&none_with_ns).unwrap_err().contains("NONE with a cost"));
    let twice = format!("{base}\n[[cost]]\nevents = [\"arch.isb\"]\nns = 1.0\nquality = \"M\"\nsource = \"x\"\n");
    assert!(Profile::parse(&twice).unwrap_err().contains("costed twice"));
    assert!(Profile::load("vax-780").unwrap_err().contains("altra-vm"));
}

#[test]
fn clocks_and_costs_outside_their_ranges_are_refused_at_their_line() {
    let base = profile::BUILTIN[0].1;
    let clock_line = base.lines().position(|l| l.starts_with("clock_ghz")).unwrap() + 1;
    for clock in ["0", "-1", "nan", "inf", "1e300"] {
        let text = base
            .lines()
            .map(|l| {
                if l.starts_with("clock_ghz") {
                    format!("clock_ghz = {clock}")
                } else {
                    l.to_string()
                }
            })
            .collect::<Vec<_>>()
            .join("\n");
        let e = Profile::parse(&text).unwrap_err();
        assert!(e.starts_with(&format!("{clock_line}:1: clock_ghz = ")), "{clock}: {e}");
        assert!(e.contains("finite number from 0.1 to 10 GHz"), "{e}");
    }
    let huge = format!(
        "{base}\n[[cost]]\nevents = [\"kernel.folio_ref_atomic\"]\nns = 1e15\nquality = \"M\"\nsource = \"x\"\n"
    );
    let line = huge
        .lines()
        .position(|l| l.contains("kernel.folio_ref_atomic"))
        .unwrap()
        + 1;
    let e = Profile::parse(&huge).unwrap_err();
    assert_eq!(
        e,
        format!("{line}:11: kernel.folio_ref_atomic: cost 1000000000000000.0 ns is outside 0 to 1e9 ns")
    );
    // A syntax error names its place and does not echo a megabyte line.
    let long = format!("{base}\nx = \"{}", "y".repeat(1 << 20));
    let e = Profile::parse(&long).unwrap_err();
    assert!(e.len() < 400, "{}", e.len());
    assert!(e.starts_with(&format!("{}:", base.lines().count() + 2)), "{e}");
}

#[test]
fn seed_derived_costs_are_marked() {
    let p = Profile::load("altra-vm").unwrap();
    let d: Vec<_> = p.derived_from("003").iter().flat_map(|c| c.events.clone()).collect();
    assert!(d.contains(&"arch.tlbi.vaale1is".to_string()) && d.contains(&"arch.isb".to_string()));
    let k = Profile::load("kunpeng-920").unwrap();
    assert!(k.derived_from("003").is_empty());
}

fn report(counters: &[(&str, i64)], phases: &[&[(&str, i64)]]) -> Report {
    let c = |v: &[(&str, i64)]| v.iter().map(|(k, n)| (k.to_string(), *n)).collect();
    Report {
        counters: c(counters),
        phases: phases
            .iter()
            .enumerate()
            .map(|(i, p)| Phase {
                label: format!("p{i}"),
                counters: c(p),
                time_ns: None,
            })
            .collect(),
        ..Report::default()
    }
}

#[test]
fn time_is_linear_and_sums() {
    let p = Profile::load("altra-vm").unwrap();
    let a: &[(&str, i64)] = &[("arch.tlbi.vale1is", 3), ("arch.dsb.ish", 1), ("vmstat.pgfault", 2)];
    let b: &[(&str, i64)] = &[("arch.tlbi.vale1is", 5), ("arch.isb", 7), ("arch.tlbi.total", 5)];
    let total: Vec<(&str, i64)> = vec![
        ("arch.tlbi.vale1is", 8),
        ("arch.dsb.ish", 1),
        ("arch.isb", 7),
        ("arch.tlbi.total", 5),
        ("vmstat.pgfault", 2),
        ("arch.dsb.ishst", 0),
        ("frob.unknown", 4),
    ];
    let m1 = model(&p, &report(&total, &[a, b]));
    let doubled: Vec<(&str, i64)> = total.iter().map(|(k, n)| (*k, n * 2)).collect();
    let a2: Vec<(&str, i64)> = a.iter().map(|(k, n)| (*k, n * 2)).collect();
    let b2: Vec<(&str, i64)> = b.iter().map(|(k, n)| (*k, n * 2)).collect();
    let m2 = model(&p, &report(&doubled, &[&a2, &b2]));
    assert_eq!(m1.total_ps, 8 * 541_900 + 1_145_300 + 7 * 8_060);
    assert_eq!(m2.total_ps, 2 * m1.total_ps);
    for (k, ps) in &m1.by_event {
        assert_eq!(m2.by_event[k], 2 * ps, "{k}");
    }
    assert_eq!(m1.by_event.values().sum::<i128>(), m1.total_ps);
    assert_eq!(m1.phases_ps.iter().sum::<i128>(), m1.total_ps);
    assert!(!m1.by_event.contains_key("arch.dsb.ishst"), "zero counts are left out");
    assert_eq!(
        m1.uncosted,
        vec!["frob.unknown".to_string(), "vmstat.pgfault".to_string()]
    );
    assert_eq!(m1.seed_derived["arch.dsb.ish"], "003");
}

#[test]
fn machine_features_reach_the_variants_and_set_overrides() {
    let m = Machine::load(Some("altra-metal"), &["cpus=4".into(), "zap=per-pte".into()])
        .unwrap()
        .unwrap();
    let v = crate::sim::Variants::from_sets(&m.sets).unwrap();
    assert_eq!(v.get("cpus"), "4");
    assert_eq!(v.get("zap"), "per-pte");
    assert_eq!(v.get("tlbi-range"), "off");
    assert!(!m.applied.contains_key("cpus"));
    assert_eq!(m.applied["kpti"], "off");
    let m = Machine::load(Some("altra-metal"), &[]).unwrap().unwrap();
    let v = crate::sim::Variants::from_sets(&m.sets).unwrap();
    assert_eq!(v.machine().ncpus, 80);
    assert!(Machine::load(None, &[]).unwrap().is_none());
}

#[test]
fn a_real_run_is_deterministic_and_phases_sum() {
    let w = crate::workload::parse_str(
        "test.wl",
        "set hugepages-64kB/enabled always\nmmap buf 8M populate\nmark munmap\nmunmap buf\n",
    )
    .unwrap();
    let m = Machine::load(Some("altra-vm"), &["zap=per-pte".into()])
        .unwrap()
        .unwrap();
    let v = crate::sim::Variants::from_sets(&m.sets).unwrap();
    let r = crate::sim::run(&w, &v).unwrap();
    let one = m.render(&r, true, |_| String::new());
    let r2 = crate::sim::run(&w, &v).unwrap();
    assert_eq!(one, m.render(&r2, true, |_| String::new()));
    let t = model(&m.profile, &r);
    assert!(t.total_ps > 0);
    assert_eq!(t.phases_ps.iter().sum::<i128>(), t.total_ps);
    let j: serde_json::Value = serde_json::from_str(&one).unwrap();
    assert!(j["time"]["by_event"]["arch.tlbi.vale1is"].is_number());
    assert!(j["phases"][1]["time_ns"].is_number());
    assert_eq!(j["time"]["machine"], "altra-vm");
}

#[test]
fn a_profile_file_loads_by_path() {
    let path = std::env::temp_dir().join(format!("foliolab-profile-{}.toml", std::process::id()));
    std::fs::write(
        &path,
        profile::BUILTIN[1].1.replace("name = \"altra-vm\"", "name = \"mine\""),
    )
    .unwrap();
    let p = Profile::load(path.to_str().unwrap()).unwrap();
    std::fs::remove_file(&path).unwrap();
    assert_eq!(p.name, "mine");
    assert!(matches!(p.lookup("arch.isb"), Lookup::Costed(8060, _)));
    assert!(Profile::load("/nonexistent/x.toml").is_err());
}

/// Another machine takes the host's mm software costs, but not the host's own
/// (`calibrate::HOST_ONLY`): a fork, an exit and a swapon stay uncosted there.
#[test]
fn the_hosts_fork_exit_and_swapon_stay_the_hosts() {
    let mut host = Profile::load(profile::CALIBRATED).unwrap();
    let mut costs = vec![0.0; calibrate::FEATURES.len()];
    for (i, (f, _)) in calibrate::FEATURES.iter().enumerate() {
        if *f == "vmstat.pgfault" || calibrate::HOST_ONLY.contains(f) {
            costs[i] = 1000.0;
        }
    }
    host.cost = calibrate::host_profile("host", &costs, "a CPU", host.clock_ghz, "a fit").cost;
    let (p, _) = Profile::load("altra-vm").unwrap().with_software(&host);
    assert!(matches!(p.lookup("vmstat.pgfault"), Lookup::Costed(..)));
    for e in calibrate::HOST_ONLY {
        assert!(matches!(p.lookup(e), Lookup::NoNumber(_)), "{e}");
    }
}
