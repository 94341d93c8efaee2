//! Kernels built here from source, for the QEMU targets: a source (Debian's source
//! package of a release, unpacked by scripts/setup-kbuild, or a directory holding a
//! kernel tree), patches applied in order, a compiler, a page size and config
//! fragments (tools/kernel/ and the user's) make a small QEMU-virt arm64 kernel.
//! Its Image, System.map and config are cached under a key of everything that went
//! in; a second build of the same inputs is a lookup.
//!
//! One build tree is kept per (source, compiler, page size), with one make output
//! directory per config in it, and reused: the patches are applied to it, make
//! rebuilds what they changed in the config's directory, the outputs are copied into
//! the cache (a temporary directory renamed into place, so an entry is whole or
//! absent), and the patches are reverted. A build interrupted with patches applied
//! leaves a marker; the next build restores every changed file from the source
//! first (with a new modification time, so make sees it).

mod tree;

use sha2::{Digest, Sha256};
use std::path::{Path, PathBuf};
use std::time::Instant;

pub use tree::Compiler;

/// foliolab's own config fragments, one for every kernel and one per page size
/// (merged after `allnoconfig`, before the user's).
const BASE_FRAGMENT: (&str, &str) = (
    "tools/kernel/base.config",
    include_str!("../../tools/kernel/base.config"),
);
const FRAGMENT_4K: (&str, &str) = ("tools/kernel/4K.config", include_str!("../../tools/kernel/4K.config"));
const FRAGMENT_16K: (&str, &str) = ("tools/kernel/16K.config", include_str!("../../tools/kernel/16K.config"));
/// Trees of 7.3 and later: base.config's options that these trees renamed or removed
/// (its `# drop CONFIG_X: why` lines), and their replacements. Merged after the page
/// size's; a 6.12 tree's fragments (and so its cache keys) are untouched by it.
const FRAGMENT_7_3: (&str, &str) = ("tools/kernel/7.3.config", include_str!("../../tools/kernel/7.3.config"));
/// The first release FRAGMENT_7_3 is for.
const SINCE_7_3: (u32, u32) = (7, 3);

/// Bumped when the way a kernel is built changes (make targets, the outputs kept).
const BUILD_FORMAT: &str = "foliolab-kbuild 1";

/// A build's failure: which input or step, and why. Every one is exit status 2.
#[derive(Debug, thiserror::Error)]
pub enum KbuildError {
    /// An input the user gave: a source, a patch, a fragment, a compiler.
    #[error("{0}")]
    Input(String),
    /// A step of the build: copying the tree, a patch, the config, make, the cache.
    #[error("{step}: {msg}")]
    Step { step: String, msg: String },
}

fn step(step: impl Into<String>, msg: impl ToString) -> KbuildError {
    KbuildError::Step {
        step: step.into(),
        msg: msg.to_string(),
    }
}

/// The kernel's base page size.
#[derive(Clone, Copy, Debug, PartialEq, Eq, clap::ValueEnum, serde::Serialize, serde::Deserialize)]
pub enum PageSize {
    #[value(name = "4K")]
    #[serde(rename = "4K")]
    K4,
    #[value(name = "16K")]
    #[serde(rename = "16K")]
    K16,
}

impl PageSize {
    pub fn name(self) -> &'static str {
        match self {
            PageSize::K4 => "4K",
            PageSize::K16 => "16K",
        }
    }

    fn fragment(self) -> (&'static str, &'static str) {
        match self {
            PageSize::K4 => FRAGMENT_4K,
            PageSize::K16 => FRAGMENT_16K,
        }
    }
}

/// What to build.
#[derive(Clone, Debug)]
pub struct Spec {
    /// A release whose Debian source setup-kbuild unpacked ("6.12"), or a directory.
    pub source: String,
    /// Applied in order, with `patch -p1`.
    pub patches: Vec<PathBuf>,
    pub compiler: Compiler,
    pub page_size: PageSize,
    /// The user's config fragments, merged after foliolab's.
    pub fragments: Vec<PathBuf>,
}

/// A cached build: where its files are and how long it took.
#[derive(Clone, Debug, serde::Serialize)]
pub struct Built {
    pub key: String,
    pub image: PathBuf,
    /// Seconds the build took (this run's lookup time on a hit).
    pub build_s: f64,
    pub cached: bool,
}

/// What a cache entry records of its inputs (`build.json`).
#[derive(Clone, Debug, serde::Serialize, serde::Deserialize)]
pub struct Entry {
    pub key: String,
    /// The source's identity: Debian's package and version, or a directory's.
    pub source: String,
    pub patches: Vec<PatchInfo>,
    pub compiler: String,
    pub page_size: PageSize,
    pub fragments: Vec<String>,
    /// `make kernelrelease`.
    pub release: String,
    /// CONFIG_ARM64_VA_BITS.
    pub va_bits: u32,
    /// The wall time of the build that made the entry.
    pub build_s: f64,
}

#[derive(Clone, Debug, serde::Serialize, serde::Deserialize)]
pub struct PatchInfo {
    pub path: String,
    pub sha256: String,
}

/// Where builds and their sources live: `$FOLIOLAB_KBUILD_CACHE`, default
/// /var/cache/foliolab/kbuild (scripts/setup-kbuild fills `src/`).
pub fn cache_dir() -> PathBuf {
    std::env::var_os("FOLIOLAB_KBUILD_CACHE").map_or_else(|| "/var/cache/foliolab/kbuild".into(), PathBuf::from)
}

/// The cache's built kernels: `kernels/KEY/` each.
pub fn kernels_dir() -> PathBuf {
    cache_dir().join("kernels")
}

/// Why a kernel of Debian's `release` source cannot be built here with `compiler`,
/// if it cannot: the source scripts/setup-kbuild unpacks, or the compiler, missing.
pub fn missing(release: &str, compiler: Compiler) -> Option<String> {
    let src = cache_dir().join("src").join(release).join("identity");
    if !src.is_file() {
        return Some(format!("{} is missing (run scripts/setup-kbuild)", src.display()));
    }
    compiler.version().err().map(|e| e.to_string())
}

/// A source resolved: the directory to copy and what identifies its contents.
struct Source {
    dir: PathBuf,
    identity: String,
    /// The build trees' directory name for it.
    name: String,
    /// Its Makefile's VERSION and PATCHLEVEL: which of foliolab's fragments fit it.
    version: (u32, u32),
}

/// A kernel tree's VERSION and PATCHLEVEL, from its top Makefile.
fn tree_version(dir: &Path) -> Result<(u32, u32), KbuildError> {
    let path = dir.join("Makefile");
    let text = std::fs::read_to_string(&path).map_err(|e| KbuildError::Input(format!("{}: {e}", path.display())))?;
    let field = |name: &str| {
        text.lines().take(10).find_map(|l| {
            l.strip_prefix(name)?
                .trim_start()
                .strip_prefix('=')?
                .trim()
                .parse::<u32>()
                .ok()
        })
    };
    match (field("VERSION"), field("PATCHLEVEL")) {
        (Some(v), Some(p)) => Ok((v, p)),
        _ => Err(KbuildError::Input(format!(
            "{}: no VERSION and PATCHLEVEL in its first lines: not a kernel tree's Makefile",
            path.display()
        ))),
    }
}

/// foliolab's own fragments for a tree of `version`: base.config, the page size's, and
/// for 7.3 and later 7.3.config, with base.config's lines for the symbols it drops
/// taken out.
fn own_fragments(version: (u32, u32), page_size: PageSize) -> Vec<(String, Vec<u8>)> {
    let (base_name, base) = BASE_FRAGMENT;
    let (ps_name, ps) = page_size.fragment();
    if version < SINCE_7_3 {
        return vec![
            (base_name.to_string(), base.as_bytes().to_vec()),
            (ps_name.to_string(), ps.as_bytes().to_vec()),
        ];
    }
    let (name, release) = FRAGMENT_7_3;
    let dropped: Vec<&str> = release
        .lines()
        .filter_map(|l| l.strip_prefix("# drop ")?.split(':').next())
        .collect();
    let kept: String = base
        .lines()
        .filter(|l| {
            !dropped
                .iter()
                .any(|d| l.strip_prefix(d).is_some_and(|r| r.starts_with('=')))
        })
        .map(|l| format!("{l}\n"))
        .collect();
    vec![
        (format!("{base_name} (less {name}'s drops)"), kept.into_bytes()),
        (ps_name.to_string(), ps.as_bytes().to_vec()),
        (name.to_string(), release.as_bytes().to_vec()),
    ]
}

fn resolve_source(source: &str) -> Result<Source, KbuildError> {
    let as_dir = Path::new(source);
    if as_dir.join("Makefile").is_file() && as_dir.join("arch/arm64").is_dir() {
        let dir = as_dir
            .canonicalize()
            .map_err(|e| KbuildError::Input(format!("{source}: {e}")))?;
        let fingerprint = tree::fingerprint(&dir).map_err(|e| KbuildError::Input(format!("{source}: {e}")))?;
        let path_hash = hex(&Sha256::digest(dir.to_string_lossy().as_bytes()))[..12].to_string();
        return Ok(Source {
            identity: format!("dir {} {fingerprint}", dir.display()),
            name: format!("dir-{path_hash}"),
            version: tree_version(&dir)?,
            dir,
        });
    }
    if source.contains('/') || as_dir.exists() {
        return Err(KbuildError::Input(format!(
            "{source}: not a kernel tree (no Makefile and arch/arm64 in it)"
        )));
    }
    let link = cache_dir().join("src").join(source);
    let dir = link.canonicalize().map_err(|_| {
        KbuildError::Input(format!(
            "no source for {source} in {} (scripts/setup-kbuild unpacks Debian's 6.12 and 7.3)",
            link.display()
        ))
    })?;
    let identity = std::fs::read_to_string(dir.join("identity")).map_err(|e| {
        KbuildError::Input(format!(
            "{}: {e} (run scripts/setup-kbuild)",
            dir.join("identity").display()
        ))
    })?;
    let name = dir
        .file_name()
        .map(|n| n.to_string_lossy().into_owned())
        .unwrap_or_else(|| source.to_string());
    Ok(Source {
        version: tree_version(&dir)?,
        dir,
        identity: identity.trim().to_string(),
        name,
    })
}

fn hex(bytes: &[u8]) -> String {
    bytes.iter().map(|b| format!("{b:02x}")).collect()
}

/// Every input's bytes, read once: the key hashes them, the build uses them.
struct Inputs {
    source: Source,
    /// `(path as given, bytes)`.
    patches: Vec<(String, Vec<u8>)>,
    compiler_version: String,
    /// `(name, bytes)`: foliolab's fragments, then the user's.
    fragments: Vec<(String, Vec<u8>)>,
}

fn read_inputs(spec: &Spec) -> Result<Inputs, KbuildError> {
    let read =
        |p: &Path, what: &str| std::fs::read(p).map_err(|e| KbuildError::Input(format!("{what} {}: {e}", p.display())));
    let patches = spec
        .patches
        .iter()
        .map(|p| Ok((p.display().to_string(), read(p, "patch")?)))
        .collect::<Result<Vec<_>, KbuildError>>()?;
    let source = resolve_source(&spec.source)?;
    let mut fragments = own_fragments(source.version, spec.page_size);
    for f in &spec.fragments {
        fragments.push((f.display().to_string(), read(f, "config fragment")?));
    }
    let compiler_version = spec.compiler.version()?;
    Ok(Inputs {
        source,
        patches,
        compiler_version,
        fragments,
    })
}

/// The cache key: a hash of the build format, the source's identity, each patch's
/// bytes in order, the compiler and its version, the page size and every fragment's
/// bytes (16 hex digits).
fn key(spec: &Spec, i: &Inputs) -> String {
    let mut h = Sha256::new();
    let mut field = |tag: &str, bytes: &[u8]| {
        h.update(tag.as_bytes());
        h.update((bytes.len() as u64).to_le_bytes());
        h.update(bytes);
    };
    field("format", BUILD_FORMAT.as_bytes());
    field("source", i.source.identity.as_bytes());
    for (_, p) in &i.patches {
        field("patch", p);
    }
    field("compiler", spec.compiler.name().as_bytes());
    field("compiler-version", i.compiler_version.as_bytes());
    field("page-size", spec.page_size.name().as_bytes());
    for (_, f) in &i.fragments {
        field("fragment", f);
    }
    hex(&h.finalize())[..16].to_string()
}

/// The key of `spec`'s kernel if the cache has it; nothing is built (for tests that run
/// only on kernels too slow to build in CI).
pub fn cached(spec: &Spec) -> Result<Option<String>, KbuildError> {
    let inputs = read_inputs(spec)?;
    let key = key(spec, &inputs);
    Ok(kernels_dir().join(&key).join("Image").is_file().then_some(key))
}

/// Builds `spec`, or finds it in the cache. `log` gets one line per step.
pub fn build(spec: &Spec, log: &mut dyn FnMut(&str)) -> Result<Built, KbuildError> {
    let start = Instant::now();
    let inputs = read_inputs(spec)?;
    let key = key(spec, &inputs);
    let entry = kernels_dir().join(&key);
    let hit = |start: Instant| Built {
        key: key.clone(),
        image: entry.join("Image"),
        build_s: start.elapsed().as_secs_f64(),
        cached: true,
    };
    if entry.join("Image").is_file() {
        return Ok(hit(start));
    }
    let tree_dir = cache_dir().join("trees").join(format!(
        "{}-{}-{}",
        inputs.source.name,
        spec.compiler.name(),
        spec.page_size.name()
    ));
    let mut t = tree::Tree::open(&tree_dir, spec.compiler, log)?;
    // Another build of the same inputs may have finished while this one waited.
    if entry.join("Image").is_file() {
        return Ok(hit(start));
    }
    t.sync(&inputs.source.dir, log)?;
    let outputs = t.with_patches(&inputs.patches, log, |t, log| {
        t.configure(&inputs.fragments, &inputs.patches, log)?;
        t.make(log)
    })?;
    let release = outputs.release;
    let va_bits = outputs.va_bits;
    let build_s = start.elapsed().as_secs_f64();
    let record = Entry {
        key: key.clone(),
        source: inputs.source.identity.clone(),
        patches: inputs
            .patches
            .iter()
            .map(|(p, b)| PatchInfo {
                path: p.clone(),
                sha256: hex(&Sha256::digest(b)),
            })
            .collect(),
        compiler: inputs.compiler_version.clone(),
        page_size: spec.page_size,
        fragments: inputs.fragments.iter().map(|(n, _)| n.clone()).collect(),
        release,
        va_bits,
        build_s,
    };
    store(&entry, &outputs.files, &record)?;
    Ok(Built {
        key,
        image: entry.join("Image"),
        build_s,
        cached: false,
    })
}

/// Writes a cache entry whole or not at all: into a temporary directory beside it,
/// renamed into place.
fn store(entry: &Path, files: &[(PathBuf, &'static str)], record: &Entry) -> Result<(), KbuildError> {
    let fail = |e: std::io::Error| step(format!("cache {}", entry.display()), e);
    let parent = entry.parent().expect("an entry has a parent");
    std::fs::create_dir_all(parent).map_err(fail)?;
    let tmp = parent.join(format!(
        ".tmp-{}-{}",
        entry.file_name().expect("a key").to_string_lossy(),
        std::process::id()
    ));
    let _ = std::fs::remove_dir_all(&tmp);
    std::fs::create_dir(&tmp).map_err(fail)?;
    let written = (|| -> std::io::Result<()> {
        for (from, name) in files {
            std::fs::copy(from, tmp.join(name))?;
        }
        let map = std::fs::read_to_string(tmp.join("System.map"))?;
        std::fs::write(tmp.join("kallsyms"), text_symbols(&map))?;
        std::fs::write(
            tmp.join("build.json"),
            serde_json::to_string_pretty(record).expect("an entry serializes") + "\n",
        )?;
        std::fs::rename(&tmp, entry)
    })();
    if let Err(e) = written {
        let _ = std::fs::remove_dir_all(&tmp);
        return Err(fail(e));
    }
    Ok(())
}

/// System.map's text symbols as /proc/kallsyms lists them for the plugin: `ADDR NAME`.
pub fn text_symbols(system_map: &str) -> String {
    let mut s = String::with_capacity(system_map.len());
    for line in system_map.lines() {
        let mut f = line.split_whitespace();
        if let (Some(addr), Some(kind), Some(name)) = (f.next(), f.next(), f.next()) {
            if matches!(kind, "t" | "T" | "w" | "W") {
                s.push_str(addr);
                s.push(' ');
                s.push_str(name);
                s.push('\n');
            }
        }
    }
    s
}

/// The cached builds, newest first.
pub fn list() -> Result<Vec<Entry>, KbuildError> {
    let dir = kernels_dir();
    let rd = match std::fs::read_dir(&dir) {
        Ok(rd) => rd,
        Err(e) if e.kind() == std::io::ErrorKind::NotFound => return Ok(Vec::new()),
        Err(e) => return Err(step(format!("{}", dir.display()), e)),
    };
    let mut entries = Vec::new();
    for e in rd.flatten() {
        let name = e.file_name().to_string_lossy().into_owned();
        if name.starts_with('.') {
            continue;
        }
        if let Ok(entry) = read_entry(&e.path()) {
            let modified = e.metadata().and_then(|m| m.modified()).ok();
            entries.push((modified, entry));
        }
    }
    entries.sort_by(|a, b| b.0.cmp(&a.0).then_with(|| a.1.key.cmp(&b.1.key)));
    Ok(entries.into_iter().map(|(_, e)| e).collect())
}

/// A cache entry's record.
pub fn read_entry(dir: &Path) -> Result<Entry, String> {
    let path = dir.join("build.json");
    let text = std::fs::read_to_string(&path).map_err(|e| format!("{}: {e}", path.display()))?;
    serde_json::from_str(&text).map_err(|e| format!("{}: {e}", path.display()))
}

/// The cache entry whose key is `key` or starts with it (at least 4 digits, one match).
pub fn find(key: &str) -> Result<PathBuf, String> {
    if key.len() < 4 || !key.chars().all(|c| c.is_ascii_hexdigit()) {
        return Err(format!("{key}: not a build key (4 to 16 hex digits)"));
    }
    let dir = kernels_dir();
    let matches: Vec<PathBuf> = std::fs::read_dir(&dir)
        .map_err(|e| format!("no built kernels in {}: {e}", dir.display()))?
        .flatten()
        .filter(|e| e.file_name().to_string_lossy().starts_with(key))
        .map(|e| e.path())
        .collect();
    match &matches[..] {
        [one] => Ok(one.clone()),
        [] => Err(format!(
            "no built kernel {key} in {} (foliolab kernel list)",
            dir.display()
        )),
        _ => Err(format!(
            "{key}: {} built kernels start so; give more digits",
            matches.len()
        )),
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn text_symbols_keep_functions_only() {
        let map = "ffff800080000000 T _text\nffff800080010000 t do_thing\n\
                   ffff800081000000 D some_data\nffff800080020000 W weak_fn\n";
        assert_eq!(
            text_symbols(map),
            "ffff800080000000 _text\nffff800080010000 do_thing\nffff800080020000 weak_fn\n"
        );
    }

    #[test]
    fn a_6_12_tree_gets_foliolabs_fragments_as_they_are() {
        let f = own_fragments((6, 12), PageSize::K4);
        assert_eq!(f.len(), 2);
        assert_eq!(f[0].1, BASE_FRAGMENT.1.as_bytes());
        assert_eq!(f[1].1, FRAGMENT_4K.1.as_bytes());
    }

    #[test]
    fn a_7_3_tree_gets_base_less_the_dropped_options_then_7_3s() {
        let f = own_fragments((7, 3), PageSize::K16);
        assert_eq!(f.len(), 3);
        let base = String::from_utf8(f[0].1.clone()).unwrap();
        let drops: Vec<&str> = FRAGMENT_7_3
            .1
            .lines()
            .filter_map(|l| l.strip_prefix("# drop ")?.split(':').next())
            .collect();
        assert_eq!(drops.len(), 5);
        for d in &drops {
            // Each drop names an option base.config sets, and it is gone.
            assert!(BASE_FRAGMENT.1.contains(&format!("\n{d}=")), "{d}");
            assert!(!base.contains(&format!("\n{d}=")), "{d}");
        }
        assert_eq!(base.lines().count() + drops.len(), BASE_FRAGMENT.1.lines().count());
        assert!(base.contains("\nCONFIG_ARM64_CONTPTE=y\n"));
        assert_eq!(f[1].1, FRAGMENT_16K.1.as_bytes());
        assert_eq!(f[2].1, FRAGMENT_7_3.1.as_bytes());
    }

    #[test]
    fn a_trees_version_comes_from_its_makefile() {
        let dir = std::env::temp_dir().join(format!("foliolab-kbuild-version-{}", std::process::id()));
        std::fs::create_dir_all(&dir).unwrap();
        std::fs::write(
            dir.join("Makefile"),
            "# SPDX\nVERSION = 7\nPATCHLEVEL = 3\nSUBLEVEL = 4\n",
        )
        .unwrap();
        assert_eq!(tree_version(&dir).unwrap(), (7, 3));
        std::fs::write(dir.join("Makefile"), "all:\n").unwrap();
        assert!(tree_version(&dir).unwrap_err().to_string().contains("no VERSION"));
        std::fs::remove_dir_all(&dir).unwrap();
    }

    #[test]
    fn a_build_key_is_hex_and_unambiguous() {
        assert!(find("xyz").unwrap_err().contains("not a build key"));
        assert!(find("12").unwrap_err().contains("not a build key"));
    }
}
