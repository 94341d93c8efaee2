//! One reusable build tree: `src/` (a copy of the source, patched while a build
//! runs), `out-KEY/` (make's O= directories, one per config: KEY hashes the config's
//! inputs, kept between builds so a patch rebuilds only what it changed), `lock` (one
//! build at a time), `patched` (present while patches are applied: a build that died
//! then is cleaned up by the next).
//!
//! One O= directory per config because a patch that edits a Kconfig file can change a
//! symbol every file sees: seed 001's before side drops a `select` that changes
//! `task_struct`, so one shared directory rebuilt the whole kernel on each switch to
//! that config and on each switch back.

use super::{step, KbuildError};
use std::path::{Path, PathBuf};
use std::process::Command;

/// The compiler a kernel is built with.
#[derive(Clone, Copy, Debug, PartialEq, Eq, clap::ValueEnum)]
pub enum Compiler {
    /// Debian's aarch64-linux-gnu-gcc.
    Gcc,
    /// Debian's clang with LLVM's binutils (LLVM=1).
    Clang,
}

impl Compiler {
    pub fn name(self) -> &'static str {
        match self {
            Compiler::Gcc => "gcc",
            Compiler::Clang => "clang",
        }
    }

    /// The programs it needs: the compiler (whose version is part of the key) first.
    fn programs(self) -> &'static [&'static str] {
        match self {
            Compiler::Gcc => &["aarch64-linux-gnu-gcc", "aarch64-linux-gnu-ld"],
            Compiler::Clang => &["clang", "ld.lld", "llvm-objcopy", "llvm-ar", "llvm-nm"],
        }
    }

    /// make's variables for it.
    fn make_vars(self) -> &'static [&'static str] {
        match self {
            Compiler::Gcc => &["ARCH=arm64", "CROSS_COMPILE=aarch64-linux-gnu-"],
            Compiler::Clang => &["ARCH=arm64", "LLVM=1"],
        }
    }

    /// The first line of `--version`; an error naming the program when it is missing.
    pub fn version(self) -> Result<String, KbuildError> {
        for p in &self.programs()[1..] {
            which(p)?;
        }
        let cc = self.programs()[0];
        let out = Command::new(which(cc)?)
            .arg("--version")
            .output()
            .map_err(|e| KbuildError::Input(format!("{cc}: {e}")))?;
        Ok(String::from_utf8_lossy(&out.stdout)
            .lines()
            .next()
            .unwrap_or_default()
            .to_string())
    }
}

fn which(program: &str) -> Result<PathBuf, KbuildError> {
    std::env::var_os("PATH")
        .and_then(|p| std::env::split_paths(&p).map(|d| d.join(program)).find(|f| f.is_file()))
        .ok_or_else(|| {
            KbuildError::Input(format!(
                "compiler: {program} is not installed (run scripts/setup-kbuild)"
            ))
        })
}

/// A directory's contents as a hash of every file's path, size and modification
/// time (`.git` left out): what identifies a tree the user keeps editing.
pub fn fingerprint(dir: &Path) -> std::io::Result<String> {
    use sha2::{Digest, Sha256};
    use std::os::unix::fs::MetadataExt;
    let mut h = Sha256::new();
    let mut stack = vec![dir.to_path_buf()];
    let mut files = Vec::new();
    while let Some(d) = stack.pop() {
        for e in std::fs::read_dir(&d)? {
            let e = e?;
            let ft = e.file_type()?;
            if e.file_name() == ".git" {
                continue;
            }
            if ft.is_dir() {
                stack.push(e.path());
            } else {
                let m = e.metadata()?;
                files.push((e.path(), m.len(), m.mtime(), m.mtime_nsec()));
            }
        }
    }
    files.sort();
    for (p, len, s, ns) in files {
        h.update(p.strip_prefix(dir).unwrap_or(&p).to_string_lossy().as_bytes());
        h.update([0]);
        h.update(len.to_le_bytes());
        h.update(s.to_le_bytes());
        h.update(ns.to_le_bytes());
    }
    Ok(super::hex(&h.finalize())[..16].to_string())
}

/// What a build made: the files to cache (path, name in the cache), and what the
/// runner needs to know of the kernel.
pub struct Outputs {
    pub files: Vec<(PathBuf, &'static str)>,
    pub release: String,
    pub va_bits: u32,
}

/// A build tree, locked while this value lives.
pub struct Tree {
    dir: PathBuf,
    compiler: Compiler,
    /// make's O= directory, chosen by [`Tree::configure`].
    out: PathBuf,
    _lock: std::fs::File,
}

/// The files a patch creates, changes or deletes (`--- a/PATH` and `+++ b/PATH`, the
/// first component stripped as `patch -p1` does).
fn touched(patch: &[u8]) -> Vec<String> {
    let mut paths: Vec<String> = String::from_utf8_lossy(patch)
        .lines()
        .filter_map(|l| l.strip_prefix("--- ").or_else(|| l.strip_prefix("+++ ")))
        .filter_map(|rest| rest.split(['\t', ' ']).next())
        .filter(|p| *p != "/dev/null")
        .filter_map(|p| p.split_once('/').map(|(_, p)| p.to_string()))
        .collect();
    paths.sort();
    paths.dedup();
    paths
}

/// The key of a config's inputs (16 hex digits): the fragments' bytes, and the path and
/// contents in `src` (patches applied) of every Kconfig file a patch touches. A patch
/// that changes no Kconfig file builds in the unpatched kernel's directory.
fn config_key(src: &Path, fragments: &[(String, Vec<u8>)], patches: &[(String, Vec<u8>)]) -> std::io::Result<String> {
    use sha2::{Digest, Sha256};
    let mut h = Sha256::new();
    for (_, f) in fragments {
        h.update(b"fragment");
        h.update((f.len() as u64).to_le_bytes());
        h.update(f);
    }
    let mut kconfigs: Vec<String> = patches
        .iter()
        .flat_map(|(_, p)| touched(p))
        .filter(|p| {
            Path::new(p)
                .file_name()
                .is_some_and(|n| n.to_string_lossy().starts_with("Kconfig"))
        })
        .collect();
    kconfigs.sort();
    kconfigs.dedup();
    for k in kconfigs {
        h.update(b"kconfig");
        h.update((k.len() as u64).to_le_bytes());
        h.update(k.as_bytes());
        match std::fs::read(src.join(&k)) {
            Ok(text) => {
                h.update((text.len() as u64).to_le_bytes());
                h.update(&text);
            }
            Err(e) if e.kind() == std::io::ErrorKind::NotFound => h.update(b"deleted"),
            Err(e) => return Err(e),
        }
    }
    Ok(super::hex(&h.finalize())[..16].to_string())
}

/// The niceness make runs at: a shared machine's other work keeps the CPU first.
const MAKE_NICENESS: i32 = 10;

/// How much `nice` must add to `current` for make to run at MAKE_NICENESS: nothing when
/// foliolab already runs that nice or nicer (under `nice -n 10` a relative 10 more made
/// make 19, where a build on the loaded machine got almost no CPU).
fn nice_increment(current: i32) -> i32 {
    (MAKE_NICENESS - current).max(0)
}

/// This process's niceness (0 if it cannot be read).
fn own_niceness() -> i32 {
    // getpriority can return -1 as a value: errno tells an error from it.
    // SAFETY: errno is this thread's; getpriority reads the calling process's priority.
    unsafe {
        *libc::__errno_location() = 0;
        let n = libc::getpriority(libc::PRIO_PROCESS, 0);
        if n == -1 && *libc::__errno_location() != 0 {
            0
        } else {
            n
        }
    }
}

/// Runs `cmd` with its output in `log_file`; an error with the output's last lines.
fn run(mut cmd: Command, what: &str, log_file: &Path) -> Result<(), KbuildError> {
    let out = std::fs::File::create(log_file).map_err(|e| step(what, format!("{}: {e}", log_file.display())))?;
    let err = out.try_clone().map_err(|e| step(what, e))?;
    let status = cmd
        .stdout(out)
        .stderr(err)
        .stdin(std::process::Stdio::null())
        .status()
        .map_err(|e| step(what, e))?;
    if status.success() {
        return Ok(());
    }
    let text = std::fs::read_to_string(log_file).unwrap_or_default();
    let tail: Vec<&str> = text.lines().rev().take(25).collect();
    let tail: Vec<&str> = tail.into_iter().rev().collect();
    Err(step(
        what,
        format!("{status}; the end of {}:\n{}", log_file.display(), tail.join("\n")),
    ))
}

impl Tree {
    /// Locks the tree at `dir` (waiting for another build of it), creating it.
    pub fn open(dir: &Path, compiler: Compiler, log: &mut dyn FnMut(&str)) -> Result<Tree, KbuildError> {
        let fail = |e: std::io::Error| step(format!("build tree {}", dir.display()), e);
        std::fs::create_dir_all(dir).map_err(fail)?;
        let lock = std::fs::OpenOptions::new()
            .create(true)
            .truncate(false)
            .write(true)
            .open(dir.join("lock"))
            .map_err(fail)?;
        if lock.try_lock().is_err() {
            log(&format!("waiting for another build in {}", dir.display()));
            lock.lock().map_err(fail)?;
        }
        Ok(Tree {
            dir: dir.to_path_buf(),
            compiler,
            out: dir.join("out"),
            _lock: lock,
        })
    }

    fn src(&self) -> PathBuf {
        self.dir.join("src")
    }

    fn out(&self) -> PathBuf {
        self.out.clone()
    }

    /// Makes `src/` the source's files: a copy the first time; after a build that
    /// died with patches applied, or from a directory the user edits, every file
    /// whose contents differ is copied again, with a new modification time (rsync
    /// --checksum without --times), so make rebuilds exactly what changed.
    pub fn sync(&mut self, source: &Path, log: &mut dyn FnMut(&str)) -> Result<(), KbuildError> {
        let src = self.src();
        let patched = self.dir.join("patched");
        let from_debian = source.join("identity").is_file();
        if src.join("Makefile").is_file() && from_debian && !patched.exists() {
            return Ok(());
        }
        if src.join("Makefile").is_file() {
            log(&format!("restoring {} from {}", src.display(), source.display()));
        } else {
            log(&format!("copying {} to {}", source.display(), src.display()));
        }
        let mut rsync = Command::new("rsync");
        rsync
            .args([
                "-rlp",
                "--checksum",
                "--delete",
                "--exclude=/.git",
                "--exclude=/identity",
            ])
            .arg(format!("{}/", source.display()))
            .arg(format!("{}/", src.display()));
        run(rsync, "copying the source (rsync)", &self.dir.join("rsync.log"))?;
        let _ = std::fs::remove_file(&patched);
        Ok(())
    }

    /// Applies `patches` in order, runs `f`, and reverts them whatever `f` returned.
    /// A patch that does not apply is an error naming it, with nothing of it applied
    /// (each is tried with --dry-run first) and the ones before it reverted.
    pub fn with_patches<T>(
        &mut self,
        patches: &[(String, Vec<u8>)],
        log: &mut dyn FnMut(&str),
        f: impl FnOnce(&mut Tree, &mut dyn FnMut(&str)) -> Result<T, KbuildError>,
    ) -> Result<T, KbuildError> {
        let patched = self.dir.join("patched");
        if !patches.is_empty() {
            std::fs::write(&patched, "").map_err(|e| step("patch", e))?;
        }
        let mut applied = 0;
        let mut result = Ok(());
        for (name, bytes) in patches {
            log(&format!("applying {name}"));
            if let Err(e) = self.patch(bytes, &["--dry-run"]).and_then(|()| self.patch(bytes, &[])) {
                result = Err(KbuildError::Input(format!("patch {name} does not apply: {e}")));
                break;
            }
            applied += 1;
        }
        let made = match result {
            Ok(()) => f(self, log),
            Err(e) => Err(e),
        };
        for (name, bytes) in patches[..applied].iter().rev() {
            if let Err(e) = self.patch(bytes, &["-R"]) {
                // Left for the next build's sync to restore.
                return Err(step(format!("reverting {name}"), e));
            }
        }
        let _ = std::fs::remove_file(&patched);
        made
    }

    fn patch(&self, bytes: &[u8], extra: &[&str]) -> Result<(), String> {
        use std::io::Write;
        let mut child = Command::new("patch")
            .args([
                "-p1",
                "--batch",
                "--forward",
                "--no-backup-if-mismatch",
                "-r",
                "-",
                "-s",
            ])
            .args(extra)
            .arg("-d")
            .arg(self.src())
            .stdin(std::process::Stdio::piped())
            .stdout(std::process::Stdio::piped())
            .stderr(std::process::Stdio::piped())
            .spawn()
            .map_err(|e| format!("patch: {e} (run scripts/setup-kbuild)"))?;
        let mut stdin = child.stdin.take().expect("piped stdin");
        let writer = {
            let bytes = bytes.to_vec();
            std::thread::spawn(move || stdin.write_all(&bytes))
        };
        let out = child.wait_with_output().map_err(|e| format!("patch: {e}"))?;
        let _ = writer.join();
        if out.status.success() {
            Ok(())
        } else {
            Err(format!(
                "{}{}",
                String::from_utf8_lossy(&out.stdout),
                String::from_utf8_lossy(&out.stderr)
            )
            .trim()
            .to_string())
        }
    }

    fn make_cmd(&self) -> Command {
        let mut cmd = Command::new("nice");
        cmd.args(["-n", &nice_increment(own_niceness()).to_string(), "make", "-C"])
            .arg(self.src())
            .arg(format!("O={}", self.out().display()))
            .args(self.compiler.make_vars())
            // The same inputs give the same kernel: no build date, user, host or count.
            .env("KBUILD_BUILD_TIMESTAMP", "foliolab")
            .env("KBUILD_BUILD_USER", "foliolab")
            .env("KBUILD_BUILD_HOST", "foliolab")
            .env("KBUILD_BUILD_VERSION", "1");
        cmd
    }

    /// Picks the O= directory of this config (fragments, and the Kconfig files the
    /// applied `patches` touch), then `allnoconfig` with `fragments` merged
    /// (merge_config.sh) unless that directory was configured so already; then every
    /// value a fragment sets must be the config's, or the fragment asked for something
    /// this tree lacks. A directory left by a build before there was one per config
    /// (`out/`) is taken over by the first config built: make brings it to any config.
    pub fn configure(
        &mut self,
        fragments: &[(String, Vec<u8>)],
        patches: &[(String, Vec<u8>)],
        log: &mut dyn FnMut(&str),
    ) -> Result<(), KbuildError> {
        let fail = |e: std::io::Error| step("config", e);
        let stamp = config_key(&self.src(), fragments, patches).map_err(fail)?;
        self.out = self.dir.join(format!("out-{stamp}"));
        let legacy = self.dir.join("out");
        if !self.out.exists() && legacy.is_dir() {
            log(&format!("taking over {} as {}", legacy.display(), self.out.display()));
            std::fs::rename(&legacy, &self.out).map_err(fail)?;
            let _ = std::fs::remove_file(self.dir.join("config.inputs"));
        }
        let config = self.out().join(".config");
        let stamp_file = self.out().join("foliolab.config-inputs");
        if config.is_file() && std::fs::read_to_string(&stamp_file).ok().as_deref() == Some(&stamp) {
            return Ok(());
        }
        log("configuring (allnoconfig and the fragments)");
        std::fs::create_dir_all(self.out()).map_err(fail)?;
        let frag_dir = self.out().join("foliolab.fragments");
        let _ = std::fs::remove_dir_all(&frag_dir);
        std::fs::create_dir_all(&frag_dir).map_err(fail)?;
        let mut paths = Vec::new();
        for (i, (_, bytes)) in fragments.iter().enumerate() {
            let p = frag_dir.join(format!("{i:02}.config"));
            std::fs::write(&p, bytes).map_err(fail)?;
            paths.push(p);
        }
        let _ = std::fs::remove_file(&stamp_file);
        let mut cmd = Command::new(self.src().join("scripts/kconfig/merge_config.sh"));
        cmd.current_dir(self.src())
            .args(["-n", "-O"])
            .arg(self.out())
            .args(&paths);
        for v in self.compiler.make_vars() {
            let (k, val) = v.split_once('=').expect("VAR=value");
            cmd.env(k, val);
        }
        run(cmd, "config (merge_config.sh)", &self.out().join("foliolab.config.log"))?;
        let made = std::fs::read_to_string(&config).map_err(fail)?;
        for (name, bytes) in fragments {
            for line in String::from_utf8_lossy(bytes).lines() {
                let line = line.trim();
                let ok = if let Some(sym) = line.strip_prefix("# ").and_then(|l| l.strip_suffix(" is not set")) {
                    !made.lines().any(|l| l.starts_with(&format!("{sym}=")))
                } else if line.starts_with("CONFIG_") {
                    made.lines().any(|l| l == line)
                } else {
                    continue;
                };
                if !ok {
                    return Err(KbuildError::Input(format!(
                        "config fragment {name}: {line} is not in the kernel's config (a symbol \
                         this tree lacks, or one whose dependencies are not set)"
                    )));
                }
            }
        }
        std::fs::write(&stamp_file, stamp).map_err(fail)?;
        Ok(())
    }

    /// `make Image` (nice, two jobs) and what it made.
    pub fn make(&mut self, log: &mut dyn FnMut(&str)) -> Result<Outputs, KbuildError> {
        log(&format!("make Image ({})", self.dir.join("make.log").display()));
        let mut cmd = self.make_cmd();
        cmd.args(["-j2", "Image"]);
        run(cmd, "make Image", &self.dir.join("make.log"))?;
        let out = self.out();
        let release = std::fs::read_to_string(out.join("include/config/kernel.release"))
            .map_err(|e| step("make Image", format!("include/config/kernel.release: {e}")))?
            .trim()
            .to_string();
        let config = std::fs::read_to_string(out.join(".config")).map_err(|e| step("make Image", e))?;
        let va_bits = config
            .lines()
            .find_map(|l| l.strip_prefix("CONFIG_ARM64_VA_BITS=")?.parse().ok())
            .ok_or_else(|| step("make Image", "the config has no CONFIG_ARM64_VA_BITS"))?;
        Ok(Outputs {
            files: vec![
                (out.join("arch/arm64/boot/Image"), "Image"),
                (out.join("System.map"), "System.map"),
                (out.join(".config"), "config"),
            ],
            release,
            va_bits,
        })
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn patch(path: &str) -> (String, Vec<u8>) {
        let text = format!("header\n---\n--- a/{path}\t2024-01-01\n+++ b/{path}\n@@ -1 +1 @@\n-x\n+y\n");
        (path.to_string(), text.into_bytes())
    }

    #[test]
    fn make_runs_at_niceness_10_whatever_foliolab_runs_at() {
        assert_eq!(nice_increment(0), 10);
        assert_eq!(nice_increment(10), 0);
        assert_eq!(nice_increment(15), 0);
        assert_eq!(nice_increment(-5), 15);
        let n = own_niceness();
        assert!((-20..=19).contains(&n), "{n}");
    }

    #[test]
    fn a_patch_touches_the_files_its_headers_name() {
        let (_, p) = patch("arch/arm64/Kconfig");
        assert_eq!(touched(&p), vec!["arch/arm64/Kconfig".to_string()]);
        let new = b"--- /dev/null\n+++ b/mm/new.c\n";
        assert_eq!(touched(new), vec!["mm/new.c".to_string()]);
    }

    /// A patch to a C file builds in the unpatched config's directory; one to a Kconfig
    /// file gets its own, by the Kconfig file's contents.
    #[test]
    fn only_a_patch_to_a_kconfig_file_gets_a_config_directory_of_its_own() {
        let src = std::env::temp_dir().join(format!("foliolab-config-key-{}", std::process::id()));
        std::fs::create_dir_all(src.join("arch/arm64")).unwrap();
        std::fs::write(src.join("arch/arm64/Kconfig"), "select A\n").unwrap();
        let frags = vec![("base".to_string(), b"CONFIG_SMP=y\n".to_vec())];
        let none = config_key(&src, &frags, &[]).unwrap();
        assert_eq!(config_key(&src, &frags, &[patch("mm/memory.c")]).unwrap(), none);
        let kconfig = config_key(&src, &frags, &[patch("arch/arm64/Kconfig")]).unwrap();
        assert_ne!(kconfig, none);
        std::fs::write(src.join("arch/arm64/Kconfig"), "select B\n").unwrap();
        assert_ne!(
            config_key(&src, &frags, &[patch("arch/arm64/Kconfig")]).unwrap(),
            kconfig
        );
        let other = vec![("base".to_string(), b"CONFIG_SMP=n\n".to_vec())];
        assert_ne!(config_key(&src, &other, &[]).unwrap(), none);
        std::fs::remove_dir_all(&src).unwrap();
    }
}
