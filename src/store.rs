//! The results store: every `run`, `native`, `validate` and `reproduce` is kept in an
//! embedded SQLite database, so any two results can be compared later.
//!
//! ```text
//!   runs      id | kind | started_at | workload_path | workload_text | workload_hash
//!                | variants (JSON) | machine | version | host_kernel | wall_ms | report (JSON)
//!   counters  run_id | phase ('' = whole run) | name | value
//!   points    key (a sweep point's inputs and build) | run_id
//! ```
//! WAL journal, one transaction per run: a process killed mid-write leaves the database
//! as it was after the last committed run.

use crate::report::Report;
use rusqlite::{params, Connection, OptionalExtension};
use sha2::{Digest, Sha256};
use std::path::{Path, PathBuf};

#[derive(Debug, thiserror::Error)]
pub enum StoreError {
    #[error("results store {path}: {err}")]
    Sql { path: String, err: rusqlite::Error },
    #[error("results store {path}: {msg}")]
    Other { path: String, msg: String },
}

/// What one stored result is.
#[derive(Debug, Clone, serde::Serialize)]
pub struct RunInfo {
    pub id: i64,
    pub kind: String,
    pub started_at: String,
    pub workload: Option<String>,
    pub workload_hash: Option<String>,
    pub variants: serde_json::Value,
    pub machine: Option<String>,
    pub version: String,
    pub host_kernel: Option<String>,
    pub wall_ms: f64,
}

/// A result to record.
pub struct NewRun<'a> {
    pub kind: &'a str,
    /// The workload file and its text (None for `boot`-like runs without one).
    pub workload: Option<(&'a str, &'a str)>,
    pub machine: Option<&'a str>,
    /// For host runs: the kernel release.
    pub host_kernel: Option<String>,
    pub wall_ms: f64,
    /// The report (run, native) or any other JSON result (validate, reproduce).
    pub result: serde_json::Value,
}

pub struct Store {
    conn: Connection,
    path: PathBuf,
}

/// `--db PATH`, else `$FOLIOLAB_DB`, else `$XDG_DATA_HOME/foliolab/results.db`
/// (`~/.local/share/foliolab/results.db`).
pub fn default_path(flag: Option<&Path>) -> Option<PathBuf> {
    if let Some(p) = flag {
        return Some(p.to_path_buf());
    }
    if let Some(p) = std::env::var_os("FOLIOLAB_DB").filter(|p| !p.is_empty()) {
        return Some(p.into());
    }
    Some(data_dir()?.join("results.db"))
}

/// Whether `path` lies on a file system mounted read-only (statvfs ST_RDONLY).
fn read_only_fs(path: &Path) -> bool {
    use std::os::unix::ffi::OsStrExt;
    let Ok(c) = std::ffi::CString::new(path.as_os_str().as_bytes()) else {
        return false;
    };
    // SAFETY: statvfs writes only into `st`; `c` is a valid NUL-terminated path.
    let mut st: libc::statvfs = unsafe { std::mem::zeroed() };
    // SAFETY: as above.
    unsafe { libc::statvfs(c.as_ptr(), &mut st) == 0 && st.f_flag & libc::ST_RDONLY != 0 }
}

/// `path` as the path of an SQLite URI: `?` and `#` (which would end it) and `%`
/// percent-encoded.
fn uri_path(path: &Path) -> String {
    let abs = std::path::absolute(path).unwrap_or_else(|_| path.to_path_buf());
    abs.to_string_lossy()
        .chars()
        .map(|c| match c {
            '?' => "%3f".to_string(),
            '#' => "%23".to_string(),
            '%' => "%25".to_string(),
            c => c.to_string(),
        })
        .collect()
}

/// foliolab's directory in the user's data directory: `$XDG_DATA_HOME/foliolab`, else
/// `~/.local/share/foliolab`.
pub fn data_dir() -> Option<PathBuf> {
    let data = std::env::var_os("XDG_DATA_HOME")
        .filter(|p| !p.is_empty())
        .map(PathBuf::from)
        .or_else(|| std::env::var_os("HOME").map(|h| PathBuf::from(h).join(".local/share")))?;
    Some(data.join("foliolab"))
}

const SCHEMA: &str = "
CREATE TABLE IF NOT EXISTS runs (
    id INTEGER PRIMARY KEY,
    kind TEXT NOT NULL,
    started_at TEXT NOT NULL,
    workload_path TEXT,
    workload_text TEXT,
    workload_hash TEXT,
    variants TEXT NOT NULL,
    machine TEXT,
    version TEXT NOT NULL,
    host_kernel TEXT,
    wall_ms REAL NOT NULL,
    report TEXT NOT NULL
);
CREATE TABLE IF NOT EXISTS counters (
    run_id INTEGER NOT NULL REFERENCES runs(id),
    phase TEXT NOT NULL,
    name TEXT NOT NULL,
    value INTEGER NOT NULL,
    PRIMARY KEY (run_id, phase, name)
) WITHOUT ROWID;
CREATE TABLE IF NOT EXISTS points (
    key TEXT PRIMARY KEY,
    run_id INTEGER NOT NULL REFERENCES runs(id)
) WITHOUT ROWID;
";

impl Store {
    pub fn open(path: &Path) -> Result<Store, StoreError> {
        let sql = |err| StoreError::Sql {
            path: path.display().to_string(),
            err,
        };
        if path.is_file() && read_only_fs(path) {
            // WAL readers need the -shm file, which a read-only mount cannot get: read
            // the database as immutable instead (nothing can write it there). A
            // `record` then fails as writing to a read-only database.
            let uri = format!("file:{}?immutable=1", uri_path(path));
            let flags = rusqlite::OpenFlags::SQLITE_OPEN_READ_ONLY | rusqlite::OpenFlags::SQLITE_OPEN_URI;
            let conn = Connection::open_with_flags(uri, flags).map_err(sql)?;
            return Ok(Store {
                conn,
                path: path.to_path_buf(),
            });
        }
        if let Some(dir) = path.parent().filter(|d| !d.as_os_str().is_empty()) {
            std::fs::create_dir_all(dir).map_err(|e| StoreError::Other {
                path: path.display().to_string(),
                msg: format!("creating {}: {e}", dir.display()),
            })?;
        }
        let conn = Connection::open(path).map_err(sql)?;
        // WAL: readers never block the writer, and a killed writer's partial
        // transaction is simply not in the log's committed part.
        conn.pragma_update(None, "journal_mode", "WAL").map_err(sql)?;
        conn.pragma_update(None, "synchronous", "NORMAL").map_err(sql)?;
        conn.busy_timeout(std::time::Duration::from_secs(10)).map_err(sql)?;
        conn.execute_batch(SCHEMA).map_err(sql)?;
        Ok(Store {
            conn,
            path: path.to_path_buf(),
        })
    }

    fn sql(&self, err: rusqlite::Error) -> StoreError {
        StoreError::Sql {
            path: self.path.display().to_string(),
            err,
        }
    }

    /// Records one result in one transaction; returns its id.
    pub fn record(&mut self, run: &NewRun) -> Result<i64, StoreError> {
        self.record_as(run, None)
    }

    /// Records a sweep point's result under its key (`sweep::Point::key`), in the same
    /// transaction as the run: a point is stored whole or not at all.
    pub fn record_point(&mut self, key: &str, run: &NewRun) -> Result<i64, StoreError> {
        self.record_as(run, Some(key))
    }

    /// The stored result of the sweep point `key`.
    pub fn point(&self, key: &str) -> Result<Option<serde_json::Value>, StoreError> {
        let id: Option<i64> = self
            .conn
            .query_row("SELECT run_id FROM points WHERE key = ?1", [key], |r| r.get(0))
            .optional()
            .map_err(|e| self.sql(e))?;
        id.map_or(Ok(None), |id| self.result(id))
    }

    fn record_as(&mut self, run: &NewRun, key: Option<&str>) -> Result<i64, StoreError> {
        let (path, text) = run.workload.unzip();
        let hash = text.map(|t| {
            Sha256::digest(t.as_bytes())
                .iter()
                .map(|b| format!("{b:02x}"))
                .collect::<String>()
        });
        let report: Option<Report> = serde_json::from_value(run.result.clone())
            .ok()
            .filter(|r: &Report| !r.source.is_empty());
        let variants = report
            .as_ref()
            .map_or(serde_json::Value::Object(Default::default()), |r| {
                serde_json::to_value(&r.variants).expect("variants serialize")
            });
        let started = time::OffsetDateTime::now_utc()
            .format(&time::format_description::well_known::Rfc3339)
            .expect("UTC time formats");
        let where_ = self.path.display().to_string();
        let sql = |err| StoreError::Sql {
            path: where_.clone(),
            err,
        };
        let tx = self.conn.transaction().map_err(sql)?;
        tx.execute(
            "INSERT INTO runs (kind, started_at, workload_path, workload_text, workload_hash, variants,
                               machine, version, host_kernel, wall_ms, report)
             VALUES (?1, ?2, ?3, ?4, ?5, ?6, ?7, ?8, ?9, ?10, ?11)",
            params![
                run.kind,
                started,
                path,
                text,
                hash,
                variants.to_string(),
                run.machine,
                env!("CARGO_PKG_VERSION"),
                run.host_kernel,
                run.wall_ms,
                run.result.to_string(),
            ],
        )
        .map_err(sql)?;
        let id = tx.last_insert_rowid();
        if let Some(r) = &report {
            let mut ins = tx
                .prepare("INSERT OR IGNORE INTO counters (run_id, phase, name, value) VALUES (?1, ?2, ?3, ?4)")
                .map_err(sql)?;
            let phases = r.phases.iter().map(|p| (p.label.as_str(), &p.counters));
            // A phase label used twice keeps its first phase's rows (the report has both).
            for (phase, counters) in std::iter::once(("", &r.counters)).chain(phases) {
                for (name, value) in counters.iter().filter(|(_, v)| **v != 0) {
                    ins.execute(params![id, phase, name, value]).map_err(sql)?;
                }
            }
        }
        if let Some(key) = key {
            tx.execute(
                "INSERT OR REPLACE INTO points (key, run_id) VALUES (?1, ?2)",
                params![key, id],
            )
            .map_err(sql)?;
        }
        tx.commit().map_err(sql)?;
        Ok(id)
    }

    /// Every stored result, oldest first.
    pub fn list(&self) -> Result<Vec<RunInfo>, StoreError> {
        let mut q = self
            .conn
            .prepare(
                "SELECT id, kind, started_at, workload_path, workload_hash, variants, machine, version,
                        host_kernel, wall_ms FROM runs ORDER BY id",
            )
            .map_err(|e| self.sql(e))?;
        let rows = q
            .query_map([], |r| {
                Ok(RunInfo {
                    id: r.get(0)?,
                    kind: r.get(1)?,
                    started_at: r.get(2)?,
                    workload: r.get(3)?,
                    workload_hash: r.get(4)?,
                    variants: serde_json::from_str(&r.get::<_, String>(5)?).unwrap_or_default(),
                    machine: r.get(6)?,
                    version: r.get(7)?,
                    host_kernel: r.get(8)?,
                    wall_ms: r.get(9)?,
                })
            })
            .map_err(|e| self.sql(e))?;
        rows.collect::<Result<_, _>>().map_err(|e| self.sql(e))
    }

    /// The stored result `id` as JSON.
    pub fn result(&self, id: i64) -> Result<Option<serde_json::Value>, StoreError> {
        let text: Option<String> = self
            .conn
            .query_row("SELECT report FROM runs WHERE id = ?1", [id], |r| r.get(0))
            .optional()
            .map_err(|e| self.sql(e))?;
        text.map(|t| {
            serde_json::from_str(&t).map_err(|e| StoreError::Other {
                path: self.path.display().to_string(),
                msg: format!("run {id}: stored result is not JSON: {e}"),
            })
        })
        .transpose()
    }
}

/// The host's kernel release, for native runs.
pub fn host_kernel() -> Option<String> {
    std::fs::read_to_string("/proc/sys/kernel/osrelease")
        .ok()
        .map(|s| s.trim().to_string())
}

#[cfg(test)]
mod tests {
    use super::*;

    fn scratch(name: &str) -> PathBuf {
        let dir = std::env::temp_dir().join(format!("foliolab-store-{name}-{}", std::process::id()));
        let _ = std::fs::remove_dir_all(&dir);
        dir.join("sub/results.db")
    }

    fn report(minflt: i64) -> serde_json::Value {
        serde_json::json!({
            "source": "model", "workload": "w.wl", "variants": {"zap": "batched"},
            "counters": {"proc.main.minflt": minflt, "arch.tlbi.total": 0},
            "phases": [{"label": "start", "counters": {"proc.main.minflt": minflt}}],
            "layout": {}
        })
    }

    #[test]
    fn runs_are_recorded_listed_and_read_back() {
        let path = scratch("basic");
        let mut s = Store::open(&path).unwrap();
        let run = |minflt| NewRun {
            kind: "run",
            workload: Some(("w.wl", "mmap a 64K\ntouch a\n")),
            machine: None,
            host_kernel: None,
            wall_ms: 1.5,
            result: report(minflt),
        };
        let a = s.record(&run(16)).unwrap();
        let b = s.record(&run(17)).unwrap();
        assert_eq!((a, b), (1, 2));
        let list = s.list().unwrap();
        assert_eq!(list.len(), 2);
        assert_eq!(list[0].variants["zap"], "batched");
        assert_eq!(list[0].workload_hash, list[1].workload_hash);
        assert_eq!(list[0].workload_hash.as_deref().map(str::len), Some(64));
        assert_eq!(s.result(b).unwrap().unwrap()["counters"]["proc.main.minflt"], 17);
        assert!(s.result(3).unwrap().is_none());
        let n: i64 = s
            .conn
            .query_row("SELECT count(*) FROM counters WHERE run_id = 1", [], |r| r.get(0))
            .unwrap();
        assert_eq!(n, 2, "non-zero counters: the total and the start phase");
        drop(s);
        assert_eq!(Store::open(&path).unwrap().list().unwrap().len(), 2, "reopened");
        std::fs::remove_dir_all(path.parent().unwrap().parent().unwrap()).unwrap();
    }

    #[test]
    fn a_point_is_found_by_its_key() {
        let path = scratch("points");
        let mut s = Store::open(&path).unwrap();
        let run = NewRun {
            kind: "run",
            workload: Some(("w.wl", "mmap a 64K\n")),
            machine: None,
            host_kernel: None,
            wall_ms: 1.0,
            result: report(5),
        };
        assert!(s.point("k1").unwrap().is_none());
        s.record_point("k1", &run).unwrap();
        assert_eq!(s.point("k1").unwrap().unwrap()["counters"]["proc.main.minflt"], 5);
        assert!(s.point("k2").unwrap().is_none());
        std::fs::remove_dir_all(path.parent().unwrap().parent().unwrap()).unwrap();
    }

    #[test]
    fn the_flag_beats_the_environment_and_the_data_dir() {
        assert_eq!(default_path(Some(Path::new("/x.db"))), Some(PathBuf::from("/x.db")));
    }
}
