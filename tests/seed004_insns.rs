//! Seed 004's measured instruction counts: `scripts/seed004-insns --check` re-measures
//! the contpte_ptep_get variants under qemu-aarch64 and must reproduce the committed
//! data/seed004-ptep-get-insns.json (GCC) and data/seed004-ptep-get-insns-clang.json. Skipped, with the reason printed, where the cross
//! toolchain or QEMU is missing: the script would install them, and a test must not.
//! And the code measured is the kernel's: with clang, our variants disassemble to the
//! clang-built 6.12 kernels' contpte_ptep_get, instruction for instruction.

use foliolab::cmd::seed004;
use foliolab::kbuild::{self, Compiler};
use std::path::Path;
use std::process::Command;

fn on_path(cmd: &str) -> bool {
    std::env::var_os("PATH")
        .map(|p| std::env::split_paths(&p).any(|d| d.join(cmd).is_file()))
        .unwrap_or(false)
}

#[test]
fn committed_counts_match_a_fresh_measurement() {
    let missing: Vec<&str> = ["qemu-aarch64", "aarch64-linux-gnu-gcc", "gcc", "clang"]
        .into_iter()
        .filter(|c| !on_path(c))
        .chain((!Path::new("/usr/aarch64-linux-gnu/lib/libc.a").exists()).then_some("libc6-dev-arm64-cross"))
        .collect();
    if !missing.is_empty() {
        println!("SKIP seed004_insns: missing {}", missing.join(", "));
        return;
    }
    let root = Path::new(env!("CARGO_MANIFEST_DIR"));
    let out = Command::new(root.join("scripts/seed004-insns"))
        .arg("--check")
        .current_dir(root)
        .output()
        .expect("run scripts/seed004-insns");
    assert!(
        out.status.success(),
        "scripts/seed004-insns --check failed ({}):\n{}{}",
        out.status,
        String::from_utf8_lossy(&out.stdout),
        String::from_utf8_lossy(&out.stderr)
    );
}

/// One function's instructions from an objdump listing of it, each as its text with a
/// branch's target made relative to `start` (the function's address), so a relocatable
/// object's listing and a kernel image's compare.
fn instructions(listing: &str, start: u64) -> Vec<String> {
    listing
        .lines()
        .filter_map(|l| {
            let (addr, rest) = l.trim_start().split_once(":\t")?;
            u64::from_str_radix(addr, 16).ok()?;
            // "<encoding> \t<mnemonic>\t<operands>", then a comment or a target's symbol.
            let text = rest.split_once(" \t")?.1.split("//").next()?;
            let text = match text.rsplit_once(" <") {
                Some((head, sym)) if sym.trim_end().ends_with('>') => head,
                _ => text,
            };
            let text = text.split_whitespace().collect::<Vec<_>>().join(" ");
            let branch = ["b", "cb", "tb"].iter().any(|p| text.starts_with(p));
            let target = text
                .rsplit_once(' ')
                .filter(|_| branch)
                .and_then(|(head, last)| Some((head, u64::from_str_radix(last.trim_start_matches("0x"), 16).ok()?)));
            Some(match target {
                Some((head, t)) => format!("{head} .{:+#x}", t as i64 - start as i64),
                None => text,
            })
        })
        .collect()
}

fn objdump(args: &[&str]) -> String {
    let out = Command::new("aarch64-linux-gnu-objdump")
        .args(args)
        .output()
        .expect("run objdump");
    assert!(
        out.status.success(),
        "objdump {args:?}: {}",
        String::from_utf8_lossy(&out.stderr)
    );
    String::from_utf8(out.stdout).unwrap()
}

/// contpte_ptep_get in a built kernel's Image: from its System.map address to the next
/// higher symbol's, the Image's first byte being _text.
fn kernel_function(dir: &Path) -> Vec<String> {
    let map = std::fs::read_to_string(dir.join("System.map")).unwrap();
    let mut syms: Vec<(u64, &str)> = map
        .lines()
        .filter_map(|l| {
            let mut f = l.split_whitespace();
            Some((u64::from_str_radix(f.next()?, 16).ok()?, f.nth(1)?))
        })
        .collect();
    syms.sort_unstable();
    let addr = |name: &str| syms.iter().find(|s| s.1 == name).unwrap().0;
    let (text, start) = (addr("_text"), addr("contpte_ptep_get"));
    let end = syms.iter().find(|s| s.0 > start).unwrap().0;
    let listing = objdump(&[
        "-D",
        "-b",
        "binary",
        "-m",
        "aarch64",
        &format!("--start-address={}", start - text),
        &format!("--stop-address={}", end - text),
        dir.join("Image").to_str().unwrap(),
    ]);
    instructions(&listing, start - text)
}

/// With clang, our C of each variant (tools/seed004/ptep_get.c, compiled as
/// scripts/seed004-insns compiles it) is the clang-built 6.12 kernel's
/// contpte_ptep_get with our patch of that variant, instruction for instruction: the
/// struct pte_t read through READ_ONCE included (a load and a store to the stack per
/// pte). Run where the three clang kernels are cached (`foliolab kernel seed004 --cc
/// clang` builds them).
#[test]
fn clangs_variants_are_the_clang_built_kernels_code() {
    let name = "clangs_variants_are_the_clang_built_kernels_code";
    if let Some(c) = ["clang", "aarch64-linux-gnu-objdump"].into_iter().find(|c| !on_path(c)) {
        println!("SKIP {name}: missing {c}");
        return;
    }
    let keys = match seed004::cached_keys(Compiler::Clang) {
        Ok(k) => k,
        Err(why) => {
            println!("SKIP {name}: {why}");
            return;
        }
    };
    let root = Path::new(env!("CARGO_MANIFEST_DIR"));
    let obj = std::env::temp_dir().join(format!("seed004-ptep-get-{}.o", std::process::id()));
    let status = Command::new("clang")
        .args(["--target=aarch64-linux-gnu", "-O2", "-mgeneral-regs-only", "-c", "-o"])
        .arg(&obj)
        .arg(root.join("tools/seed004/ptep_get.c"))
        .status()
        .expect("run clang");
    assert!(status.success());
    for ((variant, key), function) in keys.into_iter().zip(["full_scan", "mod1", "mod2"]) {
        let sym = format!("ptep_get_{function}");
        let listing = objdump(&["-d", &format!("--disassemble={sym}"), obj.to_str().unwrap()]);
        let start = listing
            .lines()
            .find(|l| l.ends_with(&format!("<{sym}>:")))
            .and_then(|l| u64::from_str_radix(l.split(' ').next()?, 16).ok())
            .unwrap();
        let ours = instructions(&listing, start);
        let kernel = kernel_function(&kbuild::find(&key).unwrap());
        assert!(!ours.is_empty());
        assert_eq!(ours, kernel, "{variant} (kernel {key}) against our {sym}");
    }
    let _ = std::fs::remove_file(obj);
}

#[test]
fn a_listings_branch_targets_are_relative_to_its_function() {
    let image = "   29e5c:\t1400000a \tb\t0x29e84\n   29e60:\tb249002d \torr\tx13, x1, #0x80000000000000\n   29ea8:\td65f03c0 \tret\n";
    let object = "     1c:\t1400000a \tb\t44 <ptep_get_full_scan+0x44>\n     20:\td2e0010b \tmov\tx11, #0x8000000000000       \t// #2251799813685248\n";
    assert_eq!(
        instructions(image, 0x29e44),
        ["b .+0x40", "orr x13, x1, #0x80000000000000", "ret"]
    );
    assert_eq!(instructions(object, 0), ["b .+0x44", "mov x11, #0x8000000000000"]);
}
