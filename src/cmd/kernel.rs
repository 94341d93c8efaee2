//! `foliolab kernel build|list`: arm64 kernels built here from source (src/kbuild),
//! for `--image KEY` on the QEMU targets and `foliolab ab`.

use crate::kbuild::{self, Compiler, PageSize, Spec};
use std::path::PathBuf;
use std::process::ExitCode;

#[derive(clap::Args)]
pub struct Args {
    #[command(subcommand)]
    pub command: Sub,
}

#[derive(clap::Subcommand)]
pub enum Sub {
    /// Build a kernel (or find it cached): prints its key, build time and Image.
    Build(BuildArgs),
    /// The cached kernels.
    List(ListArgs),
    /// Seed 004 on its own code: Original, Modification 1 and 2 built from 6.12 with
    /// gcc and clang, the seed's benchmark in each, beside the seed's table.
    #[command(
        after_help = "Examples:\n  foliolab kernel seed004  # kbuild,qemu: six kernels, built once\n  foliolab kernel seed004 --cc gcc --loops 2 --json  # kbuild,qemu"
    )]
    Seed004(super::seed004::Args),
}

#[derive(clap::Args)]
pub struct BuildArgs {
    /// A release whose Debian source scripts/setup-kbuild unpacked (6.12, 7.3), or a
    /// directory holding a kernel tree.
    #[arg(long, value_name = "6.12|7.3|DIR")]
    pub source: String,
    /// A patch to apply (`patch -p1`), in the order given.
    #[arg(long = "patch", value_name = "FILE")]
    pub patches: Vec<PathBuf>,
    #[arg(long = "cc", value_enum, default_value = "gcc")]
    pub compiler: Compiler,
    #[arg(long, value_enum, default_value = "4K")]
    pub granule: PageSize,
    /// A config fragment merged after foliolab's (tools/kernel/).
    #[arg(long = "config", value_name = "FRAGMENT")]
    pub fragments: Vec<PathBuf>,
    /// Print `{"key", "image", "build_s", "cached"}`.
    #[arg(long)]
    pub json: bool,
}

#[derive(clap::Args)]
pub struct ListArgs {
    /// Print the entries' records as JSON.
    #[arg(long)]
    pub json: bool,
}

pub fn main(a: Args, db: &super::StoreArgs) -> super::CmdResult {
    match a.command {
        Sub::Build(b) => build(b),
        Sub::List(l) => list(l),
        Sub::Seed004(s) => super::seed004::main(s, db),
    }
}

fn build(a: BuildArgs) -> super::CmdResult {
    let spec = Spec {
        source: a.source,
        patches: a.patches,
        compiler: a.compiler,
        page_size: a.granule,
        fragments: a.fragments,
    };
    let built = kbuild::build(&spec, &mut |line| eprintln!("kernel build: {line}"))?;
    if a.json {
        super::emit(&(serde_json::to_string(&built)? + "\n"))?;
    } else {
        let how = if built.cached { "cached" } else { "built" };
        super::emit(&format!(
            "{}\n{how} in {:.2} s: {}\n",
            built.key,
            built.build_s,
            built.image.display()
        ))?;
    }
    Ok(ExitCode::SUCCESS)
}

fn list(a: ListArgs) -> super::CmdResult {
    let entries = kbuild::list()?;
    if a.json {
        super::emit(&(serde_json::to_string_pretty(&entries)? + "\n"))?;
        return Ok(ExitCode::SUCCESS);
    }
    let mut s = format!("{} ({} kernels)\n", kbuild::kernels_dir().display(), entries.len());
    for e in &entries {
        let patches: Vec<&str> = e.patches.iter().map(|p| p.path.as_str()).collect();
        let patches = if patches.is_empty() {
            "no patches".to_string()
        } else {
            patches.join(" ")
        };
        s += &format!(
            "{}  {}  {}  {}  built in {:.0} s\n    {}; {patches}\n",
            e.key,
            e.release,
            e.page_size.name(),
            e.compiler,
            e.build_s,
            e.source
        );
    }
    super::emit(&s)?;
    Ok(ExitCode::SUCCESS)
}
