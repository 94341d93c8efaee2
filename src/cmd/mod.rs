//! One module per subcommand. Each returns the process exit code, or an error that
//! `main` prints and turns into exit status 2.

pub mod boot;
pub mod native;
pub mod run;
pub mod validate;

/// A command's failure, printed as `foliolab: <message>`.
pub type CmdResult = Result<std::process::ExitCode, Box<dyn std::error::Error>>;
