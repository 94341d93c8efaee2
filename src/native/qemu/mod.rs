//! `foliolab native --target qemu-arm64|qemu-arm64-16k|qemu-arm64-6.1|qemu-arm64-7.3[-16k]`:
//! runs workloads on a real arm64 kernel (Debian's 6.12, Debian 12's 6.1 or Debian 13
//! backports' 7.3) under QEMU (TCG, one
//! vCPU), with the host runner's measurement done in the guest (tools/qemu/runner.c)
//! and a TCG plugin (tools/qemu/plugin.c) counting TLBI, DSB, ISB and kernel-function
//! entries inside each op's window. One boot runs a whole batch of workloads; the
//! plugin also measures the boot's map_mem (`MapMem`, `boot_map_mem`).
//!
//! A workload goes to the guest flattened, one line each: `proc NAME` per process,
//! `vmstat KEY` per /proc/vmstat counter, `default KNOB VALUE` per spec default (set
//! before the run, outside any window), then `step ...` per op in execution order,
//! repeats expanded, with absolute addresses:
//! ```text
//! step set KNOB VALUE | step mark LABEL | step shrink | step swapon SIZE
//! step mmap PROC REGION ADDR SIZE HUGEPAGE NOHUGEPAGE POPULATE RO
//! step touch PROC ADDR LEN WRITE STRIDE | step madvise PROC ADDR LEN ADVICE STEP
//! step munmap PROC REGION ADDR LEN WHOLE | step mprotect PROC ADDR LEN none|r|rw
//! step mremap PROC REGION ADDR LEN NEW_ADDR NEW_LEN (moved with MREMAP_FIXED when the addresses differ)
//! step mlock|munlock PROC ADDR LEN | step fork PROC CHILD | step exit PROC
//! ```
//! (numbers in hex). Every step but `mark` is one window of the plugin's, in order.

use crate::hw::Granule;
use crate::mm::thp_sysfs::ThpKnobs;
use crate::report::{Background, Counters, Phase, Report, Run};
use crate::sim::kernels::Release;
use crate::workload::{mremap_target, Op, Prot, Stmt, Workload};
use std::collections::BTreeMap;
use std::fmt::Write as _;
use std::path::{Path, PathBuf};
use std::process::Command;
use std::time::{Duration, Instant};

mod kernel;
pub use kernel::{Arch, GuestKernel, Provenance};

/// A QEMU guest to run workloads on.
#[derive(Clone, Copy, Debug, PartialEq, Eq, clap::ValueEnum)]
pub enum Target {
    /// This host's kernel (the default).
    Host,
    /// Linux 6.12 arm64, 4K pages (CONFIG_ARM64_CONTPTE=y).
    QemuArm64,
    /// Linux 6.12 arm64, 16K pages.
    QemuArm64_16k,
    /// Linux 6.1 arm64 (Debian 12's own kernel), 4K pages.
    #[value(name = "qemu-arm64-6.1")]
    QemuArm64_61,
    /// Linux 7.0 arm64 (Debian 13 backports' 7.0.13), 4K pages, without zram (the
    /// archive no longer has its modules).
    #[value(name = "qemu-arm64-7.0")]
    QemuArm64_70,
    /// Linux 7.2 arm64 (Debian 13 backports' 7.2.12), 4K pages.
    #[value(name = "qemu-arm64-7.2")]
    QemuArm64_72,
    /// Linux 7.3 arm64 (Debian 13 backports'), 4K pages.
    #[value(name = "qemu-arm64-7.3")]
    QemuArm64_73,
    /// Linux 7.3 arm64, 16K pages.
    #[value(name = "qemu-arm64-7.3-16k")]
    QemuArm64_73_16k,
    /// Linux 6.18 x86-64 (Debian 13 backports' cloud kernel, the host's release), 4K
    /// pages: judged as the host is, with exact counts and instructions per function.
    #[value(name = "qemu-x86_64")]
    QemuX86_64,
}

impl Target {
    /// The guest kernel the target boots: Debian's (scripts/setup-qemu); None for
    /// the host.
    pub fn guest_kernel(self) -> Option<GuestKernel> {
        GuestKernel::debian(self)
    }

    /// The guest's base page size (4K for the host, whose own is not modelled here).
    pub fn granule(self) -> Granule {
        self.guest_kernel().map_or(Granule::K4, |k| k.granule)
    }

    /// The report's `source`: the target's name ("qemu-arm64-7.3", ...) or "host".
    pub fn source(self) -> &'static str {
        match self {
            Target::Host => "host",
            Target::QemuArm64 => "qemu-arm64",
            Target::QemuArm64_16k => "qemu-arm64-16k",
            Target::QemuArm64_61 => "qemu-arm64-6.1",
            Target::QemuArm64_70 => "qemu-arm64-7.0",
            Target::QemuArm64_72 => "qemu-arm64-7.2",
            Target::QemuArm64_73 => "qemu-arm64-7.3",
            Target::QemuArm64_73_16k => "qemu-arm64-7.3-16k",
            Target::QemuX86_64 => "qemu-x86_64",
        }
    }

    /// The `boot --set` values of the target's kernel build and CPU
    /// (`GuestKernel::boot_sets`).
    pub fn boot_sets(self) -> Vec<String> {
        self.guest_kernel().map(|k| k.boot_sets()).unwrap_or_default()
    }

    /// The kernel release the target runs (its `--kernel` preset by default): the
    /// host's own for the host.
    pub fn kernel(self) -> Release {
        self.guest_kernel()
            .map_or_else(crate::sim::kernels::host_release, |k| k.release)
    }

    /// The model variants that match this target's machine
    /// (`GuestKernel::machine_sets`; none for the host).
    pub fn machine_sets(self) -> Vec<String> {
        self.guest_kernel().map(|k| k.machine_sets()).unwrap_or_default()
    }
}

/// How a workload's error starts when it wrote a knob the target's kernel lacks: the
/// workload does not apply there (e.g. `hugepages-16kB/enabled` with 16K base pages).
pub const NOT_APPLICABLE: &str = "not applicable on ";

/// How the guest runner's error starts when a `swapon` finds no zram device
/// (tools/qemu/runner.c's zram_prepare).
const NO_ZRAM: &str = "zram0 disksize";

/// The guest runner's error for a `khugepaged` op when the thread is stopped
/// (tools/qemu/runner.c's KHUGEPAGED_OFF).
const KHUGEPAGED_OFF: &str = "khugepaged is not running: no THP size it collapses to is enabled";

/// The workload's `memlimit`, if it has one.
fn memlimit(stmts: &[Stmt]) -> Option<&Stmt> {
    stmts.iter().find_map(|s| match &s.op {
        Op::Memlimit { .. } => Some(s),
        Op::Repeat { body, .. } => memlimit(body),
        _ => None,
    })
}

/// The NUMA nodes a guest has when one of its workloads migrates: node 0 with the
/// vCPU, node 1 memory only, the RAM split evenly.
pub const GUEST_NODES: usize = 2;

/// What the guest runner cannot do for `w`: threads and CPU placement, a memory
/// cgroup (`memlimit`), or migration to a node beyond the guest's (`migrate`).
pub fn unsupported(w: &Workload) -> Option<String> {
    if let Some(s) = crate::workload::model_only(&w.stmts) {
        return Some(format!(
            "'{}' (line {}) runs only in the model",
            s.op.keyword(),
            s.pos.line
        ));
    }
    if let Some(s) = memlimit(&w.stmts) {
        return Some(format!(
            "its runner has no memory cgroup yet (memlimit at line {})",
            s.pos.line
        ));
    }
    w.migrate_beyond(GUEST_NODES).map(|(pos, node)| {
        format!(
            "its guest has {GUEST_NODES} NUMA nodes (migrate to node {node} at line {})",
            pos.line
        )
    })
}

/// The reason, if `error` (a per-workload error of `run_batch`) says the workload does
/// not apply to the target.
pub fn not_applicable(error: &str) -> Option<&str> {
    error.strip_prefix(NOT_APPLICABLE).map(|_| error)
}

/// Kernel functions whose entries are counted, reported as `kernel.<name>`.
pub const KERNEL_FUNCTIONS: &[&str] = &[
    "contpte_convert",
    "__contpte_try_fold",
    "__contpte_try_unfold",
    "contpte_ptep_get",
    "contpte_set_ptes",
    "contpte_clear_full_ptes",
    "contpte_get_and_clear_full_ptes",
    "contpte_wrprotect_ptes",
    "contpte_try_unfold_partial",
    "folio_remove_rmap_ptes",
    "page_remove_rmap",
    "do_anonymous_page",
    "handle_mm_fault",
];

/// Kernel functions counted besides `KERNEL_FUNCTIONS`, named comma-separated in
/// `FOLIOLAB_QEMU_FUNCTIONS`: a probe for one experiment, such as `vm_normal_page`
/// (the folio lookups that `kernel.*.folio_lookups` count in two of its callers; the
/// model has no key for all of them), reported as `kernel.<name>` and compared
/// nowhere, the model having no such key.
fn probe_functions() -> Vec<String> {
    std::env::var("FOLIOLAB_QEMU_FUNCTIONS")
        .map(|v| v.split(',').filter(|f| !f.is_empty()).map(str::to_string).collect())
        .unwrap_or_default()
}

/// The model's architectural counters this target measures: always reported, so a
/// zero compares too.
const ARCH_KEYS: &[&str] = &[
    "arch.tlbi.vae1is",
    "arch.tlbi.vale1is",
    "arch.tlbi.vaae1is",
    "arch.tlbi.vaale1is",
    "arch.tlbi.aside1is",
    "arch.tlbi.vmalle1is",
    "arch.tlbi.rvae1is",
    "arch.tlbi.rvale1is",
    "arch.tlbi.rvaae1is",
    "arch.tlbi.rvaale1is",
    "arch.tlbi.total",
    "arch.dsb.ish",
    "arch.dsb.ishst",
    "arch.isb",
];

/// The x86-64 guest's TLB work the plugin counts (tools/qemu/plugin.c): INVLPG,
/// INVPCID, and moves to CR3 and CR4. Keys of no model (the model's TLB is arm64's),
/// reported as the host's own counters would be: never compared.
const X86_KEYS: &[&str] = &[
    "arch.x86.invlpg",
    "arch.x86.invpcid",
    "arch.x86.cr3_write",
    "arch.x86.cr4_write",
];

/// The architectural counters a guest of `arch` always reports.
fn arch_keys(arch: Arch) -> &'static [&'static str] {
    match arch {
        Arch::Arm64 => ARCH_KEYS,
        Arch::X86_64 => X86_KEYS,
    }
}

/// Barriers and TLBIs in functions whose names carry one of these are the mm's (mm/,
/// arch/arm64/mm, the TLB flush helpers inlined into their callers); the rest
/// (interrupts, the scheduler, the console) go under `unattributed.`, not compared.
const MM_NAME_PARTS: &[&str] = &[
    "pte",
    "pmd",
    "pud",
    "p4d",
    "pgd",
    "tlb",
    "mmu",
    "folio",
    "page",
    "vma",
    "vmi",
    "zap",
    "unmap",
    "fault",
    "madvise",
    "mprotect",
    // change_protection (mm/mprotect.c): Debian's 7.0 inlines mprotect's
    // flush_tlb_range there, out of any function named above.
    "protection",
    "mlock",
    "huge",
    "thp",
    "collapse",
    "rmap",
    "anon",
    "contpte",
    "mm_",
    "_mm",
    "mmap",
    "shrink",
    "swap",
    "lru",
    "split",
    "dup_mm",
    "copy_p",
    "wp_",
    "reclaim",
    "free_pgtables",
    // arch/arm64/mm/pageattr.c: set_direct_map_*_noflush and update_range_prot, whose
    // inlined lazy-MMU leave issues a restored page's DSB ISHST + ISB in 7.3.
    "direct_map",
    "range_prot",
];

/// Functions that match `MM_NAME_PARTS` but are context switching (arch/arm64/mm's
/// ASID switch runs on every switch to a worker, which the runner's request/reply
/// causes): the scheduler's, not the workload's.
const NOT_MM: &[&str] = &["switch"];

fn is_mm(function: &str) -> bool {
    MM_NAME_PARTS.iter().any(|p| function.contains(p)) && !NOT_MM.iter().any(|p| function.contains(p))
}

/// The boot's measurements: total wall time, and per workload its report or error.
pub struct Batch {
    pub wall: Duration,
    /// Wall time per workload under QEMU (the host's clock, from the runner's start
    /// line to its result line; the guest's own clock counts instructions).
    pub guest: Vec<Duration>,
    pub reports: Vec<Result<Report, String>>,
    /// The boot's map_mem, when the plugin saw both its bounds.
    pub map_mem: Option<MapMem>,
    /// The programs' runs, after the workloads', in order.
    pub programs: Vec<ProgramRun>,
    /// The capabilities the guest's kernel detected on its CPU, as its log names them
    /// ("CPU features: detected: BBM Level 3"; tools/qemu/runner.c reads the log).
    pub cpu_features: Vec<String>,
}

/// The capability 7.3's cpufeature.c reports when it finds BBM Level 3
/// (BBML2_NOABORT): contpte_convert without its TLBI, the linear map in blocks.
pub const BBML3_FEATURE: &str = "BBM Level 3";

/// A static aarch64 program the runner runs after the workloads (its `program` job):
/// one that marks its own windows, as tools/seed004/bench.c does.
#[derive(Clone, Debug)]
pub struct Program {
    pub path: PathBuf,
    pub args: Vec<String>,
}

/// A program's run: its wait status, and each of its windows' counters (as an op's,
/// `window_counters`).
#[derive(Clone, Debug, serde::Serialize)]
pub struct ProgramRun {
    pub program: String,
    pub status: i32,
    pub windows: Vec<Counters>,
}

/// Pairs the programs' windows (those after the workloads') with their runs, from the
/// console's lines: a program announces its windows ("@@FOLIOLAB-PROGRAM-WINDOWS n"),
/// the runner its end ("@@FOLIOLAB-PROGRAM-STATUS s"). A program that announced none
/// has none.
fn program_runs(
    programs: &[Program],
    console: &str,
    windows: &[Window],
    counted: &[&str],
) -> Result<Vec<ProgramRun>, String> {
    let mut runs = Vec::new();
    let mut announced = 0;
    let mut next = windows.iter();
    for line in console.lines() {
        if let Some(n) = line.strip_prefix("@@FOLIOLAB-PROGRAM-WINDOWS ") {
            announced = n.trim().parse().map_err(|_| format!("bad program line {line:?}"))?;
        } else if let Some(st) = line.strip_prefix("@@FOLIOLAB-PROGRAM-STATUS ") {
            let p = programs
                .get(runs.len())
                .ok_or("the runner ran more programs than it was given")?;
            let mine: Vec<Counters> = next
                .by_ref()
                .take(announced)
                .map(|w| window_counters(w, counted, Arch::Arm64))
                .collect();
            if mine.len() != announced {
                return Err(format!(
                    "{} announced {announced} windows, the plugin saw {}",
                    p.path.display(),
                    mine.len()
                ));
            }
            runs.push(ProgramRun {
                program: std::iter::once(p.path.display().to_string())
                    .chain(p.args.iter().cloned())
                    .collect::<Vec<_>>()
                    .join(" "),
                status: st.trim().parse().map_err(|_| format!("bad program line {line:?}"))?,
                windows: mine,
            });
            announced = 0;
        }
    }
    if runs.len() != programs.len() || next.next().is_some() {
        return Err(format!(
            "the runner ended {} of {} programs, or the plugin saw windows no program announced",
            runs.len(),
            programs.len()
        ));
    }
    Ok(runs)
}

#[derive(Debug, thiserror::Error)]
pub enum QemuError {
    #[error("{0} (run scripts/setup-qemu)")]
    NotSetUp(String),
    #[error("{0}")]
    Run(String),
}

/// Where scripts/setup-qemu put the kernels, the plugin and the runner.
pub fn cache_dir() -> PathBuf {
    std::env::var_os("FOLIOLAB_QEMU_CACHE").map_or_else(|| "/var/cache/foliolab/qemu".into(), PathBuf::from)
}

/// The guest `--target` and `--image` name: `target`'s own kernel, or the image
/// (a build key or directory, whose page size must be the target's); None for the
/// host.
pub fn resolve(target: Target, image: Option<&str>) -> Result<Option<GuestKernel>, QemuError> {
    let Some(image) = image else {
        return Ok(target.guest_kernel());
    };
    if target == Target::Host {
        return Err(QemuError::Run(format!(
            "--image {image} runs under QEMU: give --target qemu-arm64 (or qemu-arm64-16k)"
        )));
    }
    if target.guest_kernel().is_some_and(|k| k.arch == Arch::X86_64) {
        return Err(QemuError::Run(format!(
            "--image {image}: built kernels are arm64; --target {} boots Debian's only",
            target.source()
        )));
    }
    let k = GuestKernel::image(image)?;
    if k.granule != target.granule() {
        return Err(QemuError::Run(format!(
            "--image {image} has {} pages, --target {} {}: give the target of its page size",
            k.granule.name(),
            target.source(),
            target.granule().name()
        )));
    }
    Ok(Some(k))
}

/// Why `target` cannot run here, if it cannot.
pub fn missing(target: Target) -> Option<String> {
    guest_missing(&target.guest_kernel()?)
}

/// Why `kernel` cannot boot here, if it cannot: QEMU, cpio, the plugin, the runner
/// or the kernel's own files missing.
pub fn guest_missing(kernel: &GuestKernel) -> Option<String> {
    let cache = cache_dir();
    for tool in [kernel.qemu().0, "cpio"] {
        let found = std::env::var_os("PATH").is_some_and(|p| std::env::split_paths(&p).any(|d| d.join(tool).is_file()));
        if !found {
            return Some(format!("{tool} is not installed"));
        }
    }
    ["plugin.so", kernel.runner()]
        .iter()
        .map(|f| cache.join(f))
        .find(|p| !p.is_file())
        .map(|p| format!("{} is missing", p.display()))
        .or_else(|| kernel.missing())
}

/// A workload's ops in execution order, repeats expanded.
fn steps<'w>(stmts: &'w [Stmt], out: &mut Vec<&'w Stmt>) {
    for s in stmts {
        match &s.op {
            Op::Repeat { n, body } => (0..*n).for_each(|_| steps(body, out)),
            _ => out.push(s),
        }
    }
}

/// The flattened workload for the guest runner (format in the module comment), its
/// regions `offset` bytes up from their workload addresses.
fn flatten(w: &Workload, granule: Granule, offset: u64, steps: &[&Stmt]) -> String {
    let mut s = String::new();
    let mut names = process_names(w);
    names.retain(|n| n != crate::workload::parse::MAIN);
    for n in std::iter::once(crate::workload::parse::MAIN).chain(names.iter().map(String::as_str)) {
        let _ = writeln!(s, "proc {n}");
    }
    for k in super::VMSTAT_KEYS {
        let _ = writeln!(s, "vmstat {k}");
    }
    for (k, v) in ThpKnobs::defaults(granule) {
        let _ = writeln!(s, "default {k} {v}");
    }
    // Process -> region -> (address, size), as the workers will have them.
    let mut regions: BTreeMap<&str, BTreeMap<&str, (u64, u64)>> = BTreeMap::new();
    for st in steps {
        let p = st.proc_name.as_str();
        let span =
            |regions: &BTreeMap<&str, BTreeMap<&str, (u64, u64)>>, r: &str, range: Option<crate::workload::Range>| {
                let (a, size) = regions.get(p).and_then(|m| m.get(r)).copied().unwrap_or((0, 0));
                range.map_or((a, size), |r| (a + r.off, r.len))
            };
        let line = match &st.op {
            Op::Set { knob, value } => format!("set {knob} {value}"),
            Op::Mark { label } => format!("mark {label}"),
            Op::Shrink => "shrink".into(),
            Op::Khugepaged => "khugepaged".into(),
            Op::Swapon { size } => format!("swapon {size:x}"),
            Op::Migrate {
                region, range, node, ..
            } => {
                let (a, len) = span(&regions, region, *range);
                format!("migrate {p} {a:x} {len:x} {node}")
            }
            Op::Thread { .. } | Op::ThreadsAll | Op::Cpu { .. } | Op::Memlimit { .. } => {
                unreachable!("{} is refused by run_batch_on", st.op.keyword())
            }
            Op::Mmap {
                region,
                size,
                hugepage,
                nohugepage,
                populate,
                ro,
                shared,
                secret,
                addr,
                ..
            } => {
                let addr = addr + offset;
                regions.entry(p).or_default().insert(region, (addr, *size));
                let f = |b: &bool| u8::from(*b);
                // `shared` goes last, and only when set: the runner reads a missing
                // field as 0, so every other line stays as it was. 2: memfd_secret.
                let shared = match (shared, secret) {
                    (_, true) => " 2",
                    (true, _) => " 1",
                    _ => "",
                };
                format!(
                    "mmap {p} {region} {addr:x} {size:x} {} {} {} {}{shared}",
                    f(hugepage),
                    f(nohugepage),
                    f(populate),
                    f(ro)
                )
            }
            Op::Touch {
                region,
                range,
                write,
                stride,
            } => {
                let (a, len) = span(&regions, region, *range);
                format!("touch {p} {a:x} {len:x} {} {stride:x}", u8::from(*write))
            }
            Op::Madvise {
                region,
                range,
                advice,
                step,
            } => {
                let (a, len) = span(&regions, region, Some(*range));
                let adv = advice.name();
                format!("madvise {p} {a:x} {len:x} {adv} {:x}", step.unwrap_or(len))
            }
            Op::Munmap { region, range } => {
                let (a, len) = span(&regions, region, *range);
                if range.is_none() {
                    regions.entry(p).or_default().remove(region.as_str());
                }
                format!("munmap {p} {region} {a:x} {len:x} {}", u8::from(range.is_none()))
            }
            Op::Mprotect { region, range, prot } => {
                let (a, len) = span(&regions, region, Some(*range));
                let prot = match prot {
                    Prot::None => "none",
                    Prot::R => "r",
                    Prot::Rw => "rw",
                };
                format!("mprotect {p} {a:x} {len:x} {prot}")
            }
            Op::Mremap { region, size, moves } => {
                let (a, old) = span(&regions, region, None);
                // The target in the guest's offset placement: the same slot half
                // rule, applied to the workload's own address.
                let to = if *moves { mremap_target(a - offset) + offset } else { a };
                regions.entry(p).or_default().insert(region, (to, *size));
                format!("mremap {p} {region} {a:x} {old:x} {to:x} {size:x}")
            }
            Op::Mlock { region, range } | Op::Munlock { region, range } => {
                let (a, len) = span(&regions, region, *range);
                format!("{} {p} {a:x} {len:x}", st.op.keyword())
            }
            Op::Fork { child } => {
                let copy = regions.get(p).cloned().unwrap_or_default();
                regions.insert(child, copy);
                format!("fork {p} {child}")
            }
            Op::Exit => format!("exit {p}"),
            Op::Repeat { .. } => unreachable!("repeats are expanded"),
        };
        let _ = writeln!(s, "step {line}");
    }
    s
}

fn process_names(w: &Workload) -> Vec<String> {
    let mut all = Vec::new();
    steps(&w.stmts, &mut all);
    let mut names: Vec<String> = std::iter::once(crate::workload::parse::MAIN.to_string())
        .chain(all.iter().filter_map(|s| match &s.op {
            Op::Fork { child } => Some(child.clone()),
            _ => None,
        }))
        .collect();
    names.sort();
    names.dedup();
    names
}

/// The plugin's counts for one op window: `(event, function) -> count` (signed: an
/// exit's window is its own less its twin's, the runner's own teardown).
type Window = BTreeMap<(String, String), i64>;

/// The op windows in order, and the boot's map_mem window (lines labelled `boot`).
fn parse_windows(text: &str) -> Result<(Vec<Window>, Option<Window>), String> {
    let mut windows = Vec::new();
    let mut boot = None;
    let mut cur = Window::new();
    for line in text.lines() {
        let f: Vec<&str> = line.split(' ').collect();
        match f[..] {
            ["boot", "end"] => boot = Some(std::mem::take(&mut cur)),
            [_, "end"] => windows.push(std::mem::take(&mut cur)),
            ["windows", _, "errors", "0"] => {}
            ["windows", _, "errors", e] => return Err(format!("plugin saw {e} unpaired window markers")),
            [_, event, function, n] => {
                let n: i64 = n.parse().map_err(|_| format!("plugin output: bad line {line:?}"))?;
                *cur.entry((event.to_string(), function.to_string())).or_default() += n;
            }
            _ => return Err(format!("plugin output: bad line {line:?}")),
        }
    }
    Ok((windows, boot))
}

/// What the guest kernel's map_mem did at boot, from the plugin's boot window: every
/// TLBI, DSB and ISB between map_mem's first and last calls (`GuestKernel::map_mem_bounds`),
/// with the model's names (`arch.tlbi.<kind>`, `arch.tlbi.total`, `arch.dsb.<option>`,
/// `arch.isb`), the instructions (`kernel.insns`, `kernel.insns.<function>`: see
/// `add_insns`), and the TLBIs by the function that issued them.
#[derive(Clone, Debug, Default, PartialEq, Eq, serde::Serialize)]
pub struct MapMem {
    pub counters: Counters,
    pub tlbi_by_function: BTreeMap<String, i64>,
    /// The kernel image's linear alias, which map_mem maps apart from the banks:
    /// [_text, __init_begin), /proc/iomem's "Kernel code".
    pub kernel_code: Option<(u64, u64)>,
    /// [_sdata, _end), /proc/iomem's "Kernel data": 7.3's map_mem maps its data and
    /// bss, [__init_end = _sdata, __bss_stop), second.
    pub kernel_data: Option<(u64, u64)>,
}

/// The range of the guest's /proc/iomem line named `what` ("Kernel code", "Kernel
/// data"), end exclusive.
fn iomem_range(console: &str, what: &str) -> Option<(u64, u64)> {
    console.lines().find_map(|l| {
        let (range, name) = l.strip_prefix("@@FOLIOLAB-IOMEM ")?.split_once(" : ")?;
        if name.trim() != what {
            return None;
        }
        let (a, b) = range.trim().split_once('-')?;
        Some((u64::from_str_radix(a, 16).ok()?, u64::from_str_radix(b, 16).ok()? + 1))
    })
}

/// The window's kernel-mode instructions, and the prefix of their per-function keys.
pub const INSNS_KEY: &str = "kernel.insns";
/// The window's user-mode instructions (every process's).
pub const USER_INSNS_KEY: &str = "user.insns";

/// Whether `key` is an instruction count, which only the guest measures.
pub fn is_insns(key: &str) -> bool {
    key == INSNS_KEY || key == USER_INSNS_KEY || insns_function(key).is_some()
}

/// The function of a `kernel.insns.<function>` key.
pub fn insns_function(key: &str) -> Option<&str> {
    key.strip_prefix(INSNS_KEY)?.strip_prefix('.')
}

/// Adds `n` of the plugin's `event` in `function` to `c` if it is an instruction count
/// (guest-only counters; the model counts no instructions): `insns` to `kernel.insns`
/// and `kernel.insns.<function>` (the instructions whose PC lies in the function's
/// symbol, so an inlined function counts under its caller, and a compiler's clone such
/// as `<function>.constprop.0` under its own name), `user.insns` to `user.insns`. They
/// are the instructions QEMU ran, counted per translation block: an instruction that
/// faults makes the rest of its block count again when it runs after the fault
/// (tools/qemu/plugin.c).
fn add_insns(c: &mut Counters, event: &str, function: &str, n: i64) -> bool {
    let keys = match event {
        "insns" => vec![INSNS_KEY.to_string(), format!("{INSNS_KEY}.{function}")],
        "user.insns" => vec![USER_INSNS_KEY.to_string()],
        _ => return false,
    };
    for k in keys {
        *c.entry(k).or_default() += n;
    }
    true
}

fn map_mem_counters(w: &Window) -> MapMem {
    let mut m = MapMem::default();
    for ((event, function), &n) in w {
        if add_insns(&mut m.counters, event, function, n) {
            continue;
        }
        if event.starts_with("tlbi.") {
            *m.counters.entry("arch.tlbi.total".into()).or_default() += n;
            *m.tlbi_by_function.entry(function.clone()).or_default() += n;
        }
        *m.counters.entry(format!("arch.{event}")).or_default() += n;
    }
    m
}

/// A window's counters: `arch.*` for the mm's TLBIs and barriers (with the model's
/// names), `unattributed.arch.*` for the rest, `kernel.<function>` for entries, and
/// the instructions (`add_insns`) of every function, the mm's or not.
/// `counted` are the `KERNEL_FUNCTIONS` the guest's kernel has.
fn window_counters(w: &Window, counted: &[&str], arch: Arch) -> Counters {
    // Instructions uncounted (FOLIOLAB_QEMU_INSNS=off) are absent, not zero.
    let insns: &[&str] = if count_insns() {
        &[INSNS_KEY, USER_INSNS_KEY]
    } else {
        &[]
    };
    let mut c: Counters = arch_keys(arch)
        .iter()
        .chain(insns)
        .map(|k| (k.to_string(), 0))
        .collect();
    c.extend(counted.iter().map(|f| (format!("kernel.{f}"), 0)));
    for ((event, function), &n) in w {
        if add_insns(&mut c, event, function, n) {
            continue;
        }
        let key = if event == "call" {
            format!("kernel.{function}")
        } else if is_mm(function) {
            if event.starts_with("tlbi.") {
                *c.entry("arch.tlbi.total".into()).or_default() += n;
            }
            format!("arch.{event}")
        } else {
            format!("unattributed.arch.{event}")
        };
        *c.entry(key).or_default() += n;
    }
    c
}

/// `[step, minflt, runner, windows, [deltas], [diagnostics]]`: one op's result from
/// the guest; `windows` is how many plugin windows it took (an exit's twin has one).
type OpResult = (usize, i64, i64, usize, Vec<i64>, Vec<String>);

/// The guest's idle window after the last op (tools/qemu/runner.c's background()).
#[derive(serde::Deserialize)]
struct GuestBackground {
    op_ms: f64,
    window_ms: f64,
    deltas: Vec<i64>,
}

/// One workload's result line from the guest runner.
#[derive(serde::Deserialize)]
struct GuestResult {
    #[serde(default)]
    keys: Vec<String>,
    #[serde(default)]
    missing: Vec<String>,
    #[serde(default)]
    ops: Vec<OpResult>,
    background: Option<GuestBackground>,
    #[serde(default)]
    layout: BTreeMap<String, Vec<Run>>,
    layout_error: Option<String>,
    error: Option<String>,
}

/// Builds a report as src/native does: totals and per-phase deltas of every op.
/// `counted`: the `KERNEL_FUNCTIONS` the guest's kernel has (the others are inlined
/// there, or came later, and are reported unavailable).
fn report(
    w: &Workload,
    source: &str,
    steps: &[&Stmt],
    g: GuestResult,
    windows: &[Window],
    counted: &[&str],
    arch: Arch,
) -> Result<Report, String> {
    let at = |s: &Stmt| format!("{}:{}:{}", w.path, s.pos.line, s.pos.col);
    if let Some(e) = &g.error {
        let step: Option<usize> = e.strip_prefix("step ").and_then(|r| r.split(' ').next()?.parse().ok());
        let stmt = step.and_then(|i| steps.get(i));
        // The runner's `set` failed for want of the sysfs file: no such knob here.
        let knob = stmt.and_then(|s| match &s.op {
            Op::Set { knob, .. } if e.ends_with("No such file or directory") => Some(knob),
            _ => None,
        });
        return Err(match (stmt, knob) {
            (Some(s), Some(knob)) => format!(
                "{NOT_APPLICABLE}{source}: its kernel has no /sys/kernel/mm/transparent_hugepage/{knob} (set at {})",
                at(s)
            ),
            // The workload's settings stopped the thread on this kernel (6.12 collapses
            // to the PMD size only): there is no scan to compare.
            (Some(s), None) if matches!(s.op, Op::Khugepaged) && e.ends_with(KHUGEPAGED_OFF) => {
                format!("{NOT_APPLICABLE}{source}: {KHUGEPAGED_OFF} ({})", at(s))
            }
            // No zram0 after the modules the cache has were loaded: neither built in
            // nor a module of it there (scripts/setup-qemu: Debian's 7.0.x and 7.1.x
            // modules are gone from the archive), so nothing to swap to.
            (Some(s), None)
                if matches!(s.op, Op::Swapon { .. })
                    && e.contains(NO_ZRAM)
                    && e.ends_with("No such file or directory") =>
            {
                format!("{NOT_APPLICABLE}{source}: its kernel has no zram ({e}, at {})", at(s))
            }
            // memfd_secret(2) off: before 6.5 (b758fe6df50d, "mm/secretmem: make it on
            // by default") it needs secretmem.enable=y on the command line, which the
            // guests boot without, as the distribution's kernel ships.
            (Some(s), None)
                if matches!(s.op, Op::Mmap { secret: true, .. }) && e.ends_with("Function not implemented") =>
            {
                format!(
                    "{NOT_APPLICABLE}{source}: its kernel has memfd_secret off (ENOSYS: off by default before 6.5, \
                     b758fe6df50d; secretmem.enable=y turns it on), at {}",
                    at(s)
                )
            }
            (Some(s), None) => format!("{}: {e}", at(s)),
            (None, _) => format!("{}: {e}", w.path),
        });
    }
    let mut keys: Vec<String> = process_names(w).iter().map(|n| format!("proc.{n}.minflt")).collect();
    keys.push(super::RUNNER_KEY.into());
    keys.extend(g.keys.iter().cloned());
    let zero = |extra: &Counters| -> Counters {
        let mut c: Counters = keys.iter().map(|k| (k.clone(), 0)).collect();
        c.extend(extra.keys().map(|k| (k.clone(), 0)));
        c
    };
    // Each op's windows: a fork's or an exit's second less its first (the twin's: the
    // runner's own memory); the background's window follows the last op.
    let mut next = windows.iter();
    let mut per_window: Vec<Counters> = Vec::new();
    for op in &g.ops {
        let mut mine: Vec<&Window> = next.by_ref().take(op.3).collect();
        let own = mine.pop().ok_or("the plugin has no window for an op")?;
        let mut w = own.clone();
        for twin in mine {
            for (k, n) in twin {
                *w.entry(k.clone()).or_default() -= n;
            }
        }
        per_window.push(window_counters(&w, counted, arch));
    }
    let idle = g
        .background
        .as_ref()
        .and_then(|_| next.next())
        .map(|w| window_counters(w, counted, arch));
    let mut all_keys = Counters::new();
    for c in &per_window {
        all_keys.extend(c.keys().map(|k| (k.clone(), 0)));
    }
    let mut totals = zero(&all_keys);
    // No time_ns: a TCG guest's wall time says nothing about a real machine's.
    let mut phases = vec![Phase {
        label: "start".into(),
        counters: zero(&all_keys),
        time_ns: None,
    }];
    let mut diagnostics = Vec::new();
    let mut ops = g.ops.iter().zip(&per_window).peekable();
    for (i, s) in steps.iter().enumerate() {
        if let Op::Mark { label } = &s.op {
            phases.push(Phase {
                label: label.clone(),
                counters: zero(&all_keys),
                time_ns: None,
            });
            continue;
        }
        let Some(((step, minflt, runner, _, deltas, diags), win)) = ops.next_if(|((step, ..), _)| *step == i) else {
            return Err(format!("{}: the guest reported no result for this op", at(s)));
        };
        debug_assert_eq!(*step, i);
        diagnostics.extend(diags.iter().map(|d| format!("{}: {d}", at(s))));
        let proc_key = format!("proc.{}.minflt", s.proc_name);
        let moved = g
            .keys
            .iter()
            .zip(deltas)
            .map(|(k, d)| (k.clone(), *d))
            .chain([(proc_key, *minflt), (super::RUNNER_KEY.to_string(), *runner)])
            .chain(win.iter().map(|(k, v)| (k.clone(), *v)));
        let phase = &mut phases.last_mut().expect("a phase").counters;
        for (k, d) in moved {
            *totals.entry(k.clone()).or_default() += d;
            *phase.entry(k).or_default() += d;
        }
    }
    let mut unavailable: BTreeMap<String, String> = g
        .missing
        .iter()
        .map(|k| (k.clone(), "not in the guest's /proc/vmstat".into()))
        .collect();
    if let Some(e) = g.layout_error {
        unavailable.insert("layout".into(), e);
    }
    for f in KERNEL_FUNCTIONS.iter().filter(|f| !counted.contains(f)) {
        unavailable.insert(
            format!("kernel.{f}"),
            "not a function of the guest's kernel (inlined there, or later than it)".into(),
        );
    }
    // What moved while the workload sat idle: the guest's own background, measured as
    // the host's is. The runner's memory takes no large folios, so a shrink splits
    // the workload's folios alone (unlike drop_caches on the host).
    let background = g.background.map(|b| Background {
        op_ms: b.op_ms,
        window_ms: b.window_ms,
        counters: g
            .keys
            .iter()
            .cloned()
            .zip(b.deltas)
            .chain(idle.into_iter().flatten())
            .filter(|(_, d)| *d != 0)
            .collect(),
        shrink: false,
        // The guest has no other processes for the scan to collapse, or holding
        // folios.
        ..Default::default()
    });
    Ok(Report {
        source: source.into(),
        workload: w.path.clone(),
        variants: BTreeMap::new(),
        counters: totals,
        phases,
        layout: g.layout,
        unavailable,
        diagnostics,
        runner_notes: Vec::new(),
        background,
    })
}

/// Runs `workloads` in one boot of `target`'s kernel, a 2G guest.
pub fn run_batch(target: Target, workloads: &[Workload]) -> Result<Batch, QemuError> {
    run_guest(&debian(target)?, workloads)
}

/// Runs `workloads` in one boot of `kernel`, a 2G guest.
pub fn run_guest(kernel: &GuestKernel, workloads: &[Workload]) -> Result<Batch, QemuError> {
    run_batch_on(kernel, workloads, 2 << 30, &[])
}

/// Runs `programs` in one boot of `kernel`, a 2G guest.
pub fn run_programs(kernel: &GuestKernel, programs: &[Program]) -> Result<Vec<ProgramRun>, QemuError> {
    Ok(run_batch_on(kernel, &[], 2 << 30, programs)?.programs)
}

/// Boots `kernel` with `ram` bytes of RAM and no workload: what its map_mem did
/// (the default rodata=full).
pub fn boot_map_mem(kernel: &GuestKernel, ram: u64) -> Result<MapMem, QemuError> {
    if kernel.map_mem_bounds().is_none() {
        return Err(QemuError::Run(format!(
            "{}: no map_mem to measure (the model's linear map is arm64's)",
            kernel.source
        )));
    }
    run_batch_on(kernel, &[], ram, &[])?
        .map_mem
        .ok_or_else(|| QemuError::Run("the plugin saw no map_mem window at boot".into()))
}

/// Whether the plugin counts instructions: yes unless `FOLIOLAB_QEMU_INSNS=off`, which
/// measures what counting costs (the guide's built-kernels chapter); the reports then
/// have no `kernel.insns` or `user.insns` keys.
fn count_insns() -> bool {
    std::env::var("FOLIOLAB_QEMU_INSNS").map_or(true, |v| v != "off")
}

/// `target`'s Debian kernel.
fn debian(target: Target) -> Result<GuestKernel, QemuError> {
    target
        .guest_kernel()
        .ok_or_else(|| QemuError::Run("the host is not a QEMU target".into()))
}

/// QEMU's options for GUEST_NODES NUMA nodes sharing `ram` evenly, the one vCPU on
/// node 0.
fn numa_args(ram: u64) -> Vec<String> {
    let per = (ram / GUEST_NODES as u64) >> 20;
    let mut args = Vec::new();
    for n in 0..GUEST_NODES {
        args.push("-object".into());
        args.push(format!("memory-backend-ram,id=m{n},size={per}M"));
        args.push("-numa".into());
        args.push(match n {
            0 => format!("node,nodeid=0,cpus=0,memdev=m{n}"),
            _ => format!("node,nodeid={n},memdev=m{n}"),
        });
    }
    args
}

/// `run_batch` on a guest of `ram` bytes, then `programs`.
fn run_batch_on(
    kernel: &GuestKernel,
    workloads: &[Workload],
    ram: u64,
    programs: &[Program],
) -> Result<Batch, QemuError> {
    let (source, granule) = (kernel.source.as_str(), kernel.granule);
    if let Some(why) = guest_missing(kernel) {
        return Err(QemuError::NotSetUp(why));
    }
    if kernel.arch != Arch::Arm64 && !programs.is_empty() {
        return Err(QemuError::Run(format!(
            "{source} runs workloads only: --program takes a static aarch64 program"
        )));
    }
    for w in workloads {
        if let Some(s) = crate::workload::model_only(&w.stmts).or_else(|| memlimit(&w.stmts)) {
            return Err(QemuError::Run(format!(
                "{}:{}:{}: '{}' does not run on the QEMU targets",
                w.path,
                s.pos.line,
                s.pos.col,
                s.op.keyword()
            )));
        }
    }
    let cache = cache_dir();
    let run_err = |what: &str, e: std::io::Error| QemuError::Run(format!("{what}: {e}"));
    // One directory per batch: a process may boot several guests at once (tests).
    static BATCHES: std::sync::atomic::AtomicU32 = std::sync::atomic::AtomicU32::new(0);
    let n = BATCHES.fetch_add(1, std::sync::atomic::Ordering::Relaxed);
    let dir = std::env::temp_dir().join(format!("foliolab-qemu-{}-{n}", std::process::id()));
    std::fs::create_dir_all(dir.join("root/w")).map_err(|e| run_err("temporary directory", e))?;
    let all_steps: Vec<Vec<&Stmt>> = workloads
        .iter()
        .map(|w| {
            let mut v = Vec::new();
            steps(&w.stmts, &mut v);
            v
        })
        .collect();
    // The memory map first: map_mem's kernel image range is its "Kernel code".
    let mut jobs = String::from("iomem\n");
    let mut files = vec!["init".to_string(), "jobs".to_string(), "w".to_string()];
    for (i, (w, st)) in workloads.iter().zip(&all_steps).enumerate() {
        let name = format!("w/{i}");
        std::fs::write(
            dir.join("root").join(&name),
            flatten(w, granule, kernel.va_offset(), st),
        )
        .map_err(|e| run_err("workload", e))?;
        let _ = writeln!(jobs, "workload /{name}");
        files.push(name);
    }
    for (i, p) in programs.iter().enumerate() {
        let name = format!("p{i}");
        std::fs::copy(&p.path, dir.join("root").join(&name)).map_err(|e| run_err(&p.path.display().to_string(), e))?;
        let _ = writeln!(jobs, "program /{name} {}", p.args.join(" "));
        files.push(name);
    }
    std::fs::write(dir.join("root/jobs"), jobs).map_err(|e| run_err("jobs", e))?;
    // zram and the modules it needs, in load order, for a `swapon` (none where zram
    // is built in: the runner finds /modules empty).
    let mut names: Vec<String> = match &kernel.modules {
        Some(modules) => std::fs::read_dir(modules)
            .map_err(|e| QemuError::NotSetUp(format!("{}: {e}", modules.display())))?
            .filter_map(|e| e.ok().map(|e| e.file_name().to_string_lossy().into_owned()))
            .collect(),
        None => Vec::new(),
    };
    names.sort();
    std::fs::create_dir_all(dir.join("root/modules")).map_err(|e| run_err("modules", e))?;
    files.push("modules".into());
    for n in names {
        let modules = kernel.modules.as_ref().expect("names come from the modules");
        std::fs::copy(modules.join(&n), dir.join("root/modules").join(&n)).map_err(|e| run_err("modules", e))?;
        files.push(format!("modules/{n}"));
    }
    std::fs::copy(cache.join(kernel.runner()), dir.join("root/init")).map_err(|e| run_err("runner", e))?;
    let initrd = dir.join("initrd.cpio");
    cpio(&dir.join("root"), &files, &initrd)?;
    let syms = dir.join("syms");
    let counted = write_syms(&kernel.kallsyms(&dir)?, &syms, kernel.map_mem_bounds())?;
    let counted: Vec<&str> = counted.iter().map(String::as_str).collect();
    let counts = dir.join("counts");
    let file = |name: &str| std::fs::File::create(dir.join(name)).map_err(|e| run_err(name, e));
    // A batch that migrates boots a guest with GUEST_NODES nodes; others keep one.
    let numa = if workloads.iter().any(|w| !w.migrates().is_empty()) {
        numa_args(ram)
    } else {
        Vec::new()
    };
    let start = Instant::now();
    let (qemu_bin, machine, console) = kernel.qemu();
    let mut qemu = Command::new(qemu_bin);
    qemu.args(machine)
        .args(["-smp", "1", "-m", &format!("{}M", ram >> 20)])
        .args(&numa)
        .args([
            "-nographic",
            "-no-reboot",
            // The guest's clock counts instructions (one per nanosecond), and idles
            // without sleeping: its timer interrupts, and so any preemption of the
            // work inside a window (a zap breaking for need_resched re-reads a pte),
            // fall at the same instructions on every run, whatever the host's load.
            "-icount",
            "shift=0,sleep=off",
            // The guest's randomness from a fixed seed, not the host's entropy: QEMU's
            // RNDR (FEAT_RNG of -cpu max) and the device tree's rng-seed seed the
            // kernel's, which places its allocations (page shuffling, slab freelists)
            // and so moves the instructions a window counts from boot to boot.
            "-seed",
            "1",
            // The wall clock from a fixed date, advancing with the guest's clock, not
            // the host's: a kernel with the PL031 driver (Debian's) sets its time from
            // it at boot, and setting the time mixes it into the entropy pool.
            "-rtc",
            "base=2024-01-01T00:00:00,clock=vm",
        ])
        .arg("-kernel")
        .arg(&kernel.image)
        .arg("-initrd")
        .arg(&initrd)
        // nokaslr: the kallsyms addresses hold; norandmaps: the runner's own
        // mappings sit at the same addresses on every boot. damon_stat.enabled=N:
        // DAMON_STAT (Debian's 7.2 and 7.3 start it at boot) has kdamond sample
        // random physical pages, each under a folio reference and the anon_vma's
        // read lock; an exit contending for that lock wakes the SCHED_FIFO runner
        // with kdamond's reference still held, so the next reuse check copies
        // (fork_pmd_thp on 7.2, decided by the boot's random numbers).
        .arg("-append")
        .arg(format!(
            "{console} rdinit=/init quiet nokaslr norandmaps damon_stat.enabled=N"
        ))
        .arg("-plugin")
        .arg(format!(
            "file={},syms={},out={}{}",
            cache.join("plugin.so").display(),
            syms.display(),
            counts.display(),
            if count_insns() { "" } else { ",insns=off" }
        ))
        .stdin(std::process::Stdio::null())
        .stdout(std::process::Stdio::piped())
        .stderr(file("stderr")?);
    // The guest dies with the thread that starts it and waits for it below: a foliolab
    // killed mid-batch (SIGKILL, or a SIGTERM outside a host run's handler) leaves no
    // QEMU running on, busy on a CPU until its batch would have ended.
    // (A parent gone before the prctl is seen by getppid.)
    let parent = std::process::id() as libc::pid_t;
    // SAFETY: prctl and getppid are async-signal-safe and touch no memory of ours.
    unsafe {
        std::os::unix::process::CommandExt::pre_exec(&mut qemu, move || {
            if libc::prctl(libc::PR_SET_PDEATHSIG, libc::SIGKILL) != 0 || libc::getppid() != parent {
                return Err(std::io::Error::other("foliolab exited before its guest started"));
            }
            Ok(())
        });
    }
    let mut qemu = qemu.spawn().map_err(|e| run_err(qemu_bin, e))?;
    // The console, read as it comes, with the time each workload started and ended.
    let stdout = qemu.stdout.take().expect("piped stdout");
    let reader = std::thread::spawn(move || {
        use std::io::BufRead;
        let mut console = String::new();
        let mut walls = Vec::new();
        let mut started = None;
        for line in std::io::BufReader::new(stdout).split(b'\n').map_while(Result::ok) {
            let line = String::from_utf8_lossy(&line).replace('\r', "");
            if line.starts_with("@@FOLIOLAB-START") {
                started = Some(Instant::now());
            } else if line.starts_with("@@FOLIOLAB-RESULT ") {
                walls.push(started.take().map_or(Duration::ZERO, |t| t.elapsed()));
            }
            console.push_str(&line);
            console.push('\n');
        }
        (console, walls)
    });
    let limit = boot_limit(&all_steps) + PROGRAM_LIMIT * programs.len() as u32;
    let pid = qemu.id();
    let status = loop {
        match qemu.try_wait().map_err(|e| run_err(qemu_bin, e))? {
            Some(status) => break Some(status),
            None if cpu_time(pid).unwrap_or_else(|| start.elapsed()) > limit
                || start.elapsed() > limit * WALL_PER_CPU_LIMIT =>
            {
                let _ = qemu.kill();
                let _ = qemu.wait();
                break None;
            }
            None => std::thread::sleep(Duration::from_millis(50)),
        }
    };
    let wall = start.elapsed();
    let (console, walls) = reader.join().unwrap_or_default();
    let stderr = String::from_utf8_lossy(&std::fs::read(dir.join("stderr")).unwrap_or_default()).into_owned();
    let plugin = std::fs::read_to_string(&counts).unwrap_or_default();
    let keep = std::env::var_os("FOLIOLAB_QEMU_KEEP").is_some();
    if keep {
        let _ = std::fs::write(dir.join("console"), &console);
    }
    if !keep {
        let _ = std::fs::remove_dir_all(&dir);
    }
    if !console.contains("@@FOLIOLAB-END") {
        let tail: String = console
            .lines()
            .rev()
            .take(20)
            .collect::<Vec<_>>()
            .into_iter()
            .rev()
            .collect::<Vec<_>>()
            .join("\n");
        let how = match status {
            Some(s) => format!("qemu {s}"),
            None => format!(
                "killed after {} s of QEMU's CPU time, the limit for this batch ({} s wall)",
                limit.as_secs(),
                wall.as_secs()
            ),
        };
        return Err(QemuError::Run(format!(
            "the guest did not finish ({how}); its console ended with:\n{tail}\n{stderr}"
        )));
    }
    let (windows, boot) = parse_windows(&plugin).map_err(QemuError::Run)?;
    let results: Vec<&str> = console
        .lines()
        .filter_map(|l| l.strip_prefix("@@FOLIOLAB-RESULT "))
        .collect();
    if results.len() != workloads.len() {
        return Err(QemuError::Run(format!(
            "the guest reported {} results for {} workloads",
            results.len(),
            workloads.len()
        )));
    }
    let mut used = 0;
    let mut reports = Vec::new();
    for ((w, st), line) in workloads.iter().zip(&all_steps).zip(results) {
        let g: GuestResult = match serde_json::from_str(line) {
            Ok(g) => g,
            Err(e) => {
                reports.push(Err(format!("{}: the guest's result: {e}", w.path)));
                continue;
            }
        };
        // The op that failed had its window too, and the idle one follows the last op.
        let n = g.ops.iter().map(|o| o.3).sum::<usize>()
            + usize::from(g.error.is_some() && g.ops.len() < st.len())
            + usize::from(g.background.is_some());
        let mine = windows.get(used..used + n).unwrap_or(&[]);
        used += n;
        reports.push(report(w, source, st, g, mine, &counted, kernel.arch));
    }
    let programs =
        program_runs(programs, &console, windows.get(used..).unwrap_or(&[]), &counted).map_err(QemuError::Run)?;
    let program_windows: usize = programs.iter().map(|p| p.windows.len()).sum();
    if used + program_windows != windows.len() {
        return Err(QemuError::Run(format!(
            "the plugin saw {} op windows, the runner ran {used} ops",
            windows.len()
        )));
    }
    Ok(Batch {
        wall,
        guest: walls,
        reports,
        map_mem: boot.as_ref().map(|b| MapMem {
            kernel_code: iomem_range(&console, "Kernel code"),
            kernel_data: iomem_range(&console, "Kernel data"),
            ..map_mem_counters(b)
        }),
        programs,
        cpu_features: console
            .lines()
            .filter_map(|l| l.strip_prefix("@@FOLIOLAB-CPUFEATURE "))
            .map(|f| f.trim().to_string())
            .collect(),
    })
}

/// The work a fork or an exit does once per mm, whatever it maps, as the model counts
/// it: its `arch.*` and `kernel.*` counters for a fork and for an exit of a process
/// with no memory, the exit's with the flush_tlb_mm that tlb_finish_mmu issues for
/// any mm whose teardown freed page tables (the twin's did). That flush is the only
/// TLB work of the empty fork (dup_mmap's, beside the pgd allocation). The guest's
/// twin windows subtract this from the guest's side along with the runner's own
/// memory, so the model's side leaves it out too.
fn per_mm_work(v: &crate::sim::Variants) -> Result<[Counters; 2], String> {
    let w = crate::workload::parse_str("(per-mm work)", "mark fork\nfork twin\nmark exit\n@twin exit\n")
        .map_err(|e| e.to_string())?;
    let r = crate::sim::run(&w, v).map_err(|e| e.to_string())?;
    let phase = |label: &str| -> Counters {
        r.phases
            .iter()
            .find(|p| p.label == label)
            .map(|p| p.counters.clone())
            .unwrap_or_default()
            .into_iter()
            .filter(|(k, _)| k.starts_with("arch.") || k.starts_with("kernel."))
            .collect()
    };
    let fork = phase("fork");
    let mut exit = phase("exit");
    for (k, n) in fork
        .iter()
        .filter(|(k, _)| k.starts_with("arch.tlbi.") || k.starts_with("arch.dsb."))
    {
        *exit.entry(k.clone()).or_default() += n;
    }
    Ok([fork, exit])
}

/// The model's report as the guest measures it: less the per-mm work of each fork
/// and exit (`per_mm_work`), in the totals and in the phase each op ran in.
pub fn as_guest_measures(mut r: Report, w: &Workload, v: &crate::sim::Variants) -> Result<Report, String> {
    let mut all = Vec::new();
    steps(&w.stmts, &mut all);
    if !all.iter().any(|s| matches!(s.op, Op::Fork { .. } | Op::Exit)) {
        return Ok(r);
    }
    let [fork, exit] = per_mm_work(v)?;
    let mut phase = 0;
    for s in all {
        let less = match &s.op {
            Op::Mark { .. } => {
                phase += 1;
                continue;
            }
            Op::Fork { .. } => &fork,
            Op::Exit => &exit,
            _ => continue,
        };
        for (k, n) in less {
            *r.counters.entry(k.clone()).or_default() -= n;
            if let Some(p) = r.phases.get_mut(phase) {
                *p.counters.entry(k.clone()).or_default() -= n;
            }
        }
    }
    // An exit that owed a batched flush: its twin owed and did the same flush_tlb_mm.
    let owed = |c: &Counters| c.get("kernel.exit_mmap.batched_pending").copied().unwrap_or(0);
    if r.phases.iter().any(|p| owed(&p.counters) > 0) {
        let flush = batched_pending_flush(v);
        for p in &mut r.phases {
            let n = owed(&p.counters);
            for (k, m) in &flush {
                *p.counters.entry(k.clone()).or_default() -= n * m;
                *r.counters.entry(k.clone()).or_default() -= n * m;
            }
        }
    }
    Ok(r)
}

/// The work flush_tlb_batched_pending does for an mm that owes a batched flush, beyond
/// its call: flush_tlb_mm under `v`'s variants.
fn batched_pending_flush(v: &crate::sim::Variants) -> Counters {
    let mut k = crate::sim::boot_kernel(v);
    let mm = k.mm_alloc().expect("a fresh machine has memory for an mm");
    k.mm_mut(mm).tlb_flush_pending = 1;
    let (mut before, mut after) = (Counters::new(), Counters::new());
    crate::sim::kernel_counters(&k, &mut before);
    k.flush_tlb_batched_pending(mm);
    crate::sim::kernel_counters(&k, &mut after);
    let mut d: Counters = after
        .into_iter()
        .filter(|(key, _)| key.starts_with("arch.") || key.starts_with("kernel."))
        .map(|(key, n)| {
            let b = before.get(&key).copied().unwrap_or(0);
            (key, n - b)
        })
        .filter(|(_, n)| *n != 0)
        .collect();
    d.remove("kernel.flush_tlb_batched_pending");
    d
}

/// How long a program may run (seed 004's benchmark runs about a minute under TCG).
const PROGRAM_LIMIT: Duration = Duration::from_secs(1200);

/// The CPU time QEMU (`pid`) has used, user and system: what `boot_limit` bounds, so
/// that a host busy with other work slows a guest without failing it (a hung guest
/// still spins: `-icount sleep=off` never idles the host CPU).
fn cpu_time(pid: u32) -> Option<Duration> {
    let stat = std::fs::read_to_string(format!("/proc/{pid}/stat")).ok()?;
    // The fields after the command's closing parenthesis: utime and stime are 14 and 15.
    let mut f = stat.rsplit_once(')')?.1.split_whitespace().skip(11);
    let ticks: u64 = f.next()?.parse::<u64>().ok()? + f.next()?.parse::<u64>().ok()?;
    // SAFETY: sysconf reads a constant of the running system; no memory is involved.
    let hz = unsafe { libc::sysconf(libc::_SC_CLK_TCK) };
    (hz > 0).then(|| Duration::from_millis(ticks * 1000 / hz as u64))
}

/// A backstop for a QEMU that stops without spinning: the batch's wall time may be
/// this many times its CPU-time limit.
const WALL_PER_CPU_LIMIT: u32 = 8;

/// How much of QEMU's CPU time a batch may take before the guest is taken to hang:
/// the boot, plus a second per workload and per thousand ops, times ten (TCG on an
/// idle host boots in 7-11 s and runs the whole validation suite in about two minutes).
fn boot_limit(steps: &[Vec<&Stmt>]) -> Duration {
    let ops: usize = steps.iter().map(Vec::len).sum();
    Duration::from_secs(10 * (15 + steps.len() as u64 + ops as u64 / 1000))
}

/// The plugin's symbol file: every text symbol, `*` before the counted functions,
/// `<` and `>` before the boot window's bounds. Returns the `KERNEL_FUNCTIONS` (and
/// probe functions) the kernel has.
fn write_syms(kallsyms: &Path, out: &Path, bounds: Option<(&str, &str)>) -> Result<Vec<String>, QemuError> {
    let (open, close) = bounds.map_or((None, None), |(o, c)| (Some(o), Some(c)));
    let probes = probe_functions();
    let text =
        std::fs::read_to_string(kallsyms).map_err(|e| QemuError::NotSetUp(format!("{}: {e}", kallsyms.display())))?;
    let mut s = String::with_capacity(text.len());
    let mut counted = Vec::new();
    for line in text.lines() {
        let Some((addr, name)) = line.split_once(' ') else {
            continue;
        };
        let counts = KERNEL_FUNCTIONS.contains(&name) || probes.iter().any(|p| p == name);
        let star = match name {
            _ if counts => {
                counted.push(name.to_string());
                "*"
            }
            _ if Some(name) == open => "<",
            _ if Some(name) == close => ">",
            _ => "",
        };
        let _ = writeln!(s, "{addr} {star}{name}");
    }
    std::fs::write(out, s).map_err(|e| QemuError::Run(format!("{}: {e}", out.display())))?;
    Ok(counted)
}

/// A newc cpio archive of `files` (relative to `root`), as the kernel unpacks it.
fn cpio(root: &Path, files: &[String], out: &Path) -> Result<(), QemuError> {
    use std::io::Write;
    // The same files make the same archive, byte for byte: every modification time
    // the epoch, and (--reproducible) inode numbers counted from one. The guest's
    // random numbers depend on the initramfs' bytes (measured: two boots of one
    // kernel with archives differing only in these gave different boot_ids), and a
    // kernel that randomizes its slab freelists or stack offsets (Debian's) then
    // runs a different number of instructions in a window.
    for f in files {
        let path = root.join(f);
        std::fs::File::open(&path)
            .and_then(|h| h.set_modified(std::time::UNIX_EPOCH))
            .map_err(|e| QemuError::Run(format!("{}: {e}", path.display())))?;
    }
    let archive = std::fs::File::create(out).map_err(|e| QemuError::Run(format!("{}: {e}", out.display())))?;
    let mut child = Command::new("cpio")
        .args(["-o", "-H", "newc", "--quiet", "--reproducible"])
        .current_dir(root)
        .stdin(std::process::Stdio::piped())
        .stdout(archive)
        .spawn()
        .map_err(|e| QemuError::Run(format!("cpio: {e}")))?;
    let list = files.join("\n") + "\n";
    child
        .stdin
        .take()
        .expect("piped stdin")
        .write_all(list.as_bytes())
        .map_err(|e| QemuError::Run(format!("cpio: {e}")))?;
    match child.wait() {
        Ok(s) if s.success() => Ok(()),
        r => Err(QemuError::Run(format!("cpio failed: {r:?}"))),
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn the_boot_window_is_map_mem_and_not_an_op_window() {
        let text = "boot tlbi.vaale1is __set_fixmap 3\nboot dsb.ish __set_fixmap 3\nboot end\n\
                    0 tlbi.vale1is zap_pte_range 1\n0 end\nwindows 1 errors 0\n";
        let (ops, boot) = parse_windows(text).unwrap();
        assert_eq!(ops.len(), 1);
        let m = map_mem_counters(&boot.unwrap());
        assert_eq!(m.counters["arch.tlbi.total"], 3);
        assert_eq!(m.counters["arch.tlbi.vaale1is"], 3);
        assert_eq!(m.counters["arch.dsb.ish"], 3);
        assert_eq!(m.tlbi_by_function["__set_fixmap"], 3);
        assert_eq!(Target::QemuArm64_61.kernel(), Release(6, 1));
        let bounds = |t: Target| t.guest_kernel().unwrap().map_mem_bounds();
        assert_ne!(bounds(Target::QemuArm64_61), bounds(Target::QemuArm64));
        assert_eq!(bounds(Target::QemuX86_64), None);
    }

    /// Instructions go to `kernel.insns` and per function, or to `user.insns`, in op
    /// windows and at boot alike, and never to the mm's arch counters.
    #[test]
    fn instructions_sum_per_function_to_the_window_total() {
        let text = "boot insns __create_pgd_mapping_locked 700\nboot insns memblock_mark_nomap 12\nboot end\n\
                    0 insns do_anonymous_page 300\n0 insns handle_mm_fault 50\n0 user.insns - 9\n\
                    0 call do_anonymous_page 1\n0 end\nwindows 1 errors 0\n";
        let (ops, boot) = parse_windows(text).unwrap();
        let c = window_counters(&ops[0], &["do_anonymous_page"], Arch::Arm64);
        assert_eq!(c["kernel.insns"], 350);
        assert_eq!(c["kernel.insns.do_anonymous_page"], 300);
        assert_eq!(c["kernel.insns.handle_mm_fault"], 50);
        assert_eq!(c["user.insns"], 9);
        assert_eq!(c["kernel.do_anonymous_page"], 1);
        assert_eq!(c["arch.tlbi.total"], 0);
        assert!(!c.keys().any(|k| k.starts_with("unattributed.")));
        let m = map_mem_counters(&boot.unwrap());
        assert_eq!(m.counters["kernel.insns"], 712);
        assert_eq!(m.counters["kernel.insns.__create_pgd_mapping_locked"], 700);
        assert!(is_insns("kernel.insns.memblock_mark_nomap") && is_insns("user.insns"));
        assert!(!is_insns("kernel.insnsx") && !is_insns("kernel.do_anonymous_page"));
    }

    /// A `set` the guest's sysfs has no file for, or a `khugepaged` op whose thread the
    /// settings stopped, makes the workload not applicable to the target, the reason
    /// named; any other failure stays an error at its op.
    #[test]
    fn a_missing_knob_or_a_stopped_khugepaged_is_not_applicable() {
        let w = crate::workload::parse_str("k.wl", "set hugepages-16kB/enabled always\nmmap a 64K\ntouch a\n").unwrap();
        let mut st = Vec::new();
        steps(&w.stmts, &mut st);
        let failed = |e: &str| GuestResult {
            keys: vec![],
            missing: vec![],
            ops: vec![],
            background: None,
            layout: BTreeMap::new(),
            layout_error: None,
            error: Some(e.into()),
        };
        let e = report(
            &w,
            "qemu-arm64-16k",
            &st,
            failed("step 0 (set): No such file or directory"),
            &[],
            KERNEL_FUNCTIONS,
            Arch::Arm64,
        )
        .unwrap_err();
        assert_eq!(
            not_applicable(&e),
            Some(
                "not applicable on qemu-arm64-16k: its kernel has no \
                 /sys/kernel/mm/transparent_hugepage/hugepages-16kB/enabled (set at k.wl:1:1)"
            )
        );
        let e = report(
            &w,
            "qemu-arm64",
            &st,
            failed("step 0 (set): Invalid argument"),
            &[],
            KERNEL_FUNCTIONS,
            Arch::Arm64,
        )
        .unwrap_err();
        assert_eq!(e, "k.wl:1:1: step 0 (set): Invalid argument");
        assert_eq!(not_applicable(&e), None);
        // A `khugepaged` op with the thread stopped has no scan to compare; one that
        // did not scan is the runner's error.
        let w = crate::workload::parse_str("k.wl", "mmap a 2M hugepage\nkhugepaged\n").unwrap();
        let mut st = Vec::new();
        steps(&w.stmts, &mut st);
        let stopped = format!("step 1 (khugepaged): {KHUGEPAGED_OFF}");
        let e = report(
            &w,
            "qemu-arm64",
            &st,
            failed(&stopped),
            &[],
            KERNEL_FUNCTIONS,
            Arch::Arm64,
        )
        .unwrap_err();
        assert_eq!(
            not_applicable(&e),
            Some(format!("not applicable on qemu-arm64: {KHUGEPAGED_OFF} (k.wl:2:1)").as_str())
        );
        let stuck = "step 1 (khugepaged): khugepaged did not scan in 10 s of the guest's clock";
        let e = report(&w, "qemu-arm64", &st, failed(stuck), &[], KERNEL_FUNCTIONS, Arch::Arm64).unwrap_err();
        assert_eq!(not_applicable(&e), None);
        // memfd_secret off (6.1 without secretmem.enable=y) refuses a secret mapping
        // only; the same error on an anonymous mmap stays an error.
        let enosys = "step 0 (mmap): err mmap failed: Function not implemented";
        for (src, na) in [("mmap s 4K secret\ntouch s\n", true), ("mmap a 4K\ntouch a\n", false)] {
            let w = crate::workload::parse_str("s.wl", src).unwrap();
            let mut st = Vec::new();
            steps(&w.stmts, &mut st);
            let e = report(
                &w,
                "qemu-arm64-6.1",
                &st,
                failed(enosys),
                &[],
                KERNEL_FUNCTIONS,
                Arch::Arm64,
            )
            .unwrap_err();
            let reason = not_applicable(&e).map(str::to_string);
            assert_eq!(reason.is_some(), na, "{e}");
            if na {
                assert!(
                    e.contains("memfd_secret off") && e.contains("b758fe6df50d") && e.ends_with("at s.wl:1:1"),
                    "{e}"
                );
            }
        }
    }
}
