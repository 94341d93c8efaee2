//! The `foliolab` command line.

use clap::{Parser, Subcommand};
use foliolab::cmd;
use std::process::ExitCode;

#[derive(Parser)]
#[command(
    name = "foliolab",
    version,
    about = "A deterministic model of Linux arm64 memory management"
)]
struct Cli {
    #[command(subcommand)]
    command: Command,
    #[command(flatten)]
    store: cmd::StoreArgs,
}

#[derive(Subcommand)]
enum Command {
    /// Run a workload on the model.
    Run(cmd::run::Args),
    /// Run a workload for real on the host kernel.
    Native(cmd::native::Args),
    /// Run workloads on the model and the host and compare.
    Validate(cmd::validate::Args),
    /// Build the kernel linear map of a machine.
    Boot(cmd::boot::Args),
    /// Every seed table: the seed's figures beside the model's.
    Reproduce(cmd::reproduce::Args),
    /// Measure this host's mm software costs into the `host` machine profile.
    Calibrate(cmd::calibrate::Args),
    /// List the results recorded in the results database.
    Runs(cmd::runs::Args),
    /// Stored runs or saved reports side by side, change against the first.
    Compare(cmd::compare::Args),
    /// The same workloads on two or more guest kernels (built or Debian's), side by side.
    Ab(cmd::ab::Args),
    /// List the machine profiles: CPUs, features, and each cost with its source.
    Machines(cmd::machines::Args),
    /// The kernel presets (--kernel): what each sets, with the upstream commit.
    Kernels(cmd::kernels::Args),
    /// Build arm64 kernels from source with patches, for --image (cached by inputs).
    Kernel(cmd::kernel::Args),
    /// Run a program on the host and record its mmaps and page faults to a trace.
    Record(cmd::record::Args),
    /// Drive the model with a recorded trace: faults, mTHP counters, TLB behaviour.
    Replay(cmd::replay::Args),
    /// Predict a program's faults under mTHP from one recording, and check on the host.
    Predict(cmd::predict::Args),
}

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
        Command::Kernel(a) => cmd::kernel::main(a),
        Command::Record(a) => cmd::record::main(a),
        Command::Replay(a) => cmd::replay::main(a, &cli.store),
        Command::Predict(a) => cmd::predict::main(a),
    };
    match r {
        Ok(code) => code,
        Err(e) => {
            eprintln!("foliolab: {e}");
            ExitCode::from(2)
        }
    }
}
