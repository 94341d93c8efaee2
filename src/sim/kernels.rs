//! Kernel presets (`--kernel 6.1|6.12|6.18|7.0|…|7.3`): each upstream change the model can show
//! either side of, as the variant key it flips, the release that brought it and the
//! commit behind it. A preset is every change's value as of that release, so the
//! presets and `foliolab kernels` come from one table and cannot drift apart.

/// A release foliolab has a preset for: the host's 6.18 and Debian's arm64 kernels.
#[derive(Clone, Copy, Debug, PartialEq, Eq, PartialOrd, Ord)]
pub struct Release(pub u32, pub u32);

impl std::fmt::Display for Release {
    fn fmt(&self, f: &mut std::fmt::Formatter) -> std::fmt::Result {
        write!(f, "{}.{}", self.0, self.1)
    }
}

/// The releases with a preset, oldest first.
pub const KERNELS: &[Release] = &[
    Release(6, 1),
    Release(6, 12),
    Release(6, 18),
    Release(7, 0),
    Release(7, 1),
    Release(7, 2),
    Release(7, 3),
];

/// The preset used when none is named: the newest release whose whole suite is
/// validated exactly on a real arm64 kernel, 7.3 (both guests, 4K and 16K;
/// docs/src/tasks/validate.md). Comparing with a real kernel takes that kernel's own
/// release instead (`host_release`, a guest's), not this.
pub const DEFAULT: Release = Release(7, 3);

/// The preset of a kernel release `MAJOR.MINOR[.…]`: the newest release with a preset
/// not after it (None when it predates them all).
pub fn preset_for(release: &str) -> Option<Release> {
    let mut parts = release.split(['.', '-', '+']);
    let mut num = || parts.next()?.parse::<u32>().ok();
    let r = Release(num()?, num()?);
    KERNELS.iter().rev().copied().find(|&k| k <= r)
}

/// The preset of the kernel this process runs on (`validate` against the host
/// models the host's release, not the default): the oldest preset if the release
/// cannot be read or predates them.
pub fn host_release() -> Release {
    std::fs::read_to_string("/proc/sys/kernel/osrelease")
        .ok()
        .and_then(|r| preset_for(r.trim()))
        .unwrap_or(KERNELS[0])
}

/// The release `--kernel` names, refusing one without a preset.
pub fn parse_kernel(s: &str) -> Result<Release, String> {
    KERNELS.iter().copied().find(|r| r.to_string() == s).ok_or_else(|| {
        let known: Vec<String> = KERNELS.iter().map(ToString::to_string).collect();
        let hint = crate::suggest::hint(s, known.iter().map(String::as_str));
        format!("--kernel {s}: no preset for it{hint} (known: {})", known.join(", "))
    })
}

/// Which command's `--set` keys a change is one of.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum Scope {
    /// `run`, `validate`, `reproduce`'s workloads.
    Run,
    /// `boot` (the linear map).
    Boot,
}

/// One upstream change: `key` was `before` up to the release before `release`, and
/// `after` from it on.
pub struct Change {
    pub scope: Scope,
    pub key: &'static str,
    pub before: &'static str,
    pub after: &'static str,
    pub release: Release,
    /// The upstream commit (abbreviated), and others of the same series after a space.
    pub commit: &'static str,
    pub what: &'static str,
}

/// Every change between 6.1 and 7.3 that a workload or `boot` can observe and the
/// model has both sides of, oldest first.
pub const CHANGES: &[Change] = &[
    Change {
        scope: Scope::Run,
        key: "pmd-freeze-rmap",
        before: "per-page",
        after: "none",
        release: Release(6, 2),
        commit: "96d82deb743a",
        what: "a freezing pmd split no longer removes each page's rmap (which queued the THP for deferred split)",
    },
    Change {
        scope: Scope::Run,
        key: "mprotect-mkwrite",
        before: "dirty-pte",
        after: "exclusive",
        release: Release(6, 2),
        commit: "c27f479ef542 d84887739d5c",
        what: "mprotect makes exclusive anon pmds and clean ptes writable, sparing the write fault",
    },
    Change {
        scope: Scope::Run,
        key: "tlb-batch",
        before: "sync",
        after: "deferred",
        release: Release(6, 6),
        commit: "43b3dfdd0455",
        what: "seed 001: arm64 defers reclaim's TLB flush (ARCH_WANT_BATCHED_UNMAP_TLB_FLUSH)",
    },
    Change {
        scope: Scope::Run,
        key: "rmap-api",
        before: "page",
        after: "folio",
        release: Release(6, 8),
        commit: "b06dc281aa99",
        what: "rmap removal per folio batch (folio_remove_rmap_ptes) instead of per page (page_remove_rmap)",
    },
    Change {
        scope: Scope::Run,
        key: "mthp",
        before: "off",
        after: "on",
        release: Release(6, 8),
        commit: "19eaf44954df 3485b88390b0",
        what: "seed 002: anonymous faults allocate multi-size THP; hugepages-<size>kB/enabled",
    },
    Change {
        scope: Scope::Run,
        key: "flush-range-nosync",
        before: "unsplit",
        after: "split",
        release: Release(6, 9),
        commit: "d9d8dc2bd3fb",
        what: "__flush_tlb_range_nosync split out: a flush_tlb_mm fallback is followed by one more DSB ISH",
    },
    Change {
        scope: Scope::Run,
        key: "pageout-young",
        before: "clear",
        after: "ignore",
        release: Release(6, 9),
        commit: "2864f3d0f583",
        what: "MADV_PAGEOUT no longer clears young bits (and flushes) before reclaim",
    },
    Change {
        scope: Scope::Run,
        key: "contpte",
        before: "off",
        after: "on",
        release: Release(6, 9),
        commit: "4602e5757bcc",
        what: "arm64 folds aligned 64K blocks of one folio with the contiguous bit",
    },
    Change {
        scope: Scope::Run,
        key: "zap",
        before: "per-pte",
        after: "batched",
        release: Release(6, 9),
        commit: "10ebac4f95e7 6b1e4efb6f54",
        what: "seed 000: zap_pte_range clears a folio's ptes as one batch",
    },
    Change {
        scope: Scope::Boot,
        key: "pgtable-fixmap",
        before: "per-cont-block",
        after: "once",
        release: Release(6, 10),
        commit: "5c63db59c5f8 1fcb7cea8a5f 0e9df1c905d8",
        what: "seed 003: map_mem maps each new table in the fixmap once",
    },
    Change {
        scope: Scope::Run,
        key: "swapin-write",
        before: "on-write",
        after: "on-read",
        release: Release(6, 11),
        commit: "c18160dba5ff",
        what: "a read fault that swaps in an exclusive folio maps it writable, so a later write does not fault",
    },
    Change {
        scope: Scope::Run,
        key: "shrink-underused",
        before: "off",
        after: "on",
        release: Release(6, 12),
        commit: "dafff3f4c850",
        what: "new PMD THPs are queued and the split shrinker splits underused ones; the shrink_underused knob",
    },
    Change {
        scope: Scope::Run,
        key: "split-zeropage",
        before: "off",
        after: "on",
        release: Release(6, 12),
        commit: "b1f202060afe",
        what: "a split anon THP's zero-filled pages become the shared zero page",
    },
    Change {
        scope: Scope::Run,
        key: "huge-zero-wp",
        before: "split",
        after: "thp",
        release: Release(6, 13),
        commit: "1ced09e0331f",
        what: "a write fault on the huge zero pmd maps a new THP",
    },
    Change {
        scope: Scope::Run,
        key: "shmem-swapout",
        before: "split",
        after: "whole",
        release: Release(6, 12),
        commit: "809bc86517cc",
        what: "shmem_writeout writes a large folio whole with THP_SWAP instead of always splitting it first (Baolin Wang, \"mm: shmem: support large folio swap out\", the id later Fixes: tags name; in 6.12's source and on the 6.12 guest)",
    },
    Change {
        scope: Scope::Run,
        key: "shmem-swapin",
        before: "cluster",
        after: "direct",
        release: Release(6, 14),
        commit: "1dd44c0af4fa",
        what: "a shmem swap-in from a synchronous device (zram) skips the swap cache and its cluster readahead",
    },
    Change {
        scope: Scope::Run,
        key: "fault-dirty",
        before: "write",
        after: "folio",
        release: Release(6, 15),
        commit: "4e92030c05dc",
        what: "a read fault maps a writable page of a dirty file folio dirty",
    },
    Change {
        scope: Scope::Run,
        key: "cow-reuse",
        before: "order0",
        after: "large",
        release: Release(6, 15),
        commit: "1da190f4d0a6",
        what: "a write fault reuses an exclusive large anon folio instead of copying",
    },
    Change {
        scope: Scope::Run,
        key: "lazyfree-unmap",
        before: "per-pte",
        after: "batched",
        release: Release(6, 15),
        commit: "354dffd29575",
        what: "try_to_unmap_one discards a lazyfree large folio in one batch",
    },
    Change {
        scope: Scope::Run,
        key: "split-list",
        before: "reversed",
        after: "in-order",
        release: Release(6, 15),
        commit: "00527733d0dc8",
        what: "a split folio's tail pages go on reclaim's list in address order (__split_unmapped_folio), so a large folio that falls back to order-0 swap-out gets descending slots",
    },
    Change {
        scope: Scope::Run,
        key: "mprotect-batch",
        before: "per-pte",
        after: "batched",
        release: Release(6, 17),
        commit: "cac1db8c3aad 7efa1cd5f89b",
        what: "change_pte_range changes a folio's ptes as one batch",
    },
    Change {
        scope: Scope::Run,
        key: "mremap-batch",
        before: "per-pte",
        after: "batched",
        release: Release(6, 17),
        commit: "f822a9a81a31 0b5be138ce00",
        what: "move_ptes moves a folio's ptes as one batch, looking the folio up only for a contpte pte (`mremap-batch=lookup-all`: 6.17-rc1's lookup of every pte, the LKP regression)",
    },
    Change {
        scope: Scope::Run,
        key: "collapse-copy",
        before: "per-pte",
        after: "batched",
        release: Release(6, 17),
        commit: "4ea3594a4741",
        what: "khugepaged clears the old ptes a folio at a time",
    },
    Change {
        scope: Scope::Run,
        key: "bbml2-elide",
        before: "off",
        after: "on",
        release: Release(6, 17),
        commit: "83bbd6be7d17",
        what: "contpte_convert skips its TLBI on a CPU the kernel finds BBML2_NOABORT on (`cpu`, `bbml2-detect`; `bbml2=on` for the unnamed CPU)",
    },
    Change {
        scope: Scope::Run,
        key: "ptep_get",
        before: "full-scan",
        after: "early-exit",
        release: Release(6, 17),
        commit: "093ae7a033cf",
        what: "seed 004: contpte_ptep_get stops once young and dirty are known",
    },
    Change {
        scope: Scope::Run,
        key: "linmap-split",
        before: "pte",
        after: "on-demand",
        release: Release(6, 18),
        commit: "a166563e7ec3 a660194dd101 e5efd56fa157",
        what: "with BBML2_NOABORT (BBM Level 3 in 7.3) rodata=full keeps the linear map in blocks and splits it when a page's permissions change (split_kernel_leaf_mapping from set_direct_map_*: memfd_secret's faults); no TLBI for the split",
    },
    Change {
        scope: Scope::Run,
        key: "swap-alloc",
        before: "free-first",
        after: "nonfull-first",
        release: Release(6, 18),
        commit: "9a42aed48421",
        what: "the swap allocator of a device without discard takes a nonfull cluster before a free one",
    },
    Change {
        scope: Scope::Run,
        key: "swap-cache",
        before: "xarray",
        after: "table",
        release: Release(6, 18),
        commit: "8578e0c00dcf 07adc4cf1ecd f83938e4188c",
        what: "swap table phase I: the swap cache moves from an XArray per 64 MiB swap address space (its xa_lock) to each cluster's table of one entry per slot (the cluster lock); kernel.swap_cache.* only",
    },
    Change {
        scope: Scope::Run,
        key: "collapse-ro",
        before: "refuse",
        after: "allow",
        release: Release(6, 18),
        commit: "62b98015d988 473b73222f3d",
        what: "a collapse of an all-read-only anon range no longer fails with SCAN_PAGE_RO",
    },
    Change {
        scope: Scope::Run,
        key: "faultaround",
        before: "window",
        after: "folio",
        release: Release(6, 18),
        commit: "357b92761d94",
        what: "fault-around maps a large page-cache folio wholly when it lies in the VMA and one page table",
    },
    Change {
        scope: Scope::Run,
        key: "prot-flush",
        before: "always",
        after: "elide",
        release: Release(6, 19),
        commit: "c320dbb7c80d",
        what: "arm64's pte_needs_flush skips mprotect's flush when only software bits change",
    },
    Change {
        scope: Scope::Run,
        key: "wp-flush",
        before: "broadcast",
        after: "local",
        release: Release(6, 19),
        commit: "cb1fa2e99955 79301c7d605a",
        what: "a write fault's flush of its stale read-only pte or pmd stays on the faulting CPU (TLBI VALE1, DSB NSH)",
    },
    Change {
        scope: Scope::Run,
        key: "sync-swapin",
        before: "bypass",
        after: "cache",
        release: Release(7, 0),
        commit: "f1879e8a0c60 ab08be8dc96a 4b34f1d82c65",
        what: "do_swap_page on zram reads every slot through the swap cache, never with readahead, in a folio as large as its ptes allow (a slot a fork shares too), maps a page writable only when its swap pte is exclusive, and frees the cache after mapping once no pte holds the slot (swap table phase II)",
    },
    Change {
        scope: Scope::Run,
        key: "file-unmap",
        before: "per-pte",
        after: "batched",
        release: Release(7, 0),
        commit: "a67fe41e214f",
        what: "try_to_unmap_one clears each run of a large file folio's ptes in one batch",
    },
    Change {
        scope: Scope::Run,
        key: "flush-range-nosync",
        before: "split",
        after: "unsplit",
        release: Release(7, 1),
        commit: "11f6dd8dd283 0477fc56960d 15397e3c3850",
        what: "arm64's TLB-flush helpers in C (tlbf_t flags, __do_flush_tlb_range; \"arm64: mm: Refactor __flush_tlb_range() to take flags\" and the rest of arm64's for-next/tlbflush, into mainline with the 7.1 merge window's arm64 pull, c43267e6794a): a range too large for TLBIs returns after flush_tlb_mm, without __flush_tlb_range's second DSB ISH. In 7.2.13's and 7.3.4's source; which commit of the series dropped the DSB was not read (the mainline mirror could not be fetched). No guest shows it: QEMU's range TLBIs reach 8 GiB",
    },
    Change {
        scope: Scope::Run,
        key: "lazyfree-pmd",
        before: "split",
        after: "discard",
        release: Release(7, 0),
        commit: "(mainline id not found)",
        what: "try_to_unmap_one discards a lazyfree PMD-mapped THP at its pmd (the folio_test_lazyfree branch under `if (!pvmw.pte)`, unmap_huge_pmd_locked: one pmd clear and flush, no thp_split_pmd; a folio written since MADV_FREE is marked swap-backed and kept pmd-mapped) instead of splitting the pmd and discarding its ptes; in 7.2.13's source, on the 7.0 and 7.2 guests (free_pageout_pmd: 2 faults, the read mapping the huge zero page); 6.12.117's source has unmap_huge_pmd_locked with no caller; 7.1 not read",
    },
    Change {
        scope: Scope::Run,
        key: "shmem-split-stat",
        before: "uncounted",
        after: "counted",
        release: Release(7, 0),
        commit: "(mainline id not found)",
        what: "shmem_writeout counts the split of a large folio it cannot swap out whole (no THP_SWAP, or no run of slots) as swpout_fallback (thp_swpout_fallback for PMD size) (\"mm/shmem: add mTHP swpout fallback statistics in shmem_writeout()\", in mm-unstable from December 2025, so the 7.0 merge window at the earliest; in 7.2.13's and 7.3.4's source, counted on the 7.2 guest; 7.0's guest has no swap and 7.0's source was not read)",
    },
    Change {
        scope: Scope::Run,
        key: "contpte-access",
        before: "gathered",
        after: "raw",
        release: Release(7, 0),
        commit: "97c5550b7631",
        what: "contpte_ptep_set_access_flags checks every entry of the block raw, no gathered contpte_ptep_get (\"arm64: contpte: fix set_access_flags() no-op check for SMMU/ATS faults\"; also in 6.19 stable)",
    },
    Change {
        scope: Scope::Run,
        key: "khugepaged-mthp",
        before: "off",
        after: "on",
        release: Release(7, 2),
        commit: "(mainline id not found)",
        what: "khugepaged collapses anon ranges to mTHP orders too (Nico Pache, \"mm/khugepaged: introduce mTHP collapse support\" and its series, v18 2026-05; collapse_scan_pmd's present-pte bitmap, mthp_collapse, collapse_max_ptes_none per order, per-order collapse stats); in 7.2.13's and 7.3.4's source; the 7.0 guest's khugepaged stops under a 64K-only setting (no mTHP collapse yet), the 7.2 guest's collapses 64K blocks as 7.3's (workloads/khugepaged/mthp_64k.wl); 7.1 not read",
    },
    Change {
        scope: Scope::Run,
        key: "lazyfree-pmd",
        before: "discard",
        after: "split",
        release: Release(7, 3),
        commit: "(mainline id not found)",
        what: "the pmd discard of a lazyfree THP removed again: try_to_unmap_one splits the pmd (\"mm/rmap: don't discard lazyfree THPs at PMD level\", in stable 7.3.2 by Debian's 7.3.3-1 changelog; absent from 7.3.4's source, which keeps unmap_huge_pmd_locked uncalled; the 7.3 guest and the 6.18 host split)",
    },
    Change {
        scope: Scope::Run,
        key: "bbml2-detect",
        before: "midr-list",
        after: "idreg-or-list",
        release: Release(7, 3),
        commit: "06468bc3c936 4955df16ff99 f8d0751426dd",
        what: "BBML2_NOABORT becomes BBM Level 3 (cpu_supports_bbml3): ID_AA64MMFR2_EL1.BBM >= 3 or a longer MIDR allow-list (Cortex-A725, Neoverse N3, C1, ...)",
    },
    Change {
        scope: Scope::Boot,
        key: "map-mem",
        before: "nomap-image",
        after: "alias-first",
        release: Release(7, 2),
        commit: "(mainline id not found)",
        what: "map_mem no longer marks the kernel image NOMAP: it maps [_text, __init_begin) and the data/bss first with its own flags (so rodata's later permission change splits no block), then every bank whole over them, keeping a table where one is (`!pXd_table(old)`) and CONT off a run holding a valid non-CONT entry; in 7.2.13's and 7.3.4's source, and the 7.2 guest's map_mem is the model's under it, the 7.0 guest's under nomap-image (7.1 not read: its preset keeps 7.0's)",
    },
];

/// An upstream change since 6.18 read in the source that the model does not take,
/// and why: `foliolab kernels` says so rather than leave it out.
pub struct Unmodeled {
    pub what: &'static str,
    /// The first release with it, as read in Debian's source or the series' merge.
    pub since: &'static str,
    pub commit: &'static str,
    pub why: &'static str,
}

/// The changes of 6.18 to 7.3 in arm64 mm read in the source and not modeled.
pub const NOT_MODELED: &[Unmodeled] = &[
    Unmodeled {
        what: "swap_map and the zeromap merged into the swap table (the swap count and the zero flag in each slot's table entry; swap table phases III and IV)",
        since: "7.2",
        commit: "mainline ids not found (the mainline mirror could not be fetched; mm-unstable has phase IV's \"mm, swap: merge zeromap into swap table\" from May 2026): Kairui Song, <20260218-swap-table-p3-v3-0-f4e34be021a7@tencent.com> (phase III) and <20260517-swap-table-p4-v5-0-88ae43e064c7@tencent.com> (phase IV); 7.2.13's and 7.3.4's source have neither si->swap_map nor si->zeromap (7.2's swap_zeromap_folio_set writes the table: __swap_table_set_zero), 6.18's both; 7.0's and 7.1's source not read (phase III, posted in February 2026, may be 7.1's)",
        why: "the model keeps a swap_map byte and a zeromap flag per slot and does not count their accesses one for one with the kernel's (__swap_duplicate's, swap_entries_free's and swap_zeromap_batch's loops), so no event shows the merge; no count the guests report changes with it",
    },
];

/// The `--set` values of `kernel`'s preset for `scope`: every key's value as of it.
/// A key that changed twice has two rows, oldest first; the later one decides from
/// its release on.
pub fn preset(kernel: Release, scope: Scope) -> Vec<String> {
    let mut out: Vec<(&str, &str)> = Vec::new();
    for c in CHANGES.iter().filter(|c| c.scope == scope) {
        let v = if kernel >= c.release { c.after } else { c.before };
        match out.iter_mut().find(|(k, _)| *k == c.key) {
            Some(slot) if kernel >= c.release => slot.1 = v,
            Some(_) => {}
            None => out.push((c.key, v)),
        }
    }
    out.into_iter().map(|(k, v)| format!("{k}={v}")).collect()
}

/// `sets` with `kernel`'s preset under them: a key the user sets keeps their value.
pub fn with_preset(kernel: Release, scope: Scope, sets: &[String]) -> Vec<String> {
    overlay(preset(kernel, scope), sets)
}

/// `KEY=VALUE` settings `over` laid over `base`: `base`'s keys that `over` leaves
/// alone, then all of `over`.
pub fn overlay(base: Vec<String>, over: &[String]) -> Vec<String> {
    let key = |s: &str| s.split_once('=').map_or(s, |(k, _)| k).to_string();
    let mut out: Vec<String> = base
        .into_iter()
        .filter(|b| !over.iter().any(|o| key(o) == key(b)))
        .collect();
    out.extend(over.iter().cloned());
    out
}

/// `foliolab kernels`: a row per change, its value under each preset, the commit.
pub fn table() -> String {
    use std::fmt::Write;
    let rows: Vec<[String; 4]> = CHANGES
        .iter()
        .map(|c| {
            let scope = match c.scope {
                Scope::Run => "",
                Scope::Boot => "boot ",
            };
            [
                format!("{scope}{}", c.key),
                c.release.to_string(),
                c.commit.to_string(),
                c.what.to_string(),
            ]
        })
        .collect();
    let key_w = rows.iter().map(|r| r[0].len()).max().unwrap_or(0).max(3);
    let commit_w = rows.iter().map(|r| r[2].len()).max().unwrap_or(0);
    let val_w = CHANGES
        .iter()
        .flat_map(|c| [c.before.len(), c.after.len()])
        .max()
        .unwrap_or(0);
    let mut s = format!("{:<key_w$}", "key");
    for k in KERNELS {
        let _ = write!(s, "  {:<val_w$}", k.to_string());
    }
    let _ = writeln!(s, "  {:<5}  {:<commit_w$}  change", "since", "commit");
    // Every cell is the preset's value, so a key that changed twice shows on both its
    // rows what each release really has (not the row's own before/after outside its span).
    let presets: Vec<[Vec<String>; 2]> = KERNELS
        .iter()
        .map(|&k| [preset(k, Scope::Run), preset(k, Scope::Boot)])
        .collect();
    for (c, r) in CHANGES.iter().zip(&rows) {
        let _ = write!(s, "{:<key_w$}", r[0]);
        for p in &presets {
            let set = &p[usize::from(c.scope == Scope::Boot)];
            let value = set
                .iter()
                .find_map(|s| s.strip_prefix(c.key)?.strip_prefix('='))
                .expect("a preset sets every key of its scope");
            let _ = write!(s, "  {value:<val_w$}");
        }
        let _ = writeln!(s, "  {:<5}  {:<commit_w$}  {}", r[1], r[2], r[3]);
    }
    let _ = writeln!(s, "\nread in the source, not modeled:");
    for u in NOT_MODELED {
        let _ = writeln!(
            s,
            "  {} (since {}; {}): not modeled: {}",
            u.what, u.since, u.commit, u.why
        );
    }
    s
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::sim::variants;

    #[test]
    fn the_default_preset_is_every_default() {
        for s in preset(DEFAULT, Scope::Run) {
            let (k, v) = s.split_once('=').unwrap();
            assert_eq!(variants::key(k).unwrap().default, v, "{k}");
        }
        for s in preset(DEFAULT, Scope::Boot) {
            let (k, v) = s.split_once('=').unwrap();
            let key = crate::cmd::boot::KEYS.iter().find(|b| b.name == k).unwrap();
            assert_eq!(key.default, v, "boot {k}");
        }
    }

    #[test]
    fn every_preset_is_a_valid_setting() {
        for &k in KERNELS {
            crate::sim::Variants::from_sets(&preset(k, Scope::Run)).unwrap();
            let mut spec = crate::cmd::boot::Spec::new(crate::hw::Granule::K4, 1 << 30);
            spec.set_all(&preset(k, Scope::Boot)).unwrap();
        }
    }

    #[test]
    fn a_key_changed_twice_shows_each_releases_own_value_on_both_rows() {
        let t = table();
        let rows: Vec<Vec<&str>> = t
            .lines()
            .filter(|l| l.starts_with("lazyfree-pmd "))
            .map(|l| l.split_whitespace().skip(1).take(KERNELS.len()).collect())
            .collect();
        assert_eq!(rows.len(), 2, "{t}");
        for row in &rows {
            for (&k, cell) in KERNELS.iter().zip(row) {
                let want = if k >= Release(7, 0) && k < Release(7, 3) {
                    "discard"
                } else {
                    "split"
                };
                assert_eq!(*cell, want, "lazyfree-pmd under {k}: {row:?}");
            }
        }
    }

    #[test]
    fn presets_pick_each_side_by_release() {
        let old = preset(Release(6, 1), Scope::Run);
        for want in [
            "zap=per-pte",
            "tlb-batch=sync",
            "contpte=off",
            "mthp=off",
            "cow-reuse=order0",
        ] {
            assert!(old.iter().any(|s| s == want), "6.1 lacks {want}: {old:?}");
        }
        let mid = preset(Release(6, 12), Scope::Run);
        for want in ["zap=batched", "contpte=on", "ptep_get=full-scan", "shrink-underused=on"] {
            assert!(mid.iter().any(|s| s == want), "6.12 lacks {want}: {mid:?}");
        }
        assert_eq!(
            preset(Release(6, 1), Scope::Boot),
            ["pgtable-fixmap=per-cont-block", "map-mem=nomap-image"]
        );
        assert_eq!(
            preset(Release(6, 12), Scope::Boot),
            ["pgtable-fixmap=once", "map-mem=nomap-image"]
        );
        // The 7.0 guest maps the image NOMAP as 6.12 does; the 7.2 guest alias-first.
        assert_eq!(
            preset(Release(7, 0), Scope::Boot),
            ["pgtable-fixmap=once", "map-mem=nomap-image"]
        );
        for k in [Release(7, 2), Release(7, 3)] {
            assert_eq!(preset(k, Scope::Boot), ["pgtable-fixmap=once", "map-mem=alias-first"]);
        }
    }

    #[test]
    fn a_key_changed_twice_takes_its_newest_row() {
        let at = |k| {
            preset(k, Scope::Run)
                .into_iter()
                .filter(|s| s.starts_with("flush-range-nosync="))
                .collect::<Vec<_>>()
        };
        assert_eq!(at(Release(6, 1)), ["flush-range-nosync=unsplit"]);
        assert_eq!(at(Release(6, 18)), ["flush-range-nosync=split"]);
        assert_eq!(at(Release(7, 0)), ["flush-range-nosync=split"]);
        assert_eq!(at(Release(7, 1)), ["flush-range-nosync=unsplit"]);
        let t = table();
        let row = t
            .lines()
            .find(|l| l.starts_with("flush-range-nosync") && l.contains("d9d8dc2bd3fb"))
            .unwrap();
        assert_eq!(
            row.split_whitespace().take(8).collect::<Vec<_>>(),
            [
                "flush-range-nosync",
                "unsplit",
                "split",
                "split",
                "split",
                "unsplit",
                "unsplit",
                "unsplit"
            ]
        );
    }

    #[test]
    fn the_unmodeled_changes_say_why() {
        let t = table();
        let line = t
            .lines()
            .find(|l| l.contains("swap_map"))
            .unwrap_or_else(|| panic!("swap_map: {t}"));
        assert!(line.contains("): not modeled: "), "{line}");
    }

    #[test]
    fn only_7_0_to_7_2_discard_a_lazyfree_thp_at_its_pmd() {
        for (k, want) in [
            (Release(6, 12), "split"),
            (Release(6, 18), "split"),
            (Release(7, 0), "discard"),
            (Release(7, 1), "discard"),
            (Release(7, 2), "discard"),
            (Release(7, 3), "split"),
        ] {
            let p = preset(k, Scope::Run);
            let got: Vec<_> = p.iter().filter_map(|s| s.strip_prefix("lazyfree-pmd=")).collect();
            assert_eq!(got, [want], "{k}");
        }
    }

    #[test]
    fn mremap_batches_from_6_17() {
        assert!(preset(Release(6, 12), Scope::Run).contains(&"mremap-batch=per-pte".to_string()));
        assert!(preset(Release(6, 18), Scope::Run).contains(&"mremap-batch=batched".to_string()));
    }

    #[test]
    fn bbml2_detection_reads_the_id_register_from_7_3() {
        assert!(preset(Release(7, 2), Scope::Run).contains(&"bbml2-detect=midr-list".to_string()));
        assert!(preset(Release(7, 3), Scope::Run).contains(&"bbml2-detect=idreg-or-list".to_string()));
    }

    #[test]
    fn a_users_set_wins_over_the_preset() {
        let s = with_preset(Release(6, 1), Scope::Run, &["zap=batched".into()]);
        assert!(s.contains(&"zap=batched".to_string()));
        assert!(!s.contains(&"zap=per-pte".to_string()));
        crate::sim::Variants::from_sets(&s).unwrap();
    }

    #[test]
    fn a_release_maps_to_the_newest_preset_not_after_it() {
        assert_eq!(preset_for("6.18.7-amd64"), Some(Release(6, 18)));
        assert_eq!(preset_for("6.19.2"), Some(Release(6, 18)));
        assert_eq!(preset_for("7.3.4+deb13-arm64"), Some(Release(7, 3)));
        assert_eq!(preset_for("5.10.0"), None);
        assert_eq!(preset_for("garbage"), None);
    }

    #[test]
    fn unknown_kernels_are_refused() {
        assert_eq!(parse_kernel("6.12"), Ok(Release(6, 12)));
        assert!(parse_kernel("5.15").unwrap_err().contains("6.1, 6.12, 6.18"));
    }

    #[test]
    fn the_table_has_a_row_per_change_with_its_commit() {
        let t = table();
        assert_eq!(t.lines().count(), CHANGES.len() + 1 + 2 + NOT_MODELED.len());
        assert!(t.contains("43b3dfdd0455") && t.contains("boot pgtable-fixmap"), "{t}");
    }
}
