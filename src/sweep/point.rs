//! One point of a sweep: what it runs, its key in the results store, and the run.

use crate::sim::{kernels, Variants};
use crate::workload::Workload;
use serde::{Deserialize, Serialize};
use serde_json::Value;
use sha2::{Digest, Sha256};

/// What a point runs: a workload (its text carried along, so a point runs anywhere) or a
/// trace (read from its path where the point runs; its hash is in the key).
#[derive(Clone, Debug, PartialEq, Eq, Serialize, Deserialize)]
#[serde(tag = "kind", rename_all = "lowercase")]
pub enum Input {
    Workload { path: String, text: String },
    Trace { path: String, sha256: String },
}

impl Input {
    pub fn trace(path: &str) -> Result<Input, String> {
        let bytes = std::fs::read(path).map_err(|e| format!("{path}: {e}"))?;
        Ok(Input::Trace {
            path: path.to_string(),
            sha256: hex(&Sha256::digest(&bytes)),
        })
    }

    pub fn path(&self) -> &str {
        match self {
            Input::Workload { path, .. } | Input::Trace { path, .. } => path,
        }
    }
}

/// One run of a sweep.
#[derive(Clone, Debug, PartialEq, Eq, Serialize, Deserialize)]
pub struct Point {
    /// Its place in the sweep (the table's order).
    pub index: usize,
    pub input: Input,
    /// The swept variants, in the spec's key order.
    pub variants: Vec<(String, String)>,
    /// The settings every model point of the sweep takes.
    pub sets: Vec<String>,
    /// The kernel preset (None: the newest).
    pub kernel: Option<String>,
    /// The machine profile for modeled time (a name or a .toml path).
    pub machine: Option<String>,
    /// `model`, `host` or a QEMU guest.
    pub target: String,
}

/// Why a point did not run: a workload's position, or anything else.
#[derive(Debug, thiserror::Error)]
pub enum PointError {
    #[error("{path}:{line}:{col}: {msg}")]
    Workload {
        path: String,
        line: u32,
        col: u32,
        msg: String,
    },
    #[error("{0}")]
    Other(String),
}

impl From<crate::workload::WorkloadError> for PointError {
    fn from(e: crate::workload::WorkloadError) -> Self {
        PointError::Workload {
            path: e.path,
            line: e.pos.line,
            col: e.pos.col,
            msg: e.msg,
        }
    }
}

impl From<crate::sim::SimError> for PointError {
    fn from(e: crate::sim::SimError) -> Self {
        match e {
            crate::sim::SimError::Failed { path, pos, msg } => PointError::Workload {
                path,
                line: pos.line,
                col: pos.col,
                msg,
            },
            e => PointError::Other(e.to_string()),
        }
    }
}

impl From<String> for PointError {
    fn from(e: String) -> Self {
        PointError::Other(e)
    }
}

fn hex(b: &[u8]) -> String {
    b.iter().map(|b| format!("{b:02x}")).collect()
}

impl Point {
    pub fn new(
        index: usize,
        input: Input,
        variants: Vec<(String, String)>,
        sets: Vec<String>,
        kernel: Option<String>,
        machine: Option<String>,
        target: &str,
    ) -> Point {
        Point {
            index,
            input,
            variants,
            sets,
            kernel,
            machine,
            target: target.to_string(),
        }
    }

    /// A single model run of a workload (`foliolab run`, `foliolab.run`).
    pub fn model(input: Input, sets: Vec<String>, kernel: Option<String>, machine: Option<String>) -> Point {
        Point::new(0, input, vec![], sets, kernel, machine, super::spec::MODEL)
    }

    /// The settings the point runs with: the sweep's, then its swept variants.
    pub fn all_sets(&self) -> Vec<String> {
        let swept = self.variants.iter().map(|(k, v)| format!("{k}={v}"));
        self.sets.iter().cloned().chain(swept).collect()
    }

    /// Whether it needs something only some machines have: `host` (root and a writable
    /// THP sysfs) or `qemu` (a set-up guest). Ray sends it only to workers offering that
    /// resource.
    pub fn needs(&self) -> Option<&'static str> {
        match self.target.as_str() {
            super::spec::MODEL => None,
            "host" => Some("host"),
            _ => Some("qemu"),
        }
    }

    /// The key of its result in the store: every input (the workload's path and text or
    /// the trace's hash, the settings, kernel, machine, target), this build, and for the
    /// host the kernel release it runs on. Not its index: the same run in two sweeps is
    /// one result.
    pub fn key(&self) -> String {
        let machine_text = self
            .machine
            .as_deref()
            .filter(|m| m.ends_with(".toml"))
            .map(|m| std::fs::read(m).map(|b| hex(&Sha256::digest(&b))).unwrap_or_default());
        let input = match &self.input {
            Input::Workload { path, text } => {
                serde_json::json!(["workload", path, hex(&Sha256::digest(text.as_bytes()))])
            }
            Input::Trace { path, sha256 } => serde_json::json!(["trace", path, sha256]),
        };
        let host = (self.target == "host").then(crate::store::host_kernel).flatten();
        let key = serde_json::json!({
            "build": super::BUILD,
            "input": input,
            "sets": self.all_sets(),
            "kernel": self.kernel,
            "machine": self.machine,
            "machine_sha256": machine_text,
            "target": self.target,
            "host_kernel": host,
        });
        hex(&Sha256::digest(key.to_string().as_bytes()))
    }

    /// Runs the point; its result is the JSON `foliolab run --json` (or `replay --json`,
    /// `native --json`) prints for the same inputs.
    pub fn run(&self) -> Result<Value, PointError> {
        if self.target != super::spec::MODEL {
            let Input::Workload { path, text } = &self.input else {
                return Err(PointError::Other(format!(
                    "{}: traces replay on the model only",
                    self.input.path()
                )));
            };
            let w = crate::workload::parse_str(path, text)?;
            let target = super::spec::parse_target(&self.target)?;
            if let Some(why) = crate::native::qemu::missing(target) {
                return Err(PointError::Other(format!("target {}: {why}", self.target)));
            }
            let guest = target.guest_kernel();
            let r = crate::cmd::native::run_on(guest.as_ref(), std::slice::from_ref(&w))
                .map_err(|e| PointError::Other(e.to_string()))?
                .pop()
                .expect("a report per workload")?;
            return Ok(serde_json::to_value(&r).expect("a report serializes"));
        }
        let machine = crate::time::Machine::load(self.machine.as_deref(), &self.all_sets())?;
        let sets = machine.as_ref().map_or_else(|| self.all_sets(), |m| m.sets.clone());
        let kernel = match &self.kernel {
            Some(k) => kernels::parse_kernel(k)?,
            None => kernels::DEFAULT,
        };
        let v = Variants::from_sets(&kernels::with_preset(kernel, kernels::Scope::Run, &sets))?;
        match &self.input {
            Input::Workload { path, text } => {
                let w: Workload = crate::workload::parse_str(path, text)?;
                let r = crate::sim::run(&w, &v)?;
                Ok(crate::cmd::report_value(&r, machine.as_ref()))
            }
            Input::Trace { path, sha256 } => {
                let bytes = std::fs::read(path).map_err(|e| format!("{path}: {e}"))?;
                if hex(&Sha256::digest(&bytes)) != *sha256 {
                    return Err(PointError::Other(format!("{path}: changed since the sweep read it")));
                }
                let r = crate::trace::replay::replay(path, std::io::Cursor::new(&bytes[..]), &v, &[])
                    .map_err(|e| e.to_string())?;
                let mut j = serde_json::to_value(&r).expect("a replay serializes");
                if let Some(m) = &machine {
                    j["time"] = crate::cmd::report_value(&r.report, Some(m))["time"].take();
                }
                Ok(j)
            }
        }
    }

    /// The store's record of the point's result.
    pub fn new_run<'a>(&'a self, result: Value, wall_ms: f64) -> crate::store::NewRun<'a> {
        let (kind, text) = match &self.input {
            Input::Workload { text, .. } if self.target == super::spec::MODEL => ("run", text.as_str()),
            Input::Workload { text, .. } => ("native", text.as_str()),
            Input::Trace { sha256, .. } => ("replay", sha256.as_str()),
        };
        crate::store::NewRun {
            kind,
            workload: Some((self.input.path(), text)),
            machine: self.machine.as_deref(),
            host_kernel: (self.target == "host").then(crate::store::host_kernel).flatten(),
            wall_ms,
            result,
        }
    }
}

/// Why this machine cannot run host points (root and a writable THP sysfs), if it cannot.
pub fn host_missing() -> Option<String> {
    // SAFETY: geteuid has no preconditions.
    if unsafe { libc::geteuid() } != 0 {
        return Some("not root: the THP knobs and kpageflags need root".into());
    }
    let probe = std::path::Path::new("/sys/kernel/mm/transparent_hugepage/hugepages-64kB/enabled");
    match std::fs::OpenOptions::new().write(true).open(probe) {
        Ok(_) => None,
        Err(e) => Some(format!("{} not writable: {e}", probe.display())),
    }
}
