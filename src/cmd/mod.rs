//! One module per subcommand. Each returns the process exit code, or an error that
//! `main` prints and turns into exit status 2.

pub mod ab;
pub mod bench;
pub mod boot;
pub mod calibrate;
pub mod compare;
pub mod kernel;
pub mod kernels;
pub mod machines;
pub mod native;
pub mod predict;
pub mod record;
pub mod replay;
pub mod reproduce;
pub mod run;
pub mod runs;
pub mod seed004;
pub mod seeds;
pub mod sweep;
pub mod validate;

/// A command's failure, printed as `foliolab: <message>`.
pub type CmdResult = Result<std::process::ExitCode, Box<dyn std::error::Error>>;

/// Write a command's output to stdout. A reader that went away (`foliolab run ... |
/// head`) ends the output quietly instead of panicking as `println!` would.
pub fn emit(text: &str) -> std::io::Result<()> {
    use std::io::Write;
    if CAPTURE.with_borrow_mut(|c| c.as_mut().map(|c| c.push_str(text)).is_some()) {
        return Ok(());
    }
    let mut out = std::io::stdout().lock();
    match out.write_all(text.as_bytes()).and_then(|()| out.flush()) {
        Err(e) if e.kind() == std::io::ErrorKind::BrokenPipe => Ok(()),
        r => r,
    }
}

thread_local! {
    /// `capture`'s buffer: set, `emit` appends to it instead of writing to stdout.
    static CAPTURE: std::cell::RefCell<Option<String>> = const { std::cell::RefCell::new(None) };
}

/// Runs a command in-process (the Python module) and returns what it emitted with its
/// result, so a caller gets exactly the CLI's output without a subprocess.
pub fn capture<T>(f: impl FnOnce() -> T) -> (T, String) {
    /// Ends the capture even if `f` panics, so a caught panic leaves `emit` writing stdout.
    struct Reset;
    impl Drop for Reset {
        fn drop(&mut self) {
            CAPTURE.with_borrow_mut(|c| *c = None);
        }
    }
    CAPTURE.with_borrow_mut(|c| *c = Some(String::new()));
    let reset = Reset;
    let r = f();
    let out = CAPTURE.with_borrow_mut(|c| c.take()).unwrap_or_default();
    drop(reset);
    (r, out)
}

/// Where results are recorded: `--db PATH`, `$FOLIOLAB_DB`, or the user's data directory.
#[derive(clap::Args, Clone, Debug)]
pub struct StoreArgs {
    /// The results database (default: $FOLIOLAB_DB, else ~/.local/share/foliolab/results.db).
    #[arg(long, global = true, value_name = "PATH")]
    pub db: Option<std::path::PathBuf>,
    /// Do not record this run in the results database.
    #[arg(long, global = true)]
    pub no_store: bool,
}

impl StoreArgs {
    pub fn open(&self) -> Result<crate::store::Store, crate::store::StoreError> {
        let path = crate::store::default_path(self.db.as_deref()).ok_or_else(|| crate::store::StoreError::Other {
            path: "(none)".into(),
            msg: "no --db, FOLIOLAB_DB or HOME to find the results database".into(),
        })?;
        crate::store::Store::open(&path)
    }
}

/// Records a finished command's result unless `--no-store`; a store that fails is
/// reported on stderr and leaves the command's own output alone. Returns whether the
/// result is where it was asked to be: stored, or not asked for.
pub fn record(db: &StoreArgs, run: &crate::store::NewRun) -> bool {
    if db.no_store {
        return true;
    }
    match db.open().and_then(|mut s| s.record(run)) {
        Ok(_) => true,
        Err(e) => {
            eprintln!("foliolab: not recorded: {e}");
            false
        }
    }
}

/// The exit status of a command whose result was printed but could not be stored
/// (the store is a directory, read-only, full, or locked past its timeout).
pub const EXIT_NOT_STORED: u8 = 3;

/// Records one report of `w` (see `record`); host runs carry the host's kernel release.
/// Under `--no-store` nothing is built: the report's JSON value, a tenth of a small
/// run's instructions, would only be dropped.
pub fn record_report(
    db: &StoreArgs,
    kind: &str,
    w: &crate::workload::Workload,
    r: &crate::report::Report,
    machine: Option<&crate::time::Machine>,
    wall: std::time::Duration,
) -> bool {
    if db.no_store {
        return true;
    }
    let host_kernel = (r.source == "host").then(crate::store::host_kernel).flatten();
    let result = report_value(r, machine);
    record(
        db,
        &crate::store::NewRun {
            kind,
            workload: Some((&w.path, &w.text)),
            machine: machine.map(|m| m.profile.name.as_str()),
            host_kernel,
            wall_ms: wall.as_secs_f64() * 1e3,
            result,
        },
    )
}

/// A report as `--json` prints it: with its modeled time when a machine is given.
pub fn report_value(r: &crate::report::Report, machine: Option<&crate::time::Machine>) -> serde_json::Value {
    match machine {
        Some(m) => crate::time::annotate(r, &crate::time::model(&m.profile, r), &m.applied),
        None => serde_json::to_value(r).expect("a report serializes"),
    }
}
