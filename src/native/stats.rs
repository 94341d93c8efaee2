//! The host's global counters: the THP-relevant part of /proc/vmstat and every per-size
//! mTHP stat. Files are opened once and re-read with `pread`, into buffers allocated
//! once, so a snapshot between two ops takes no page faults of its own.

use std::collections::BTreeMap;
use std::fs::File;
use std::os::unix::fs::FileExt;
use std::path::Path;

/// The /proc/vmstat counters reported as `vmstat.<name>`: page faults, THP fault
/// allocation and fallback, splits (whole, deferred, underused, PMD), collapse, the huge
/// zero page, THP swap-out and lazyfree pages discarded by reclaim, swap-in and
/// swap-out and swap readahead (swap_ra, swap_ra_hit), reclaim's LRU scan and steal
/// counts, and migration. System-wide counters such as pgfree or pgalloc_* are left
/// out: other processes on the host move them by far more than a workload does; so are
/// pgactivate and pgdeactivate, which every file page read twice moves (the runner's
/// own binary in a QEMU guest, where no idle window measures it).
pub const VMSTAT_KEYS: &[&str] = &[
    "pgfault",
    "thp_fault_alloc",
    "thp_fault_fallback",
    "thp_fault_fallback_charge",
    "thp_collapse_alloc",
    "thp_collapse_alloc_failed",
    "thp_scan_exceed_none_pte",
    "thp_scan_exceed_swap_pte",
    "thp_scan_exceed_share_pte",
    "thp_split_page",
    "thp_split_page_failed",
    "thp_deferred_split_page",
    "thp_underused_split_page",
    "thp_split_pmd",
    "thp_zero_page_alloc",
    "thp_zero_page_alloc_failed",
    "thp_swpout",
    "thp_swpout_fallback",
    "thp_file_alloc",
    "thp_file_fallback",
    "thp_file_fallback_charge",
    "thp_file_mapped",
    "pglazyfreed",
    "pswpin",
    "pswpout",
    "swpin_zero",
    "swpout_zero",
    "pgmajfault",
    "swap_ra",
    "swap_ra_hit",
    "pgmigrate_success",
    "pgmigrate_fail",
    "thp_migration_success",
    "thp_migration_fail",
    "thp_migration_split",
    "pgscan_anon",
    "pgsteal_anon",
    "pgscan_file",
    "pgsteal_file",
];

/// Open counter files and the names their values go under.
pub struct Sources {
    vmstat: Option<File>,
    /// `(key, file)` for each mTHP stat.
    mthp: Vec<(String, File)>,
    /// Keys of the counters, in snapshot order.
    keys: Vec<String>,
    buf: Vec<u8>,
}

impl Sources {
    /// Opens what exists; what doesn't goes to `unavailable` as `key -> reason`.
    pub fn open(vmstat: &Path, thp_dir: &Path, unavailable: &mut BTreeMap<String, String>) -> Sources {
        let mut keys = Vec::new();
        let vmstat = match File::open(vmstat) {
            Ok(f) => {
                let text = std::fs::read_to_string(vmstat).unwrap_or_default();
                for k in VMSTAT_KEYS {
                    if text.lines().any(|l| l.split_whitespace().next() == Some(k)) {
                        keys.push(format!("vmstat.{k}"));
                    } else {
                        unavailable.insert(format!("vmstat.{k}"), format!("not in {}", vmstat.display()));
                    }
                }
                Some(f)
            }
            Err(e) => {
                unavailable.insert("vmstat.*".into(), format!("{}: {e}", vmstat.display()));
                None
            }
        };
        let mut mthp = Vec::new();
        let mut sizes: Vec<(u64, std::path::PathBuf)> = std::fs::read_dir(thp_dir)
            .into_iter()
            .flatten()
            .flatten()
            .filter_map(|e| {
                let name = e.file_name().into_string().ok()?;
                let kb = name.strip_prefix("hugepages-")?.strip_suffix("kB")?.parse().ok()?;
                Some((kb, e.path().join("stats")))
            })
            .collect();
        sizes.sort();
        if sizes.is_empty() {
            unavailable.insert(
                "mthp.*".into(),
                format!("no hugepages-<size>kB in {}", thp_dir.display()),
            );
        }
        for (kb, dir) in sizes {
            let mut files: Vec<_> = match std::fs::read_dir(&dir) {
                Ok(rd) => rd
                    .flatten()
                    .filter_map(|e| Some((e.file_name().into_string().ok()?, e.path())))
                    .collect(),
                Err(e) => {
                    unavailable.insert(format!("mthp.{kb}kB.*"), format!("{}: {e}", dir.display()));
                    continue;
                }
            };
            files.sort();
            for (stat, path) in files {
                let key = format!("mthp.{kb}kB.{stat}");
                match File::open(&path) {
                    Ok(f) => mthp.push((key, f)),
                    Err(e) => {
                        unavailable.insert(key, format!("{}: {e}", path.display()));
                    }
                }
            }
        }
        keys.extend(mthp.iter().map(|(k, _)| k.clone()));
        Sources {
            vmstat,
            mthp,
            keys,
            buf: vec![0; 64 << 10],
        }
    }

    pub fn keys(&self) -> &[String] {
        &self.keys
    }

    /// Reads every counter into `out` (in `keys` order, which it must match in length).
    pub fn snapshot(&mut self, out: &mut [i64]) -> std::io::Result<()> {
        let mut i = 0;
        if let Some(f) = &self.vmstat {
            let n = f.read_at(&mut self.buf, 0)?;
            let text = std::str::from_utf8(&self.buf[..n]).unwrap_or("");
            // VMSTAT_KEYS that exist, in order; vmstat lines are "name value".
            for k in VMSTAT_KEYS {
                if i < out.len() && self.keys[i].strip_prefix("vmstat.") == Some(k) {
                    out[i] = find_value(text, k).unwrap_or(0);
                    i += 1;
                }
            }
        }
        for (_, f) in &self.mthp {
            let n = f.read_at(&mut self.buf, 0)?;
            out[i] = std::str::from_utf8(&self.buf[..n])
                .ok()
                .and_then(|s| s.trim().parse().ok())
                .unwrap_or(0);
            i += 1;
        }
        Ok(())
    }
}

fn find_value(text: &str, key: &str) -> Option<i64> {
    text.lines().find_map(|l| {
        let (k, v) = l.split_once(' ')?;
        (k == key).then(|| v.trim().parse().ok()).flatten()
    })
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn reads_fake_sources_and_lists_what_is_missing() {
        let dir = std::env::temp_dir().join(format!("foliolab-stats-{}", std::process::id()));
        let stats = dir.join("thp/hugepages-64kB/stats");
        std::fs::create_dir_all(&stats).unwrap();
        std::fs::write(dir.join("vmstat"), "nr_free_pages 5\npgfault 100\nthp_fault_alloc 7\n").unwrap();
        std::fs::write(stats.join("anon_fault_alloc"), "12\n").unwrap();
        std::fs::write(stats.join("split"), "3\n").unwrap();
        let mut un = BTreeMap::new();
        let mut s = Sources::open(&dir.join("vmstat"), &dir.join("thp"), &mut un);
        assert_eq!(
            s.keys(),
            [
                "vmstat.pgfault",
                "vmstat.thp_fault_alloc",
                "mthp.64kB.anon_fault_alloc",
                "mthp.64kB.split"
            ]
        );
        assert!(un.contains_key("vmstat.thp_split_pmd"));
        let mut out = vec![0; 4];
        s.snapshot(&mut out).unwrap();
        assert_eq!(out, [100, 7, 12, 3]);
        let mut un = BTreeMap::new();
        let s = Sources::open(&dir.join("nope"), &dir.join("nope"), &mut un);
        assert!(s.keys().is_empty());
        assert_eq!(un.keys().collect::<Vec<_>>(), ["mthp.*", "vmstat.*"]);
        std::fs::remove_dir_all(&dir).unwrap();
    }
}
