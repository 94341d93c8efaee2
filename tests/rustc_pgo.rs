//! scripts/rustc-pgo, cargo's wrapper for the workspace's compiles: only an optimised
//! compile of the foliolab crate gets the checked-in profile, and only from a rustc
//! whose LLVM can read it. A stand-in rustc prints the arguments it was given.

use std::path::{Path, PathBuf};
use std::process::Command;

const WRAPPER: &str = concat!(env!("CARGO_MANIFEST_DIR"), "/scripts/rustc-pgo");
const PROFILE: &str = concat!(env!("CARGO_MANIFEST_DIR"), "/pgo/foliolab.profdata");

/// A rustc that answers `-vV` with LLVM `llvm`, the wrapper's probe of the vectorizer
/// option (`OPTION --print cfg`) as an LLVM that has it or not, and otherwise prints its
/// arguments, in a directory of its own that goes with it.
struct FakeRustc(PathBuf);

impl FakeRustc {
    fn new(llvm: &str) -> FakeRustc {
        FakeRustc::with_option(llvm, true)
    }

    fn with_option(llvm: &str, knows: bool) -> FakeRustc {
        let dir = std::env::temp_dir().join(format!("foliolab-rustc-pgo-{}-{llvm}-{knows}", std::process::id()));
        std::fs::create_dir_all(&dir).unwrap();
        let path = dir.join("rustc");
        let probe = if knows { 0 } else { 1 };
        std::fs::write(
            &path,
            format!(
                "#!/bin/sh\nif [ \"$1\" = -vV ]; then echo 'LLVM version: {llvm}'; exit 0; fi\n\
                 if [ \"$2\" = --print ]; then exit {probe}; fi\nprintf '%s\\n' \"$@\"\n"
            ),
        )
        .unwrap();
        Command::new("chmod").arg("+x").arg(&path).status().unwrap();
        FakeRustc(dir)
    }

    fn path(&self) -> PathBuf {
        self.0.join("rustc")
    }
}

impl Drop for FakeRustc {
    fn drop(&mut self) {
        let _ = std::fs::remove_dir_all(&self.0);
    }
}

/// The arguments the wrapper handed rustc for `args`.
fn passed(rustc: &Path, args: &[&str], no_pgo: bool) -> Vec<String> {
    let mut cmd = Command::new(WRAPPER);
    cmd.arg(rustc).args(args).env_remove("FOLIOLAB_NO_PGO");
    if no_pgo {
        cmd.env("FOLIOLAB_NO_PGO", "1");
    }
    let out = cmd.output().unwrap();
    assert!(out.status.success(), "{}", String::from_utf8_lossy(&out.stderr));
    String::from_utf8(out.stdout)
        .unwrap()
        .lines()
        .map(String::from)
        .collect()
}

/// The major version of the LLVM that wrote the profile (pgo/profile.info).
fn profile_llvm() -> u32 {
    let info = std::fs::read_to_string(concat!(env!("CARGO_MANIFEST_DIR"), "/pgo/profile.info")).unwrap();
    let v = info
        .lines()
        .find_map(|l| l.strip_prefix("llvm: "))
        .expect("an llvm line");
    v.split('.').next().unwrap().parse().unwrap()
}

/// `args` as the wrapper hands them on with the profile: the profile, the vectorizer
/// option where rustc's LLVM has it, the cfg.
fn profiled(args: &[&str], option: bool) -> Vec<String> {
    let mut want: Vec<String> = args.iter().map(|s| s.to_string()).collect();
    want.push(format!("-Cprofile-use={PROFILE}"));
    if option {
        want.push("-Cllvm-args=-vectorizer-min-trip-count=0".into());
    }
    want.extend(["--cfg".into(), "foliolab_pgo".into()]);
    want
}

const RELEASE: [&str; 6] = ["--crate-name", "foliolab", "src/lib.rs", "-C", "opt-level=3", "-C"];

#[test]
fn an_optimised_compile_of_the_crate_gets_the_profile_its_vectorizer_option_and_its_cfg() {
    let llvm = profile_llvm();
    let rustc = FakeRustc::new(&format!("{llvm}.1.0"));
    let mut args = RELEASE.to_vec();
    args.push("lto=fat");
    assert_eq!(passed(&rustc.path(), &args, false), profiled(&args, true));
}

#[test]
fn an_llvm_without_the_vectorizer_option_gets_the_profile_alone() {
    let llvm = profile_llvm();
    let rustc = FakeRustc::with_option(&format!("{llvm}.1.0"), false);
    assert_eq!(passed(&rustc.path(), &RELEASE, false), profiled(&RELEASE, false));
}

#[test]
fn other_compiles_run_as_they_came() {
    let llvm = profile_llvm();
    let same = FakeRustc::new(&format!("{llvm}.0.0"));
    let older = FakeRustc::new(&format!("{}.9.9", llvm - 1));
    let dev = ["--crate-name", "foliolab", "src/lib.rs", "-C", "opt-level=1"];
    let other = ["--crate-name", "serde", "lib.rs", "-C", "opt-level=3"];
    let script = ["--crate-name", "build_script_build", "build.rs", "-C", "opt-level=3"];
    let mut generate = RELEASE.to_vec();
    generate.push("profile-generate=/tmp/raw");
    let release = RELEASE.to_vec();
    for (rustc, args, no_pgo) in [
        (&same, &dev[..], false),
        (&same, &other[..], false),
        (&same, &script[..], false),
        (&same, &generate[..], false),
        (&same, &release[..], true),
        // A rustc whose LLVM is older than the profile's could not read it.
        (&older, &release[..], false),
    ] {
        assert_eq!(
            passed(&rustc.path(), args, no_pgo),
            args,
            "{args:?}, FOLIOLAB_NO_PGO {no_pgo}"
        );
    }
}

#[test]
fn the_profile_is_checked_in_for_this_rustc() {
    assert!(Path::new(PROFILE).is_file(), "{PROFILE}");
    let out = Command::new(std::env::var("RUSTC").unwrap_or("rustc".into()))
        .arg("-vV")
        .output()
        .unwrap();
    let v = String::from_utf8(out.stdout).unwrap();
    let have: u32 = v
        .lines()
        .find_map(|l| l.strip_prefix("LLVM version: "))
        .and_then(|v| v.split('.').next()?.parse().ok())
        .expect("rustc -vV names its LLVM");
    assert!(
        have >= profile_llvm(),
        "rustc's LLVM {have} cannot read a profile from LLVM {}: release builds are not profile-guided (scripts/pgo profile)",
        profile_llvm()
    );
}

#[test]
fn the_command_alone_is_linked_statically() {
    let rustc = FakeRustc::new(&format!("{}.0.0", profile_llvm()));
    let static_flags = ["-Ctarget-feature=+crt-static", "-Crelocation-model=static"].map(String::from);
    let bin = [
        "--crate-name",
        "foliolab",
        "src/main.rs",
        "--crate-type",
        "bin",
        "-C",
        "opt-level=1",
    ];
    assert!(passed(&rustc.path(), &bin, false).ends_with(&static_flags));
    let lib = [
        "--crate-name",
        "foliolab",
        "src/lib.rs",
        "--crate-type",
        "lib",
        "-C",
        "opt-level=1",
    ];
    let tests = ["--crate-name", "foliolab", "src/main.rs", "--test", "-C", "opt-level=1"];
    let other_bin = ["--crate-name", "other", "main.rs", "--crate-type", "bin"];
    for args in [&lib[..], &tests[..], &other_bin[..]] {
        let got = passed(&rustc.path(), args, false);
        assert!(static_flags.iter().all(|f| !got.contains(f)), "{args:?}");
    }
}

/// The foliolab binary these tests run has no program interpreter (PT_INTERP) and is
/// no position-independent executable (ET_EXEC, not ET_DYN): it was linked statically
/// at a fixed address, so a run maps, relocates and binds no shared library and
/// relocates none of its own pointers.
#[test]
fn the_built_command_has_no_dynamic_loader() {
    let elf = std::fs::read(env!("CARGO_BIN_EXE_foliolab")).unwrap();
    assert_eq!(&elf[..4], b"\x7fELF");
    let u16_at = |o: usize| u16::from_le_bytes([elf[o], elf[o + 1]]) as usize;
    let phoff = u64::from_le_bytes(elf[0x20..0x28].try_into().unwrap()) as usize;
    let (phentsize, phnum) = (u16_at(0x36), u16_at(0x38));
    const ET_EXEC: usize = 2;
    assert_eq!(u16_at(0x10), ET_EXEC, "ELF type");
    assert!(phnum > 0);
    const PT_INTERP: u32 = 3;
    let types: Vec<u32> = (0..phnum)
        .map(|i| {
            let o = phoff + i * phentsize;
            u32::from_le_bytes(elf[o..o + 4].try_into().unwrap())
        })
        .collect();
    assert!(!types.contains(&PT_INTERP), "program header types {types:?}");
}
