//! The `foliolab` command line.

use clap::{Parser, Subcommand};
use foliolab::cmd;
use std::process::ExitCode;

#[derive(Parser)]
#[command(
    name = "foliolab",
    version,
    about = "A deterministic model of Linux arm64 memory management",
    after_help = "Examples:\n  foliolab reproduce\n  foliolab run workloads/seed000-munmap-64k.wl --each zap=per-pte,batched\n  foliolab validate tests/validation/fork_cow.wl  # root\n\nThe guide: docs/ (mdbook serve docs), starting at docs/src/introduction.md."
)]
struct Cli {
    #[command(subcommand)]
    command: Command,
    #[command(flatten)]
    store: cmd::StoreArgs,
}

/// Each subcommand's arguments are built only when that subcommand is parsed
/// (`defer`): a command builds one subcommand's, not all seventeen (the run and replay
/// variant help alone is 13 KB of text), at every start.
#[derive(Subcommand)]
#[command(defer = true)]
enum Command {
    /// Run a workload on the model.
    Run(cmd::run::Args),
    /// Run a workload for real on the host kernel.
    #[command(
        after_help = "Examples:\n  foliolab native tests/validation/fork_cow.wl  # root\n  foliolab native --target qemu-arm64 tests/validation/fork_cow.wl  # qemu"
    )]
    Native(cmd::native::Args),
    /// Run workloads on the model and the host and compare.
    #[command(
        after_help = "Examples:\n  foliolab validate tests/validation/fork_cow.wl  # root\n  foliolab validate --target qemu-arm64 tests/validation/fork_cow.wl  # qemu"
    )]
    Validate(cmd::validate::Args),
    /// Build the kernel linear map of a machine.
    Boot(cmd::boot::Args),
    /// Every seed table: the seed's figures beside the model's.
    #[command(after_help = "Examples:\n  foliolab reproduce 004\n  foliolab reproduce --json")]
    Reproduce(cmd::reproduce::Args),
    /// Measure this host's mm software costs into the `host` machine profile.
    #[command(
        after_help = "Examples:\n  foliolab calibrate --out /tmp/foliolab-host.toml  # root\n  foliolab calibrate --shootdown-only --out /tmp/foliolab-host.toml  # root"
    )]
    Calibrate(cmd::calibrate::Args),
    /// List the results recorded in the results database.
    #[command(after_help = "Examples:\n  foliolab runs\n  foliolab runs --json")]
    Runs(cmd::runs::Args),
    /// Stored runs or saved reports side by side, change against the first.
    #[command(after_help = "Examples:\n  foliolab compare 1 2\n  foliolab compare 1 2 --all --json")]
    Compare(cmd::compare::Args),
    /// The same workloads on two or more guest kernels (built or Debian's), side by side.
    #[command(
        after_help = "Examples:\n  foliolab ab tests/kernel/anon_faults.wl --image qemu-arm64 --image qemu-arm64-6.1  # qemu\n  foliolab ab tests/validation/fork_cow.wl --image qemu-arm64 --image qemu-arm64 --json  # qemu"
    )]
    Ab(cmd::ab::Args),
    /// List the machine profiles: CPUs, features, and each cost with its source.
    #[command(after_help = "Examples:\n  foliolab machines\n  foliolab machines altra-metal --notes")]
    Machines(cmd::machines::Args),
    /// The kernel presets (--kernel): what each sets, with the upstream commit.
    #[command(after_help = "Examples:\n  foliolab kernels\n  foliolab kernels --json")]
    Kernels(cmd::kernels::Args),
    /// Build arm64 kernels from source with patches, for --image (cached by inputs).
    #[command(
        after_help = "Examples:\n  foliolab kernel build --source 6.12  # kbuild\n  foliolab kernel build --source 6.12 --patch tests/kernel/flush-per-anon-fault.patch --json  # kbuild\n  foliolab kernel list"
    )]
    Kernel(cmd::kernel::Args),
    /// Run a program on the host and record its mmaps and page faults to a trace.
    #[command(
        after_help = "Examples:\n  foliolab record -o /tmp/foliolab-sort.trc -- sort --version  # root\n  foliolab record --no-aslr -o /tmp/foliolab-py.trc -- python3 -c 'x = b\"a\" * (1 << 24)'  # root"
    )]
    Record(cmd::record::Args),
    /// Drive the model with a recorded trace: faults, mTHP counters, TLB behaviour.
    Replay(cmd::replay::Args),
    /// Predict a program's faults under mTHP from one recording, and check on the host.
    #[command(
        after_help = "Examples:\n  foliolab predict --mthp 64K -- python3 -c 'x = b\"a\" * (1 << 24)'  # root\n  foliolab predict --mthp 16K+64K --dir /tmp/foliolab-traces -- sort --version  # root"
    )]
    Predict(cmd::predict::Args),
    /// Run every point of a sweep spec (workloads × variants × kernels × machines ×
    /// targets) on every core or a Ray cluster, each kept in the results store.
    #[command(
        after_help = "Examples:\n  foliolab sweep examples/zap-sweep.toml\n  foliolab sweep examples/zap-sweep.toml --jobs 1 --out /tmp/foliolab-zap.csv"
    )]
    Sweep(cmd::sweep::Args),
    /// The speed guard: model against host kernel on the same work, whole processes, best of N.
    #[command(after_help = "Examples:\n  foliolab bench  # timed\n  foliolab bench --case order0 --rounds 3  # timed")]
    Bench(cmd::bench::Args),
}

/// The CPU check runs from .init_array, ahead of std's own start-up (its
/// `.init_array.00099` and `lang_start`), which fat LTO compiles for the target CPU too:
/// before it, the only code run is the loader's, glibc's and this check's.
#[used]
#[unsafe(link_section = ".init_array.00098")]
static CHECK_CPU: extern "C" fn() = foliolab::hostcpu::exit_on_mismatch;

fn main() -> ExitCode {
    let cli = Cli::parse();
    let r = match cli.command {
        Command::Run(a) => cmd::run::main(a, &cli.store),
        Command::Native(a) => cmd::native::main(a, &cli.store),
        Command::Validate(a) => cmd::validate::main(a, &cli.store),
        Command::Boot(a) => cmd::boot::main(a),
        Command::Calibrate(a) => cmd::calibrate::main(a),
        Command::Reproduce(a) => cmd::reproduce::main(a, &cli.store),
        Command::Runs(a) => cmd::runs::main(a, &cli.store),
        Command::Compare(a) => cmd::compare::main(a, &cli.store),
        Command::Ab(a) => cmd::ab::main(a, &cli.store),
        Command::Machines(a) => cmd::machines::main(a),
        Command::Kernels(a) => cmd::kernels::main(a),
        Command::Kernel(a) => cmd::kernel::main(a, &cli.store),
        Command::Record(a) => cmd::record::main(a),
        Command::Replay(a) => cmd::replay::main(a, &cli.store),
        Command::Predict(a) => cmd::predict::main(a),
        Command::Sweep(a) => cmd::sweep::main(a, &cli.store),
        Command::Bench(a) => cmd::bench::main(a),
    };
    match r {
        Ok(code) => code,
        Err(e) => {
            // An error may quote an input: its control bytes must not reach the terminal.
            eprintln!("foliolab: {}", foliolab::input::escape_controls(&e.to_string()));
            ExitCode::from(2)
        }
    }
}

#[cfg(test)]
mod tests {
    use clap::CommandFactory;

    #[test]
    fn every_deferred_subcommand_builds_and_passes_clap_s_checks() {
        // `defer` builds a subcommand's arguments only when it is parsed; building the
        // whole tree here runs clap's definition checks on all of them.
        let mut cli = super::Cli::command();
        cli.build();
        let run = cli.find_subcommand("run").expect("run");
        assert!(
            run.get_arguments().any(|a| a.get_id() == "workload"),
            "run's arguments are built"
        );
        super::Cli::command().debug_assert();
    }
}
