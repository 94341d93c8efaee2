//! `foliolab._core`, the Python extension (built by maturin with the `python` feature;
//! the typed layer around it is python/foliolab). Results cross as the CLI's JSON text,
//! so Python's `.to_json()` is the CLI's by construction. Every call releases the GIL
//! while the model runs, and a panic becomes `foliolab.InternalError`, never a crash
//! of the interpreter.

use crate::cmd::{self, StoreArgs};
use crate::store::Store;
use crate::sweep::{self, Input, Point, PointError, Spec};
use pyo3::exceptions::PyException;
use pyo3::prelude::*;
use pyo3::types::PyList;
use std::path::PathBuf;

pyo3::create_exception!(_core, FoliolabError, PyException, "A foliolab command or run failed.");
pyo3::create_exception!(
    _core,
    WorkloadError,
    FoliolabError,
    "A workload (or the run it describes) is wrong at .path:.line:.column."
);
pyo3::create_exception!(
    _core,
    InternalError,
    FoliolabError,
    "foliolab hit a bug (a Rust panic, caught); the message says where."
);

/// Runs `f` with the GIL released; an error or a panic becomes a Python exception.
fn nogil<T: Send>(py: Python<'_>, f: impl FnOnce() -> Result<T, PointError> + Send) -> PyResult<T> {
    let r = py.detach(|| std::panic::catch_unwind(std::panic::AssertUnwindSafe(f)));
    match r {
        Ok(Ok(v)) => Ok(v),
        Ok(Err(e)) => Err(to_py(py, e)),
        Err(panic) => Err(InternalError::new_err(sweep::exec::panic_message(&*panic))),
    }
}

fn to_py(py: Python<'_>, e: PointError) -> PyErr {
    match e {
        PointError::Workload { path, line, col, msg } => {
            let err = WorkloadError::new_err(format!("{path}:{line}:{col}: {msg}"));
            let v = err.value(py);
            // Setting attributes on a fresh exception instance cannot fail.
            let _ = v.setattr("path", path);
            let _ = v.setattr("message", msg);
            let _ = v.setattr("line", line);
            let _ = v.setattr("column", col);
            err
        }
        PointError::Other(msg) => FoliolabError::new_err(msg),
    }
}

/// A workload error from a boxed command error, keeping its position.
fn point_error(e: Box<dyn std::error::Error>) -> PointError {
    let e = match e.downcast::<crate::workload::WorkloadError>() {
        Ok(w) => return (*w).into(),
        Err(e) => e,
    };
    match e.downcast::<crate::sim::SimError>() {
        Ok(s) => (*s).into(),
        Err(e) => PointError::Other(e.to_string()),
    }
}

fn json<T: serde::de::DeserializeOwned>(what: &str, text: &str) -> Result<T, PointError> {
    serde_json::from_str(text).map_err(|e| PointError::Other(format!("{what}: {e}")))
}

/// The store at `db` (None: the CLI's default), or a private in-memory one.
fn open_store(db: Option<PathBuf>, store: bool) -> Result<Store, PointError> {
    let path = if store {
        crate::store::default_path(db.as_deref())
            .ok_or_else(|| PointError::Other("no db, FOLIOLAB_DB or HOME to find the results database".into()))?
    } else {
        PathBuf::from(":memory:")
    };
    Store::open(&path).map_err(|e| PointError::Other(e.to_string()))
}

/// This build's identity, as in sweep points' keys.
#[pyfunction]
fn build() -> &'static str {
    sweep::BUILD
}

/// One model run: `path` names the workload (read from it when `text` is None); the
/// result is `foliolab run --json`'s text. Recorded in the store like the CLI's runs
/// unless `store` is false.
#[pyfunction]
#[pyo3(signature = (path, text, sets, kernel=None, machine=None, db=None, store=true))]
#[allow(clippy::too_many_arguments)]
fn run(
    py: Python<'_>,
    path: String,
    text: Option<String>,
    sets: Vec<String>,
    kernel: Option<String>,
    machine: Option<String>,
    db: Option<PathBuf>,
    store: bool,
) -> PyResult<String> {
    nogil(py, move || {
        let text = match text {
            Some(t) => t,
            None => crate::workload::parse_file(&path)?.text,
        };
        let p = Point::model(Input::Workload { path, text }, sets, kernel, machine);
        let start = std::time::Instant::now();
        let v = p.run()?;
        if store {
            let run = p.new_run(v.clone(), start.elapsed().as_secs_f64() * 1e3);
            if let Err(e) =
                open_store(db, true).and_then(|mut s| s.record(&run).map_err(|e| PointError::Other(e.to_string())))
            {
                eprintln!("foliolab: not recorded: {e}");
            }
        }
        Ok(serde_json::to_string_pretty(&v).expect("JSON values serialize") + "\n")
    })
}

/// SPEC.toml read as `foliolab sweep` reads it: (the spec as JSON, the directory its
/// paths are relative to).
#[pyfunction]
fn load_spec(py: Python<'_>, path: PathBuf) -> PyResult<(String, PathBuf)> {
    nogil(py, move || {
        let (spec, dir) = Spec::load(&path)?;
        Ok((serde_json::to_string(&spec).expect("a spec serializes"), dir))
    })
}

/// The points of a sweep spec (its JSON), paths relative to `base`: a JSON list.
#[pyfunction]
fn sweep_points(py: Python<'_>, spec: String, base: PathBuf) -> PyResult<String> {
    nogil(py, move || {
        let spec: Spec = json("sweep spec", &spec)?;
        let points = spec.points(&base).map_err(point_error)?;
        Ok(serde_json::to_string(&points).expect("points serialize"))
    })
}

/// A point's store key and what it needs (None, "host" or "qemu").
#[pyfunction]
fn point_info(py: Python<'_>, point: String) -> PyResult<(String, Option<&'static str>)> {
    nogil(py, move || {
        let p: Point = json("point", &point)?;
        Ok((p.key(), p.needs()))
    })
}

/// Runs one point (a Ray task calls this): its result's JSON text.
#[pyfunction]
fn run_point(py: Python<'_>, point: String) -> PyResult<String> {
    nogil(py, move || {
        let p: Point = json("point", &point)?;
        Ok(p.run()?.to_string())
    })
}

/// The stored results of these point keys (None where not stored).
#[pyfunction]
#[pyo3(signature = (keys, db=None, store=true))]
fn stored(py: Python<'_>, keys: Vec<String>, db: Option<PathBuf>, store: bool) -> PyResult<Vec<Option<String>>> {
    nogil(py, move || {
        let s = open_store(db, store)?;
        keys.iter()
            .map(|k| {
                s.point(k)
                    .map(|v| v.map(|v| v.to_string()))
                    .map_err(|e| PointError::Other(e.to_string()))
            })
            .collect()
    })
}

/// Stores a point's result under its key (what `sweep_local` does as each finishes).
#[pyfunction]
#[pyo3(signature = (point, result, wall_ms, db=None))]
fn store_point(py: Python<'_>, point: String, result: String, wall_ms: f64, db: Option<PathBuf>) -> PyResult<()> {
    nogil(py, move || {
        let p: Point = json("point", &point)?;
        let v = json("result", &result)?;
        let mut s = open_store(db, true)?;
        s.record_point(&p.key(), &p.new_run(v, wall_ms))
            .map(|_| ())
            .map_err(|e| PointError::Other(e.to_string()))
    })
}

/// Runs the points (JSON list) on `jobs` threads, skipping stored ones; `progress(done,
/// total)` is called as points finish. Returns (results as JSON list, ran, stored,
/// failed [(index, why)]).
#[pyfunction]
#[pyo3(signature = (points, jobs, db=None, store=true, progress=None))]
#[allow(clippy::type_complexity)]
fn sweep_local(
    py: Python<'_>,
    points: String,
    jobs: usize,
    db: Option<PathBuf>,
    store: bool,
    progress: Option<Py<PyAny>>,
) -> PyResult<(String, usize, usize, Vec<(usize, String)>)> {
    nogil(py, move || {
        let points: Vec<Point> = json("points", &points)?;
        let mut s = open_store(db, store)?;
        let mut tick = |done: usize, total: usize| {
            if let Some(cb) = &progress {
                Python::attach(|py| {
                    if let Err(e) = cb.call1(py, (done, total)) {
                        e.print(py);
                    }
                });
            }
        };
        let o = sweep::run_local(points, &mut s, jobs, &mut tick).map_err(|e| PointError::Other(e.to_string()))?;
        let results = serde_json::to_string(&o.results).expect("results serialize");
        Ok((results, o.ran, o.stored, o.failed))
    })
}

/// The tidy table of points and their results (JSON lists): [(column, values)].
#[pyfunction]
fn table<'py>(py: Python<'py>, points: String, results: String) -> PyResult<Vec<(String, Bound<'py, PyList>)>> {
    let t = nogil(py, move || {
        let points: Vec<Point> = json("points", &points)?;
        let results: Vec<Option<serde_json::Value>> = json("results", &results)?;
        Ok(sweep::table::table(&points, &results))
    })?;
    t.columns
        .into_iter()
        .map(|(name, c)| {
            let list = match c {
                sweep::Column::Int(v) => PyList::new(py, v)?,
                sweep::Column::Str(v) => PyList::new(py, v)?,
            };
            Ok((name, list))
        })
        .collect()
}

/// Runs a CLI command in-process (`replay`, `boot`, `reproduce`, `native`, `kernels`,
/// `validate`) with these arguments, returning what it prints (asked for as JSON by
/// the caller). The same code as the CLI's, so the same output.
#[pyfunction]
fn command(py: Python<'_>, name: String, argv: Vec<String>) -> PyResult<String> {
    nogil(py, move || {
        let (r, out) = cmd::capture(|| dispatch(&name, &argv));
        match r.map_err(point_error)? {
            c if c == std::process::ExitCode::SUCCESS => Ok(out),
            _ => Err(PointError::Other(format!("{name} failed:\n{out}"))),
        }
    })
}

/// `name`'s arguments parsed with its CLI definition, and the store flags.
fn parse<A: clap::Args + clap::FromArgMatches>(
    name: &'static str,
    argv: &[String],
) -> Result<(A, StoreArgs), Box<dyn std::error::Error>> {
    use clap::FromArgMatches;
    let c = clap::Command::new(name).no_binary_name(true);
    let c = <StoreArgs as clap::Args>::augment_args(A::augment_args(c));
    let m = c.try_get_matches_from(argv).map_err(|e| e.render().to_string())?;
    Ok((A::from_arg_matches(&m)?, StoreArgs::from_arg_matches(&m)?))
}

fn dispatch(name: &str, argv: &[String]) -> cmd::CmdResult {
    let name: &'static str = ["replay", "boot", "reproduce", "native", "validate", "kernels"]
        .into_iter()
        .find(|n| *n == name)
        .ok_or_else(|| format!("no command {name} in the Python module"))?;
    match name {
        "replay" => parse(name, argv).and_then(|(a, db)| cmd::replay::main(a, &db)),
        "boot" => parse(name, argv).and_then(|(a, _)| cmd::boot::main(a)),
        "reproduce" => parse(name, argv).and_then(|(a, db)| cmd::reproduce::main(a, &db)),
        "native" => parse(name, argv).and_then(|(a, db)| cmd::native::main(a, &db)),
        "validate" => parse(name, argv).and_then(|(a, db)| cmd::validate::main(a, &db)),
        "kernels" => parse(name, argv).and_then(|(a, _)| cmd::kernels::main(a)),
        _ => unreachable!("names are checked above"),
    }
}

/// Every built-in machine profile (JSON list).
#[pyfunction]
fn machines(py: Python<'_>) -> PyResult<String> {
    nogil(py, || {
        let all = crate::time::Profile::all()?;
        Ok(serde_json::to_string(&all).expect("profiles serialize"))
    })
}

/// The real-kernel targets and, for each, why it cannot run here (None: it can).
#[pyfunction]
fn targets() -> Vec<(String, Option<String>)> {
    use clap::ValueEnum;
    crate::native::qemu::Target::value_variants()
        .iter()
        .filter_map(|t| {
            let name = t.to_possible_value()?.get_name().to_string();
            let why = match t {
                crate::native::qemu::Target::Host => sweep::point::host_missing(),
                t => crate::native::qemu::missing(*t),
            };
            Some((name, why))
        })
        .collect()
}

/// The CPU check, as the command line's (main.rs), when the extension is loaded: ahead
/// of PyO3's module init and std's start-up, which LTO compiles for the target CPU. On
/// a CPU without the build's features it names the one missing and ends the process
/// (exit 2), which the first instruction needing it would do anyway, by SIGILL.
#[used]
#[unsafe(link_section = ".init_array.00098")]
static CHECK_CPU: extern "C" fn() = crate::hostcpu::exit_on_mismatch;

#[pymodule]
fn _core(m: &Bound<'_, PyModule>) -> PyResult<()> {
    let py = m.py();
    m.add("FoliolabError", py.get_type::<FoliolabError>())?;
    m.add("WorkloadError", py.get_type::<WorkloadError>())?;
    m.add("InternalError", py.get_type::<InternalError>())?;
    for f in [
        wrap_pyfunction!(build, m)?,
        wrap_pyfunction!(run, m)?,
        wrap_pyfunction!(load_spec, m)?,
        wrap_pyfunction!(sweep_points, m)?,
        wrap_pyfunction!(point_info, m)?,
        wrap_pyfunction!(run_point, m)?,
        wrap_pyfunction!(stored, m)?,
        wrap_pyfunction!(store_point, m)?,
        wrap_pyfunction!(sweep_local, m)?,
        wrap_pyfunction!(table, m)?,
        wrap_pyfunction!(command, m)?,
        wrap_pyfunction!(machines, m)?,
        wrap_pyfunction!(targets, m)?,
    ] {
        m.add_function(f)?;
    }
    Ok(())
}
