//! `foliolab kernel seed004`: seed 004 on its own code. Debian's 6.12 source is built
//! as the seed's Original and with its Modification 1 and 2 (our patches in
//! tools/kernel/patches/, written from the mail's description), with gcc and with
//! clang (`foliolab kernel build`, cached); each kernel boots once under QEMU and runs
//! the seed's benchmark (tools/seed004/bench.c, built by scripts/setup-qemu) in its
//! three scenarios; the TCG plugin counts the instructions. The table puts
//! contpte_ptep_get's instructions per call and the benchmark's total beside the
//! seed's figures, each change against the same table's Original. `validate --seeds`
//! includes it.

use crate::kbuild::{self, Compiler, PageSize, Spec};
use crate::native::qemu::{self, GuestKernel, Program, ProgramRun};
use crate::report::Counters;
use serde::{Deserialize, Serialize};
use std::collections::BTreeMap;
use std::fmt::Write as _;
use std::path::PathBuf;
use std::process::ExitCode;

/// The source every variant is built from (Debian's linux-source-6.12).
const SOURCE: &str = "6.12";
/// A patch file's name and its bytes.
type Patch = (&'static str, &'static [u8]);
/// The seed's variants, in its table's order, with our patch for each (none: the
/// source as it is).
const VARIANTS: [(&str, Option<Patch>); 3] = [
    ("Original", None),
    (
        "Modification 1",
        Some((
            "seed004-mod1.patch",
            include_bytes!("../../tools/kernel/patches/seed004-mod1.patch"),
        )),
    ),
    (
        "Modification 2",
        Some((
            "seed004-mod2.patch",
            include_bytes!("../../tools/kernel/patches/seed004-mod2.patch"),
        )),
    ),
];
const SCENARIOS: [u32; 3] = [1, 2, 3];
const COMPILERS: [Compiler; 2] = [Compiler::Gcc, Compiler::Clang];
/// The benchmark's buffer: 4096 contpte blocks.
const BLOCKS: f64 = 4096.0;
/// The seed's mlock/munlock loops per run.
const SEED_LOOPS: f64 = 500.0;
/// The benchmark's windows: setup, first loop, the other loops, free.
const WINDOWS: usize = 4;
/// The per-function table keeps the loop's largest functions.
const TOP_FUNCTIONS: usize = 40;
const PTEP_GET: &str = "contpte_ptep_get";

#[derive(clap::Args)]
pub struct Args {
    /// A compiler to build with (repeat for both; default gcc and clang).
    #[arg(long = "cc", value_enum)]
    pub compilers: Vec<Compiler>,
    /// mlock/munlock loops per scenario; the seed's 500-loop total is extrapolated
    /// from the first loop and the mean of the others.
    #[arg(long, default_value_t = 4, value_parser = clap::value_parser!(u32).range(2..))]
    pub loops: u32,
    /// Print the table as JSON.
    #[arg(long)]
    pub json: bool,
}

/// One built kernel: its variant, compiler and build.
#[derive(Debug, Serialize, Deserialize, Clone)]
pub struct Kernel {
    pub cc: String,
    /// The compiler's `--version` line.
    pub compiler: String,
    pub variant: String,
    pub key: String,
    pub build_s: f64,
    pub cached: bool,
    /// contpte_ptep_get's length in the image, in instructions (to the next symbol).
    pub ptep_get_static_insns: Option<u64>,
    /// The boot's wall time, its three scenarios included.
    pub run_s: f64,
}

/// One variant in one scenario, built with one compiler.
#[derive(Debug, Serialize, Deserialize, Clone)]
pub struct Row {
    pub cc: String,
    pub scenario: u32,
    pub variant: String,
    /// Instructions (kernel and user) of each window.
    pub setup: i64,
    pub first_loop: i64,
    /// The mean of the loops after the first.
    pub per_loop: f64,
    pub free: i64,
    pub user_per_loop: f64,
    /// setup + first loop + 499 × per loop + free: the seed's run of 500 loops.
    pub total_500_loops: f64,
    /// Against the same compiler's Original in the same scenario.
    pub change_pct: f64,
    pub ptep_get_calls_per_block: f64,
    pub ptep_get_insns_per_call: f64,
    /// contpte_ptep_get's share of a loop's instructions.
    pub ptep_get_share: f64,
    /// The seed's total for this variant and scenario, and its change from its
    /// Original: the seed's figures (its kernel, compiler and machine), not ours.
    pub seed_total: f64,
    pub seed_change_pct: f64,
    /// Kernel instructions per loop by function, the largest (an inlined function
    /// counts under its caller).
    pub loop_insns_per_function: BTreeMap<String, f64>,
}

#[derive(Debug, Serialize, Deserialize, Clone)]
pub struct Seed004 {
    pub what: String,
    pub loops_run: u32,
    pub kernels: Vec<Kernel>,
    pub rows: Vec<Row>,
    pub notes: Vec<String>,
}

impl Seed004 {
    /// The rows `reproduce` shows in its real-kernel column: per compiler, scenario and
    /// modification, the 500-loop instruction total's change against Original, keyed as
    /// reproduce's seed 004 rows are (their experiment and variant names). clang's come
    /// first: reproduce shows the first row with a cell's key, and clang's code is the
    /// one the seed's figures fit.
    pub fn real_kernel_rows(&self) -> Vec<serde_json::Value> {
        let mut out = Vec::new();
        let mut rows: Vec<&Row> = self.rows.iter().filter(|r| r.variant != VARIANTS[0].0).collect();
        rows.sort_by_key(|r| r.cc != "clang");
        for r in rows {
            let Some(base) = self
                .rows
                .iter()
                .find(|b| b.cc == r.cc && b.scenario == r.scenario && b.variant == VARIANTS[0].0)
            else {
                continue;
            };
            let compiler = self
                .kernels
                .iter()
                .find(|k| k.cc == r.cc)
                .map_or(r.cc.as_str(), |k| &k.compiler);
            out.push(serde_json::json!({
                "seed": "004",
                "experiment": crate::reproduce::seed004::experiment(r.scenario, "instructions"),
                "variant": r.variant,
                "unit": "instructions",
                "value": (r.total_500_loops - base.total_500_loops).round(),
                "kernel": format!("{SOURCE} built with {compiler}, our patches (6.12's mlock walk: {:.0} calls per block)", r.ptep_get_calls_per_block),
                "build": r.cc,
                "change_pct": (r.change_pct * 100.0).round() / 100.0,
            }));
        }
        out
    }
}

/// Why seed 004 cannot run here with `compilers`, if it cannot.
pub fn missing(compilers: &[Compiler]) -> Option<String> {
    let src = kbuild::cache_dir().join("src").join(SOURCE).join("identity");
    if !src.is_file() {
        return Some(format!("{} is missing (run scripts/setup-kbuild)", src.display()));
    }
    if let Some(e) = compilers.iter().find_map(|c| c.version().err()) {
        return Some(e.to_string());
    }
    if let Some(why) = qemu::missing(qemu::Target::QemuArm64) {
        return Some(format!("{why} (run scripts/setup-qemu)"));
    }
    let bench = bench();
    (!bench.is_file()).then(|| format!("{} is missing (run scripts/setup-qemu)", bench.display()))
}

/// Why seed 004's kernels built with `cc` are not all in the cache, if they are not
/// (a test that must not build them: a clang build takes tens of minutes here).
pub fn not_cached(cc: Compiler) -> Option<String> {
    cached_keys(cc).err()
}

/// The cache keys of seed 004's kernels built with `cc`, per variant in the seed's
/// order, or why they are not all cached.
pub fn cached_keys(cc: Compiler) -> Result<Vec<(&'static str, String)>, String> {
    let mut keys = Vec::new();
    for (variant, patch) in VARIANTS {
        let patches = match patch {
            Some((name, bytes)) => vec![patch_file(name, bytes)?],
            None => Vec::new(),
        };
        match kbuild::cached(&spec(cc, patches)).map_err(|e| e.to_string())? {
            Some(key) => keys.push((variant, key)),
            None => {
                return Err(format!(
                    "{variant} built with {} is not cached (foliolab kernel seed004 --cc {} builds it)",
                    cc.name(),
                    cc.name()
                ))
            }
        }
    }
    Ok(keys)
}

/// The build of a variant: 6.12's source with `patches`, 4K pages, foliolab's config.
fn spec(cc: Compiler, patches: Vec<PathBuf>) -> Spec {
    Spec {
        source: SOURCE.into(),
        patches,
        compiler: cc,
        page_size: PageSize::K4,
        fragments: Vec::new(),
    }
}

/// tools/seed004/bench.c as scripts/setup-qemu builds it for the guest.
fn bench() -> PathBuf {
    qemu::cache_dir().join("seed004")
}

/// The variant's patch as a file: the bytes foliolab was built with, kept in the build
/// cache (the key is of a patch's bytes, so a copy elsewhere hits the same entry).
fn patch_file(name: &str, bytes: &[u8]) -> Result<PathBuf, String> {
    let dir = kbuild::cache_dir().join("seed004");
    let path = dir.join(name);
    if std::fs::read(&path).is_ok_and(|b| b == bytes) {
        return Ok(path);
    }
    let fail = |e: std::io::Error| format!("{}: {e}", path.display());
    std::fs::create_dir_all(&dir).map_err(fail)?;
    let tmp = dir.join(format!(".{name}.{}", std::process::id()));
    std::fs::write(&tmp, bytes).map_err(fail)?;
    std::fs::rename(&tmp, &path).map_err(fail)?;
    Ok(path)
}

/// contpte_ptep_get's length in a kernel's `ADDR NAME` symbols: the bytes to the next
/// higher symbol, in instructions.
fn static_insns(kallsyms: &str, function: &str) -> Option<u64> {
    let mut addrs: Vec<(u64, &str)> = kallsyms
        .lines()
        .filter_map(|l| {
            let (a, n) = l.split_once(' ')?;
            Some((u64::from_str_radix(a, 16).ok()?, n.trim()))
        })
        .collect();
    addrs.sort_unstable();
    let at = addrs.iter().position(|&(_, n)| n == function)?;
    let start = addrs[at].0;
    let next = addrs[at..].iter().find(|&&(a, _)| a > start)?.0;
    Some((next - start) / 4)
}

fn total(c: &Counters) -> i64 {
    c.get(qemu::INSNS_KEY).copied().unwrap_or(0) + c.get(qemu::USER_INSNS_KEY).copied().unwrap_or(0)
}

/// Kernel instructions per function in `c`, divided by `n`.
fn per_function(c: &Counters, n: f64) -> BTreeMap<String, f64> {
    c.iter()
        .filter_map(|(k, &v)| Some((qemu::insns_function(k)?.to_string(), v as f64 / n)))
        .filter(|(_, v)| *v != 0.0)
        .collect()
}

/// A scenario's row from the benchmark's run, and the loop's instructions per function
/// (all of them).
fn row(
    cc: Compiler,
    variant: usize,
    scenario: u32,
    run: &ProgramRun,
    loops: u32,
) -> Result<(Row, BTreeMap<String, f64>), String> {
    if run.status != 0 || run.windows.len() != WINDOWS {
        return Err(format!(
            "{}: exit status {}, {} windows (want 0 and {WINDOWS})",
            run.program,
            run.status,
            run.windows.len()
        ));
    }
    let [setup, first, rest, free] = [0, 1, 2, 3].map(|i| &run.windows[i]);
    let later = f64::from(loops - 1);
    let per_loop = total(rest) as f64 / later;
    let calls = rest.get(&format!("kernel.{PTEP_GET}")).copied().unwrap_or(0) as f64;
    let insns = rest
        .get(&format!("{}.{PTEP_GET}", qemu::INSNS_KEY))
        .copied()
        .unwrap_or(0) as f64;
    if calls == 0.0 {
        return Err(format!("{}: no {PTEP_GET} call in its loops", run.program));
    }
    let functions = per_function(rest, later);
    let mut top: Vec<(&String, &f64)> = functions.iter().collect();
    top.sort_by(|a, b| b.1.total_cmp(a.1).then(a.0.cmp(b.0)));
    let seed_row = crate::reproduce::seed004::TABLE[scenario as usize - 1];
    Ok((
        Row {
            cc: cc.name().into(),
            scenario,
            variant: VARIANTS[variant].0.into(),
            setup: total(setup),
            first_loop: total(first),
            per_loop,
            free: total(free),
            user_per_loop: rest.get(qemu::USER_INSNS_KEY).copied().unwrap_or(0) as f64 / later,
            total_500_loops: (total(setup) + total(first) + total(free)) as f64 + (SEED_LOOPS - 1.0) * per_loop,
            change_pct: 0.0,
            ptep_get_calls_per_block: calls / later / BLOCKS,
            ptep_get_insns_per_call: insns / calls,
            ptep_get_share: insns / later / per_loop,
            seed_total: seed_row[variant].0,
            seed_change_pct: pct(seed_row[variant].0, seed_row[0].0),
            loop_insns_per_function: top
                .iter()
                .take(TOP_FUNCTIONS)
                .map(|(k, v)| ((*k).clone(), **v))
                .collect(),
        },
        functions,
    ))
}

fn pct(x: f64, base: f64) -> f64 {
    (x - base) / base * 100.0
}

/// What the counts say of scenario 3's Modification 1 against Original with `cc`: the
/// loop's difference and which functions' instructions moved.
fn scenario3_note(
    cc: Compiler,
    rows: &[Row],
    functions: &BTreeMap<(u32, usize), BTreeMap<String, f64>>,
    kernels: &[Kernel],
) -> Option<String> {
    let find = |v: usize| rows.iter().find(|r| r.scenario == 3 && r.variant == VARIANTS[v].0);
    let (orig, mod1) = (find(0)?, find(1)?);
    let (fo, fm) = (functions.get(&(3, 0))?, functions.get(&(3, 1))?);
    let names: std::collections::BTreeSet<&String> = fo.keys().chain(fm.keys()).collect();
    let mut moved: Vec<(&str, f64)> = names
        .into_iter()
        .map(|k| {
            let d = fm.get(k).copied().unwrap_or(0.0) - fo.get(k).copied().unwrap_or(0.0);
            (k.as_str(), d)
        })
        .filter(|(_, d)| d.abs() >= 1.0)
        .collect();
    moved.sort_by(|a, b| b.1.abs().total_cmp(&a.1.abs()).then(a.0.cmp(b.0)));
    let size = |v: usize| {
        kernels
            .iter()
            .find(|k| k.variant == VARIANTS[v].0)
            .and_then(|k| k.ptep_get_static_insns)
            .map_or("?".into(), |n| n.to_string())
    };
    let d_call = mod1.ptep_get_insns_per_call - orig.ptep_get_insns_per_call;
    let mut s = format!(
        "{}: scenario 3, Modification 1 against Original: {:+.0} instructions per loop ({:+.2} %); \
         contpte_ptep_get {:.0} -> {:.0} instructions per call ({:+.0}, {:+.2} per pte of the 16; \
         {} -> {} instructions long in the image), {:.1} calls per block in both",
        cc.name(),
        mod1.per_loop - orig.per_loop,
        mod1.change_pct,
        orig.ptep_get_insns_per_call,
        mod1.ptep_get_insns_per_call,
        d_call,
        d_call / 16.0,
        size(0),
        size(1),
        mod1.ptep_get_calls_per_block,
    );
    // A change of the loop's own work moves a function by an instruction per block or
    // more; less is the tick's interrupt work, which lands differently in another image.
    let (others, tick): (Vec<_>, Vec<_>) = moved
        .iter()
        .filter(|(f, _)| *f != PTEP_GET)
        .partition(|(_, d)| d.abs() >= BLOCKS);
    if others.is_empty() {
        s += "; no other kernel function moved by an instruction per block";
    } else {
        let list: Vec<String> = others.iter().map(|(f, d)| format!("{f} {d:+.0}")).collect();
        let _ = write!(s, "; other functions per loop: {}", list.join(", "));
    }
    let tick_sum: f64 = tick.iter().map(|(_, d)| d).sum();
    if !tick.is_empty() {
        let _ = write!(
            s,
            " ({} functions moved by less, {tick_sum:+.0} per loop in all: timer and scheduler work of the tick, which falls differently in another image)",
            tick.len()
        );
    }
    // The cause, as the per-function counts give it: the loop's change that is
    // contpte_ptep_get's own instructions.
    let d_loop = mod1.per_loop - orig.per_loop;
    let d_ptep = fm.get(PTEP_GET).copied().unwrap_or(0.0) - fo.get(PTEP_GET).copied().unwrap_or(0.0);
    if d_loop.abs() >= BLOCKS {
        let _ = write!(
            s,
            ". Cause: {d_ptep:+.0} of the loop's {d_loop:+.0} instructions ({:.1} %) are kernel.insns.{PTEP_GET}'s own: in scenario 3 no pte is young or dirty, so Modification 1's loop never stops early and reads all 16 ptes as Original's does, and {}'s code for its loop with the two early-exit tests is {:+.2} instructions per pte longer than for Original's full scan",
            d_ptep / d_loop * 100.0,
            cc.name(),
            d_call / 16.0
        );
    } else {
        let _ = write!(
            s,
            ". With {} Modification 1 costs scenario 3 nothing measurable: its loop ({:+.0} instructions per call) is as long as Original's when no pte stops it early",
            cc.name(),
            d_call
        );
    }
    Some(s)
}

/// Builds the three variants with each compiler, runs the benchmark's three scenarios
/// on each, and makes the table. `log` gets a line per build and boot.
pub fn run(
    compilers: &[Compiler],
    loops: u32,
    log: &mut dyn FnMut(&str),
) -> Result<Seed004, Box<dyn std::error::Error>> {
    let programs: Vec<Program> = SCENARIOS
        .iter()
        .map(|s| Program {
            path: bench(),
            args: vec![s.to_string(), loops.to_string()],
        })
        .collect();
    let mut out = Seed004 {
        what: format!(
            "seed 004's benchmark (tools/seed004/bench.c, {loops} mlock/munlock loops per scenario) on Debian's 6.12 source built here (tools/kernel/base.config, 4K pages) as the seed's Original and with tools/kernel/patches/seed004-mod{{1,2}}.patch, per compiler; instructions counted by the TCG plugin (kernel and user, QEMU -icount, one vCPU). total_500_loops = setup + first loop + 499 x the mean later loop + free; change_pct against the same compiler's Original; seed_total and seed_change_pct are the seed's table (its kernel, compiler and machine), shown beside ours, never as ours"
        ),
        loops_run: loops,
        kernels: Vec::new(),
        rows: Vec::new(),
        notes: Vec::new(),
    };
    for &cc in compilers {
        let mut functions = BTreeMap::new();
        let first_row = out.rows.len();
        let first_kernel = out.kernels.len();
        for (v, (variant, patch)) in VARIANTS.iter().enumerate() {
            let patches = match patch {
                Some((name, bytes)) => vec![patch_file(name, bytes)?],
                None => Vec::new(),
            };
            let built = kbuild::build(&spec(cc, patches), &mut |l| log(&format!("kernel build: {l}")))?;
            let how = if built.cached { "cached" } else { "built" };
            log(&format!(
                "seed 004: {} {variant}: {} {how} in {:.2} s",
                cc.name(),
                built.key,
                built.build_s
            ));
            let dir = kbuild::find(&built.key)?;
            let kallsyms = std::fs::read_to_string(dir.join("kallsyms")).unwrap_or_default();
            let guest = GuestKernel::image(&built.key)?;
            let start = std::time::Instant::now();
            let runs = qemu::run_programs(&guest, &programs)?;
            let run_s = start.elapsed().as_secs_f64();
            log(&format!(
                "seed 004: {} {variant}: three scenarios in one boot, {run_s:.1} s",
                cc.name()
            ));
            for (s, r) in SCENARIOS.iter().zip(&runs) {
                let (row, f) = row(cc, v, *s, r, loops)?;
                functions.insert((*s, v), f);
                out.rows.push(row);
            }
            out.kernels.push(Kernel {
                cc: cc.name().into(),
                compiler: cc.version()?,
                variant: variant.to_string(),
                key: built.key,
                build_s: built.build_s,
                cached: built.cached,
                ptep_get_static_insns: static_insns(&kallsyms, PTEP_GET),
                run_s,
            });
        }
        let mine = &mut out.rows[first_row..];
        for s in SCENARIOS {
            let base = mine
                .iter()
                .find(|r| r.scenario == s && r.variant == VARIANTS[0].0)
                .map(|r| r.total_500_loops);
            for r in mine.iter_mut().filter(|r| r.scenario == s) {
                r.change_pct = base.map_or(0.0, |b| pct(r.total_500_loops, b));
            }
        }
        if let Some(n) = scenario3_note(cc, &out.rows[first_row..], &functions, &out.kernels[first_kernel..]) {
            out.notes.push(n);
        }
    }
    out.notes.push(format!(
        "the seed's kernel makes about 50 contpte_ptep_get calls per block per mlock+munlock (its totals' differences imply 48-52; 6.6-6.10's mlock walk reads each pte again), 6.12 makes {} (6.11's folio_pte_batch): so the whole benchmark's changes here are smaller than the seed's where contpte_ptep_get's own change is the same",
        out.rows
            .first()
            .map_or("?".into(), |r| format!("{:.0}", r.ptep_get_calls_per_block))
    ));
    Ok(out)
}

/// `x` to the instruction, grouped by thousands.
fn thousands(x: f64) -> String {
    crate::html::num(x.round())
}

/// The table for people: per compiler, scenario and variant, our counts and changes
/// beside the seed's; then each kernel's key and build time, and the notes.
pub fn text(s: &Seed004) -> String {
    let mut out = format!(
        "seed 004 on its own code: 6.12 built here, {} loops per scenario\n",
        s.loops_run
    );
    let _ = writeln!(
        out,
        "{:<6} {:>3} {:<15} {:>10} {:>10} {:>15} {:>17} {:>9} | {:>17} {:>9}",
        "cc",
        "sc.",
        "variant",
        "ptep/call",
        "calls/blk",
        "loop insns",
        "500-loop total",
        "change",
        "seed's total",
        "seed's"
    );
    for r in &s.rows {
        let _ = writeln!(
            out,
            "{:<6} {:>3} {:<15} {:>10.0} {:>10.1} {:>15} {:>17} {:>8.2}% | {:>17} {:>8.2}%",
            r.cc,
            r.scenario,
            r.variant,
            r.ptep_get_insns_per_call,
            r.ptep_get_calls_per_block,
            thousands(r.per_loop),
            thousands(r.total_500_loops),
            r.change_pct,
            thousands(r.seed_total),
            r.seed_change_pct
        );
    }
    out += "kernels:\n";
    for k in &s.kernels {
        let _ = writeln!(
            out,
            "  {:<6} {:<15} {}  {} in {:.2} s, contpte_ptep_get {} instructions long; boot and 3 scenarios {:.1} s",
            k.cc,
            k.variant,
            k.key,
            if k.cached { "cached" } else { "built" },
            k.build_s,
            k.ptep_get_static_insns.map_or("?".into(), |n| n.to_string()),
            k.run_s
        );
    }
    for n in &s.notes {
        let _ = writeln!(out, "note: {n}");
    }
    out
}

fn record(db: &super::StoreArgs, s: &Seed004, wall: std::time::Duration) -> Result<(), serde_json::Error> {
    super::record(
        db,
        &crate::store::NewRun {
            kind: "kernel-seed004",
            workload: None,
            machine: None,
            host_kernel: None,
            wall_ms: wall.as_secs_f64() * 1e3,
            result: serde_json::to_value(s)?,
        },
    );
    Ok(())
}

pub fn main(a: Args, db: &super::StoreArgs) -> super::CmdResult {
    let compilers = if a.compilers.is_empty() {
        COMPILERS.to_vec()
    } else {
        a.compilers
    };
    if let Some(why) = missing(&compilers) {
        return Err(why.into());
    }
    let start = std::time::Instant::now();
    let s = run(&compilers, a.loops, &mut |l| eprintln!("{l}"))?;
    record(db, &s, start.elapsed())?;
    if a.json {
        super::emit(&(serde_json::to_string_pretty(&s)? + "\n"))?;
    } else {
        super::emit(&text(&s))?;
    }
    Ok(ExitCode::SUCCESS)
}

/// `validate --seeds`' seed 004 section: both compilers, the default loops; its text
/// and JSON, or a printed reason when it cannot run here.
pub fn validate_section(db: &super::StoreArgs) -> Result<(String, serde_json::Value), Box<dyn std::error::Error>> {
    if let Some(why) = missing(&COMPILERS) {
        let text = format!("\nseed 004 on built kernels: SKIP: {why}\n");
        return Ok((text, serde_json::json!({ "skipped": why })));
    }
    let start = std::time::Instant::now();
    let s = run(&COMPILERS, 4, &mut |l| eprintln!("{l}"))?;
    record(db, &s, start.elapsed())?;
    let mut json = serde_json::to_value(&s)?;
    json["real_kernel"] = s.real_kernel_rows().into();
    Ok((format!("\n{}", text(&s)), json))
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn a_functions_length_runs_to_the_next_higher_symbol() {
        let syms = "ffff000000001000 a\nffff000000001040 contpte_ptep_get\nffff000000001040 alias\n\
                    ffff000000001100 b\n";
        assert_eq!(static_insns(syms, "contpte_ptep_get"), Some(0x30));
        assert_eq!(static_insns(syms, "b"), None);
        assert_eq!(static_insns(syms, "missing"), None);
    }

    fn window(pairs: &[(&str, i64)]) -> Counters {
        pairs.iter().map(|(k, v)| (k.to_string(), *v)).collect()
    }

    #[test]
    fn a_row_extrapolates_the_seeds_500_loops_from_the_later_loops() {
        let loop_w = |n: i64| {
            window(&[
                ("kernel.insns", 1000 * n),
                ("user.insns", 10 * n),
                ("kernel.insns.contpte_ptep_get", 400 * n),
                ("kernel.contpte_ptep_get", 2 * n),
            ])
        };
        let run = ProgramRun {
            program: "seed004 1 4".into(),
            status: 0,
            windows: vec![
                window(&[("kernel.insns", 5000)]),
                loop_w(1),
                loop_w(3),
                window(&[("user.insns", 7)]),
            ],
        };
        let (r, f) = row(Compiler::Gcc, 1, 1, &run, 4).unwrap();
        assert_eq!(r.per_loop, 1010.0);
        assert_eq!(r.total_500_loops, 5000.0 + 1010.0 + 7.0 + 499.0 * 1010.0);
        assert_eq!(r.ptep_get_insns_per_call, 200.0);
        assert_eq!(r.ptep_get_calls_per_block, 2.0 / BLOCKS);
        assert_eq!(f["contpte_ptep_get"], 400.0);
        assert_eq!(r.seed_total, 18303833386.0);
        assert!((r.seed_change_pct - -51.72).abs() < 0.01);
    }

    #[test]
    fn the_table_shows_the_seeds_figures_beside_ours() {
        let run = ProgramRun {
            program: "seed004 3 4".into(),
            status: 0,
            windows: vec![
                window(&[("kernel.insns", 9)]),
                window(&[]),
                window(&[
                    ("kernel.insns", 3_000_000),
                    ("kernel.insns.contpte_ptep_get", 600),
                    ("kernel.contpte_ptep_get", 3),
                ]),
                window(&[]),
            ],
        };
        let (r, _) = row(Compiler::Clang, 1, 3, &run, 4).unwrap();
        let s = Seed004 {
            what: String::new(),
            loops_run: 4,
            kernels: Vec::new(),
            rows: vec![r],
            notes: vec!["a note".into()],
        };
        let t = text(&s);
        let line = t.lines().find(|l| l.starts_with("clang")).unwrap();
        assert!(line.contains("Modification 1") && line.contains("1,000,000"), "{t}");
        assert!(line.contains("38,305,241,759") && line.contains("4.36%"), "{t}");
        assert!(t.ends_with("note: a note\n"), "{t}");
    }

    #[test]
    fn a_failed_benchmark_is_an_error_not_a_row() {
        let run = ProgramRun {
            program: "seed004 2 4".into(),
            status: 1,
            windows: vec![Counters::new(); 4],
        };
        assert!(row(Compiler::Clang, 0, 2, &run, 4)
            .unwrap_err()
            .contains("exit status 1"));
    }

    #[test]
    fn real_kernel_rows_are_the_change_against_the_same_compilers_original() {
        let row = |cc: &str, variant: &str, total: f64| Row {
            cc: cc.into(),
            scenario: 2,
            variant: variant.into(),
            setup: 0,
            first_loop: 0,
            per_loop: 0.0,
            free: 0,
            user_per_loop: 0.0,
            total_500_loops: total,
            change_pct: 0.0,
            ptep_get_calls_per_block: 20.0,
            ptep_get_insns_per_call: 0.0,
            ptep_get_share: 0.0,
            seed_total: 0.0,
            seed_change_pct: 0.0,
            loop_insns_per_function: BTreeMap::new(),
        };
        let s = Seed004 {
            what: String::new(),
            loops_run: 4,
            kernels: Vec::new(),
            rows: vec![
                row("gcc", "Original", 1000.0),
                row("gcc", "Modification 1", 1100.0),
                row("clang", "Original", 900.0),
                row("clang", "Modification 1", 850.0),
            ],
            notes: Vec::new(),
        };
        let r = s.real_kernel_rows();
        assert_eq!(r.len(), 2);
        assert_eq!(r[0]["value"], -50.0, "clang first: {r:?}");
        assert_eq!(r[1]["value"], 100.0);
        assert_eq!(r[0]["experiment"], "scenario 2: instructions, change against Original");
        assert_eq!(r[0]["variant"], "Modification 1");
    }
}
