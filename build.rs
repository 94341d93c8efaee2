//! The build's identity for the results store: a hash of everything the model's results
//! come from (its source, the machine profiles and the data and workloads built into
//! it), so a sweep point stored by one build is reused by that build alone, whether the
//! CLI or the Python extension ran it.

use sha2::{Digest, Sha256};
use std::path::{Path, PathBuf};

const INPUTS: [&str; 6] = ["src", "machines", "data", "workloads", "Cargo.toml", "Cargo.lock"];

fn files(p: &Path, out: &mut Vec<PathBuf>) {
    if p.is_dir() {
        let mut entries: Vec<PathBuf> = std::fs::read_dir(p)
            .unwrap_or_else(|e| panic!("{}: {e}", p.display()))
            .map(|e| e.expect("a directory entry").path())
            .collect();
        entries.sort();
        for e in entries {
            files(&e, out);
        }
    } else if p.is_file() {
        out.push(p.to_path_buf());
    }
}

fn main() {
    let mut all = Vec::new();
    for input in INPUTS {
        println!("cargo:rerun-if-changed={input}");
        files(Path::new(input), &mut all);
    }
    let mut h = Sha256::new();
    for f in &all {
        h.update(f.to_string_lossy().as_bytes());
        h.update([0]);
        h.update(std::fs::read(f).unwrap_or_else(|e| panic!("{}: {e}", f.display())));
    }
    let hex: String = h.finalize()[..8].iter().map(|b| format!("{b:02x}")).collect();
    println!(
        "cargo:rustc-env=FOLIOLAB_BUILD={}+{hex}",
        std::env::var("CARGO_PKG_VERSION").expect("set by cargo")
    );
    // The CPU the build targets (`.cargo/config.toml`, or RUSTFLAGS), for `bench`'s label.
    let flags = std::env::var("CARGO_ENCODED_RUSTFLAGS").unwrap_or_default();
    let mut words = flags.split('\x1f').map(|f| f.strip_prefix("-C").unwrap_or(f));
    if let Some(cpu) = words.find_map(|w| w.strip_prefix("target-cpu=")) {
        println!("cargo:rustc-env=FOLIOLAB_TARGET_CPU={cpu}");
    }
}
