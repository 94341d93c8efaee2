//! The build's identity for the results store: a hash of everything the model's results
//! come from (its source, the machine profiles and the data and workloads built into
//! it), so a sweep point stored by one build is reused by that build alone, whether the
//! CLI or the Python extension ran it.

use sha2::{Digest, Sha256};
use std::fmt::Write;
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
    // scripts/rustc-pgo gives an optimised compile pgo/foliolab.profdata and this cfg:
    // a new profile rebuilds the crate, and `bench` names the build it came from.
    println!("cargo:rerun-if-changed=pgo");
    println!("cargo::rustc-check-cfg=cfg(foliolab_pgo)");
    static_unwinder();
    seed004_tables();
}

/// The unwinder from libgcc_eh.a, linked in, instead of libgcc_s.so.1: loading that
/// runs its constructor, which probes the CPU by CPUID, and a CPUID traps to the
/// hypervisor in a VM (17.5 µs here; tasks/speed.md, eighteenth round). Listed ahead of
/// std's `-lgcc_s`, the archive answers the unwinder's symbols first, and the linker's
/// --as-needed then drops libgcc_s. Not for the Python extension: GCC 12's archive
/// looks frames up by glibc 2.35's `_dl_find_object`, which would raise the wheel's
/// manylinux floor from 2.34, for a start-up the interpreter pays once.
fn static_unwinder() {
    let os = std::env::var("CARGO_CFG_TARGET_OS").unwrap_or_default();
    let env = std::env::var("CARGO_CFG_TARGET_ENV").unwrap_or_default();
    let python = std::env::var_os("CARGO_FEATURE_PYTHON").is_some();
    if os == "linux" && env == "gnu" && !python {
        println!("cargo:rustc-link-lib=static:-bundle=gcc_eh");
    }
}

/// Seed 004's sweep grids (`src/arch/arm64/contpte_insns.rs`), read from its two JSON
/// tables here and written out as constants: parsing 14 KB of JSON at a run's first
/// contpte_ptep_get cost 0.58 M instructions, a hundredth of a 1 GiB 64K run.
fn seed004_tables() {
    let mut out = String::new();
    for (name, file) in [
        ("GCC", "data/seed004-ptep-get-insns.json"),
        ("CLANG", "data/seed004-ptep-get-insns-clang.json"),
    ] {
        let text = std::fs::read_to_string(file).unwrap_or_else(|e| panic!("{file}: {e}"));
        let j: serde_json::Value = serde_json::from_str(&text).unwrap_or_else(|e| panic!("{file}: {e}"));
        let hex = j["pte_old_clean"]
            .as_str()
            .unwrap_or_else(|| panic!("{file}: no pte_old_clean"));
        let old_clean = u64::from_str_radix(hex.trim_start_matches("0x"), 16)
            .unwrap_or_else(|e| panic!("{file}: pte_old_clean {hex}: {e}"));
        write!(
            out,
            "pub const {name}: Table = Table {{ pte_old_clean: {old_clean:#x}, sweep: Sweep {{"
        )
        .unwrap();
        for layout in ["only", "from"] {
            write!(out, "{layout}: Grids {{").unwrap();
            for (field, key) in [
                ("full_scan", "full-scan"),
                ("mod1", "mod1"),
                ("mod2", "mod2"),
                ("early_exit", "early-exit"),
            ] {
                let rows = j["sweep"][layout][key].as_array();
                let rows = rows
                    .filter(|r| r.len() == 17)
                    .unwrap_or_else(|| panic!("{file}: sweep.{layout}.{key}: not 17 rows"));
                write!(out, "{field}: [").unwrap();
                for row in rows {
                    let cells = row.as_array().filter(|c| c.len() == 17);
                    let cells = cells.unwrap_or_else(|| panic!("{file}: sweep.{layout}.{key}: a row not of 17"));
                    let n: Vec<String> = cells
                        .iter()
                        .map(|c| {
                            let n = c.as_u64().and_then(|n| u32::try_from(n).ok());
                            n.unwrap_or_else(|| panic!("{file}: sweep.{layout}.{key}: {c} is no count"))
                                .to_string()
                        })
                        .collect();
                    write!(out, "[{}],", n.join(",")).unwrap();
                }
                out.push_str("],");
            }
            out.push_str("},");
        }
        out.push_str("}};\n");
    }
    let dir = std::env::var("OUT_DIR").expect("set by cargo");
    std::fs::write(Path::new(&dir).join("seed004_tables.rs"), out).expect("write seed004_tables.rs");
}
