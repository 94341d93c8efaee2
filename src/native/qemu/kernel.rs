//! A guest kernel as a value: where its image and symbols are, its release (for the
//! model's preset), page size, VA bits and where it came from. The runner boots any
//! such value the same way; `--target qemu-arm64[-16k|-6.1|-7.3|-7.3-16k]` resolve to Debian's
//! kernels (scripts/setup-qemu), `--image KEY|DIR` to one built by `foliolab kernel
//! build` (src/kbuild) or a kernel build directory.

use super::{cache_dir, QemuError, Target};
use crate::hw::Granule;
use crate::sim::kernels::Release;
use std::path::{Path, PathBuf};

/// Where a guest kernel came from.
#[derive(Clone, Debug, PartialEq, Eq, serde::Serialize)]
#[serde(tag = "kind", content = "id", rename_all = "lowercase")]
pub enum Provenance {
    /// Debian's image package, by kernel release.
    Debian(String),
    /// `foliolab kernel build`, by key.
    Build(String),
    /// A kernel build directory (Image, System.map and .config in it).
    Dir(PathBuf),
}

/// The guest's architecture: which QEMU, machine, console and runner boot it.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum Arch {
    Arm64,
    /// x86-64 (`qemu-x86_64`): the host's architecture, whose kernel the model is
    /// judged against as the host's is (no arm64 keys).
    X86_64,
}

/// A guest kernel the QEMU runner can boot.
#[derive(Clone, Debug)]
pub struct GuestKernel {
    pub arch: Arch,
    /// The reports' `source`: the target's name, or `qemu-arm64:KEY`.
    pub source: String,
    pub image: PathBuf,
    /// Text symbols as `ADDR NAME` lines (/proc/kallsyms' text entries).
    pub symbols: PathBuf,
    /// zram and the modules it needs, in load order; None where zram is built in.
    pub modules: Option<PathBuf>,
    /// The release the kernel was built from (its model preset).
    pub release: Release,
    pub granule: Granule,
    /// CONFIG_ARM64_VA_BITS: 52 with LPA2 on `-cpu max` (five levels with 4K pages).
    pub va_bits: u32,
    pub provenance: Provenance,
}

impl GuestKernel {
    /// Debian's kernel of a QEMU target, as scripts/setup-qemu caches it; None for
    /// the host.
    pub fn debian(target: Target) -> Option<GuestKernel> {
        let (source, flavour, granule, release, va_bits) = match target {
            Target::Host => return None,
            Target::QemuX86_64 => return Some(GuestKernel::debian_x86_64()),
            Target::QemuArm64 => ("qemu-arm64", "arm64", Granule::K4, Release(6, 12), 52),
            Target::QemuArm64_16k => ("qemu-arm64-16k", "arm64-16k", Granule::K16, Release(6, 12), 52),
            Target::QemuArm64_61 => ("qemu-arm64-6.1", "arm64-6.1", Granule::K4, Release(6, 1), 48),
            Target::QemuArm64_70 => ("qemu-arm64-7.0", "arm64-7.0", Granule::K4, Release(7, 0), 52),
            Target::QemuArm64_72 => ("qemu-arm64-7.2", "arm64-7.2", Granule::K4, Release(7, 2), 52),
            Target::QemuArm64_73 => ("qemu-arm64-7.3", "arm64-7.3", Granule::K4, Release(7, 3), 52),
            Target::QemuArm64_73_16k => ("qemu-arm64-7.3-16k", "arm64-7.3-16k", Granule::K16, Release(7, 3), 52),
        };
        let dir = cache_dir().join(flavour);
        let full = std::fs::read_to_string(dir.join("release")).unwrap_or_default();
        Some(GuestKernel {
            arch: Arch::Arm64,
            source: source.into(),
            image: dir.join("Image"),
            symbols: dir.join("kallsyms"),
            modules: Some(dir.join("modules")),
            release,
            granule,
            va_bits,
            provenance: Provenance::Debian(full.trim().to_string()),
        })
    }

    /// Debian 13 backports' 6.18 x86-64 cloud kernel (`qemu-x86_64`): the host's
    /// release, 4K pages, four-level tables (the guest's CPU is QEMU's `max` without
    /// LA57, as the host's has none).
    fn debian_x86_64() -> GuestKernel {
        let dir = cache_dir().join("x86_64");
        let full = std::fs::read_to_string(dir.join("release")).unwrap_or_default();
        GuestKernel {
            arch: Arch::X86_64,
            source: "qemu-x86_64".into(),
            image: dir.join("vmlinuz"),
            symbols: dir.join("kallsyms"),
            modules: Some(dir.join("modules")),
            release: Release(6, 18),
            granule: Granule::K4,
            va_bits: 48,
            provenance: Provenance::Debian(full.trim().to_string()),
        }
    }

    /// `--image KEY|DIR`: a cached build by key (or a unique prefix of one), or a
    /// directory holding Image (or arch/arm64/boot/Image), System.map and .config
    /// (or config).
    pub fn image(arg: &str) -> Result<GuestKernel, QemuError> {
        let bad = |m: String| QemuError::Run(format!("--image {arg}: {m}"));
        let path = Path::new(arg);
        if path.is_dir() {
            let pick = |names: &[&str]| names.iter().map(|n| path.join(n)).find(|p| p.is_file());
            let image = pick(&["Image", "arch/arm64/boot/Image"]).ok_or_else(|| bad("no Image in it".into()))?;
            let config = pick(&["config", ".config"]).ok_or_else(|| bad("no config or .config in it".into()))?;
            let map = pick(&["System.map"]).ok_or_else(|| bad("no System.map in it".into()))?;
            let config = std::fs::read_to_string(&config).map_err(|e| bad(format!("{}: {e}", config.display())))?;
            let (release, granule, va_bits) = from_config(&config).map_err(bad)?;
            let (symbols, provenance, source) = match crate::kbuild::read_entry(path) {
                Ok(e) => (
                    path.join("kallsyms"),
                    Provenance::Build(e.key.clone()),
                    format!("qemu-arm64:{}", e.key),
                ),
                Err(_) => {
                    let canon = path.canonicalize().unwrap_or_else(|_| path.to_path_buf());
                    (
                        map,
                        Provenance::Dir(canon.clone()),
                        format!("qemu-arm64:{}", canon.display()),
                    )
                }
            };
            return Ok(GuestKernel {
                arch: Arch::Arm64,
                source,
                image,
                symbols,
                modules: None,
                release,
                granule,
                va_bits,
                provenance,
            });
        }
        if path.exists() {
            return Err(bad("not a directory or a build key".into()));
        }
        let dir = crate::kbuild::find(arg).map_err(bad)?;
        GuestKernel::image(&dir.to_string_lossy())
    }

    /// Why this kernel cannot boot here, if it cannot.
    pub fn missing(&self) -> Option<String> {
        [&self.image, &self.symbols]
            .into_iter()
            .chain(self.modules.as_ref())
            .find(|p| !p.exists())
            .map(|p| format!("{} is missing", p.display()))
    }

    /// A short name for a column or a log line: the target, or the build key.
    pub fn label(&self) -> String {
        match &self.provenance {
            Provenance::Debian(_) => self.source.clone(),
            Provenance::Build(key) => key.clone(),
            Provenance::Dir(d) => d.display().to_string(),
        }
    }

    /// The symbols in the plugin's input form, `ADDR NAME`: a build directory's
    /// System.map is converted into `dir`.
    pub(super) fn kallsyms(&self, dir: &Path) -> Result<PathBuf, QemuError> {
        if !matches!(self.provenance, Provenance::Dir(_)) {
            return Ok(self.symbols.clone());
        }
        let map = std::fs::read_to_string(&self.symbols)
            .map_err(|e| QemuError::Run(format!("{}: {e}", self.symbols.display())))?;
        let out = dir.join("kallsyms");
        std::fs::write(&out, crate::kbuild::text_symbols(&map))
            .map_err(|e| QemuError::Run(format!("{}: {e}", out.display())))?;
        Ok(out)
    }

    /// Where the guest places the workload's regions, past their addresses in the
    /// workload: with 16K pages a top-level entry spans 128T, the whole of the
    /// default user window, which holds the runner's stack and mappings; the model's
    /// address space has only the workload in it. So the guest maps the regions
    /// 128T up (an mmap hint past the 47-bit window), where their page tables are
    /// their own, as with 4K pages (512G per entry) they are anyway.
    pub(super) fn va_offset(&self) -> u64 {
        match self.granule {
            Granule::K16 => 1 << 47,
            _ => 0,
        }
    }

    /// The functions whose first entries bound map_mem at boot (paging_init inlines
    /// it): its first call, memblock_mark_nomap (6.12: of the kfence pool; 6.1: of
    /// the kernel image), and the first call after it, memblock_allow_resize (6.12,
    /// whose map_mem ends mapping the kfence pool) or its own last call,
    /// memblock_clear_nomap (6.1, where pgd_clear_fixmap and the TTBR1 switch follow).
    /// 7.3's map_mem marks nothing nomap (it maps the kernel's linear alias first);
    /// its first call is force_pte_mapping()'s cpu_supports_bbml3 (capabilities are
    /// not final yet; kfence's early pool, mapped before it, is off with
    /// KFENCE_SAMPLE_INTERVAL=0, as Debian and tools/kernel/base.config build it).
    /// 7.2 maps the alias first too, and its force_pte_mapping() calls the same check
    /// under its older name, cpu_supports_bbml2_noabort (7.2.13's source; the 7.2
    /// guest has no memblock_mark_nomap window). 7.0 keeps 6.12's bounds (the 7.0
    /// guest's window is 6.12's); 7.1 was not read.
    /// None on x86-64, whose boot has no map_mem (the model's is arm64's).
    pub(super) fn map_mem_bounds(&self) -> Option<(&'static str, &'static str)> {
        if self.arch == Arch::X86_64 {
            return None;
        }
        Some(match self.release {
            Release(6, 1) => ("memblock_mark_nomap", "memblock_clear_nomap"),
            r if r >= Release(7, 3) => ("cpu_supports_bbml3", "memblock_allow_resize"),
            Release(7, 2) => ("cpu_supports_bbml2_noabort", "memblock_allow_resize"),
            _ => ("memblock_mark_nomap", "memblock_allow_resize"),
        })
    }

    /// The QEMU that runs the guest, its machine and CPU, and the command line's
    /// own part (the console): arm64's `virt` with `-cpu max`, whose pointer
    /// authentication (Debian's kernels and ours sign every return address) uses
    /// QEMU's implementation-defined algorithm (`pauth-impdef=on`, QEMU's
    /// docs/system/arm/cpu-features.rst) rather than the architected QARMA5, which TCG
    /// emulates slowly: the same instructions run and only the codes differ, and a boot
    /// that dumps 6.12's symbols took 11.6–14.9 s of user CPU instead of 40.3–43.4; x86-64's `pc` with
    /// `-cpu max` less LA57 (four-level tables, as the host has) and no network (no
    /// option ROM to load). Debian's x86-64 kernel boots with THP `always` (as arm64's
    /// does), under which the runner's own memory at boot, before it sets the spec's
    /// `madvise`, took a PMD THP that it later unmapped in part: a shrink split it
    /// (shrink_64k). It boots with `madvise`, the value the runner sets anyway.
    pub(super) fn qemu(&self) -> (&'static str, &'static [&'static str], &'static str) {
        match self.arch {
            Arch::Arm64 => (
                "qemu-system-aarch64",
                &["-M", "virt", "-cpu", "max,pauth-impdef=on"],
                "console=ttyAMA0",
            ),
            Arch::X86_64 => (
                "qemu-system-x86_64",
                &["-M", "pc", "-cpu", "max,la57=off", "-net", "none"],
                "console=ttyS0 transparent_hugepage=madvise",
            ),
        }
    }

    /// The guest runner's file in the cache: tools/qemu/runner.c built for the arch.
    pub(super) fn runner(&self) -> &'static str {
        match self.arch {
            Arch::Arm64 => "runner",
            Arch::X86_64 => "runner-x86_64",
        }
    }

    /// The `boot --set` values of the kernel's build and CPU: a 52-bit VA kernel with
    /// 4K pages on `-cpu max` (FEAT_LPA2) runs five levels of tables (16K pages
    /// reach 52 bits with four).
    pub fn boot_sets(&self) -> Vec<String> {
        if self.granule == Granule::K4 && self.va_bits == 52 {
            vec!["pgtable-levels=5".into()]
        } else {
            Vec::new()
        }
    }

    /// The model variants that match this kernel's machine (`--set ...`, which a
    /// user's own `--set` overrides): its base page size; `tlbi-range=on` because
    /// QEMU's `-cpu max` implements FEAT_TLBIRANGE, so the guest kernel flushes ranges
    /// with range TLBIs; and for a 52-bit VA kernel (CONFIG_ARM64_LPA2, as Debian
    /// builds 6.12) `lpa2=on`, because `-cpu max` implements FEAT_LPA2 too, so range
    /// TLBIs start on 64K boundaries (Debian's 6.1 is a 48-bit VA kernel); and
    /// `cpu=qemu-max`, the MIDR the guest boots on, from which the kernel decides
    /// BBML2_NOABORT (no) and the repeat-TLBI erratum (no) as it does on hardware.
    /// The kernel's behaviour is its preset's (`release`).
    ///
    /// x86-64 (judged as the host is, on the model's generic software): `contpte=off`,
    /// for x86 has no contiguous bit (arm64's contpte blocks, which a PMD split folds,
    /// break a zap's batches: fork_pmd_thp's exit calls folio_remove_rmap_ptes 3 times
    /// on x86, 4 on arm64); and `lazyfree-pmd=discard`, the behaviour of the build
    /// rather than of its release: Debian's 6.18.15 still discards a lazyfree PMD THP
    /// at its pmd (free_pageout_pmd, free_write_pageout_pmd), as 7.0 to 7.2 do, while
    /// the host's 6.18.44 splits it, the stable removal having reached 6.18.y since.
    pub fn machine_sets(&self) -> Vec<String> {
        if self.arch == Arch::X86_64 {
            return vec!["contpte=off".into(), "lazyfree-pmd=discard".into()];
        }
        let mut sets = Vec::new();
        if self.granule == Granule::K16 {
            sets.push("granule=16K".to_string());
        }
        sets.push("cpu=qemu-max".into());
        sets.push("tlbi-range=on".into());
        if self.va_bits == 52 {
            sets.push("lpa2=on".into());
        }
        sets
    }
}

/// A kernel config's release (its header line), page size and VA bits.
fn from_config(config: &str) -> Result<(Release, Granule, u32), String> {
    let version = config
        .lines()
        .find_map(|l| l.strip_prefix("# Linux/arm64 ")?.split(' ').next())
        .ok_or("the config has no `# Linux/arm64 VERSION` header line")?;
    let mut parts = version.split(['.', '-']);
    let mut num = || parts.next().and_then(|p| p.parse::<u32>().ok());
    let release = match (num(), num()) {
        (Some(a), Some(b)) => Release(a, b),
        _ => return Err(format!("the config's release {version:?} is not MAJOR.MINOR")),
    };
    let set = |sym: &str| config.lines().any(|l| l == format!("{sym}=y"));
    let granule = if set("CONFIG_ARM64_4K_PAGES") {
        Granule::K4
    } else if set("CONFIG_ARM64_16K_PAGES") {
        Granule::K16
    } else {
        return Err("the kernel has neither 4K nor 16K pages (64K is not modelled)".into());
    };
    let va_bits = config
        .lines()
        .find_map(|l| l.strip_prefix("CONFIG_ARM64_VA_BITS=")?.parse().ok())
        .ok_or("the config has no CONFIG_ARM64_VA_BITS")?;
    Ok((release, granule, va_bits))
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn a_config_gives_release_page_size_and_va_bits() {
        let c = "#\n# Automatically generated file; DO NOT EDIT.\n# Linux/arm64 6.12.117 Kernel Configuration\n\
                 CONFIG_ARM64_16K_PAGES=y\nCONFIG_ARM64_VA_BITS=52\n";
        assert_eq!(from_config(c), Ok((Release(6, 12), Granule::K16, 52)));
        assert!(from_config("CONFIG_ARM64_4K_PAGES=y\n").unwrap_err().contains("header"));
        assert!(
            from_config("# Linux/arm64 6.12.1 Kernel Configuration\nCONFIG_ARM64_64K_PAGES=y\n")
                .unwrap_err()
                .contains("64K")
        );
    }

    #[test]
    fn an_image_needs_a_qemu_target_of_its_page_size() {
        let e = super::super::resolve(Target::Host, Some("0123abcd")).unwrap_err();
        assert!(e.to_string().contains("give --target qemu-arm64"), "{e}");
        let dir = std::env::temp_dir().join(format!("foliolab-image-test-{}", std::process::id()));
        std::fs::create_dir_all(&dir).unwrap();
        for f in ["Image", "System.map"] {
            std::fs::write(dir.join(f), "").unwrap();
        }
        std::fs::write(
            dir.join(".config"),
            "# Linux/arm64 6.12.117 Kernel Configuration\nCONFIG_ARM64_4K_PAGES=y\nCONFIG_ARM64_VA_BITS=48\n",
        )
        .unwrap();
        let arg = dir.to_string_lossy().into_owned();
        let e = super::super::resolve(Target::QemuArm64_16k, Some(&arg)).unwrap_err();
        assert!(e.to_string().contains("has 4K pages"), "{e}");
        let k = super::super::resolve(Target::QemuArm64, Some(&arg)).unwrap().unwrap();
        assert_eq!((k.release, k.granule, k.va_bits), (Release(6, 12), Granule::K4, 48));
        assert_eq!(k.machine_sets(), ["cpu=qemu-max", "tlbi-range=on"]);
        assert!(k.boot_sets().is_empty());
        assert!(matches!(k.provenance, Provenance::Dir(_)));
        std::fs::remove_dir_all(&dir).unwrap();
    }

    /// Debian's kernels resolve to the values the targets had as enum variants.
    #[test]
    fn debian_targets_keep_their_machine() {
        let k = GuestKernel::debian(Target::QemuArm64).unwrap();
        assert_eq!(k.machine_sets(), ["cpu=qemu-max", "tlbi-range=on", "lpa2=on"]);
        assert_eq!(k.boot_sets(), ["pgtable-levels=5"]);
        assert_eq!(k.va_offset(), 0);
        let k = GuestKernel::debian(Target::QemuArm64_16k).unwrap();
        assert_eq!(
            k.machine_sets(),
            ["granule=16K", "cpu=qemu-max", "tlbi-range=on", "lpa2=on"]
        );
        assert!(k.boot_sets().is_empty());
        assert_eq!(k.va_offset(), 1 << 47);
        let k = GuestKernel::debian(Target::QemuArm64_61).unwrap();
        assert_eq!(k.machine_sets(), ["cpu=qemu-max", "tlbi-range=on"]);
        assert!(k.boot_sets().is_empty());
        assert_eq!(
            k.map_mem_bounds(),
            Some(("memblock_mark_nomap", "memblock_clear_nomap"))
        );
        let k = GuestKernel::debian(Target::QemuArm64_73).unwrap();
        assert_eq!((k.release, k.granule), (Release(7, 3), Granule::K4));
        assert_eq!(k.machine_sets(), ["cpu=qemu-max", "tlbi-range=on", "lpa2=on"]);
        assert_eq!(k.boot_sets(), ["pgtable-levels=5"]);
        let k = GuestKernel::debian(Target::QemuArm64_73_16k).unwrap();
        assert_eq!(
            k.machine_sets(),
            ["granule=16K", "cpu=qemu-max", "tlbi-range=on", "lpa2=on"]
        );
        assert_eq!(k.va_offset(), 1 << 47);
        assert!(GuestKernel::debian(Target::Host).is_none());
        // The x86-64 guest is judged as the host is: no arm64 machine, no map_mem.
        let k = GuestKernel::debian(Target::QemuX86_64).unwrap();
        assert_eq!(
            (k.arch, k.release, k.granule),
            (Arch::X86_64, Release(6, 18), Granule::K4)
        );
        assert_eq!(k.machine_sets(), ["contpte=off", "lazyfree-pmd=discard"]);
        assert!(k.boot_sets().is_empty());
        assert_eq!(k.map_mem_bounds(), None);
        assert_eq!((k.qemu().0, k.runner()), ("qemu-system-x86_64", "runner-x86_64"));
    }
}
