//! The knobs of /sys/kernel/mm/transparent_hugepage, with the defaults of
//! ../shared/spec/workload.md (which the host runner also writes before a run).

use crate::hw::Granule;

/// A per-size or top-level `enabled` setting.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum ThpMode {
    Always,
    Inherit,
    Madvise,
    Never,
}

impl ThpMode {
    pub fn name(self) -> &'static str {
        match self {
            ThpMode::Always => "always",
            ThpMode::Inherit => "inherit",
            ThpMode::Madvise => "madvise",
            ThpMode::Never => "never",
        }
    }
}

/// The `defrag` setting.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum Defrag {
    Always,
    Defer,
    DeferMadvise,
    Madvise,
    Never,
}

#[derive(Clone, Debug, PartialEq, Eq)]
pub struct ThpKnobs {
    pub granule: Granule,
    /// Top-level `enabled`: always, madvise or never.
    enabled: ThpMode,
    pub defrag: Defrag,
    /// `use_zero_page`: read faults on PMD-suitable ranges may map the huge zero page.
    pub use_zero_page: bool,
    /// `shrink_underused`.
    pub shrink_underused: bool,
    /// `khugepaged/max_ptes_none`, `max_ptes_swap`, `max_ptes_shared`: khugepaged's
    /// limits on the none (or zero-page), swap and shared ptes of a PMD range.
    pub max_ptes_none: u32,
    pub max_ptes_swap: u32,
    pub max_ptes_shared: u32,
    /// The per-size `hugepages-<size>kB/enabled` settings as the kernel keeps them
    /// (huge_anon_orders_{always,madvise,inherit}): a bit per order, clear in all three
    /// for `never`, so the fault path combines three masks.
    orders_always: u64,
    orders_madvise: u64,
    orders_inherit: u64,
    /// The kernel has the per-size `hugepages-<size>kB/enabled` knobs (6.8+).
    per_size: bool,
    /// The kernel has `shrink_underused` (6.12+).
    has_shrink_underused: bool,
    /// Top-level `shmem_enabled` (shmem_huge) and the huge policy of the internal
    /// shm_mnt that backs MAP_SHARED|MAP_ANONYMOUS, which only never, always,
    /// within_size and advise write (deny and force leave it).
    shmem_huge: ShmemHuge,
    shm_mnt_huge: ShmemHuge,
    /// The per-size `hugepages-<size>kB/shmem_enabled` settings
    /// (huge_shmem_orders_{always,inherit,madvise,within_size}).
    shmem_orders_always: u64,
    shmem_orders_inherit: u64,
    shmem_orders_madvise: u64,
    shmem_orders_within_size: u64,
}

/// A `shmem_enabled` setting (SHMEM_HUGE_*), top-level or per size.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum ShmemHuge {
    Never,
    Always,
    WithinSize,
    Advise,
    /// Per size only.
    Inherit,
    /// Top-level only.
    Deny,
    Force,
}

impl ShmemHuge {
    pub fn name(self) -> &'static str {
        match self {
            ShmemHuge::Never => "never",
            ShmemHuge::Always => "always",
            ShmemHuge::WithinSize => "within_size",
            ShmemHuge::Advise => "advise",
            ShmemHuge::Inherit => "inherit",
            ShmemHuge::Deny => "deny",
            ShmemHuge::Force => "force",
        }
    }
    fn parse(value: &str, top: bool) -> Option<ShmemHuge> {
        Some(match value {
            "never" => ShmemHuge::Never,
            "always" => ShmemHuge::Always,
            "within_size" => ShmemHuge::WithinSize,
            "advise" => ShmemHuge::Advise,
            "inherit" if !top => ShmemHuge::Inherit,
            "deny" if top => ShmemHuge::Deny,
            "force" if top => ShmemHuge::Force,
            _ => return None,
        })
    }
}

/// MAX_PAGECACHE_ORDER: min(MAX_XAS_ORDER, the PMD order), MAX_XAS_ORDER being 11
/// (XA_CHUNK_SHIFT 6).
const MAX_PAGECACHE_ORDER: u32 = 11;

/// The start of the error for a knob this kernel lacks: `validate` takes a workload
/// that writes one as not applicable to the kernel, as the guest's missing sysfs file.
pub const NO_SUCH_KNOB: &str = "no such knob in this kernel";

impl ThpKnobs {
    pub fn new(granule: Granule) -> ThpKnobs {
        let pmd = granule.pmd_order() as usize;
        ThpKnobs {
            granule,
            enabled: ThpMode::Madvise,
            defrag: Defrag::Madvise,
            use_zero_page: true,
            shrink_underused: true,
            max_ptes_none: (1 << pmd) - 1,
            max_ptes_swap: 1 << pmd >> 3,
            max_ptes_shared: 1 << pmd >> 1,
            orders_always: 0,
            orders_madvise: 0,
            orders_inherit: 1 << pmd,
            per_size: true,
            has_shrink_underused: true,
            shmem_huge: ShmemHuge::Never,
            shm_mnt_huge: ShmemHuge::Never,
            shmem_orders_always: 0,
            shmem_orders_inherit: 1 << pmd,
            shmem_orders_madvise: 0,
            shmem_orders_within_size: 0,
        }
    }

    /// The knobs of an older kernel: without multi-size THP (before 6.8) only the PMD
    /// order, through the top-level `enabled`; without the underused shrinker (before
    /// 6.12) no new THP is queued for it, as with `shrink_underused` 0.
    pub fn set_kernel(&mut self, per_size: bool, shrink_underused: bool) {
        self.per_size = per_size;
        self.has_shrink_underused = shrink_underused;
        if !shrink_underused {
            self.shrink_underused = false;
        }
    }

    /// The `hugepages-<size>kB/enabled` setting of `order`.
    fn mode(&self, order: u32) -> ThpMode {
        let masks = [
            (self.orders_always, ThpMode::Always),
            (self.orders_madvise, ThpMode::Madvise),
            (self.orders_inherit, ThpMode::Inherit),
        ];
        mode_of(order, &masks, ThpMode::Never)
    }

    /// Anonymous mTHP orders the granule allows: 2 ..= PMD order.
    pub fn anon_orders(&self) -> std::ops::RangeInclusive<u32> {
        2..=self.granule.pmd_order()
    }

    /// The `<size>kB` name of an order.
    pub fn size_kb(&self, order: u32) -> u64 {
        (self.granule.page_size() << order) >> 10
    }

    fn order_of_size_kb(&self, kb: u64) -> Option<u32> {
        self.anon_orders().find(|o| self.size_kb(*o) == kb)
    }

    /// Orders a shmem folio may have (THP_ORDERS_ALL_FILE_DEFAULT): 1 ..= the PMD
    /// order or MAX_PAGECACHE_ORDER, whichever is lower.
    pub fn shmem_orders(&self) -> std::ops::RangeInclusive<u32> {
        1..=self.granule.pmd_order().min(MAX_PAGECACHE_ORDER)
    }

    /// The `hugepages-<size>kB/shmem_enabled` setting of `order`.
    fn shmem_mode(&self, order: u32) -> ShmemHuge {
        let masks = [
            (self.shmem_orders_always, ShmemHuge::Always),
            (self.shmem_orders_inherit, ShmemHuge::Inherit),
            (self.shmem_orders_within_size, ShmemHuge::WithinSize),
            (self.shmem_orders_madvise, ShmemHuge::Advise),
        ];
        mode_of(order, &masks, ShmemHuge::Never)
    }

    /// The shmem folio orders some fault could allocate under these knobs (bit per order).
    pub fn shmem_orders_allowed(&self) -> u64 {
        let any = self.shmem_orders_always | self.shmem_orders_madvise | self.shmem_orders_within_size;
        let top_on = !matches!(self.shm_mnt_huge, ShmemHuge::Never) || self.shmem_huge == ShmemHuge::Force;
        let inherit = if top_on { self.shmem_orders_inherit } else { 0 };
        any | inherit
    }

    fn set_shmem(&mut self, knob: &str, value: &str) -> Result<(), String> {
        let bad = |what: &str| Err(format!("invalid value '{value}' for {what}"));
        if knob == "shmem_enabled" {
            let Some(h) = ShmemHuge::parse(value, true) else {
                return bad("shmem_enabled (always|within_size|advise|never|deny|force)");
            };
            // shmem_enabled_store: shm_mnt's policy follows all but deny and force.
            self.shmem_huge = h;
            if !matches!(h, ShmemHuge::Deny | ShmemHuge::Force) {
                self.shm_mnt_huge = h;
            }
            return Ok(());
        }
        if !self.per_size {
            return Err(format!(
                "{NO_SUCH_KNOB}: {knob} came with multi-size THP for anonymous shmem (6.11; mthp=off)"
            ));
        }
        let order = knob
            .strip_prefix("hugepages-")
            .and_then(|r| r.strip_suffix("kB/shmem_enabled"))
            .and_then(|kb| kb.parse::<u64>().ok())
            .and_then(|kb| self.shmem_orders().find(|o| self.size_kb(*o) == kb))
            .ok_or_else(|| format!("unknown knob '{knob}'"))?;
        let Some(mode) = ShmemHuge::parse(value, false) else {
            return bad(&format!("{knob} (always|inherit|within_size|advise|never)"));
        };
        // thpsize_shmem_enabled_store: no inherit below the PMD size under force.
        if mode == ShmemHuge::Inherit && self.shmem_huge == ShmemHuge::Force && order != self.granule.pmd_order() {
            return bad(&format!("{knob} while shmem_enabled is force (EINVAL)"));
        }
        let bit = 1u64 << order;
        for (mask, m) in [
            (&mut self.shmem_orders_always, ShmemHuge::Always),
            (&mut self.shmem_orders_inherit, ShmemHuge::Inherit),
            (&mut self.shmem_orders_madvise, ShmemHuge::Advise),
            (&mut self.shmem_orders_within_size, ShmemHuge::WithinSize),
        ] {
            *mask = if mode == m { *mask | bit } else { *mask & !bit };
        }
        Ok(())
    }

    /// shmem_allowable_huge_orders for a fault at `index` of an anonymous shmem VMA
    /// of `i_size` pages, with or without MADV_HUGEPAGE / MADV_NOHUGEPAGE.
    pub fn shmem_allowable_orders(&self, vm_hugepage: bool, vm_nohugepage: bool, index: u64, i_size: u64) -> u64 {
        if vm_nohugepage || self.shmem_huge == ShmemHuge::Deny {
            return 0;
        }
        let file_orders = self.shmem_orders().fold(0u64, |m, o| m | (1 << o));
        if self.shmem_huge == ShmemHuge::Force {
            return self.shmem_orders_inherit;
        }
        // shmem_huge_global_enabled: the shm_mnt's policy, judged with the PMD order.
        let global = match self.shm_mnt_huge {
            ShmemHuge::Always => true,
            ShmemHuge::WithinSize => within_size(file_orders, index, i_size) != 0 || vm_hugepage,
            ShmemHuge::Advise => vm_hugepage,
            _ => false,
        };
        let mut mask = self.shmem_orders_always | within_size(self.shmem_orders_within_size, index, i_size);
        if vm_hugepage {
            mask |= self.shmem_orders_madvise;
        }
        if global {
            mask |= self.shmem_orders_inherit;
        }
        mask & file_orders
    }

    /// Write `value` to `knob` (a path below transparent_hugepage/), as sysfs would.
    pub fn set(&mut self, knob: &str, value: &str) -> Result<(), String> {
        let bad = |what: &str| Err(format!("invalid value '{value}' for {what}"));
        match knob {
            "enabled" => {
                self.enabled = match value {
                    "always" => ThpMode::Always,
                    "madvise" => ThpMode::Madvise,
                    "never" => ThpMode::Never,
                    _ => return bad("enabled (always|madvise|never)"),
                }
            }
            "defrag" => {
                self.defrag = match value {
                    "always" => Defrag::Always,
                    "defer" => Defrag::Defer,
                    "defer+madvise" => Defrag::DeferMadvise,
                    "madvise" => Defrag::Madvise,
                    "never" => Defrag::Never,
                    _ => return bad("defrag (always|defer|defer+madvise|madvise|never)"),
                }
            }
            "shrink_underused" if !self.has_shrink_underused => {
                return Err(format!("{NO_SUCH_KNOB}: {knob} came with the underused-THP shrinker (6.12, dafff3f4c850; shrink-underused=off)"))
            }
            "use_zero_page" | "shrink_underused" => {
                let v = match value {
                    "0" => false,
                    "1" => true,
                    _ => return bad(&format!("{knob} (0|1)")),
                };
                if knob == "use_zero_page" {
                    self.use_zero_page = v
                } else {
                    self.shrink_underused = v
                }
            }
            "khugepaged/max_ptes_none" | "khugepaged/max_ptes_swap" | "khugepaged/max_ptes_shared" => {
                let max = (1u32 << self.granule.pmd_order()) - 1;
                let v = match value.parse::<u32>() {
                    Ok(v) if v <= max => v,
                    _ => return bad(&format!("{knob} (0..={max})")),
                };
                *match knob {
                    "khugepaged/max_ptes_none" => &mut self.max_ptes_none,
                    "khugepaged/max_ptes_swap" => &mut self.max_ptes_swap,
                    _ => &mut self.max_ptes_shared,
                } = v;
            }
            _ if knob.ends_with("shmem_enabled") => self.set_shmem(knob, value)?,
            _ if !self.per_size && knob.starts_with("hugepages-") => {
                return Err(format!("{NO_SUCH_KNOB}: {knob} came with multi-size THP (6.8, 3485b88390b0; mthp=off)"))
            }
            _ => {
                let order = knob
                    .strip_prefix("hugepages-")
                    .and_then(|r| r.strip_suffix("kB/enabled"))
                    .and_then(|kb| kb.parse::<u64>().ok())
                    .and_then(|kb| self.order_of_size_kb(kb))
                    .ok_or_else(|| format!("unknown knob '{knob}'"))?;
                let mode = match value {
                    "always" => ThpMode::Always,
                    "inherit" => ThpMode::Inherit,
                    "madvise" => ThpMode::Madvise,
                    "never" => ThpMode::Never,
                    _ => return bad(&format!("{knob} (always|inherit|madvise|never)")),
                };
                let bit = 1u64 << order;
                for (mask, m) in [
                    (&mut self.orders_always, ThpMode::Always),
                    (&mut self.orders_madvise, ThpMode::Madvise),
                    (&mut self.orders_inherit, ThpMode::Inherit),
                ] {
                    *mask = if mode == m { *mask | bit } else { *mask & !bit };
                }
            }
        }
        Ok(())
    }

    /// Every knob the workload language may write, with its default value, in a
    /// fixed order (the host runner saves, sets and restores exactly these).
    pub fn defaults(granule: Granule) -> Vec<(String, String)> {
        let k = ThpKnobs::new(granule);
        let mut v = vec![
            ("enabled".to_string(), "madvise".to_string()),
            ("defrag".to_string(), "madvise".to_string()),
            ("use_zero_page".to_string(), "1".to_string()),
            ("shrink_underused".to_string(), "1".to_string()),
            ("khugepaged/max_ptes_none".to_string(), k.max_ptes_none.to_string()),
            ("khugepaged/max_ptes_swap".to_string(), k.max_ptes_swap.to_string()),
            ("khugepaged/max_ptes_shared".to_string(), k.max_ptes_shared.to_string()),
        ];
        for o in k.anon_orders() {
            v.push((
                format!("hugepages-{}kB/enabled", k.size_kb(o)),
                k.mode(o).name().to_string(),
            ));
        }
        // The top-level shmem knob first: under `force` a size could not be `inherit`.
        v.push(("shmem_enabled".to_string(), k.shmem_huge.name().to_string()));
        for o in k.shmem_orders() {
            v.push((
                format!("hugepages-{}kB/shmem_enabled", k.size_kb(o)),
                k.shmem_mode(o).name().to_string(),
            ));
        }
        v
    }

    /// The folio sizes above a page (kB) a fault may allocate in an anonymous VMA,
    /// with or without MADV_HUGEPAGE.
    pub fn fault_sizes_kb(&self, vm_hugepage: bool) -> Vec<u64> {
        let mask = self.allowable_orders(vm_hugepage, false);
        self.anon_orders()
            .filter(|o| mask & (1 << o) != 0)
            .map(|o| self.size_kb(o))
            .collect()
    }

    /// hugepage_global_enabled: the top-level `enabled` is always or madvise.
    pub fn global_enabled(&self) -> bool {
        matches!(self.enabled, ThpMode::Always | ThpMode::Madvise)
    }

    /// thp_vma_allowable_orders for an anonymous VMA in the fault path (sysfs enforced).
    pub fn allowable_orders(&self, vm_hugepage: bool, vm_nohugepage: bool) -> u64 {
        if vm_nohugepage {
            return 0;
        }
        let inherit = match self.enabled {
            ThpMode::Always => true,
            ThpMode::Madvise => vm_hugepage,
            _ => false,
        };
        let mut mask = self.orders_always;
        if vm_hugepage {
            mask |= self.orders_madvise;
        }
        if inherit {
            mask |= self.orders_inherit;
        }
        mask
    }
}

/// The mode whose order bitmap has `order`'s bit (the kernel keeps one bitmap per
/// mode, a bit in at most one), else `none`.
fn mode_of<M: Copy>(order: u32, masks: &[(u64, M)], none: M) -> M {
    (masks.iter())
        .find(|(m, _)| m & (1 << order) != 0)
        .map_or(none, |(_, mode)| *mode)
}

/// shmem_get_orders_within_size: `orders` if the folio of the highest order whose
/// aligned block ends within i_size (`i_size` pages) around `index` fits, else 0; the
/// kernel returns the whole mask once one order fits.
fn within_size(orders: u64, index: u64, i_size: u64) -> u64 {
    let mut o = orders;
    while o != 0 {
        let order = 63 - o.leading_zeros();
        if i_size >= (index + 1).next_multiple_of(1 << order) {
            return o;
        }
        o &= !(1 << order);
    }
    0
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn defaults_match_the_spec() {
        let k = ThpKnobs::new(Granule::K4);
        assert_eq!(k.allowable_orders(false, false), 0);
        assert_eq!(k.allowable_orders(true, false), 1 << 9);
        let d = ThpKnobs::defaults(Granule::K4);
        assert!(d.contains(&("hugepages-2048kB/enabled".into(), "inherit".into())));
        assert!(d.contains(&("hugepages-64kB/enabled".into(), "never".into())));
        assert_eq!(d.iter().filter(|(k, _)| k.ends_with("kB/enabled")).count(), 8);
        assert_eq!(d.iter().filter(|(k, _)| k.ends_with("kB/shmem_enabled")).count(), 9);
    }

    #[test]
    fn inherit_follows_the_top_level() {
        let mut k = ThpKnobs::new(Granule::K4);
        k.set("hugepages-64kB/enabled", "inherit").unwrap();
        k.set("hugepages-16kB/enabled", "madvise").unwrap();
        assert_eq!(k.allowable_orders(false, false), 0);
        assert_eq!(k.allowable_orders(true, false), (1 << 9) | (1 << 4) | (1 << 2));
        k.set("enabled", "always").unwrap();
        assert_eq!(k.allowable_orders(false, false), (1 << 9) | (1 << 4));
        assert_eq!(k.allowable_orders(true, true), 0);
    }

    #[test]
    fn rewriting_a_size_moves_it_between_the_order_bitmaps() {
        let mut k = ThpKnobs::new(Granule::K4);
        k.set("enabled", "always").unwrap();
        for (mode, plain, madv) in [
            ("always", true, true),
            ("madvise", false, true),
            ("inherit", true, true),
            ("never", false, false),
        ] {
            k.set("hugepages-64kB/enabled", mode).unwrap();
            assert_eq!(k.allowable_orders(false, false) & (1 << 4) != 0, plain, "{mode}");
            assert_eq!(k.allowable_orders(true, false) & (1 << 4) != 0, madv, "{mode}");
            assert_eq!(
                k.allowable_orders(true, false) & !(1 << 4),
                1 << 9,
                "{mode}: other sizes untouched"
            );
        }
    }

    #[test]
    fn bad_knobs_and_values_are_refused() {
        let mut k = ThpKnobs::new(Granule::K4);
        assert!(k.set("hugepages-8kB/enabled", "always").is_err());
        assert!(k.set("hugepages-64kB/enabled", "sometimes").is_err());
        assert!(k.set("enabled", "inherit").is_err());
        assert!(k.set("frobnicate", "1").is_err());
    }

    #[test]
    fn shmem_sizes_follow_their_knob_and_inherit_the_top_level() {
        let mut k = ThpKnobs::new(Granule::K4);
        let (o64, o16) = (1 << 4, 1 << 2);
        assert_eq!(k.shmem_allowable_orders(false, false, 0, 256), 0, "defaults: nothing");
        k.set("hugepages-2048kB/shmem_enabled", "never").unwrap();
        k.set("hugepages-64kB/shmem_enabled", "inherit").unwrap();
        k.set("hugepages-16kB/shmem_enabled", "advise").unwrap();
        assert_eq!(k.shmem_allowable_orders(false, false, 0, 256), 0);
        assert_eq!(k.shmem_allowable_orders(true, false, 0, 256), o16);
        k.set("shmem_enabled", "advise").unwrap();
        assert_eq!(k.shmem_allowable_orders(true, false, 0, 256), o64 | o16);
        k.set("shmem_enabled", "always").unwrap();
        assert_eq!(k.shmem_allowable_orders(false, false, 0, 256), o64);
        assert_eq!(k.shmem_allowable_orders(true, true, 0, 256), 0, "MADV_NOHUGEPAGE");
        // deny turns every size off; force leaves only the inherit sizes.
        k.set("shmem_enabled", "deny").unwrap();
        assert_eq!(k.shmem_allowable_orders(true, false, 0, 256), 0);
        k.set("shmem_enabled", "force").unwrap();
        assert_eq!(k.shmem_allowable_orders(false, false, 0, 256), o64);
        assert!(
            k.set("hugepages-16kB/shmem_enabled", "inherit").is_err(),
            "EINVAL under force"
        );
    }

    #[test]
    fn within_size_allows_a_size_only_inside_i_size() {
        let mut k = ThpKnobs::new(Granule::K4);
        k.set("hugepages-64kB/shmem_enabled", "within_size").unwrap();
        // i_size 24 pages: the block [0, 16) ends inside it, [16, 32) does not.
        assert_eq!(k.shmem_allowable_orders(false, false, 3, 24), 1 << 4);
        assert_eq!(k.shmem_allowable_orders(false, false, 17, 24), 0);
    }

    #[test]
    fn shmem_has_an_order_1_size_and_anon_does_not() {
        let mut k = ThpKnobs::new(Granule::K4);
        k.set("hugepages-8kB/shmem_enabled", "always").unwrap();
        assert_eq!(k.shmem_allowable_orders(false, false, 0, 256), 1 << 1);
        assert!(
            k.set("hugepages-8kB/enabled", "always").is_err(),
            "no order-1 anon size"
        );
        let d = ThpKnobs::defaults(Granule::K4);
        let top = d.iter().position(|(n, _)| n == "shmem_enabled").unwrap();
        assert_eq!(d[top].1, "never");
        assert!(
            d[top + 1..].iter().all(|(n, _)| n.ends_with("/shmem_enabled")),
            "the top level is written first"
        );
        assert!(d.contains(&("hugepages-2048kB/shmem_enabled".into(), "inherit".into())));
        assert!(d.contains(&("hugepages-8kB/shmem_enabled".into(), "never".into())));
    }
}
