//! The sweep spec, SPEC.toml:
//!
//! ```toml
//! workloads = ["workloads/seed000-munmap-64k.wl"]   # paths, relative to the spec file
//! traces = []                                         # traces written by `foliolab record`
//! kernels = ["6.1", "6.18"]                           # default: 7.3
//! machines = ["altra-metal"]                          # default: none (counts only)
//! targets = ["model"]                                 # model | host | qemu-arm64 | ...
//! sets = ["cpus=4"]                                   # settings every model point takes
//! [variants]
//! zap = ["per-pte", "batched"]
//! ```
//!
//! Model points are the full product. A real kernel (host, a QEMU guest) has no variants,
//! presets or machine profile to choose, so it gets one point per workload.

use super::point::{Input, Point};
use crate::native::qemu::Target;
use crate::sim::{kernels, variants, Variants};
use std::collections::BTreeMap;
use std::path::Path;

#[derive(Clone, Debug, Default, serde::Deserialize, serde::Serialize)]
#[serde(deny_unknown_fields)]
pub struct Spec {
    #[serde(default)]
    pub workloads: Vec<String>,
    #[serde(default)]
    pub traces: Vec<String>,
    /// Variant key -> the values to sweep (keys in name order).
    #[serde(default)]
    pub variants: BTreeMap<String, Vec<String>>,
    #[serde(default)]
    pub sets: Vec<String>,
    #[serde(default)]
    pub kernels: Vec<String>,
    #[serde(default)]
    pub machines: Vec<String>,
    #[serde(default)]
    pub targets: Vec<String>,
}

/// The model target's name in `targets`.
pub const MODEL: &str = "model";

impl Spec {
    /// Reads SPEC.toml; its paths are taken relative to the file's directory.
    pub fn load(path: &Path) -> Result<(Spec, std::path::PathBuf), String> {
        let text = std::fs::read_to_string(path).map_err(|e| format!("{}: {e}", path.display()))?;
        let spec: Spec = toml::from_str(&text).map_err(|e| {
            let at = e.span().map(|s| line_col(&text, s.start)).unwrap_or((1, 1));
            format!("{}:{}:{}: {}", path.display(), at.0, at.1, e.message())
        })?;
        let dir = path.parent().unwrap_or(Path::new("")).to_path_buf();
        Ok((spec, dir))
    }

    /// Every point, in a fixed order (inputs, then targets, kernels, machines and the
    /// variants in key order, each in the order given): the order of the table's rows,
    /// whatever order the points finish in. Inputs are read and parsed here, so a bad
    /// workload fails the sweep before any point runs.
    pub fn points(&self, dir: &Path) -> Result<Vec<Point>, Box<dyn std::error::Error>> {
        if self.workloads.is_empty() && self.traces.is_empty() {
            return Err("sweep: no workloads or traces".into());
        }
        let mut inputs = Vec::new();
        for w in &self.workloads {
            let path = dir.join(w).to_string_lossy().into_owned();
            let w = crate::workload::parse_file(&path)?;
            inputs.push(Input::Workload { path, text: w.text });
        }
        for t in &self.traces {
            inputs.push(Input::trace(&dir.join(t).to_string_lossy())?);
        }
        let targets = if self.targets.is_empty() {
            vec![MODEL.to_string()]
        } else {
            self.targets.clone()
        };
        for t in &targets {
            if t != MODEL {
                let target = parse_target(t)?;
                if inputs.iter().any(|i| matches!(i, Input::Trace { .. })) {
                    return Err(format!("sweep: target {t}: traces replay on the model only").into());
                }
                if let Some(why) = crate::native::qemu::missing(target) {
                    return Err(format!("sweep: target {t}: {why}").into());
                }
            }
        }
        for k in &self.kernels {
            kernels::parse_kernel(k)?;
        }
        for m in &self.machines {
            crate::time::Profile::load(m)?;
        }
        let swept = self.swept()?;
        let mut points = Vec::new();
        for input in &inputs {
            for target in &targets {
                if target != MODEL {
                    points.push(Point::new(
                        points.len(),
                        input.clone(),
                        vec![],
                        vec![],
                        None,
                        None,
                        target,
                    ));
                    continue;
                }
                for kernel in opt(&self.kernels) {
                    for machine in opt(&self.machines) {
                        for variants in &swept {
                            points.push(Point::new(
                                points.len(),
                                input.clone(),
                                variants.clone(),
                                self.sets.clone(),
                                kernel.cloned(),
                                machine.cloned(),
                                target,
                            ));
                        }
                    }
                }
            }
        }
        Ok(points)
    }

    /// The product of the swept variants, each value checked.
    fn swept(&self) -> Result<Vec<Vec<(String, String)>>, String> {
        let fixed = variants::split_sets(&self.sets)?;
        let mut product = vec![vec![]];
        for (key, values) in &self.variants {
            if variants::key(key).is_none() {
                let known: Vec<_> = variants::KEYS.iter().map(|k| k.name).collect();
                return Err(format!(
                    "sweep: variants.{key}: unknown variant (known: {})",
                    known.join(", ")
                ));
            }
            if fixed.iter().any(|&(k, _)| k == key) {
                return Err(format!("sweep: variants.{key}: also in sets"));
            }
            if values.is_empty() {
                return Err(format!("sweep: variants.{key}: no values"));
            }
            for (i, v) in values.iter().enumerate() {
                Variants::default()
                    .set(key, v)
                    .map_err(|e| format!("sweep: variants.{key}: {e}"))?;
                if values[..i].contains(v) {
                    return Err(format!("sweep: variants.{key}: value '{v}' given twice"));
                }
            }
            product = product
                .into_iter()
                .flat_map(|p: Vec<(String, String)>| {
                    values.iter().map(move |v| {
                        let mut p = p.clone();
                        p.push((key.clone(), v.clone()));
                        p
                    })
                })
                .collect();
        }
        Ok(product)
    }
}

/// The list's items as `Some`, or one `None` for an empty list (the default).
fn opt(list: &[String]) -> Vec<Option<&String>> {
    if list.is_empty() {
        vec![None]
    } else {
        list.iter().map(Some).collect()
    }
}

/// A `--target` name (`host`, `qemu-arm64`, ...).
pub fn parse_target(t: &str) -> Result<Target, String> {
    <Target as clap::ValueEnum>::from_str(t, false).map_err(|_| {
        let known: Vec<String> = <Target as clap::ValueEnum>::value_variants()
            .iter()
            .filter_map(|v| clap::ValueEnum::to_possible_value(v).map(|p| p.get_name().to_string()))
            .collect();
        format!("sweep: unknown target '{t}' (known: model, {})", known.join(", "))
    })
}

/// 1-based line and column of byte offset `at` in `text`.
fn line_col(text: &str, at: usize) -> (usize, usize) {
    let before = &text[..at.min(text.len())];
    let line = before.matches('\n').count() + 1;
    let col = before.rsplit('\n').next().map_or(0, |l| l.chars().count()) + 1;
    (line, col)
}

#[cfg(test)]
mod tests {
    use super::*;

    fn spec(toml: &str) -> Spec {
        toml::from_str(toml).unwrap()
    }

    #[test]
    fn points_are_the_product_in_a_fixed_order() {
        let s = spec(
            r#"workloads = ["workloads/seed000-munmap-64k.wl", "workloads/seed000-munmap-order0.wl"]
               kernels = ["6.1", "6.18"]
               [variants]
               zap = ["per-pte", "batched"]
               contpte = ["on", "off"]"#,
        );
        let p = s.points(Path::new(env!("CARGO_MANIFEST_DIR"))).unwrap();
        assert_eq!(p.len(), 2 * 2 * 2 * 2);
        assert!(p.iter().enumerate().all(|(i, p)| p.index == i));
        assert_eq!(
            p[0].variants,
            [("contpte".into(), "on".into()), ("zap".into(), "per-pte".into())]
        );
        assert_eq!(p[1].variants[1].1, "batched");
        assert_eq!(p[4].kernel.as_deref(), Some("6.18"));
        let keys: std::collections::BTreeSet<_> = p.iter().map(Point::key).collect();
        assert_eq!(keys.len(), p.len(), "every point has its own key");
    }

    #[test]
    fn bad_specs_say_what_is_wrong() {
        let dir = Path::new(env!("CARGO_MANIFEST_DIR"));
        let err = |t: &str| spec(t).points(dir).unwrap_err().to_string();
        let w = r#"workloads = ["workloads/seed000-munmap-64k.wl"]"#;
        assert!(err(&format!("{w}\n[variants]\nzap = [\"x\"]")).contains("variants.zap"));
        assert!(err(&format!("{w}\n[variants]\nnope = [\"x\"]")).contains("unknown variant"));
        assert!(err(&format!("{w}\nkernels = [\"5.0\"]")).contains("no preset"));
        assert!(err(&format!("{w}\ntargets = [\"mars\"]")).contains("unknown target"));
        assert!(err(&format!(
            "{w}\nsets = [\"zap=batched\"]\n[variants]\nzap = [\"per-pte\"]"
        ))
        .contains("also in sets"));
        assert!(err("").contains("no workloads"));
    }

    #[test]
    fn a_toml_error_has_its_line_and_column() {
        let dir = std::env::temp_dir().join(format!("foliolab-spec-{}", std::process::id()));
        std::fs::create_dir_all(&dir).unwrap();
        let path = dir.join("s.toml");
        std::fs::write(&path, "workloads = []\nkernels = 6.1\n").unwrap();
        let e = Spec::load(&path).unwrap_err();
        assert!(e.contains("s.toml:2:11:"), "{e}");
        std::fs::remove_dir_all(&dir).unwrap();
    }
}
