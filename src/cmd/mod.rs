//! One module per subcommand. Each returns the process exit code, or an error that
//! `main` prints and turns into exit status 2.

pub mod boot;
pub mod machines;
pub mod native;
pub mod run;
pub mod validate;

/// A command's failure, printed as `foliolab: <message>`.
pub type CmdResult = Result<std::process::ExitCode, Box<dyn std::error::Error>>;

/// Write a command's output to stdout. A reader that went away (`foliolab run ... |
/// head`) ends the output quietly instead of panicking as `println!` would.
pub fn emit(text: &str) -> std::io::Result<()> {
    use std::io::Write;
    let mut out = std::io::stdout().lock();
    match out.write_all(text.as_bytes()).and_then(|()| out.flush()) {
        Err(e) if e.kind() == std::io::ErrorKind::BrokenPipe => Ok(()),
        r => r,
    }
}
