//! `foliolab predict`: what large anonymous folios do to a real program, predicted by
//! the model from one recording and checked against the host.
//!
//! The program is recorded once with every THP size off. The model replays that trace
//! under each mTHP setting and predicts each process's anonymous faults. The program
//! then runs on the host under each setting (the knobs written under the same lock,
//! and restored however the run ends, as `native` does), recorded again so that its
//! faults are counted per process and per mapping kind exactly as the prediction's.
//! ASLR is off for every run, so all of them map the same addresses.

use super::record::{self, Options};
use super::replay::{self, ProcLine, Replayed};
use crate::native::knobs::KnobGuard;
use crate::sim::Variants;
use std::path::{Path, PathBuf};

/// One mTHP setting: the sizes (kB) set to `always`, every other size `never`.
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct Setting {
    pub name: String,
    pub sizes_kb: Vec<u64>,
}

impl Setting {
    /// `off`, `64K`, `16K+64K`, `2M` ...
    pub fn parse(s: &str) -> Result<Setting, String> {
        if s == "off" {
            return Ok(Setting {
                name: s.into(),
                sizes_kb: Vec::new(),
            });
        }
        let sizes_kb = s
            .split('+')
            .map(|p| {
                let (n, mult) = match p.strip_suffix('K') {
                    Some(n) => (n, 1),
                    None => (p.strip_suffix('M').ok_or(())?, 1024),
                };
                n.parse::<u64>().map(|n| n * mult).map_err(|_| ())
            })
            .collect::<Result<Vec<_>, ()>>()
            .map_err(|()| format!("mTHP setting {s:?}: expected off or sizes like 64K or 16K+64K"))?;
        Ok(Setting {
            name: s.into(),
            sizes_kb,
        })
    }

    /// The knob writes, given the host's (or model's) sizes: every size never unless chosen.
    pub fn knobs(&self, sizes_kb: &[u64]) -> Result<Vec<(String, String)>, String> {
        if let Some(k) = self.sizes_kb.iter().find(|k| !sizes_kb.contains(k)) {
            return Err(format!("mTHP setting {}: no {k}kB size here", self.name));
        }
        let mut v = vec![("enabled".to_string(), "never".to_string())];
        for kb in sizes_kb {
            let on = self.sizes_kb.contains(kb);
            v.push((
                format!("hugepages-{kb}kB/enabled"),
                if on { "always" } else { "never" }.to_string(),
            ));
        }
        Ok(v)
    }
}

/// The host's anonymous THP sizes, in kB.
fn host_sizes(thp: &Path) -> Vec<u64> {
    let mut v: Vec<u64> = record::thp_knobs(thp)
        .iter()
        .filter_map(|(k, _)| k.strip_prefix("hugepages-")?.strip_suffix("kB/enabled")?.parse().ok())
        .collect();
    v.sort_unstable();
    v
}

/// One setting's outcome.
#[derive(Debug, serde::Serialize)]
pub struct Outcome {
    pub setting: String,
    /// Per process: the model's faults replaying the baseline trace.
    pub predicted: Vec<ProcLine>,
    /// Per process: the faults recorded running under the setting.
    pub measured: Vec<ProcLine>,
    /// mthp.<size>.anon_fault_alloc the model predicts, and the host-wide counter's
    /// movement during the measured run.
    pub alloc_predicted: Vec<(u64, i64)>,
    pub alloc_host: Vec<(u64, i64)>,
    pub trace_bytes: u64,
    pub wall_ns: u64,
}

#[derive(Debug, serde::Serialize)]
pub struct Prediction {
    pub command: Vec<String>,
    /// Wall and CPU time of the program unrecorded, and recorded, with every size off;
    /// the recorder's own CPU time.
    pub plain_wall_ns: u64,
    pub recorded_wall_ns: u64,
    pub plain_cpu_ns: u64,
    pub recorded_cpu_ns: u64,
    pub recorder_cpu_ns: u64,
    pub trace_bytes: u64,
    pub events: u64,
    pub replay_ns: Vec<u64>,
    pub outcomes: Vec<Outcome>,
}

fn anon_fault_alloc(thp: &Path, sizes: &[u64]) -> Vec<(u64, i64)> {
    sizes
        .iter()
        .map(|&kb| {
            let p = thp.join(format!("hugepages-{kb}kB/stats/anon_fault_alloc"));
            (
                kb,
                std::fs::read_to_string(p)
                    .ok()
                    .and_then(|s| s.trim().parse().ok())
                    .unwrap_or(0),
            )
        })
        .collect()
}

/// Runs `command` unrecorded with ASLR off: its wall and CPU time.
fn run_plain(command: &[String]) -> Result<(u64, u64), String> {
    use std::os::unix::process::CommandExt;
    let cpu = record::cpu_ns(libc::RUSAGE_CHILDREN);
    let start = std::time::Instant::now();
    let mut c = std::process::Command::new(&command[0]);
    c.args(&command[1..]);
    // SAFETY: personality is async-signal-safe and touches no memory of ours.
    unsafe {
        c.pre_exec(|| {
            libc::personality(libc::ADDR_NO_RANDOMIZE as libc::c_ulong);
            Ok(())
        });
    }
    let st = c.status().map_err(|e| format!("{}: {e}", command[0]))?;
    if !st.success() {
        return Err(format!("{}: exited {st}", command.join(" ")));
    }
    Ok((
        start.elapsed().as_nanos() as u64,
        record::cpu_ns(libc::RUSAGE_CHILDREN) - cpu,
    ))
}

fn replay_file(path: &Path, v: &Variants, knobs: &[(String, String)]) -> Result<(Replayed, u64), String> {
    let f = std::fs::File::open(path).map_err(|e| format!("{}: {e}", path.display()))?;
    let start = std::time::Instant::now();
    let r = replay::replay(&path.display().to_string(), f, v, knobs).map_err(|e| e.to_string())?;
    Ok((r, start.elapsed().as_nanos() as u64))
}

/// Whether the host's knobs still hold what was `written` for the run of `what`:
/// the lock keeps other foliolab runs out, not a process outside foliolab (or the
/// program itself), and a run under other knobs than its setting measures nothing.
fn still_set(thp: &Path, written: &[(String, String)], what: &str) -> Result<(), String> {
    let now = record::thp_knobs(thp);
    let moved: Vec<String> = written
        .iter()
        .filter_map(|(k, v)| {
            let cur = now.iter().find(|(n, _)| n == k).map_or("(gone)", |(_, c)| c.as_str());
            (cur != v).then(|| format!("{k} is {cur}, not {v}"))
        })
        .collect();
    if moved.is_empty() {
        return Ok(());
    }
    Err(format!(
        "the run {what} is spoiled: the THP knobs changed during it, by a process outside foliolab or the program ({})",
        moved.join("; ")
    ))
}

/// Records `command` with every size off and under each setting, predicting each.
/// Traces go to `dir` as `off.trc` (the recording replayed) and
/// `<setting>.measured.trc`.
pub fn predict(
    command: &[String],
    settings: &[Setting],
    dir: &Path,
    thp: &Path,
    lock: &Path,
    v: &Variants,
) -> Result<Prediction, String> {
    let sizes = host_sizes(thp);
    let guard = KnobGuard::arm(thp, lock).map_err(|e| e.to_string())?;
    let write = |knobs: &[(String, String)]| -> Result<(), String> {
        knobs
            .iter()
            .try_for_each(|(k, val)| guard.set(k, val).map_err(|e| e.to_string()))
    };
    let off = Setting::parse("off")?;
    let off_knobs = off.knobs(&sizes)?;
    write(&off_knobs)?;
    let (plain_wall_ns, plain_cpu_ns) = run_plain(command)?;
    still_set(thp, &off_knobs, "unrecorded, with every size off")?;
    let trace = |name: &str| -> PathBuf { dir.join(format!("{name}.trc")) };
    let rec = |path: &Path| {
        record::record(
            &Options {
                command,
                output: path,
                no_aslr: true,
            },
            thp,
        )
        .map_err(|e| e.to_string())
    };
    let base = rec(&trace("off"))?;
    still_set(thp, &off_knobs, "recorded with every size off")?;
    if base.trailer.status != 0 {
        return Err(format!(
            "{}: exited {} while recorded",
            command.join(" "),
            base.trailer.status
        ));
    }
    let mut measured = Vec::new();
    for s in settings {
        let knobs = s.knobs(&sizes)?;
        write(&knobs)?;
        let before = anon_fault_alloc(thp, &s.sizes_kb);
        let r = rec(&trace(&format!("{}.measured", s.name)))?;
        let after = anon_fault_alloc(thp, &s.sizes_kb);
        still_set(thp, &knobs, &format!("measured under {}", s.name))?;
        write(&off_knobs)?;
        let host: Vec<(u64, i64)> = after.iter().zip(&before).map(|(a, b)| (a.0, a.1 - b.1)).collect();
        measured.push((r, host));
    }
    drop(guard);
    let mut replay_ns = Vec::new();
    let mut outcomes = Vec::new();
    for (s, (rec, host)) in settings.iter().zip(measured) {
        let (pred, ns) = replay_file(&trace("off"), v, &s.knobs(&sizes)?)?;
        replay_ns.push(ns);
        let (meas, _) = replay_file(&trace(&format!("{}.measured", s.name)), v, &[])?;
        outcomes.push(Outcome {
            setting: s.name.clone(),
            alloc_predicted: s
                .sizes_kb
                .iter()
                .map(|kb| {
                    (
                        *kb,
                        pred.report
                            .counters
                            .get(&format!("mthp.{kb}kB.anon_fault_alloc"))
                            .copied()
                            .unwrap_or(0),
                    )
                })
                .collect(),
            alloc_host: host,
            predicted: pred.processes,
            measured: meas.processes,
            trace_bytes: rec.bytes,
            wall_ns: rec.trailer.wall_ns,
        });
    }
    Ok(Prediction {
        command: command.to_vec(),
        plain_wall_ns,
        recorded_wall_ns: base.trailer.wall_ns,
        plain_cpu_ns,
        recorded_cpu_ns: base.trailer.cpu_ns,
        recorder_cpu_ns: base.trailer.recorder_cpu_ns,
        trace_bytes: base.bytes,
        events: base.trailer.events,
        replay_ns,
        outcomes,
    })
}

/// Predicted minus measured, as a percentage of measured.
fn error_pct(pred: u64, meas: u64) -> f64 {
    if meas == 0 {
        return if pred == 0 { 0.0 } else { f64::INFINITY };
    }
    (pred as f64 - meas as f64) / meas as f64 * 100.0
}

impl Prediction {
    /// The table: one row per setting and command, then the totals.
    pub fn render(&self) -> String {
        use std::fmt::Write;
        let mut s = String::new();
        let secs = |ns: u64| ns as f64 / 1e9;
        let _ = writeln!(s, "program: {}", self.command.join(" "));
        let _ = writeln!(
            s,
            "record overhead: wall {:.2} s unrecorded, {:.2} s recorded ({:+.1}%); the program's CPU {:.2} s and {:.2} s ({:+.1}%), the recorder's own {:.2} s",
            secs(self.plain_wall_ns),
            secs(self.recorded_wall_ns),
            error_pct(self.recorded_wall_ns, self.plain_wall_ns),
            secs(self.plain_cpu_ns),
            secs(self.recorded_cpu_ns),
            error_pct(self.recorded_cpu_ns, self.plain_cpu_ns),
            secs(self.recorder_cpu_ns),
        );
        let _ = writeln!(
            s,
            "trace: {} bytes for {} events ({:.2} bytes/event)",
            self.trace_bytes,
            self.events,
            self.trace_bytes as f64 / self.events.max(1) as f64
        );
        for (o, ns) in self.outcomes.iter().zip(&self.replay_ns) {
            let _ = writeln!(
                s,
                "replay under {}: {} events in {:.3} s ({:.1} M events/s)",
                o.setting,
                self.events,
                secs(*ns),
                self.events as f64 / secs(*ns) / 1e6
            );
        }
        let _ = writeln!(
            s,
            "\nanonymous faults: predicted by replaying the trace recorded with every size off; measured running under the setting\n(off: the program run again as recorded, so its error is the program's own run-to-run variation)\n"
        );
        let _ = writeln!(
            s,
            "{:<10} {:<16} {:>5} {:>12} {:>12} {:>9}",
            "mTHP", "command", "procs", "predicted", "measured", "error"
        );
        for o in &self.outcomes {
            // By command: a parallel build runs its processes in another order each
            // time, so the n-th process of one run need not be the n-th of the other.
            let mut by: Vec<(String, u64, u64, u64)> = Vec::new();
            for (lines, measured) in [(&o.predicted, false), (&o.measured, true)] {
                for l in lines.iter() {
                    let i = match by.iter().position(|b| b.0 == l.comm) {
                        Some(i) => i,
                        None => {
                            by.push((l.comm.clone(), 0, 0, 0));
                            by.len() - 1
                        }
                    };
                    if measured {
                        by[i].3 += l.anon_faults;
                    } else {
                        by[i].1 += 1;
                        by[i].2 += l.model_faults;
                    }
                }
            }
            let (pt, mt) = (by.iter().map(|b| b.2).sum(), by.iter().map(|b| b.3).sum());
            by.push(("all".into(), o.predicted.len() as u64, pt, mt));
            for (comm, procs, p, m) in by {
                let _ = writeln!(
                    s,
                    "{:<10} {:<16} {:>5} {:>12} {:>12} {:>8.2}%",
                    o.setting,
                    comm,
                    procs,
                    p,
                    m,
                    error_pct(p, m)
                );
            }
        }
        let _ = writeln!(
            s,
            "\nlarge folios allocated at fault (mthp.<size>.anon_fault_alloc): the model's, and the host-wide counter's movement during the measured run (other processes may move it)"
        );
        for o in &self.outcomes {
            for ((kb, p), (_, h)) in o.alloc_predicted.iter().zip(&o.alloc_host) {
                let _ = writeln!(s, "{:<10} {kb:>6}kB  model {p:>10}  host {h:>10}", o.setting);
            }
        }
        s
    }
}

/// The reference program: the C compile step of this project's own rusqlite
/// dependency (libsqlite3-sys builds the bundled SQLite amalgamation, 9.5 MB of C,
/// with the system compiler), found in cargo's registry, output to `out`.
pub fn reference_build(out: &Path) -> Result<Vec<String>, String> {
    let home = std::env::var_os("CARGO_HOME")
        .map(PathBuf::from)
        .or_else(|| std::env::var_os("HOME").map(|h| PathBuf::from(h).join(".cargo")))
        .ok_or("neither CARGO_HOME nor HOME is set: cannot find cargo's registry")?;
    let mut found: Vec<PathBuf> = std::fs::read_dir(home.join("registry/src"))
        .map_err(|e| format!("{}: {e}", home.join("registry/src").display()))?
        .flatten()
        .flat_map(|idx| std::fs::read_dir(idx.path()).into_iter().flatten().flatten())
        .map(|e| e.path())
        .filter(|p| {
            p.file_name()
                .and_then(|n| n.to_str())
                .is_some_and(|n| n.starts_with("libsqlite3-sys-"))
        })
        .map(|p| p.join("sqlite3/sqlite3.c"))
        .filter(|p| p.exists())
        .collect();
    found.sort();
    let src = found
        .pop()
        .ok_or("no libsqlite3-sys source in cargo's registry (build foliolab first: `cargo build`)")?;
    Ok(vec![
        "cc".into(),
        "-O2".into(),
        "-c".into(),
        src.display().to_string(),
        "-o".into(),
        out.display().to_string(),
    ])
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn a_knob_moved_during_a_run_spoils_it() {
        let dir = std::env::temp_dir().join(format!("foliolab-still-set-{}", std::process::id()));
        std::fs::create_dir_all(dir.join("hugepages-64kB")).unwrap();
        std::fs::write(dir.join("enabled"), "always [madvise] never\n").unwrap();
        std::fs::write(dir.join("hugepages-64kB/enabled"), "always inherit madvise [never]\n").unwrap();
        let written = Setting::parse("64K").unwrap().knobs(&[64]).unwrap();
        let err = still_set(&dir, &written, "measured under 64K").unwrap_err();
        assert!(
            err.contains("measured under 64K is spoiled")
                && err.contains("enabled is madvise, not never")
                && err.contains("hugepages-64kB/enabled is never, not always"),
            "{err}"
        );
        std::fs::write(dir.join("enabled"), "always madvise [never]\n").unwrap();
        std::fs::write(dir.join("hugepages-64kB/enabled"), "[always] inherit madvise never\n").unwrap();
        assert!(still_set(&dir, &written, "x").is_ok());
        let _ = std::fs::remove_dir_all(&dir);
    }

    #[test]
    fn settings_parse_to_the_sizes_they_name() {
        assert_eq!(Setting::parse("16K+64K").unwrap().sizes_kb, vec![16, 64]);
        assert_eq!(Setting::parse("2M").unwrap().sizes_kb, vec![2048]);
        assert!(Setting::parse("off").unwrap().sizes_kb.is_empty());
        assert!(Setting::parse("64").unwrap_err().contains("expected off"));
    }

    #[test]
    fn a_setting_turns_its_sizes_on_and_every_other_off() {
        let k = Setting::parse("64K").unwrap().knobs(&[16, 64, 2048]).unwrap();
        assert_eq!(
            k,
            [
                ("enabled", "never"),
                ("hugepages-16kB/enabled", "never"),
                ("hugepages-64kB/enabled", "always"),
                ("hugepages-2048kB/enabled", "never")
            ]
            .map(|(a, b)| (a.to_string(), b.to_string()))
        );
        assert!(Setting::parse("32K")
            .unwrap()
            .knobs(&[16, 64])
            .unwrap_err()
            .contains("no 32kB"));
    }
}
