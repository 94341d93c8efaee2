//! The results store survives a crash: `foliolab run` killed with SIGKILL at points
//! spread over its whole life, writing included, leaves a database that opens and holds
//! every run that had finished, each whole.

use std::process::{Command, Stdio};
use std::time::Instant;

fn foliolab(db: &std::path::Path) -> Command {
    let mut c = Command::new(env!("CARGO_BIN_EXE_foliolab"));
    c.env("FOLIOLAB_DB", db);
    c
}

/// Stored runs, read through `foliolab runs --json`; every stored report must parse.
fn stored(db: &std::path::Path) -> Vec<serde_json::Value> {
    let out = foliolab(db).args(["runs", "--json"]).output().unwrap();
    assert!(out.status.success(), "{}", String::from_utf8_lossy(&out.stderr));
    serde_json::from_slice(&out.stdout).unwrap()
}

#[test]
fn a_run_killed_mid_write_leaves_every_finished_run() {
    let dir = std::path::Path::new(env!("CARGO_TARGET_TMPDIR")).join("store-crash");
    let _ = std::fs::remove_dir_all(&dir);
    std::fs::create_dir_all(&dir).unwrap();
    let db = dir.join("results.db");
    // Every other page touched: a 131,072-run layout, so the report takes a while to write.
    let wl = dir.join("big.wl");
    std::fs::write(&wl, "mmap a 1G nohugepage\ntouch a stride=8K\n").unwrap();
    let run = |db: &std::path::Path| {
        let mut c = foliolab(db);
        c.arg("run").arg(&wl).stdout(Stdio::null());
        c
    };
    let start = Instant::now();
    assert!(run(&db).status().unwrap().success());
    let whole = start.elapsed();
    let mut finished = stored(&db).len();
    assert_eq!(finished, 1);
    // Kills spread evenly over one run's whole life, each on a fresh process.
    let kills = 16;
    for k in 0..kills {
        let mut child = run(&db).spawn().unwrap();
        std::thread::sleep(whole * k / kills);
        // SAFETY: signalling a child we spawned.
        unsafe { libc::kill(child.id() as i32, libc::SIGKILL) };
        let status = child.wait().unwrap();
        let runs = stored(&db);
        if status.success() {
            finished += 1;
        }
        // A run killed after its commit is there too; one killed before is not.
        assert!(
            runs.len() == finished || runs.len() == finished + 1,
            "{} stored, {finished} finished",
            runs.len()
        );
        finished = runs.len();
        let c = rusqlite::Connection::open(&db).unwrap();
        let ok: String = c.query_row("PRAGMA integrity_check", [], |r| r.get(0)).unwrap();
        assert_eq!(ok, "ok");
        let reports: Vec<String> = c
            .prepare("SELECT report FROM runs")
            .unwrap()
            .query_map([], |r| r.get(0))
            .unwrap()
            .map(|r| r.unwrap())
            .collect();
        for r in reports {
            let v: serde_json::Value = serde_json::from_str(&r).unwrap();
            assert_eq!(v["layout"]["main/a"].as_array().unwrap().len(), 131072);
        }
    }
}
