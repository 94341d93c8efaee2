//! Per-run choices: the seed variants (before/after) and the machine's shape, set
//! with `--set key=value`.

use crate::arch::arm64::contpte_insns::Compiler;
use crate::arch::arm64::pgtable::PtepGetVariant;
use crate::arch::TlbFlavour;
use crate::hw::{Granule, MachineConfig};
use crate::mm::rmap::TlbBatchVariant;
use crate::mm::ZapVariant;
use crate::workload::parse::fmt_size;
use std::collections::BTreeMap;

/// One `--set` key: its default, the values it takes, and what it changes (the first
/// line of a `run --each` comparison).
pub struct Key {
    pub name: &'static str,
    pub default: &'static str,
    pub values: &'static str,
    pub about: &'static str,
}

/// Every key, in the order `run --help` lists them.
pub const KEYS: &[Key] = &[
    Key {
        name: "zap",
        default: "batched",
        values: "per-pte|batched",
        about: "seed 000: zap_pte_range clears a present-pte batch of one folio with one call (batched) or pte by pte (per-pte)",
    },
    Key {
        name: "tlb-batch",
        default: "deferred",
        values: "sync|deferred",
        about: "seed 001: try_to_unmap_one flushes each cleared pte with its own TLBI and DSB (sync) or queues the TLBIs and waits once in try_to_unmap_flush (deferred)",
    },
    Key {
        name: "tlb-flush",
        default: "arm64",
        values: "arm64|x86",
        about: "the shootdown of reclaim's and migration's flushes (ptep_clear_flush, the batched flush, flush_tlb_batched_pending): arm64's broadcast TLBIs and DSB ISH, or x86's IPIs to the CPUs of mm_cpumask with a pending cpumask and one IPI round per batch",
    },
    Key {
        name: "contpte",
        default: "on",
        values: "on|off",
        about: "arm64 folds the ptes of an aligned 64K block of one folio into a contiguous-bit range (on) or never sets PTE_CONT (off)",
    },
    Key {
        name: "ptep_get",
        default: "early-exit",
        values: "full-scan|early-exit|mod1|mod2",
        about: "seed 004: contpte_ptep_get reads all CONT_PTES entries (full-scan), stops once young and dirty are known (early-exit), or uses the thread's modification 1 or 2",
    },
    Key {
        name: "contpte-insns",
        default: "gcc",
        values: "gcc|clang",
        about: "seed 004: kernel.contpte_ptep_get.insns counts the instructions of each ptep_get variant as Debian's GCC 12 compiles it (gcc, as Debian builds its kernels) or its clang 14 (clang, as Android builds its kernels: seed 004's phone), -O2, measured by scripts/seed004-insns",
    },
    Key {
        name: "prot-flush",
        default: "elide",
        values: "always|elide",
        about: "mprotect flushes every present pte it changes (always, 6.18) or, as arm64's pte_needs_flush does since 6.19 (c320dbb7c80d), skips the flush when only invalid or software bits change (elide)",
    },
    Key {
        name: "wp-flush",
        default: "local",
        values: "broadcast|local",
        about: "a write fault that makes a pte (or huge pmd) writable or dirty in place flushes its stale read-only entry on the faulting CPU only, TLBI VALE1/RVALE1 and DSB NSH, other CPUs taking a spurious fault instead (local, 6.19+: cb1fa2e99955), or broadcast, VALE1IS and DSB ISH (broadcast, up to 6.18)",
    },
    Key {
        name: "contpte-access",
        default: "raw",
        values: "gathered|raw",
        about: "contpte_ptep_set_access_flags decides it has nothing to do by reading every entry of the block raw (raw, 7.0+: the SMMU/ATS fault fix) or from the gathered contpte_ptep_get (gathered, up to 6.19)",
    },
    Key {
        name: "cow-reuse",
        default: "large",
        values: "large|order0",
        about: "a write fault on a no longer exclusive page of a large anon folio reuses the folio when this mm maps it alone (large, 6.15+: 1da190f4d0a6) or always copies the page, reusing only order-0 folios (order0, up to 6.14, e.g. the 6.12 guest)",
    },
    Key {
        name: "mprotect-batch",
        default: "batched",
        values: "batched|per-pte",
        about: "change_pte_range changes the ptes of one folio as a batch (batched, 6.17+: cac1db8c3aad, 7efa1cd5f89b) or pte by pte, unfolding each contpte block it touches and refolding it at its last pte (per-pte, up to 6.16)",
    },
    Key {
        name: "mremap-batch",
        default: "batched",
        values: "batched|per-pte|lookup-all",
        about: "move_ptes moves a folio's ptes as one batch, looking the folio up (vm_normal_folio, a struct page read) only where arm64's pte_batch_hint sees a contpte block (batched, 6.17+: f822a9a81a31 with 0b5be138ce00), or for every present pte, as 6.17-rc1 did before that fix (lookup-all: the LKP mremap regression), or pte by pte with no lookup, unfolding each contpte block and refolding it at its last pte (per-pte, up to 6.16)",
    },
    Key {
        name: "huge-zero-wp",
        default: "thp",
        values: "thp|split",
        about: "a write fault on the huge zero pmd maps a new THP (thp, 6.13+: 1ced09e0331f) or splits the pmd and copies one page on the pte path (split, up to 6.12)",
    },
    Key {
        name: "huge-zero",
        default: "lazy",
        values: "lazy|allocated",
        about: "the huge zero folio is allocated and zeroed by the first read fault that maps it (lazy: a fresh boot, or after its shrinker freed it) or exists before the run (allocated: a host that used it earlier and has not freed it, as calibrate's host runs after the first; or CONFIG_PERSISTENT_HUGE_ZERO_FOLIO, 6.18+, which allocates it at boot)",
    },
    Key {
        name: "lazyfree-unmap",
        default: "batched",
        values: "batched|per-pte",
        about: "try_to_unmap_one discards a lazyfree large folio's ptes in one batch with one range TLBI (batched, 6.15+: 354dffd29575, 2f4ab3ac10e1) or pte by pte, each unfolding its contpte block and removing its rmap, which queues the folio for deferred split (per-pte, 6.12)",
    },
    Key {
        name: "lazyfree-pmd",
        default: "split",
        values: "split|discard",
        about: "try_to_unmap_one splits a lazyfree THP's pmd and discards its ptes (split: 6.12.117, 6.18, 7.3.4) or discards the THP at the pmd, unmap_huge_pmd_locked: one pmd clear and flush, no thp_split_pmd, and a folio written since MADV_FREE marked swap-backed and kept pmd-mapped (discard: Debian's 7.0 and 7.2; removed by \"mm/rmap: don't discard lazyfree THPs at PMD level\", stable 7.3.2)",
    },
    Key {
        name: "collapse-copy",
        default: "batched",
        values: "batched|per-pte",
        about: "__collapse_huge_page_copy_succeeded clears and unmaps the old ptes a folio at a time (batched, 6.17+: 4ea3594a4741) or one at a time, unfolding each contpte block and leaving each large folio partially mapped (per-pte, 6.12)",
    },
    Key {
        name: "mlock-walk",
        default: "batched",
        values: "batched|per-pte",
        about: "mlock_pte_range steps over a large folio with folio_pte_batch, one ptep_get per folio (batched, 6.11+: Lance Yang, 'mm/mlock: implement folio_mlock_step() using folio_pte_batch()', <20240603140745.83880-1-ioworker0@gmail.com>) or with 6.6's folio_mlock_step (dc68badcede4), which reads every pte of the folio again (per-pte, 6.6 to 6.10; seed 004's phone)",
    },
    Key {
        name: "split-list",
        default: "in-order",
        values: "in-order|reversed",
        about: "a split puts a large folio's tail pages on reclaim's list in address order, so shrink_folio_list (which takes from the tail) swaps them out last page first (in-order, 6.15+: 00527733d0dc8), or last page first, so they get ascending slots (reversed, up to 6.14, e.g. the 6.12 guest)",
    },
    Key {
        name: "swapin-write",
        default: "on-read",
        values: "on-read|on-write",
        about: "do_swap_page maps an exclusive folio writable on a read fault too (on-read, 6.11+: c18160dba5ff) or only on a write fault, so a write after a read swap-in faults (on-write, up to 6.10, e.g. the 6.1 guest)",
    },
    Key {
        name: "shmem-swapin",
        default: "direct",
        values: "direct|cluster",
        about: "a shmem page on zram is read back directly, skipping the swap cache (direct, 6.14+: 1dd44c0af4fa), or through the swap cache with swap_cluster_readahead around it, its neighbours swap cache hits (cluster, up to 6.13, e.g. the 6.12 guest)",
    },
    Key {
        name: "sync-swapin",
        default: "cache",
        values: "bypass|cache",
        about: "do_swap_page on zram (SWP_SYNCHRONOUS_IO) reads every slot through the swap cache with no readahead, in a folio as large as its ptes allow (shared slots too), then frees the cache once no pte holds the slot (cache, 7.0+: f1879e8a0c60, ab08be8dc96a, 4b34f1d82c65), the page writable at once only when its swap pte is exclusive, or reads a slot only this pte holds around the cache and a slot a forked mm shares through it with swapin_readahead, a read fault keeping it cached (bypass, up to 6.19)",
    },
    Key {
        name: "fault-dirty",
        default: "folio",
        values: "folio|write",
        about: "a read fault maps a writable file page dirty when its folio is dirty (folio, 6.15+: 4e92030c05dc), or clean until written (write, up to 6.14): reclaim then finds the pte of a shmem page read back after swap-in clean, and waits for no flush before writing it",
    },
    Key {
        name: "file-unmap",
        default: "batched",
        values: "per-pte|batched",
        about: "try_to_unmap_one clears a large page-cache (shmem) folio's ptes one at a time, unfolding its contpte block (per-pte, up to 6.19), or each run in one batch with one rmap removal (batched, 7.0+: a67fe41e214f)",
    },
    Key {
        name: "shmem-swapout",
        default: "whole",
        values: "whole|split",
        about: "shmem_writeout writes a large shmem folio whole where the kernel has THP_SWAP (whole, 6.12+), or always splits it first and writes its pages one by one (split, up to 6.11, e.g. the 6.1 guest: thp_split_page, no thp_swpout)",
    },
    Key {
        name: "shmem-split-stat",
        default: "counted",
        values: "counted|uncounted",
        about: "shmem_writeout's split of a large folio it cannot swap out whole (no THP_SWAP: arm64 with 16K or 64K pages; or no run of slots) counts mthp swpout_fallback, and thp_swpout_fallback for the PMD size (counted, 7.0+), or nothing (uncounted, up to 6.19)",
    },
    Key {
        name: "faultaround",
        default: "folio",
        values: "folio|window",
        about: "fault-around maps a large page-cache folio wholly, beyond the fault_around_bytes window, when it lies in the VMA and one page table (folio, 6.18+: 357b92761d94), or only its pages inside the window (window, up to 6.17)",
    },
    Key {
        name: "swap-cache",
        default: "table",
        values: "table|xarray",
        about: "the swap cache is each cluster's swap table, a folio found, added or deleted with one entry per slot under the cluster lock (table, 6.18+: 8578e0c00dcf, 07adc4cf1ecd, f83938e4188c), or an XArray per 64 MiB swap address space, walked node by node under its xa_lock (xarray, up to 6.17, e.g. the 6.12 guest); only kernel.swap_cache.* counts differ",
    },
    Key {
        name: "swap-alloc",
        default: "nonfull-first",
        values: "nonfull-first|free-first",
        about: "when a CPU's swap cluster is drained, the allocator of a device without discard takes a nonfull cluster first (nonfull-first, 6.18: 9a42aed48421) or a free one (free-first, up to 6.17, e.g. the 6.12 guest, whose first slots then start at the second cluster)",
    },
    Key {
        name: "collapse-ro",
        default: "allow",
        values: "allow|refuse",
        about: "khugepaged and MADV_COLLAPSE collapse an anon range whose ptes are all write-protected (allow, 6.18) or fail it with SCAN_PAGE_RO (refuse, up to 6.17; 62b98015d988, 473b73222f3d)",
    },
    Key {
        name: "khugepaged-mthp",
        default: "on",
        values: "on|off",
        about: "khugepaged collapses an anonymous range to the largest enabled mTHP order its present ptes fill (mthp_collapse, max_ptes_none scaled per order, no swap or shared pte below the PMD order) and counts per-order collapse stats (on, 7.2+: Nico Pache's series) or to the PMD order only (off, up to 7.1)",
    },
    Key {
        name: "mthp",
        default: "on",
        values: "on|off",
        about: "anonymous faults may allocate multi-size THP, set per size in hugepages-<size>kB/enabled (on, 6.8+: 19eaf44954df, 3485b88390b0) or only PMD THP, with no per-size knobs (off, e.g. 6.1)",
    },
    Key {
        name: "shrink-underused",
        default: "on",
        values: "on|off",
        about: "new PMD THPs go on the deferred split queue and the shrinker splits underused ones, as the shrink_underused knob says (on, 6.12+: dafff3f4c850) or there is no such knob and only partially mapped THPs are queued (off, e.g. 6.1)",
    },
    Key {
        name: "split-zeropage",
        default: "on",
        values: "on|off",
        about: "splitting an isolated anon THP maps its zero-filled pages to the shared zero page (on, 6.12+: b1f202060afe) or keeps every page (off, e.g. 6.1)",
    },
    Key {
        name: "pageout-young",
        default: "ignore",
        values: "ignore|clear",
        about: "MADV_PAGEOUT leaves the young bits and reclaim ignores references (ignore, 6.9+: 2864f3d0f583) or it clears them as MADV_COLD does, flushing the range through the mmu_gather (clear, e.g. 6.1)",
    },
    Key {
        name: "flush-range-nosync",
        default: "unsplit",
        values: "split|unsplit",
        about: "a range flush too large for TLBIs becomes flush_tlb_mm and __flush_tlb_range still adds its DSB ISH (split, 6.9+: d9d8dc2bd3fb) or returns after flush_tlb_mm (unsplit: 6.1 to 6.8, and again from 7.1, whose C helpers return from __do_flush_tlb_range after flush_tlb_mm)",
    },
    Key {
        name: "pmd-freeze-rmap",
        default: "none",
        values: "none|per-page",
        about: "splitting a PMD-mapped THP's pmd into migration entries leaves its rmap alone (none, 6.2+: 96d82deb743a) or removes each page's, which queues the THP for deferred split, counted (per-page, e.g. 6.1)",
    },
    Key {
        name: "mprotect-mkwrite",
        default: "exclusive",
        values: "exclusive|dirty-pte",
        about: "mprotect(PROT_WRITE) maps an exclusive anon pte or pmd writable at once (exclusive, 6.2+: c27f479ef542, d84887739d5c) or only a dirty pte, leaving the rest to a write fault (dirty-pte, e.g. 6.1)",
    },
    Key {
        name: "rmap-api",
        default: "folio",
        values: "folio|page",
        about: "rmap removal is folio_remove_rmap_ptes, one call per batch of a folio's pages (folio, 6.8+: b06dc281aa99) or page_remove_rmap, one call per page and per zapped pmd (page, e.g. 6.1): kernel.<name> counts it",
    },
    Key {
        name: "bbml2-elide",
        default: "on",
        values: "on|off",
        about: "the kernel uses BBML2_NOABORT (the `bbml2` CPU feature) to skip contpte_convert's TLBI (on, 6.17+: 83bbd6be7d17) or does break-before-make on any CPU (off)",
    },
    Key {
        name: "linmap-split",
        default: "on-demand",
        values: "on-demand|pte",
        about: "under rodata=full on a CPU the kernel finds BBML2_NOABORT / BBM Level 3 on (`cpu`, `bbml2-detect`), the linear map is kept in blocks and split when a page's permissions change (on-demand, 6.18+: a166563e7ec3 a660194dd101 e5efd56fa157) or is pte-mapped from boot (pte): what set_direct_map_* (memfd_secret's pages) cost",
    },
    Key {
        name: "bbml2-detect",
        default: "idreg-or-list",
        values: "midr-list|idreg-or-list|idreg-or-list-qemu",
        about: "how the kernel decides a named CPU (`cpu`) has BBML2_NOABORT: its MIDR on an allow-list (midr-list, 6.17 to 7.2: 5aa4b625762e) or ID_AA64MMFR2_EL1.BBM >= 3, else a longer allow-list (idreg-or-list, 7.3: BBM Level 3, 06468bc3c936 4955df16ff99 f8d0751426dd), or that list with QEMU's -cpu max on it (idreg-or-list-qemu: a 7.3 kernel built with tools/kernel/patches/qemu-bbml3.patch)",
    },
    Key {
        name: "granule",
        default: "4K",
        values: "4K|16K|64K",
        about: "the translation granule (base page size) of the machine",
    },
    Key {
        name: "ram",
        default: "16G",
        values: "a size from 64M to 128T, e.g. 16G or 1T",
        about: "the machine's RAM",
    },
    Key {
        name: "cpus",
        default: "8",
        values: "1..=256",
        about: "the number of CPUs, each with its own TLB",
    },
    Key {
        name: "nodes",
        default: "1",
        values: "1..=64",
        about: "NUMA nodes: RAM split evenly between them, CPU c on node c * nodes / cpus; the page allocator takes the faulting CPU's node first",
    },
    Key {
        name: "tlbi-range",
        default: "off",
        values: "on|off",
        about: "FEAT_TLBIRANGE: a range flush uses range TLBIs (on) or one TLBI per page, a large one a whole-ASID TLBI (off)",
    },
    Key {
        name: "bbml2",
        default: "off",
        values: "on|off",
        about: "BBML2_NOABORT on the unnamed CPU (cpu=generic): the hardware changes a live contiguous bit or block size without conflict aborts, and the kernel trusts it with that (on); a named `cpu` decides it from its MIDR and ID registers instead",
    },
    Key {
        name: "cpu",
        default: "generic",
        values: "generic|qemu-max|cortex-a55|cortex-a76|neoverse-n1|neoverse-v3|ampere1|cortex-a725",
        about: "the CPU, by its MIDR_EL1 and ID_AA64MMFR2_EL1.BBM: the kernel decides BBML2_NOABORT and the repeat-TLBI erratum workaround from them (generic: no MIDR; `bbml2` stands for the verdict)",
    },
    Key {
        name: "kpti",
        default: "off",
        values: "on|off",
        about: "kernel page-table isolation: kernel mappings are non-global and each user TLBI is issued for both ASIDs of the pair",
    },
    Key {
        name: "lpa2",
        default: "off",
        values: "on|off",
        about: "FEAT_LPA2 (a 52-bit VA kernel, as Debian's arm64 kernels are): a range TLBI must start on a 64K boundary, so a flush starting off one begins with single TLBIs",
    },
    Key {
        name: "hafdbs",
        default: "on",
        values: "on|off",
        about: "FEAT_HAFDBS: the hardware sets the access flag and dirty state (on) or software faults do (off)",
    },
    Key {
        name: "checks",
        default: "off",
        values: "on|off",
        about: "the architectural checkers (TLB conflicts, break-before-make) run after each step",
    },
    Key {
        name: "inject",
        default: "none",
        values: "none|extra-fault|drop-flush",
        about: "testing only: extra-fault breaks the model by one fault (its first fault is accounted twice), so `validate` must fail; drop-flush makes try_to_unmap_flush do nothing, so reclaim frees folios that TLBs still map and the checker must fire",
    },
];

/// The key named `name`.
pub fn key(name: &str) -> Option<&'static Key> {
    KEYS.iter().find(|k| k.name == name)
}

/// The `--set` keys of a command's `--help`: one line per key with its default and values.
/// Built with pushes rather than `format!`: clap builds every command's help text at
/// start-up, and padding a hundred fields through the formatter took a quarter of a
/// million instructions of every run.
pub fn keys_help(keys: &[Key]) -> String {
    let w = keys.iter().map(|k| k.name.len()).max().unwrap_or(0);
    let dw = keys.iter().map(|k| k.default.len()).max().unwrap_or(0);
    let mut s = String::with_capacity(32 + keys.iter().map(|k| 14 + w + dw + k.values.len()).sum::<usize>());
    s.push_str("--set keys (KEY=VALUE):\n");
    let pad = |s: &mut String, field: &str, width: usize| {
        s.push_str(field);
        s.extend(std::iter::repeat_n(' ', width - field.len()));
    };
    for k in keys {
        s.push_str("  ");
        pad(&mut s, k.name, w);
        s.push_str("  default ");
        pad(&mut s, k.default, dw);
        s.push_str("  ");
        s.push_str(k.values);
        s.push('\n');
    }
    s
}

#[derive(Clone, Debug, PartialEq, Eq)]
pub struct Variants {
    values: BTreeMap<String, String>,
}

impl Default for Variants {
    fn default() -> Self {
        Variants {
            values: KEYS
                .iter()
                .map(|k| (k.name.to_string(), k.default.to_string()))
                .collect(),
        }
    }
}

/// Parse a command-line size (`workload::parse::parse_size`'s grammar).
pub fn parse_size(s: &str) -> Result<u64, String> {
    crate::workload::parse::parse_size(s)
        .ok_or_else(|| format!("{s}: expected a size such as 4096, 0x1000, 16M, 512G or 1T"))
}

/// The least RAM a machine may have: the model reserves frames at the bottom and
/// `run` needs room for its first tables.
pub const MIN_RAM: u64 = 64 << 20;
/// The most: with VA_BITS = 48 the linear map is the lower half of the kernel's VA
/// space, 128T from PAGE_OFFSET to PAGE_END, and arm64_memblock_init drops memory
/// beyond it. A larger span would run the linear map into the fixmap at the top.
pub const MAX_RAM: u64 = 128 << 40;

/// Parse a machine's RAM size, for `run --set ram=` and `boot --ram` alike.
pub fn parse_ram(s: &str) -> Result<u64, String> {
    let ram = parse_size(s)?;
    if !(MIN_RAM..=MAX_RAM).contains(&ram) {
        return Err(format!(
            "ram {s}: expected a size from {} to {} (the linear map of a 48-bit VA)",
            fmt_size(MIN_RAM),
            fmt_size(MAX_RAM)
        ));
    }
    Ok(ram)
}

fn on_off(v: &str) -> Option<bool> {
    match v {
        "on" | "1" | "true" => Some(true),
        "off" | "0" | "false" => Some(false),
        _ => None,
    }
}

/// Split `--set KEY=VALUE`, refusing a key set twice (the last would silently win).
pub fn split_sets(sets: &[String]) -> Result<Vec<(&str, &str)>, String> {
    let mut seen = Vec::with_capacity(sets.len());
    for s in sets {
        let (k, v) = s
            .split_once('=')
            .ok_or_else(|| format!("--set {s}: expected KEY=VALUE"))?;
        if seen.iter().any(|&(key, _)| key == k) {
            return Err(format!("--set {k}: given more than once"));
        }
        seen.push((k, v));
    }
    Ok(seen)
}

impl Variants {
    /// Apply `key=value` settings, refusing unknown keys and values and repeated keys.
    pub fn from_sets(sets: &[String]) -> Result<Variants, String> {
        let mut v = Variants::default();
        for (k, val) in split_sets(sets)? {
            v.set(k, val)?;
        }
        if v.get("cpu") != "generic" && split_sets(sets)?.iter().any(|&(k, _)| k == "bbml2") {
            return Err(format!(
                "--set bbml2: cpu={} decides BBML2_NOABORT itself (bbml2 is for cpu=generic)",
                v.get("cpu")
            ));
        }
        Ok(v)
    }

    pub fn set(&mut self, k: &str, val: &str) -> Result<(), String> {
        let Some(key) = key(k) else {
            let known: Vec<_> = KEYS.iter().map(|k| k.name).collect();
            let hint = crate::suggest::hint(k, known.iter().copied());
            return Err(format!("unknown variant '{k}'{hint} (known: {})", known.join(", ")));
        };
        let ok = match k {
            "zap" => matches!(val, "per-pte" | "batched"),
            "tlb-batch" => matches!(val, "sync" | "deferred"),
            "tlb-flush" => matches!(val, "arm64" | "x86"),
            "ptep_get" => matches!(val, "full-scan" | "early-exit" | "mod1" | "mod2"),
            "contpte-insns" => matches!(val, "gcc" | "clang"),
            "prot-flush" => matches!(val, "always" | "elide"),
            "wp-flush" => matches!(val, "local" | "broadcast"),
            "contpte-access" => matches!(val, "raw" | "gathered"),
            "cow-reuse" => matches!(val, "large" | "order0"),
            "mprotect-batch" => matches!(val, "batched" | "per-pte"),
            "mremap-batch" => matches!(val, "batched" | "per-pte" | "lookup-all"),
            "huge-zero-wp" => matches!(val, "thp" | "split"),
            "huge-zero" => matches!(val, "lazy" | "allocated"),
            "lazyfree-unmap" | "collapse-copy" | "mlock-walk" => matches!(val, "batched" | "per-pte"),
            "lazyfree-pmd" => matches!(val, "split" | "discard"),
            "collapse-ro" => matches!(val, "allow" | "refuse"),
            "split-list" => matches!(val, "in-order" | "reversed"),
            "swap-alloc" => matches!(val, "nonfull-first" | "free-first"),
            "swap-cache" => matches!(val, "table" | "xarray"),
            "swapin-write" => matches!(val, "on-read" | "on-write"),
            "shmem-swapin" => matches!(val, "direct" | "cluster"),
            "sync-swapin" => matches!(val, "bypass" | "cache"),
            "fault-dirty" => matches!(val, "folio" | "write"),
            "faultaround" => matches!(val, "folio" | "window"),
            "file-unmap" => matches!(val, "per-pte" | "batched"),
            "shmem-split-stat" => matches!(val, "counted" | "uncounted"),
            "shmem-swapout" => matches!(val, "whole" | "split"),
            "pageout-young" => matches!(val, "ignore" | "clear"),
            "flush-range-nosync" => matches!(val, "split" | "unsplit"),
            "pmd-freeze-rmap" => matches!(val, "none" | "per-page"),
            "mprotect-mkwrite" => matches!(val, "exclusive" | "dirty-pte"),
            "rmap-api" => matches!(val, "folio" | "page"),
            "bbml2-elide" => matches!(val, "on" | "off"),
            "linmap-split" => matches!(val, "on-demand" | "pte"),
            "bbml2-detect" => matches!(val, "midr-list" | "idreg-or-list" | "idreg-or-list-qemu"),
            "cpu" => crate::hw::cpu::by_name(val).is_some(),
            "mthp" | "shrink-underused" | "split-zeropage" | "khugepaged-mthp" => matches!(val, "on" | "off"),
            "inject" => matches!(val, "none" | "extra-fault" | "drop-flush"),
            "granule" => Granule::parse(val).is_some(),
            "ram" => parse_ram(val).is_ok(),
            "cpus" => val.parse::<usize>().is_ok_and(|n| (1..=256).contains(&n)),
            "nodes" => val.parse::<usize>().is_ok_and(|n| (1..=64).contains(&n)),
            _ => on_off(val).is_some(),
        };
        if !ok {
            let hint = crate::suggest::hint(val, key.values.split('|'));
            return Err(format!(
                "invalid value '{val}' for variant '{k}'{hint} ({})",
                key.values
            ));
        }
        self.values.insert(k.to_string(), val.to_string());
        Ok(())
    }

    /// These variants raised to a workload's `machine` needs: a value below the need
    /// is raised when it is the key's default, and refused (with the need's position
    /// and both values) when something set it.
    pub fn meeting(&self, needs: &[crate::workload::MachineNeed]) -> Result<Variants, (crate::workload::Pos, String)> {
        let amount = |k: &str, v: &str| match k {
            "ram" => parse_ram(v).unwrap_or(0),
            _ => v.parse::<u64>().unwrap_or(0),
        };
        let mut out = self.clone();
        for n in needs {
            let have = self.get(n.key);
            if amount(n.key, have) >= amount(n.key, &n.value) {
                continue;
            }
            if key(n.key).is_some_and(|k| k.default != have) {
                return Err((
                    n.pos,
                    format!(
                        "the workload needs {}={} and this run has {}={have}",
                        n.key, n.value, n.key
                    ),
                ));
            }
            out.set(n.key, &n.value).map_err(|e| (n.pos, e))?;
        }
        Ok(out)
    }

    pub fn get(&self, k: &str) -> &str {
        &self.values[k]
    }
    fn flag(&self, k: &str) -> bool {
        on_off(self.get(k)).unwrap()
    }
    pub fn all(&self) -> &BTreeMap<String, String> {
        &self.values
    }

    pub fn machine(&self) -> MachineConfig {
        let mut cfg = MachineConfig {
            granule: Granule::parse(self.get("granule")).unwrap(),
            ram_bytes: parse_ram(self.get("ram")).unwrap(),
            ncpus: self.get("cpus").parse().unwrap(),
            nodes: self.get("nodes").parse().unwrap(),
            ..MachineConfig::default()
        };
        cfg.features.tlbi_range = self.flag("tlbi-range");
        cfg.features.bbml2 = self.flag("bbml2");
        cfg.features.kpti = self.flag("kpti");
        cfg.features.hafdbs = self.flag("hafdbs");
        cfg.features.lpa2 = self.flag("lpa2");
        let cpu = crate::hw::cpu::by_name(self.get("cpu")).expect("checked when set");
        if cpu.midr != 0 {
            cfg.features.midr = cpu.midr;
            cfg.features.bbm = cpu.bbm;
            cfg.features.bbml2 = cpu.bbml2_noabort;
        }
        cfg
    }
    /// The kernel's cpufeature rule for BBML2_NOABORT.
    pub fn bbml2_detect(&self) -> crate::arch::arm64::cpufeature::Bbml2Detect {
        use crate::arch::arm64::cpufeature::Bbml2Detect;
        match self.get("bbml2-detect") {
            "idreg-or-list" => Bbml2Detect::IdRegOrList,
            "idreg-or-list-qemu" => Bbml2Detect::IdRegOrListQemu,
            _ => Bbml2Detect::MidrList,
        }
    }
    pub fn zap(&self) -> ZapVariant {
        if self.get("zap") == "per-pte" {
            ZapVariant::PerPte
        } else {
            ZapVariant::Batched
        }
    }
    pub fn tlb_flush(&self) -> TlbFlavour {
        if self.get("tlb-flush") == "x86" {
            TlbFlavour::X86
        } else {
            TlbFlavour::Arm64
        }
    }
    pub fn tlb_batch(&self) -> TlbBatchVariant {
        if self.get("tlb-batch") == "sync" {
            TlbBatchVariant::Sync
        } else {
            TlbBatchVariant::Deferred
        }
    }
    /// arm64's pte_needs_flush (6.19) rather than the generic one, which always flushes.
    pub fn prot_flush_elide(&self) -> bool {
        self.get("prot-flush") == "elide"
    }
    /// do_wp_page as up to 6.14: only order-0 folios are reused once shared.
    pub fn cow_reuse_order0(&self) -> bool {
        self.get("cow-reuse") == "order0"
    }
    /// change_pte_range pte by pte, as before cac1db8c3aad (6.17).
    pub fn mprotect_per_pte(&self) -> bool {
        self.get("mprotect-batch") == "per-pte"
    }
    /// move_ptes' batching (f822a9a81a31, 0b5be138ce00: 6.17).
    pub fn mremap_batch(&self) -> crate::mm::mremap::MremapBatch {
        use crate::mm::mremap::MremapBatch;
        match self.get("mremap-batch") {
            "per-pte" => MremapBatch::PerPte,
            "lookup-all" => MremapBatch::LookupAll,
            _ => MremapBatch::Hinted,
        }
    }
    /// A write to the huge zero pmd splits it, as before 1ced09e0331f (6.13).
    pub fn huge_zero_wp_split(&self) -> bool {
        self.get("huge-zero-wp") == "split"
    }
    /// try_to_unmap_one unmaps a lazyfree large folio pte by pte, as before
    /// 354dffd29575 (6.15).
    pub fn lazyfree_unmap_per_pte(&self) -> bool {
        self.get("lazyfree-unmap") == "per-pte"
    }
    /// try_to_unmap_one discards a lazyfree THP at its pmd (unmap_huge_pmd_locked), as
    /// Debian's 7.0 and 7.2 do.
    pub fn lazyfree_pmd_discard(&self) -> bool {
        self.get("lazyfree-pmd") == "discard"
    }
    /// __collapse_huge_page_copy_succeeded clears the old ptes one by one, as before
    /// 4ea3594a4741 (6.17).
    pub fn collapse_copy_per_pte(&self) -> bool {
        self.get("collapse-copy") == "per-pte"
    }
    /// folio_mlock_step reads every pte of the folio, as from dc68badcede4 (6.6) up to
    /// its folio_pte_batch version (6.11).
    pub fn mlock_walk_per_pte(&self) -> bool {
        self.get("mlock-walk") == "per-pte"
    }
    /// A collapse of a range with no writable pte fails (SCAN_PAGE_RO), as before 6.18.
    pub fn split_list_reversed(&self) -> bool {
        self.get("split-list") == "reversed"
    }
    pub fn collapse_ro_refuse(&self) -> bool {
        self.get("collapse-ro") == "refuse"
    }
    /// khugepaged's mTHP collapse (7.2+).
    pub fn khugepaged_mthp(&self) -> bool {
        self.flag("khugepaged-mthp")
    }
    /// Multi-size THP for anonymous memory and its per-size knobs (6.8+).
    pub fn mthp(&self) -> bool {
        self.flag("mthp")
    }
    /// The underused-THP shrinker and its `shrink_underused` knob (6.12+).
    pub fn shrink_underused(&self) -> bool {
        self.flag("shrink-underused")
    }
    /// remap_page maps zero-filled pages of a split anon THP to the zero page (6.12+).
    pub fn split_zeropage(&self) -> bool {
        self.flag("split-zeropage")
    }
    pub fn contpte(&self) -> bool {
        self.flag("contpte")
    }
    pub fn checks(&self) -> bool {
        self.flag("checks")
    }
    /// The testing-only breakage `inject=extra-fault`.
    pub fn inject_extra_fault(&self) -> bool {
        self.get("inject") == "extra-fault"
    }
    pub fn inject_drop_flush(&self) -> bool {
        self.get("inject") == "drop-flush"
    }
    pub fn ptep_get(&self) -> PtepGetVariant {
        match self.get("ptep_get") {
            "full-scan" => PtepGetVariant::FullScan,
            "mod1" => PtepGetVariant::Mod1,
            "mod2" => PtepGetVariant::Mod2,
            _ => PtepGetVariant::EarlyExit,
        }
    }
    /// The compiler of the code whose instructions contpte_ptep_get counts.
    pub fn contpte_insns(&self) -> Compiler {
        if self.get("contpte-insns") == "clang" {
            Compiler::Clang
        } else {
            Compiler::Gcc
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn keys_help_lists_each_key_in_aligned_columns() {
        let key = |name, default, values| Key {
            name,
            default,
            values,
            about: "",
        };
        assert_eq!(
            keys_help(&[key("zap", "batched", "per-pte|batched"), key("ram", "4G", "SIZE")]),
            "--set keys (KEY=VALUE):\n  zap  default batched  per-pte|batched\n  ram  default 4G       SIZE\n"
        );
    }

    #[test]
    fn a_workload_machine_raises_defaults_and_refuses_a_smaller_setting() {
        let w = crate::workload::parse_str("t.wl", "machine nodes=2 ram=4G\nmmap a 4K\n").unwrap();
        let v = Variants::default().meeting(&w.machine).unwrap();
        assert_eq!(
            (v.get("nodes"), v.get("ram")),
            ("2", "16G"),
            "a default below the need is raised, one above kept"
        );
        let more = Variants::from_sets(&["nodes=4".into()])
            .unwrap()
            .meeting(&w.machine)
            .unwrap();
        assert_eq!(more.get("nodes"), "4");
        let (pos, e) = Variants::from_sets(&["ram=1G".into()])
            .unwrap()
            .meeting(&w.machine)
            .unwrap_err();
        assert_eq!((pos.line, pos.col), (1, 17));
        assert!(e.contains("needs ram=4G and this run has ram=1G"), "{e}");
    }

    #[test]
    fn defaults_and_overrides() {
        let v = Variants::from_sets(&["zap=per-pte".into(), "granule=16K".into()]).unwrap();
        assert_eq!(v.zap(), ZapVariant::PerPte);
        assert_eq!(v.tlb_batch(), TlbBatchVariant::Deferred);
        assert_eq!(
            Variants::from_sets(&["tlb-batch=sync".into()]).unwrap().tlb_batch(),
            TlbBatchVariant::Sync
        );
        assert_eq!(v.machine().granule, Granule::K16);
        assert!(v.contpte());
        assert!(!v.cow_reuse_order0());
        assert!(Variants::from_sets(&["cow-reuse=order0".into()])
            .unwrap()
            .cow_reuse_order0());
        assert!(Variants::from_sets(&["cow-reuse=small".into()]).is_err());
        assert!(!v.mprotect_per_pte());
        assert!(!v.huge_zero_wp_split());
        let old = Variants::from_sets(&["mprotect-batch=per-pte".into(), "huge-zero-wp=split".into()]).unwrap();
        assert!(old.mprotect_per_pte());
        assert!(old.huge_zero_wp_split());
        assert!(Variants::from_sets(&["mprotect-batch=on".into()]).is_err());
        assert!(Variants::from_sets(&["huge-zero-wp=on".into()]).is_err());
        assert!(Variants::from_sets(&["huge-zero=kept".into()]).is_err());
        assert!(!v.lazyfree_unmap_per_pte() && !v.collapse_copy_per_pte() && !v.collapse_ro_refuse());
        let old = Variants::from_sets(&[
            "lazyfree-unmap=per-pte".into(),
            "collapse-copy=per-pte".into(),
            "collapse-ro=refuse".into(),
        ])
        .unwrap();
        assert!(old.lazyfree_unmap_per_pte() && old.collapse_copy_per_pte() && old.collapse_ro_refuse());
        assert!(Variants::from_sets(&["collapse-ro=per-pte".into()]).is_err());
    }

    #[test]
    fn sizes_parse() {
        assert_eq!(parse_size("512G"), Ok(512 << 30));
        assert_eq!(parse_size("16MiB"), Ok(16 << 20));
        assert_eq!(parse_size("0x1000"), Ok(4096));
        assert_eq!(parse_size("3g"), Ok(3 << 30));
        assert!(parse_size("12Q").is_err());
        assert!(parse_size("G").is_err());
        assert!(parse_size("99999999T").is_err());
    }

    #[test]
    fn bad_settings_are_refused_with_the_allowed_values() {
        let e = Variants::from_sets(&["zap=sometimes".into()]).unwrap_err();
        assert!(e.contains("per-pte|batched"), "{e}");
        assert!(Variants::from_sets(&["frob=1".into()])
            .unwrap_err()
            .contains("unknown variant"));
        assert!(Variants::from_sets(&["zap".into()]).is_err());
        for ram in ["32M", "129T", "256T", "0xfffffffffffff000"] {
            let e = Variants::from_sets(&[format!("ram={ram}")]).unwrap_err();
            assert!(e.contains("64M to 128T"), "{e}");
        }
        assert!(Variants::from_sets(&["ram=128T".into()]).is_ok());
        let e = Variants::from_sets(&["zap=per-pte".into(), "zap=batched".into()]).unwrap_err();
        assert_eq!(e, "--set zap: given more than once");
    }
}
