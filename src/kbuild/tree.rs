//! One reusable build tree: `src/` (a copy of the source, patched while a build
//! runs), `out/` (make's O= directory, kept between builds so a patch rebuilds only
//! what it changed), `lock` (one build at a time), `patched` (present while patches
//! are applied: a build that died then is cleaned up by the next).

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
    _lock: std::fs::File,
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
            _lock: lock,
        })
    }

    fn src(&self) -> PathBuf {
        self.dir.join("src")
    }

    fn out(&self) -> PathBuf {
        self.dir.join("out")
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
        cmd.args(["-n", "10", "make", "-C"])
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

    /// `allnoconfig` with `fragments` merged (merge_config.sh), unless the config was
    /// made from the same fragments already; then every value a fragment sets must
    /// be the config's, or the fragment asked for something this tree lacks.
    pub fn configure(&mut self, fragments: &[(String, Vec<u8>)], log: &mut dyn FnMut(&str)) -> Result<(), KbuildError> {
        use sha2::{Digest, Sha256};
        let fail = |e: std::io::Error| step("config", e);
        let mut h = Sha256::new();
        for (_, f) in fragments {
            h.update((f.len() as u64).to_le_bytes());
            h.update(f);
        }
        let stamp = super::hex(&h.finalize());
        let config = self.out().join(".config");
        let stamp_file = self.dir.join("config.inputs");
        if config.is_file() && std::fs::read_to_string(&stamp_file).ok().as_deref() == Some(&stamp) {
            return Ok(());
        }
        log("configuring (allnoconfig and the fragments)");
        std::fs::create_dir_all(self.out()).map_err(fail)?;
        let frag_dir = self.dir.join("fragments");
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
        run(cmd, "config (merge_config.sh)", &self.dir.join("config.log"))?;
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
