//! The model's CONFIG_DEBUG_VM: a full consistency check of page tables, folios,
//! counters and the allocator, run after ops in tests and property tests.

use super::folio::PageFlags;
use super::mm_types::MmId;
use super::vmstat::MthpStat;
use super::Kernel;
use crate::arch::arm64::pgtable::Pte;
use crate::hw::{DescKind, Pfn, TableId};
use std::collections::BTreeMap;

#[derive(Default)]
struct Seen {
    /// Pte mappings per page.
    pte_maps: BTreeMap<u64, i32>,
    /// Pmd mappings per folio head.
    pmd_maps: BTreeMap<u64, i32>,
    /// Page-table pages reachable from some pgd.
    tables: u64,
}

impl Kernel {
    /// Check every invariant; the first violation is returned as a message.
    pub fn check_invariants(&self) -> Result<(), String> {
        let mut seen = Seen::default();
        for (id, m) in self.mms.iter().enumerate() {
            let Some(m) = m else { continue };
            let mut rss = 0i64;
            let (mut ptes, mut pmds) = (0i64, 0i64);
            self.check_table(
                id,
                m.pgd_table,
                self.arch.granule().start_level(),
                0,
                &mut seen,
                &mut rss,
                &mut ptes,
                &mut pmds,
            )?;
            if rss != m.rss_anon {
                return Err(format!("mm {id}: rss_anon {} but {rss} pages mapped", m.rss_anon));
            }
            let deposited = m.deposited.len() as i64;
            if ptes + deposited != m.nr_ptes || pmds != m.nr_pmds {
                return Err(format!(
                    "mm {id}: nr_ptes {} nr_pmds {} but found {ptes}+{deposited} and {pmds}",
                    m.nr_ptes, m.nr_pmds
                ));
            }
            seen.tables += 1 + deposited as u64;
            for (start, v) in &m.vmas {
                if *start != v.start || v.start >= v.end {
                    return Err(format!("mm {id}: bad VMA {v:?}"));
                }
            }
            let mut prev_end = 0;
            for v in m.vmas.values() {
                if v.start < prev_end {
                    return Err(format!("mm {id}: overlapping VMAs at {:#x}", v.start));
                }
                prev_end = v.end;
            }
        }
        self.check_folios(&seen)
    }

    #[allow(clippy::too_many_arguments)]
    fn check_table(
        &self,
        mm: MmId,
        table: TableId,
        level: u8,
        base: u64,
        seen: &mut Seen,
        rss: &mut i64,
        ptes: &mut i64,
        pmds: &mut i64,
    ) -> Result<(), String> {
        let g = self.arch.granule();
        let mem = &self.arch.hw.mem;
        let n = g.entries_at(level);
        let shift = g.level_shift(level);
        for i in 0..n {
            let d = mem.read(table, i);
            let va = base | ((i as u64) << shift);
            match d.kind(level, g) {
                DescKind::Table(pa) => {
                    let child = mem
                        .table_id_of(pa)
                        .ok_or_else(|| format!("mm {mm}: table at {va:#x} points at no table"))?;
                    seen.tables += 1;
                    match level + 1 {
                        3 => *ptes += 1,
                        2 => *pmds += 1,
                        _ => {}
                    }
                    self.check_table(mm, child, level + 1, va, seen, rss, ptes, pmds)?;
                }
                DescKind::Block(_) => {
                    let pfn = d.pfn(g);
                    if self.huge_zero_folio == Some(pfn) {
                        continue;
                    }
                    if self.memmap.folio_of(pfn) != pfn || self.memmap.folio_order(pfn) != g.pmd_order() {
                        return Err(format!(
                            "mm {mm}: pmd at {va:#x} maps {pfn:?}, not a PMD-order folio head"
                        ));
                    }
                    *seen.pmd_maps.entry(pfn.0).or_default() += 1;
                    *rss += 1 << g.pmd_order();
                }
                DescKind::Page(_) => {
                    let pfn = d.pfn(g);
                    if level == 3 && Pte(d).pte_cont() {
                        self.check_cont_block(mm, table, i, va)?;
                    }
                    if self.is_zero_pfn(pfn) {
                        continue;
                    }
                    *seen.pte_maps.entry(pfn.0).or_default() += 1;
                    *rss += 1;
                }
                // PROT_NONE: a present, invalid pte maps its page all the same.
                DescKind::Invalid if level == 3 && Pte(d).pte_present() => {
                    let pfn = d.pfn(g);
                    if !self.is_zero_pfn(pfn) {
                        *seen.pte_maps.entry(pfn.0).or_default() += 1;
                        *rss += 1;
                    }
                }
                DescKind::Invalid if !d.is_none() => {
                    return Err(format!("mm {mm}: unexpected non-present entry {d:?} at {va:#x}"));
                }
                _ => {}
            }
        }
        Ok(())
    }

    /// A contpte block: all entries valid and CONT, consecutive pfns, same prot.
    fn check_cont_block(&self, mm: MmId, table: TableId, i: usize, va: u64) -> Result<(), String> {
        let g = self.arch.granule();
        let n = g.cont_ptes();
        let first = i & !(n - 1);
        let mem = &self.arch.hw.mem;
        let head = Pte(mem.read(table, first));
        let norm = |p: Pte| p.pte_mkold().pte_mkclean();
        for j in 0..n {
            let p = Pte(mem.read(table, first + j));
            let expect = norm(head).pte_advance_pfn(j as u64, g);
            if !p.pte_valid_cont() || !norm(p).pte_same(expect) {
                return Err(format!(
                    "mm {mm}: inconsistent contpte block at {va:#x} (entry {j}: {p:?})"
                ));
            }
        }
        if head.pte_pfn(g).0 % n as u64 != 0 {
            return Err(format!("mm {mm}: contpte block at {va:#x} maps an unaligned pfn"));
        }
        Ok(())
    }

    fn check_folios(&self, seen: &Seen) -> Result<(), String> {
        let mut heads: BTreeMap<u64, (i32, i32)> = BTreeMap::new();
        for (pfn, n) in &seen.pte_maps {
            let p = self.memmap.page(Pfn(*pfn));
            if p.flags.contains(PageFlags::BUDDY) || !p.flags.contains(PageFlags::INUSE) {
                return Err(format!("{pfn:#x} is mapped but free"));
            }
            if p.mapcount != *n {
                return Err(format!("{pfn:#x}: mapcount {} but {n} pte mappings", p.mapcount));
            }
            let h = self.memmap.folio_of(Pfn(*pfn)).0;
            let e = heads.entry(h).or_default();
            e.0 += n;
            e.1 += 1;
        }
        for (h, n) in &seen.pmd_maps {
            heads.entry(*h).or_default();
            let _ = n;
        }
        let mut nr_anon: BTreeMap<u32, i64> = BTreeMap::new();
        let mut partial: BTreeMap<u32, i64> = BTreeMap::new();
        for (h, (maps, pages_mapped)) in &heads {
            let f = Pfn(*h);
            let hp = self.memmap.page(f);
            let order = self.memmap.folio_order(f);
            let pmd = seen.pmd_maps.get(h).copied().unwrap_or(0);
            if !hp.flags.contains(PageFlags::ANON) {
                return Err(format!("folio {f:?} is mapped but not anon"));
            }
            let mapcount = maps + pmd;
            if self.memmap.folio_mapcount(f) != mapcount {
                return Err(format!(
                    "folio {f:?}: folio_mapcount {} but {mapcount} mappings",
                    self.memmap.folio_mapcount(f)
                ));
            }
            if hp.refcount != mapcount {
                return Err(format!("folio {f:?}: refcount {} but {mapcount} mappings", hp.refcount));
            }
            if order > 0 {
                if hp.entire_mapcount != pmd || hp.nr_pages_mapped != *pages_mapped {
                    return Err(format!(
                        "folio {f:?}: entire {} nr_pages_mapped {} but {pmd} and {pages_mapped}",
                        hp.entire_mapcount, hp.nr_pages_mapped
                    ));
                }
                let partially = pmd == 0 && *pages_mapped > 0 && (*pages_mapped as u64) < (1 << order);
                if partially && order > 1 && !hp.flags.contains(PageFlags::PARTIALLY_MAPPED) {
                    return Err(format!("folio {f:?} is partially mapped but not marked"));
                }
                if hp.flags.contains(PageFlags::PARTIALLY_MAPPED) {
                    *partial.entry(order).or_default() += 1;
                    if !hp.flags.contains(PageFlags::DEFERRED) {
                        return Err(format!("folio {f:?} marked partially mapped but not queued"));
                    }
                }
            }
            *nr_anon.entry(order).or_default() += 1;
        }
        for order in self.knobs.anon_orders() {
            let want = nr_anon.get(&order).copied().unwrap_or(0);
            if self.stat.mthp(order, MthpStat::NrAnon) != want {
                return Err(format!(
                    "order {order}: nr_anon {} but {want} anon folios mapped",
                    self.stat.mthp(order, MthpStat::NrAnon)
                ));
            }
            let want = partial.get(&order).copied().unwrap_or(0);
            if self.stat.mthp(order, MthpStat::NrAnonPartiallyMapped) != want {
                return Err(format!(
                    "order {order}: nr_anon_partially_mapped {} but {want}",
                    self.stat.mthp(order, MthpStat::NrAnonPartiallyMapped)
                ));
            }
        }
        // Every page is either free, a table, reserved, the huge zero page, or mapped.
        let mut used: u64 = heads.keys().map(|h| self.memmap.folio_nr_pages(Pfn(*h))).sum();
        used += seen.tables;
        if let Some(z) = self.huge_zero_folio {
            used += self.memmap.folio_nr_pages(z);
        }
        let total = self.memmap.nr_pages() - 16;
        if self.buddy.free_pages + used != total {
            return Err(format!(
                "leak: {} free + {used} in use != {total} pages",
                self.buddy.free_pages
            ));
        }
        Ok(())
    }
}
