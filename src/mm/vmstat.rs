//! The counters the kernel exposes: /proc/vmstat events and the per-size mTHP stats
//! of /sys/kernel/mm/transparent_hugepage/hugepages-<size>kB/stats/.

macro_rules! named_enum {
    ($(#[$m:meta])* $ty:ident { $($var:ident => $name:literal,)* }) => {
        $(#[$m])*
        #[derive(Clone, Copy, Debug, PartialEq, Eq)]
        #[repr(u8)]
        pub enum $ty { $($var,)* }
        impl $ty {
            pub const ALL: &'static [$ty] = &[$($ty::$var,)*];
            pub const COUNT: usize = $ty::ALL.len();
            pub const fn name(self) -> &'static str {
                match self { $($ty::$var => $name,)* }
            }
        }
    };
}

named_enum!(
    /// A /proc/vmstat event counter.
    VmEvent {
        PgFault => "pgfault",
        ThpFaultAlloc => "thp_fault_alloc",
        ThpFaultFallback => "thp_fault_fallback",
        ThpFaultFallbackCharge => "thp_fault_fallback_charge",
        ThpSplitPage => "thp_split_page",
        ThpSplitPageFailed => "thp_split_page_failed",
        ThpDeferredSplitPage => "thp_deferred_split_page",
        ThpSplitPmd => "thp_split_pmd",
        ThpZeroPageAlloc => "thp_zero_page_alloc",
        ThpZeroPageAllocFailed => "thp_zero_page_alloc_failed",
        ThpCollapseAlloc => "thp_collapse_alloc",
        ThpCollapseAllocFailed => "thp_collapse_alloc_failed",
        ThpScanExceedNonePte => "thp_scan_exceed_none_pte",
        ThpScanExceedSwapPte => "thp_scan_exceed_swap_pte",
        ThpScanExceedSharePte => "thp_scan_exceed_share_pte",
        ThpSwpoutFallback => "thp_swpout_fallback",
        ThpFileAlloc => "thp_file_alloc",
        ThpFileFallback => "thp_file_fallback",
        ThpFileFallbackCharge => "thp_file_fallback_charge",
        ThpFileMapped => "thp_file_mapped",
        PgLazyFreed => "pglazyfreed",
        PgMajFault => "pgmajfault",
        Pswpin => "pswpin",
        Pswpout => "pswpout",
        SwpinZero => "swpin_zero",
        SwpoutZero => "swpout_zero",
        ThpSwpout => "thp_swpout",
        SwapRa => "swap_ra",
        SwapRaHit => "swap_ra_hit",
        PgmigrateSuccess => "pgmigrate_success",
        PgmigrateFail => "pgmigrate_fail",
        ThpMigrationSuccess => "thp_migration_success",
        ThpMigrationFail => "thp_migration_fail",
        ThpMigrationSplit => "thp_migration_split",
        PgActivate => "pgactivate",
        PgDeactivate => "pgdeactivate",
        PgScanAnon => "pgscan_anon",
        PgStealAnon => "pgsteal_anon",
        PgScanFile => "pgscan_file",
        PgStealFile => "pgsteal_file",
        PgScanDirect => "pgscan_direct",
        PgStealDirect => "pgsteal_direct",
        PgRefill => "pgrefill",
        PgScanKswapd => "pgscan_kswapd",
        PgStealKswapd => "pgsteal_kswapd",
        PageOutRun => "pageoutrun",
    }
);

named_enum!(
    /// A per-size mTHP stat (enum mthp_stat_item).
    MthpStat {
        AnonFaultAlloc => "anon_fault_alloc",
        AnonFaultFallback => "anon_fault_fallback",
        AnonFaultFallbackCharge => "anon_fault_fallback_charge",
        Swpout => "swpout",
        SwpoutFallback => "swpout_fallback",
        Swpin => "swpin",
        SwpinFallback => "swpin_fallback",
        SwpinFallbackCharge => "swpin_fallback_charge",
        Split => "split",
        SplitFailed => "split_failed",
        SplitDeferred => "split_deferred",
        NrAnon => "nr_anon",
        NrAnonPartiallyMapped => "nr_anon_partially_mapped",
        ShmemAlloc => "shmem_alloc",
        ShmemFallback => "shmem_fallback",
        ShmemFallbackCharge => "shmem_fallback_charge",
        CollapseAlloc => "collapse_alloc",
        CollapseAllocFailed => "collapse_alloc_failed",
        CollapseExceedSwapPte => "collapse_exceed_swap_pte",
        CollapseExceedNonePte => "collapse_exceed_none_pte",
        CollapseExceedSharedPte => "collapse_exceed_shared_pte",
    }
);

impl MthpStat {
    /// Shown only for the anon sizes (the kernel's anon_stats group): a file-only size
    /// (order 1, shmem) has none of them.
    pub fn anon_only(self) -> bool {
        use MthpStat::*;
        matches!(
            self,
            AnonFaultAlloc
                | AnonFaultFallback
                | AnonFaultFallbackCharge
                | SplitDeferred
                | NrAnon
                | NrAnonPartiallyMapped
        )
    }
}

/// Event counts, plus the mTHP stats of every order up to `max_order`.
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct VmStats {
    events: [i64; VmEvent::COUNT],
    mthp: Vec<[i64; MthpStat::COUNT]>,
}

impl VmStats {
    pub fn new(max_order: u32) -> VmStats {
        VmStats {
            events: [0; VmEvent::COUNT],
            mthp: vec![[0; MthpStat::COUNT]; max_order as usize + 1],
        }
    }
    #[inline]
    pub fn count_vm_event(&mut self, e: VmEvent) {
        self.count_vm_events(e, 1);
    }
    #[inline]
    pub fn count_vm_events(&mut self, e: VmEvent, n: i64) {
        self.events[e as usize] += n;
    }
    #[inline]
    pub fn event(&self, e: VmEvent) -> i64 {
        self.events[e as usize]
    }
    /// count_mthp_stat / mod_mthp_stat: order 0 has no stats (order 1 only shmem's).
    #[inline]
    pub fn mod_mthp_stat(&mut self, order: u32, s: MthpStat, delta: i64) {
        if order >= 1 && (order as usize) < self.mthp.len() {
            self.mthp[order as usize][s as usize] += delta;
        }
    }
    #[inline]
    pub fn count_mthp_stat(&mut self, order: u32, s: MthpStat) {
        self.mod_mthp_stat(order, s, 1);
    }
    #[inline]
    pub fn mthp(&self, order: u32, s: MthpStat) -> i64 {
        self.mthp[order as usize][s as usize]
    }
    pub fn max_order(&self) -> u32 {
        self.mthp.len() as u32 - 1
    }
}
