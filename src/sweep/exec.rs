//! The local executor: the points not yet stored run on every core; each is stored the
//! moment it finishes (by this thread, the store's one writer), so a sweep killed at any
//! point keeps everything finished and its rerun runs only the rest.

use super::point::Point;
use crate::store::{Store, StoreError};
use serde_json::Value;
use std::sync::atomic::{AtomicUsize, Ordering};
use std::sync::{mpsc, Mutex};

/// A sweep's results, by point index.
pub struct Outcome {
    pub points: Vec<Point>,
    /// Each point's result (`None` if it failed).
    pub results: Vec<Option<Value>>,
    /// Points run by this sweep.
    pub ran: usize,
    /// Points found in the store, not run again.
    pub stored: usize,
    /// Points that failed: index and why.
    pub failed: Vec<(usize, String)>,
}

/// Runs the points of `points` that `store` does not hold on `jobs` threads. Points on a
/// real kernel (host, QEMU) run one at a time: they share the host's THP knobs or boot
/// a guest. `progress(done, total)` is called on this thread after each point.
pub fn run_local(
    points: Vec<Point>,
    store: &mut Store,
    jobs: usize,
    progress: &mut dyn FnMut(usize, usize),
) -> Result<Outcome, StoreError> {
    let keys: Vec<String> = points.iter().map(Point::key).collect();
    let mut results = Vec::with_capacity(points.len());
    for key in &keys {
        results.push(store.point(key)?);
    }
    let pending: Vec<usize> = (0..points.len()).filter(|&i| results[i].is_none()).collect();
    let stored = points.len() - pending.len();
    let mut failed = Vec::new();
    let next = AtomicUsize::new(0);
    let real_kernel = Mutex::new(());
    let (tx, rx) = mpsc::channel();
    progress(stored, points.len());
    std::thread::scope(|s| -> Result<(), StoreError> {
        for _ in 0..jobs.clamp(1, pending.len().max(1)) {
            let tx = tx.clone();
            let (next, pending, points, real_kernel) = (&next, &pending, &points, &real_kernel);
            s.spawn(move || {
                while let Some(&i) = pending.get(next.fetch_add(1, Ordering::Relaxed)) {
                    let p = &points[i];
                    let _one = p.needs().map(|_| real_kernel.lock().unwrap_or_else(|e| e.into_inner()));
                    let start = std::time::Instant::now();
                    let r = run_caught(p);
                    if tx.send((i, r, start.elapsed())).is_err() {
                        return;
                    }
                }
            });
        }
        drop(tx);
        let mut done = stored;
        for (i, r, wall) in rx {
            match r {
                Ok(v) => {
                    store.record_point(&keys[i], &points[i].new_run(v.clone(), wall.as_secs_f64() * 1e3))?;
                    results[i] = Some(v);
                }
                Err(e) => failed.push((i, e)),
            }
            done += 1;
            progress(done, points.len());
        }
        Ok(())
    })?;
    failed.sort();
    Ok(Outcome {
        points,
        results,
        ran: pending.len() - failed.len(),
        stored,
        failed,
    })
}

/// Runs `p`; a panic is the point's failure, not the sweep's end.
pub fn run_caught(p: &Point) -> Result<Value, String> {
    match std::panic::catch_unwind(std::panic::AssertUnwindSafe(|| p.run())) {
        Ok(r) => r.map_err(|e| e.to_string()),
        Err(panic) => Err(format!("panicked: {}", panic_message(&*panic))),
    }
}

/// The text of a caught panic.
pub fn panic_message(panic: &(dyn std::any::Any + Send)) -> String {
    panic
        .downcast_ref::<String>()
        .cloned()
        .or_else(|| panic.downcast_ref::<&str>().map(|s| s.to_string()))
        .unwrap_or_else(|| "(no message)".into())
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::sweep::Spec;

    /// Two small workloads (milliseconds each) in a scratch directory, and that directory.
    fn scratch(name: &str) -> std::path::PathBuf {
        let dir = std::env::temp_dir().join(format!("foliolab-sweep-{name}-{}", std::process::id()));
        let _ = std::fs::remove_dir_all(&dir);
        std::fs::create_dir_all(&dir).unwrap();
        let w64 = "set hugepages-64kB/enabled always\nmmap buf 4M\ntouch buf\nmark unmap\nmunmap buf\n";
        std::fs::write(dir.join("a.wl"), w64).unwrap();
        std::fs::write(
            dir.join("b.wl"),
            "mmap buf 4M populate\nmadvise buf 0 4M dontneed step=64K\n",
        )
        .unwrap();
        dir
    }

    fn spec() -> Spec {
        toml::from_str(
            r#"workloads = ["a.wl", "b.wl"]
               kernels = ["6.12", "6.18"]
               machines = ["altra-metal"]
               [variants]
               zap = ["per-pte", "batched"]"#,
        )
        .unwrap()
    }

    fn sweep(dir: &std::path::Path, db: &str, jobs: usize, reverse: bool) -> (Outcome, super::super::Table) {
        let mut points = spec().points(dir).unwrap();
        if reverse {
            points.reverse();
        }
        let mut store = Store::open(&dir.join(db)).unwrap();
        let mut o = run_local(points, &mut store, jobs, &mut |_, _| {}).unwrap();
        if reverse {
            o.points.reverse();
            o.results.reverse();
        }
        let t = super::super::table::table(&o.points, &o.results);
        (o, t)
    }

    #[test]
    fn the_table_is_the_same_whatever_the_thread_count_and_order() {
        let dir = scratch("threads");
        let (one, t1) = sweep(&dir, "one.db", 1, false);
        let (three, t3) = sweep(&dir, "three.db", 3, true);
        assert_eq!((one.ran, three.ran, one.points.len()), (8, 8, 8));
        assert!(one.failed.is_empty() && three.failed.is_empty());
        assert_eq!(t1, t3);
        assert!(t1.rows() > 8);
        std::fs::remove_dir_all(dir).unwrap();
    }

    #[test]
    fn a_rerun_runs_only_what_is_not_stored() {
        let dir = scratch("rerun");
        let (first, t1) = sweep(&dir, "r.db", 2, false);
        assert_eq!((first.ran, first.stored), (8, 0));
        let (again, t2) = sweep(&dir, "r.db", 2, false);
        assert_eq!((again.ran, again.stored), (0, 8));
        assert_eq!(t1, t2);
        std::fs::remove_dir_all(dir).unwrap();
    }
}
