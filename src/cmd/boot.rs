//! `foliolab boot`: build the kernel linear map of a machine and report what it cost
//! (page tables, fixmap maps, TLBIs, barriers, descriptor writes) for map_mem alone.
//!
//! RAM starts at 0x4000_0000, QEMU virt's base (1 GiB-aligned, so memstart is the
//! base and 1 GiB blocks line up). `--ram` is the span of physical memory from there;
//! `--holes` removes parts of it from the memory map.

use super::CmdResult;
use crate::arch::arm64::mmu::{paging_init, InitMm, LinearMapConfig, PgtableFixmap, Rodata, PAGE_OFFSET};
use crate::hw::addr::PTE_LEVEL;
use crate::hw::{Event, Events, Features, Granule, Machine, MachineConfig, PhysAddr, PhysMem};
use crate::mm::memblock::Memblock;
use crate::report::Report;
use crate::sim::variants::{keys_help, parse_ram, parse_size, split_sets, Key};
use crate::workload::parse::fmt_size;
use std::collections::BTreeMap;
use std::process::ExitCode;

/// Where RAM starts: QEMU virt's base.
pub const RAM_BASE: u64 = 0x4000_0000;

/// Every `boot --set` key.
pub const KEYS: &[Key] = &[
    Key {
        name: "pgtable-fixmap",
        default: "once",
        values: "per-cont-block|per-table|alloc-and-populate|once (seed 003)",
        about: "seed 003: how map_mem reaches each new page table through the fixmap",
    },
    Key {
        name: "rodata",
        default: "full",
        values: "full|on|off",
        about: "rodata=full makes the linear map pte-granular (without BBML2_NOABORT)",
    },
    Key {
        name: "bbml2",
        default: "off",
        values: "on|off (BBML2_NOABORT, a 6.18 kernel)",
        about: "BBML2_NOABORT: rodata=full and kfence no longer force a pte-granular linear map",
    },
    Key {
        name: "tlbi-range",
        default: "off",
        values: "on|off (FEAT_TLBIRANGE)",
        about: "FEAT_TLBIRANGE: range flushes use range TLBIs",
    },
    Key {
        name: "debug-pagealloc",
        default: "off",
        values: "on|off",
        about: "debug_pagealloc forces a pte-granular linear map",
    },
    Key {
        name: "pgtable-levels",
        default: "4",
        values: "4|5 (5: 52-bit VA with LPA2, 4K)",
        about: "the kernel's table levels: 5 adds the p4d table, reached through the fixmap on every __create_pgd_mapping call",
    },
    Key {
        name: "kernel-image",
        default: "none",
        values: "none|START-END (physical, hex)",
        about: "the kernel image's [_stext, __init_begin): map_mem leaves it out, then maps its linear alias without contiguous ranges but with blocks (`boot --target` takes the guest's)",
    },
    Key {
        name: "map-mem",
        default: "alias-first",
        values: "alias-first|nomap-image (before 7.3)",
        about: "map_mem's order: the banks around the NOMAP kernel image, then its alias with blocks (6.1, 6.12), or the alias first with map_mem's flags (kernel-image, kernel-data), then every bank whole over it (7.3)",
    },
    Key {
        name: "kernel-data",
        default: "none",
        values: "none|START-END (physical, hex)",
        about: "the kernel's [__init_end, __bss_stop): 7.3's map_mem maps it second (`boot --target` takes the guest's [_sdata, _end))",
    },
    Key {
        name: "kfence",
        default: "off",
        values: "on|off",
        about: "kfence forces a pte-granular linear map (without BBML2_NOABORT)",
    },
];

#[derive(clap::Args)]
#[command(after_help = format!("{}\n\nExamples:\n  foliolab boot --ram 4G\n  foliolab boot --ram 64G --set pgtable-fixmap=per-cont-block --json", keys_help(KEYS)))]
pub struct Args {
    /// Physical memory span from the RAM base (64M to 128T, e.g. 16M, 512G, 1T).
    #[arg(long, value_parser = parse_ram)]
    ram: u64,
    /// Translation granule: 4K, 16K or 64K.
    #[arg(long, default_value = "4K", value_parser = |s: &str| Granule::parse(s).ok_or("expected 4K, 16K or 64K"))]
    granule: Granule,
    /// A variant, e.g. pgtable-fixmap=per-table or rodata=off (the keys are listed below).
    #[arg(long = "set", value_name = "KEY=VALUE")]
    set: Vec<String>,
    /// The kernel release whose behaviour to model (`foliolab kernels` lists what each
    /// preset sets; default 7.3, or the target's); a `--set` of the same key wins.
    #[arg(long, value_name = "6.1|6.12|6.18|7.0|7.1|7.2|7.3", value_parser = crate::sim::kernels::parse_kernel)]
    kernel: Option<crate::sim::kernels::Release>,
    /// Also boot that QEMU guest with `--ram` of RAM and print what its map_mem did
    /// beside the model's (the TLBIs by function too); the model takes the guest's page
    /// size, kernel image and table levels.
    #[arg(long, value_enum)]
    target: Option<crate::native::qemu::Target>,
    /// Boot this kernel instead (a key from `foliolab kernel build` or a kernel build
    /// directory), as `--target` does Debian's; the model takes the kernel's release
    /// as its preset unless `--kernel` says otherwise.
    #[arg(long, value_name = "KEY|DIR")]
    image: Option<String>,
    /// Holes in the memory map, as OFFSET+SIZE from the RAM base (comma-separated, e.g. 1G+2M).
    #[arg(long, value_delimiter = ',', value_parser = parse_hole)]
    holes: Vec<(u64, u64)>,
    /// Print the report as JSON (the shape `foliolab run` prints).
    #[arg(long)]
    json: bool,
}

/// `START-END`, two hex physical addresses.
fn parse_range(s: &str) -> Option<(u64, u64)> {
    let (a, b) = s.split_once('-')?;
    let hex = |x: &str| u64::from_str_radix(x.trim_start_matches("0x"), 16).ok();
    Some((hex(a)?, hex(b)?))
}

/// A `kernel-image`/`kernel-data` value: `none` or `START-END`.
fn fmt_range(r: Option<(u64, u64)>) -> String {
    r.map_or("none".to_string(), |(s, e)| format!("{s:#x}-{e:#x}"))
}

/// A machine to boot and the kernel's choices for it.
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct Spec {
    pub granule: Granule,
    pub ram: u64,
    pub holes: Vec<(u64, u64)>,
    pub features: Features,
    pub linmap: LinearMapConfig,
}

impl Spec {
    pub fn new(granule: Granule, ram: u64) -> Spec {
        Spec {
            granule,
            ram,
            holes: Vec::new(),
            features: Features::default(),
            linmap: LinearMapConfig::default(),
        }
    }

    /// Apply `--set KEY=VALUE` settings, refusing a key given twice.
    pub fn set_all(&mut self, sets: &[String]) -> Result<(), String> {
        split_sets(sets)?.into_iter().try_for_each(|(k, v)| self.set(k, v))
    }

    /// Apply one `--set KEY=VALUE`.
    pub fn set(&mut self, key: &str, value: &str) -> Result<(), String> {
        let bad = |expected: &str| format!("--set {key}={value}: expected {expected}");
        let on_off = || match value {
            "on" => Ok(true),
            "off" => Ok(false),
            _ => Err(bad("on or off")),
        };
        match key {
            "pgtable-fixmap" => {
                self.linmap.pgtable_fixmap = PgtableFixmap::parse(value)
                    .ok_or_else(|| bad("per-cont-block, per-table, alloc-and-populate or once"))?
            }
            "rodata" => self.linmap.rodata = Rodata::parse(value).ok_or_else(|| bad("full, on or off"))?,
            "bbml2" => self.features.bbml2 = on_off()?,
            "tlbi-range" => self.features.tlbi_range = on_off()?,
            "debug-pagealloc" => self.linmap.debug_pagealloc = on_off()?,
            "kfence" => self.linmap.kfence = on_off()?,
            "pgtable-levels" => {
                self.linmap.five_levels = match value {
                    "4" => false,
                    "5" => true,
                    _ => return Err(bad("4 or 5")),
                }
            }
            "kernel-image" | "kernel-data" => {
                let range = match value {
                    "none" => None,
                    _ => Some(
                        parse_range(value)
                            .ok_or_else(|| bad("none or START-END, physical, e.g. 0x40210000-0x41590000"))?,
                    ),
                };
                if key == "kernel-image" {
                    self.linmap.kernel_image = range;
                } else {
                    self.linmap.kernel_data = range;
                }
            }
            "map-mem" => {
                self.linmap.alias_first = match value {
                    "nomap-image" => false,
                    "alias-first" => true,
                    _ => return Err(bad("nomap-image or alias-first")),
                }
            }
            _ => {
                let known: Vec<&str> = KEYS.iter().map(|k| k.name).collect();
                return Err(format!("--set {key}: unknown setting ({})", known.join(", ")));
            }
        }
        Ok(())
    }

    /// The memory map: the span from RAM_BASE less the holes.
    pub fn memblock(&self) -> Result<Memblock, String> {
        let ps = self.granule.page_size();
        if self.ram == 0 || !self.ram.is_multiple_of(ps) {
            return Err(format!(
                "--ram {}: must be a non-zero multiple of the {} page",
                self.ram,
                self.granule.name()
            ));
        }
        let mut mb = Memblock::new();
        mb.add(PhysAddr(RAM_BASE), self.ram);
        for &(off, size) in &self.holes {
            if !off.is_multiple_of(ps) || !size.is_multiple_of(ps) || off + size > self.ram {
                return Err(format!(
                    "hole {}+{}: must be page-aligned and inside RAM",
                    fmt_size(off),
                    fmt_size(size)
                ));
            }
            mb.remove(PhysAddr(RAM_BASE + off), size);
        }
        if mb.memory().is_empty() {
            return Err("the holes cover all of RAM".into());
        }
        Ok(mb)
    }

    /// The page-table frames map_mem allocates at most: below the static root, one
    /// table per entry of the level above that the linear map reaches, down to the
    /// leaves' level (ptes when forced, else the largest block), and for each memory
    /// range's two unaligned ends one table at every level.
    fn table_frames_bound(&self) -> u64 {
        let g = self.granule;
        let leaf = if self.linmap.force_pte_mapping(&self.features) {
            PTE_LEVEL
        } else {
            (g.start_level()..PTE_LEVEL)
                .find(|&l| g.block_allowed_at(l))
                .unwrap_or(PTE_LEVEL)
        };
        let below_root = (g.start_level() + 1..=PTE_LEVEL).len() as u64;
        let tables: u64 = (g.start_level() + 1..=leaf)
            .map(|l| self.ram.div_ceil(1 << g.level_shift(l - 1)) + 1)
            .sum();
        tables + (self.holes.len() as u64 + 1) * 2 * below_root
    }

    /// Refuse a machine whose linear map the model cannot store, or whose tables would
    /// not fit in the host's available memory.
    pub fn check_host_memory(&self, available: Option<u64>) -> Result<(), String> {
        let tables = self.table_frames_bound();
        let what = format!("boot --ram {}", fmt_size(self.ram));
        if tables > PhysMem::max_tables(self.granule) {
            return Err(format!(
                "{what}: the linear map needs up to {tables} page tables of {}, more than the model's \
                 table storage holds (2^32 descriptors); use rodata=off or a larger granule",
                self.granule.name()
            ));
        }
        let bytes = PhysMem::host_bytes_needed(self.granule, tables);
        crate::hostmem::Budget::new(what)
            .add(
                "the linear map's page tables (a smaller --ram, rodata=off, or a larger granule)",
                bytes,
            )
            .check_against(available)
    }

    /// The variants in force, as reported.
    pub fn variants(&self) -> BTreeMap<String, String> {
        let on_off = |b: bool| if b { "on" } else { "off" };
        let holes: Vec<String> = self
            .holes
            .iter()
            .map(|&(o, s)| format!("{}+{}", fmt_size(o), fmt_size(s)))
            .collect();
        [
            ("granule", self.granule.name().to_string()),
            ("ram", fmt_size(self.ram)),
            ("holes", holes.join(",")),
            ("pgtable-fixmap", self.linmap.pgtable_fixmap.name().to_string()),
            ("rodata", self.linmap.rodata.name().to_string()),
            ("bbml2", on_off(self.features.bbml2).to_string()),
            ("tlbi-range", on_off(self.features.tlbi_range).to_string()),
            ("debug-pagealloc", on_off(self.linmap.debug_pagealloc).to_string()),
            ("kfence", on_off(self.linmap.kfence).to_string()),
            (
                "pgtable-levels",
                if self.linmap.five_levels { "5" } else { "4" }.to_string(),
            ),
            ("kernel-image", fmt_range(self.linmap.kernel_image)),
            ("kernel-data", fmt_range(self.linmap.kernel_data)),
            (
                "map-mem",
                if self.linmap.alias_first {
                    "alias-first"
                } else {
                    "nomap-image"
                }
                .to_string(),
            ),
        ]
        .into_iter()
        .filter(|(k, v)| *k != "holes" || !v.is_empty())
        .map(|(k, v)| (k.to_string(), v))
        .collect()
    }
}

/// A booted machine and map_mem's events.
pub struct Booted {
    pub machine: Machine,
    pub mm: InitMm,
    pub memblock: Memblock,
    pub map_mem: Events,
}

/// Boot `spec` up to and including map_mem. Only the boot CPU is online at that point,
/// so the machine has one CPU.
pub fn boot(spec: &Spec) -> Result<Booted, String> {
    let mut mb = spec.memblock()?;
    spec.check_host_memory(crate::hostmem::mem_available())?;
    let cfg = MachineConfig {
        granule: spec.granule,
        ram_bytes: mb.end_of_dram().0,
        ncpus: 1,
        features: spec.features,
        ..Default::default()
    };
    if let Some((start, end)) = spec.linmap.kernel_image {
        if start >= end || start < RAM_BASE || end > RAM_BASE + spec.ram || start % spec.granule.page_size() != 0 {
            return Err(format!(
                "kernel-image {start:#x}-{end:#x}: must be a page-aligned range inside RAM"
            ));
        }
        mb.reserve(PhysAddr(start), end - start);
    }
    let mut m = Machine::new(cfg);
    // Setting up init_mm writes only static tables and counts nothing: the events are map_mem's.
    let mm = paging_init(&mut m, &mut mb, spec.linmap);
    let map_mem = m.ev.clone();
    Ok(Booted {
        machine: m,
        mm,
        memblock: mb,
        map_mem,
    })
}

pub fn main(a: Args) -> CmdResult {
    use crate::sim::kernels::{with_preset, Scope, DEFAULT};
    // --image alone is a QEMU guest of its own page size.
    let guest = match (a.target, &a.image) {
        (None, Some(image)) => Some(crate::native::qemu::GuestKernel::image(image)?),
        (Some(t), image) => {
            Some(crate::native::qemu::resolve(t, image.as_deref())?.ok_or("--target host has no map_mem to boot")?)
        }
        (None, None) => None,
    };
    let kernel = a.kernel.or(guest.as_ref().map(|k| k.release)).unwrap_or(DEFAULT);
    if let Some(guest_kernel) = guest {
        if let Some(why) = crate::native::qemu::guest_missing(&guest_kernel) {
            return Err(crate::native::qemu::QemuError::NotSetUp(why).into());
        }
        if !a.holes.is_empty() {
            return Err("--target and --image boot a guest of --ram with no holes".into());
        }
        let guest = crate::native::qemu::boot_map_mem(&guest_kernel, a.ram)?;
        let spec = guest_spec(&guest_kernel, kernel, a.ram, &guest, &a.set)?;
        let report = model_report(&spec)?;
        let agree = agrees(&guest, &report.counters);
        if a.json {
            let j = serde_json::json!({ "model": report, "guest": guest, "agree": agree });
            super::emit(&(serde_json::to_string_pretty(&j)? + "\n"))?;
        } else {
            super::emit(&guest_summary(&guest_kernel.label(), &report, &guest))?;
        }
        return Ok(if agree { ExitCode::SUCCESS } else { ExitCode::FAILURE });
    }
    let mut spec = Spec::new(a.granule, a.ram);
    spec.holes = a.holes;
    spec.set_all(&with_preset(kernel, Scope::Boot, &a.set))?;
    let t0 = std::time::Instant::now();
    let b = boot(&spec)?;
    let elapsed = t0.elapsed();
    let report = Report {
        variants: spec.variants(),
        counters: counters(&b),
        ..boot_report()
    };
    if a.json {
        super::emit(&(serde_json::to_string_pretty(&report)? + "\n"))?;
    } else {
        super::emit(&summary(&spec, &b, &report, elapsed))?;
    }
    // The process exits next; freeing every table frame one by one would cost about a
    // fifth of a 512G build.
    std::mem::forget(b);
    Ok(ExitCode::SUCCESS)
}

fn boot_report() -> Report {
    Report {
        source: "model".into(),
        workload: "boot".into(),
        ..Default::default()
    }
}

/// map_mem's counters.
fn counters(b: &Booted) -> crate::report::Counters {
    b.map_mem
        .iter_nonzero()
        .map(|(k, v)| (k.to_string(), v as i64))
        .collect()
}

/// The model's map_mem report for `spec`.
pub fn model_report(spec: &Spec) -> Result<Report, String> {
    let b = boot(spec)?;
    Ok(Report {
        variants: spec.variants(),
        counters: counters(&b),
        ..boot_report()
    })
}

/// Whether the guest's map_mem and the model's agree: TLBIs (in all and by kind),
/// DSBs and ISBs.
pub fn agrees(guest: &crate::native::qemu::MapMem, model: &crate::report::Counters) -> bool {
    ["arch.tlbi.total", "arch.dsb.ish", "arch.dsb.ishst", "arch.isb"]
        .iter()
        .all(|k| guest.counters.get(*k) == model.get(*k))
        && model
            .keys()
            .filter(|k| k.starts_with("arch.tlbi."))
            .all(|k| guest.counters.get(k) == model.get(k))
}

/// The model of `guest`'s boot with `ram` bytes: `kernel`'s preset, the guest
/// kernel's build (`GuestKernel::boot_sets`) and its own kernel image range, under
/// `sets`.
pub fn guest_spec(
    guest_kernel: &crate::native::qemu::GuestKernel,
    kernel: crate::sim::kernels::Release,
    ram: u64,
    guest: &crate::native::qemu::MapMem,
    sets: &[String],
) -> Result<Spec, String> {
    use crate::sim::kernels::{overlay, with_preset, Scope};
    let mut build = guest_kernel.boot_sets();
    if let Some((s, e)) = guest.kernel_code {
        build.push(format!("kernel-image={s:#x}-{e:#x}"));
    }
    if let Some((s, e)) = guest.kernel_data {
        build.push(format!("kernel-data={s:#x}-{e:#x}"));
    }
    let mut spec = Spec::new(guest_kernel.granule, ram);
    spec.set_all(&with_preset(kernel, Scope::Boot, &overlay(build, sets)))?;
    Ok(spec)
}

/// The guest's map_mem beside the model's: TLBIs and barriers, then the guest's TLBIs by
/// the function that issued them.
fn guest_summary(label: &str, model: &Report, guest: &crate::native::qemu::MapMem) -> String {
    use std::fmt::Write;
    let mut s = format!("map_mem on {label} against the model ({:?}):\n", model.variants);
    use crate::native::qemu::is_insns;
    let keys: std::collections::BTreeSet<&String> = guest
        .counters
        .keys()
        .filter(|k| !is_insns(k))
        .chain(
            model
                .counters
                .keys()
                .filter(|k| k.starts_with("arch.tlbi") || k.starts_with("arch.dsb") || *k == "arch.isb"),
        )
        .collect();
    let _ = writeln!(s, "  {:<24} {:>10} {:>10}", "counter", "guest", "model");
    for k in keys {
        let (g, m) = (
            guest.counters.get(k).copied().unwrap_or(0),
            model.counters.get(k).copied().unwrap_or(0),
        );
        let _ = writeln!(s, "  {k:<24} {g:>10} {m:>10}{}", if g == m { "" } else { "  DIFFERS" });
    }
    let _ = writeln!(s, "guest TLBIs by function:");
    for (f, n) in &guest.tlbi_by_function {
        let _ = writeln!(s, "  {f:<40} {n:>10}");
    }
    // Instructions are the guest's alone: shown, never compared (the model counts none).
    if let Some(total) = guest.counters.get(crate::native::qemu::INSNS_KEY) {
        let mut top: Vec<(&String, &i64)> = guest
            .counters
            .iter()
            .filter(|(k, _)| k.as_str() != crate::native::qemu::INSNS_KEY && is_insns(k))
            .collect();
        top.sort_by(|a, b| b.1.cmp(a.1).then(a.0.cmp(b.0)));
        let _ = writeln!(
            s,
            "guest instructions (not modeled): {total}; the largest functions (--json has all):"
        );
        for (k, n) in top.into_iter().take(5) {
            let _ = writeln!(s, "  {:<40} {n:>10}", k.trim_start_matches("kernel.insns."));
        }
    }
    s
}

fn summary(spec: &Spec, b: &Booted, report: &Report, elapsed: std::time::Duration) -> String {
    use std::fmt::Write;
    let mut s = String::new();
    let m = &b.machine;
    let ranges = b.memblock.memory();
    let end = b.mm.phys_to_virt(b.memblock.end_of_dram());
    let _ = writeln!(
        s,
        "boot: {} of RAM at {:#x} in {} range(s), {} granule",
        fmt_size(b.memblock.phys_mem_size()),
        RAM_BASE,
        ranges.len(),
        spec.granule.name()
    );
    let variants: Vec<String> = report.variants.iter().map(|(k, v)| format!("{k}={v}")).collect();
    let _ = writeln!(s, "variants: {}", variants.join(" "));
    let flags: Vec<&str> = b.mm.cfg.map_mem_flags(m).iter_names().map(|(name, _)| name).collect();
    let _ = writeln!(s, "linear map: [{PAGE_OFFSET:#x}, {:#x}) {}", end.0, flags.join(" | "));
    let _ = writeln!(s, "map_mem:");
    let ev = &b.map_mem;
    let rows: [(&str, &[Event]); 8] = [
        (
            "page tables L0/L1/L2/L3",
            &[
                Event::TableAllocL0,
                Event::TableAllocL1,
                Event::TableAllocL2,
                Event::TableAllocL3,
            ],
        ),
        ("fixmap map/unmap", &[Event::FixmapMap, Event::FixmapUnmap]),
        ("TLBI total/vaale1is", &[Event::TlbiTotal, Event::TlbiVaale1is]),
        ("DSB ishst/ish", &[Event::DsbIshst, Event::DsbIsh]),
        ("ISB", &[Event::Isb]),
        (
            "writes pgd/pud/pmd/pte",
            &[Event::PgdWrite, Event::PudWrite, Event::PmdWrite, Event::PteWrite],
        ),
        ("page zero", &[Event::PageZero]),
        ("TLB entries invalidated", &[Event::TlbInvalidated]),
    ];
    for (label, events) in rows {
        let values: Vec<String> = events.iter().map(|e| ev.get(*e).to_string()).collect();
        let _ = writeln!(s, "  {label:<26} {}", values.join(" / "));
    }
    let _ = writeln!(
        s,
        "host: {:.3} s, table storage {:.1} MiB",
        elapsed.as_secs_f64(),
        m.mem.host_bytes() as f64 / (1 << 20) as f64
    );
    s
}

fn parse_hole(s: &str) -> Result<(u64, u64), String> {
    let (off, size) = s
        .split_once('+')
        .ok_or_else(|| format!("{s}: expected OFFSET+SIZE, e.g. 1G+2M"))?;
    Ok((parse_size(off)?, parse_size(size)?))
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn holes_parse() {
        assert_eq!(parse_hole("1G+2M"), Ok((1 << 30, 2 << 20)));
        assert!(parse_hole("1G").is_err());
    }

    #[test]
    fn a_linear_map_the_model_cannot_store_or_the_host_cannot_hold_is_refused() {
        let e = Spec::new(Granule::K4, 100 << 40).check_host_memory(None).unwrap_err();
        assert!(
            e.starts_with("boot --ram 100T: the linear map needs up to 52531409 page tables"),
            "{e}"
        );
        let mut s = Spec::new(Granule::K4, 128 << 40);
        s.set("rodata", "off").unwrap();
        assert_eq!(s.check_host_memory(None), Ok(()));
        let e = Spec::new(Granule::K4, 8 << 40)
            .check_host_memory(Some(1 << 30))
            .unwrap_err();
        assert!(e.starts_with("boot --ram 8T needs up to 16."), "{e}");
    }

    #[test]
    fn bad_settings_are_rejected_with_the_choices() {
        let mut s = Spec::new(Granule::K4, 1 << 30);
        assert!(s
            .set("pgtable-fixmap", "twice")
            .unwrap_err()
            .contains("alloc-and-populate"));
        assert!(s.set("bbml2", "yes").unwrap_err().contains("on or off"));
        assert!(s.set("frobnicate", "on").unwrap_err().contains("unknown setting"));
        assert!(s.set_all(&["rodata".into()]).unwrap_err().contains("KEY=VALUE"));
        assert_eq!(
            s.set_all(&["rodata=off".into(), "rodata=on".into()]),
            Err("--set rodata: given more than once".into())
        );
        s.set_all(&["pgtable-fixmap=alloc-and-populate".into(), "bbml2=on".into()])
            .unwrap();
        assert_eq!(s.linmap.pgtable_fixmap, PgtableFixmap::AllocAndPopulate);
        assert!(s.features.bbml2);
        s.holes = vec![(1 << 30, 3 << 30)];
        assert!(s.memblock().is_err());
    }

    #[test]
    fn boot_reports_map_mem_alone() {
        let mut s = Spec::new(Granule::K4, 16 << 20);
        s.holes = vec![(4 << 20, 2 << 20)];
        let b = boot(&s).unwrap();
        assert_eq!(b.memblock.phys_mem_size(), 14 << 20);
        // The early_fixmap_init writes are not map_mem's; its tables are.
        assert_eq!(b.map_mem.get(Event::TableAllocL3), 8 - 1);
        // Both ranges visit the pud and pmd table: 2 + 2 + 7 pte tables, one TLBI each.
        assert_eq!(b.map_mem.get(Event::TlbiTotal), 2 + 2 + 7);
        assert_eq!(s.variants()["holes"], "4M+2M");
    }

    #[test]
    fn tlbi_range_does_not_change_one_page_fixmap_flushes() {
        let plain = boot(&Spec::new(Granule::K4, 64 << 20)).unwrap().map_mem;
        let mut s = Spec::new(Granule::K4, 64 << 20);
        s.set("tlbi-range", "on").unwrap();
        assert_eq!(boot(&s).unwrap().map_mem, plain);
        assert_eq!(plain.get(Event::TlbiVaale1is), 1 + 1 + 32);
    }
}
