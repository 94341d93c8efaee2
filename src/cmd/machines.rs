//! `foliolab machines [NAME|PATH.toml ...] [--notes]`: the machine profiles, each cost
//! with its quality and source.

use crate::time::Profile;
use std::process::ExitCode;

#[derive(clap::Args)]
pub struct Args {
    /// Profiles to show (default: every built-in one).
    pub names: Vec<String>,
    /// Also print each cost's note (how it was derived or estimated).
    #[arg(long)]
    pub notes: bool,
}

pub fn main(a: Args) -> super::CmdResult {
    let profiles = if a.names.is_empty() {
        Profile::all()?
    } else {
        a.names.iter().map(|n| Profile::load(n)).collect::<Result<_, _>>()?
    };
    let text: Vec<String> = profiles.iter().map(|p| render(p, a.notes)).collect();
    super::emit(&text.join("\n"))?;
    Ok(ExitCode::SUCCESS)
}

fn short(s: &str, n: usize) -> String {
    if s.chars().count() <= n {
        s.to_string()
    } else {
        s.chars().take(n - 3).collect::<String>() + "..."
    }
}

/// One profile as text.
pub fn render(p: &Profile, notes: bool) -> String {
    use std::fmt::Write;
    let mut s = String::new();
    let f = &p.features;
    let _ = writeln!(s, "{}: {}", p.name, p.description);
    let _ = writeln!(s, "  cpus {} ({})", p.cpus, p.cpus_note);
    let _ = writeln!(s, "  nodes {}", p.nodes);
    let yn = |b: bool| if b { "yes" } else { "no" };
    let _ = writeln!(
        s,
        "  features: FEAT_TLBIRANGE {}, BBML2 {}, KPTI {}, REPEAT_TLBI {}",
        yn(f.tlbi_range),
        yn(f.bbml2),
        yn(f.kpti),
        f.repeat_tlbi
    );
    if notes {
        let _ = writeln!(s, "    {}", f.note);
    }
    let _ = writeln!(
        s,
        "  TLB: {} [{}] ({})",
        p.tlb.geometry,
        p.tlb.quality.tag(),
        p.tlb.source
    );
    let _ = writeln!(s, "  costs (ns per count):");
    let w = p
        .cost
        .iter()
        .flat_map(|c| &c.events)
        .map(|e| e.len())
        .max()
        .unwrap_or(0);
    let (costed, none): (Vec<_>, Vec<_>) = p.cost.iter().partition(|c| c.ns.is_some());
    for c in costed {
        let value = c.ns.map_or("-".to_string(), |ns| format!("{ns}"));
        let rows: Vec<_> = c.rows.iter().map(|r| r.to_string()).collect();
        let rows = if rows.is_empty() {
            String::new()
        } else {
            format!(" [costs.md row {}]", rows.join(","))
        };
        let seed = c
            .derived_from_seed
            .as_ref()
            .map_or(String::new(), |sd| format!(" {{derived from seed {sd}}}"));
        for e in &c.events {
            let _ = writeln!(
                s,
                "    {e:<w$}  {value:>8}  {:<4}  {}{rows}{seed}",
                c.quality.tag(),
                short(&c.source, 60)
            );
        }
        if notes {
            if let Some(n) = &c.note {
                let _ = writeln!(s, "      note: {n}");
            }
            if let Some(r) = &c.seed_relation {
                let _ = writeln!(s, "      seed: {r}");
            }
        }
    }
    let _ = writeln!(s, "  uncosted (no public number; listed as uncosted when counted):");
    for c in none {
        let _ = writeln!(s, "    {} [{}]", c.events.join(" "), short(&c.source, 60));
        if notes {
            if let Some(n) = &c.note {
                let _ = writeln!(s, "      note: {n}");
            }
        }
    }
    let _ = writeln!(s, "  not costed by design (sums, composites, statistics):");
    for n in &p.not_costed {
        let _ = writeln!(s, "    {} ({})", n.events.join(" "), n.reason);
    }
    s
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn every_cost_is_shown_with_its_quality() {
        for p in Profile::all().unwrap() {
            let text = render(&p, true);
            for c in &p.cost {
                for e in &c.events {
                    assert!(text.contains(e.as_str()), "{}: {e}", p.name);
                }
                if let Some(n) = &c.note {
                    assert!(text.contains(n.as_str()), "{}: note", p.name);
                }
            }
        }
    }
}
