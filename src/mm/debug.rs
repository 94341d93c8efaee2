//! The model's CONFIG_DEBUG_VM: a full consistency check of page tables, folios,
//! counters and the allocator, run after ops in tests and property tests.

use super::filemap::CacheEntry;
use super::folio::{PageFlags, NIL};
use super::mm_types::MmId;
use super::vmstat::MthpStat;
use super::Kernel;
use crate::arch::arm64::pgtable::pmd_trans_huge;
use crate::arch::arm64::pgtable::Pte;
use crate::hw::{DescKind, Pfn, TableId};
use std::collections::BTreeMap;

#[derive(Default)]
struct Seen {
    /// Pte mappings per page.
    pte_maps: BTreeMap<u64, i32>,
    /// Pmd mappings per folio head.
    pmd_maps: BTreeMap<u64, i32>,
    /// Mappings (ptes and pmds) per large folio head and mm, for the mm-id slots.
    folio_mm_maps: BTreeMap<(u64, MmId), i32>,
    /// Page-table pages reachable from some pgd.
    tables: u64,
    /// Swap ptes per slot, and per mm.
    swap_refs: BTreeMap<u64, u8>,
    swap_ptes: BTreeMap<MmId, i64>,
    /// Pte mappings of shmem pages, per mm (MM_SHMEMPAGES).
    shmem_ptes: BTreeMap<MmId, i64>,
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
            let shmem = seen.shmem_ptes.get(&id).copied().unwrap_or(0);
            if shmem != m.rss_shmem {
                return Err(format!(
                    "mm {id}: rss_shmem {} but {shmem} shmem pages mapped",
                    m.rss_shmem
                ));
            }
            let swapped = seen.swap_ptes.get(&id).copied().unwrap_or(0);
            if swapped != m.rss_swap {
                return Err(format!("mm {id}: rss_swap {} but {swapped} swap ptes", m.rss_swap));
            }
            let deposited = m.deposited.len() as i64;
            if ptes + deposited != m.nr_ptes || pmds != m.nr_pmds {
                return Err(format!(
                    "mm {id}: nr_ptes {} nr_pmds {} but found {ptes}+{deposited} and {pmds}",
                    m.nr_ptes, m.nr_pmds
                ));
            }
            seen.tables += 1 + deposited as u64;
            for (start, v) in m.vmas() {
                if *start != v.start || v.start >= v.end {
                    return Err(format!("mm {id}: bad VMA {v:?}"));
                }
            }
            let mut prev_end = 0;
            for v in m.vmas().values() {
                if v.start < prev_end {
                    return Err(format!("mm {id}: overlapping VMAs at {:#x}", v.start));
                }
                prev_end = v.end;
            }
        }
        self.check_shmem(&mut seen)?;
        self.check_swap(&seen)?;
        self.check_folios(&seen)
    }

    /// Every shmem page-cache entry: a folio cached there at its index (a large one at
    /// each index of its aligned range; swap-backed, not in the swap cache), or a slot that it holds (one reference, as a
    /// swap pte's); nrpages, swapped and the folio-to-inode map agree with the entries.
    fn check_shmem(&self, seen: &mut Seen) -> Result<(), String> {
        let (mut cached, mut cached_folios) = (0, 0);
        for (ino, inode) in self.shmem.inodes() {
            // Pages cached (nrpages counts pages) and the folios holding them.
            let (mut folios, mut slots, mut heads) = (0, 0, 0);
            for (index, e) in &inode.mapping.i_pages {
                match *e {
                    CacheEntry::Folio(f) => {
                        let p = self.memmap.page(f);
                        let nr = self.memmap.folio_nr_pages(f);
                        let first = self.memmap.page_index(f);
                        let ok = self.shmem.folio_inode(f) == Some(ino)
                            && *index >= first
                            && *index < first + nr
                            && first.is_multiple_of(nr)
                            && self.memmap.page_index(Pfn(f.0 + *index - first)) == *index
                            && p.flags.contains(PageFlags::SWAPBACKED | PageFlags::INUSE)
                            && !p.flags.intersects(PageFlags::ANON | PageFlags::SWAPCACHE);
                        if !ok {
                            return Err(format!("shmem inode {ino}: index {index} caches {f:?} ({p:?})"));
                        }
                        folios += 1;
                        heads += (*index == first) as u64;
                    }
                    CacheEntry::Swap(slot) => {
                        *seen.swap_refs.entry(slot).or_default() += 1;
                        slots += 1;
                    }
                }
            }
            if folios != inode.mapping.nrpages || slots != inode.swapped {
                return Err(format!(
                    "shmem inode {ino}: nrpages {} swapped {} but {folios} folios and {slots} slots",
                    inode.mapping.nrpages, inode.swapped
                ));
            }
            cached += folios;
            cached_folios += heads;
        }
        let live = self.shmem.inodes().map(|(_, i)| i.mapping.nrpages).sum::<u64>();
        if cached != live || self.shmem.nr_cached() as u64 != cached_folios {
            return Err(format!(
                "shmem: {} folios know an inode but the caches hold {cached_folios}",
                self.shmem.nr_cached()
            ));
        }
        Ok(())
    }

    /// Every slot's count is the swap ptes that hold it; a slot is marked cached
    /// exactly when a folio in the swap cache holds it, and that folio covers it.
    fn check_swap(&self, seen: &Seen) -> Result<(), String> {
        let Some(si) = &self.swap else {
            return match seen.swap_refs.keys().next() {
                Some(o) => Err(format!("a swap pte for slot {o} without a swap device")),
                None => Ok(()),
            };
        };
        let mut inuse = 0;
        for offset in 1..si.max() {
            let want = seen.swap_refs.get(&offset).copied().unwrap_or(0);
            if si.swap_count(offset) != want {
                return Err(format!(
                    "swap slot {offset}: count {} but {want} swap ptes",
                    si.swap_count(offset)
                ));
            }
            let cached = si.cache.folio(offset);
            if si.has_cache(offset) != cached.is_some() {
                return Err(format!(
                    "swap slot {offset}: SWAP_HAS_CACHE but cached folio {cached:?}"
                ));
            }
            if let Some(f) = cached {
                let first = si.cache.swap_of(f);
                let nr = self.memmap.folio_nr_pages(f);
                if !first.is_some_and(|s| (s..s + nr).contains(&offset))
                    || !self.memmap.folio_test(f, PageFlags::SWAPCACHE | PageFlags::SWAPBACKED)
                {
                    return Err(format!(
                        "swap slot {offset}: cached {f:?} at {first:?} does not cover it"
                    ));
                }
            }
            inuse += (want > 0 || cached.is_some()) as u64;
        }
        for (f, slot) in si.cache.iter() {
            if si.cache.folio(slot) != Some(f) {
                return Err(format!("swap cache: {f:?} at slot {slot}, which caches another"));
            }
            // Up to 6.19 cached folios are order 0 between ops: readahead reads order 0,
            // and reclaim frees the large folios it writes out in the same pass. From
            // 7.0 swapin_sync reads large folios into the cache for slots a fork shares.
            if self.memmap.folio_order(f) > 0 && !self.swapin_sync_cache {
                return Err(format!("swap cache: large folio {f:?} at slot {slot} between ops"));
            }
        }
        if inuse != si.inuse_pages {
            return Err(format!("swap: {} slots in use but {inuse} referenced", si.inuse_pages));
        }
        Ok(())
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
                _ if level == 2 && pmd_trans_huge(d) => {
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
                    *seen.folio_mm_maps.entry((pfn.0, mm)).or_default() += 1;
                    if self.shmem.folio_inode(pfn).is_some() {
                        *seen.shmem_ptes.entry(mm).or_default() += 1 << g.pmd_order();
                    } else {
                        *rss += 1 << g.pmd_order();
                    }
                }
                DescKind::Page(_) => {
                    let pfn = d.pfn(g);
                    if level == 3 && Pte(d).pte_cont() {
                        self.check_cont_block(mm, table, i, va)?;
                    }
                    if self.is_zero_pfn(pfn) {
                        continue;
                    }
                    self.seen_pte(mm, pfn, seen);
                    if self.shmem.folio_inode(self.memmap.folio_of(pfn)).is_some() {
                        *seen.shmem_ptes.entry(mm).or_default() += 1;
                    } else {
                        *rss += 1;
                    }
                }
                // PROT_NONE: a present, invalid pte maps its page all the same.
                DescKind::Invalid if level == 3 && Pte(d).pte_present() => {
                    let pfn = d.pfn(g);
                    if !self.is_zero_pfn(pfn) {
                        self.seen_pte(mm, pfn, seen);
                        *rss += 1;
                    }
                }
                // Migration entries live only inside the op that made them.
                DescKind::Invalid if Pte(d).is_migration_entry() => {
                    return Err(format!("mm {mm}: migration entry {d:?} left at {va:#x}"));
                }
                DescKind::Invalid if level == 3 && Pte(d).is_swap_pte() => {
                    *seen.swap_refs.entry(Pte(d).pte_swp_offset()).or_default() += 1;
                    *seen.swap_ptes.entry(mm).or_default() += 1;
                }
                DescKind::Invalid if !d.is_none() => {
                    return Err(format!("mm {mm}: unexpected non-present entry {d:?} at {va:#x}"));
                }
                _ => {}
            }
        }
        Ok(())
    }

    fn seen_pte(&self, mm: MmId, pfn: Pfn, seen: &mut Seen) {
        *seen.pte_maps.entry(pfn.0).or_default() += 1;
        let head = self.memmap.folio_of(pfn);
        if head != pfn || self.memmap.folio_order(head) > 0 {
            *seen.folio_mm_maps.entry((head.0, mm)).or_default() += 1;
        }
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
        if !head.pte_pfn(g).0.is_multiple_of(n as u64) {
            return Err(format!("mm {mm}: contpte block at {va:#x} maps an unaligned pfn"));
        }
        Ok(())
    }

    /// The struct pages of a mapped large folio: every tail carries its folio's order
    /// (which is how it finds its head) and no folio-wide flag, and the page after the
    /// folio is not claimed by it (a split or prep that wrote tails as if the folio
    /// were larger corrupts it).
    fn check_folio_pages(&self, head: Pfn) -> Result<(), String> {
        let hp = self.memmap.page(head);
        if hp.flags.contains(PageFlags::TAIL) || !hp.flags.contains(PageFlags::INUSE) {
            return Err(format!("folio {head:?}: head page flags {:?}", hp.flags));
        }
        let nr = self.memmap.folio_nr_pages(head);
        for i in 1..nr {
            let p = self.memmap.page(Pfn(head.0 + i));
            let tail = p.flags.contains(PageFlags::TAIL | PageFlags::INUSE) && !p.flags.contains(PageFlags::HEAD);
            if !tail || p.order != hp.order {
                return Err(format!("folio {head:?}: bad tail page {i} ({p:?})"));
            }
        }
        if let Some(next) = self.memmap.try_page(Pfn(head.0 + nr)) {
            if next.flags.contains(PageFlags::TAIL) && self.memmap.folio_of(Pfn(head.0 + nr)) == head {
                return Err(format!(
                    "folio {head:?} of order {}: the page after it claims it as head",
                    hp.order
                ));
            }
        }
        Ok(())
    }

    /// A mapped page that is a tail must lie inside its head's folio.
    fn check_tail_in_folio(&self, pfn: Pfn) -> Result<(), String> {
        let head = self.memmap.folio_of(pfn);
        if head == pfn {
            return Ok(());
        }
        let hp = self.memmap.page(head);
        if !hp.flags.contains(PageFlags::HEAD) || pfn.0 >= head.0 + (1u64 << hp.order) {
            return Err(format!("{pfn:?} is a tail outside its head {head:?}'s folio"));
        }
        Ok(())
    }

    /// The mm-id slots of a large folio count no more than the mappings of their mm,
    /// and a folio mapped by two mms is marked maybe-shared.
    fn check_mm_slots(&self, head: Pfn, seen: &Seen) -> Result<(), String> {
        let hp = self.memmap.page(head);
        let lf = self.memmap.large(head);
        let per_mm: Vec<(MmId, i32)> = seen
            .folio_mm_maps
            .range((head.0, 0)..=(head.0, MmId::MAX))
            .map(|((_, mm), n)| (*mm, *n))
            .collect();
        for s in 0..2 {
            if lf.mm_id[s] == 0 {
                continue;
            }
            let mm = lf.mm_id[s] as MmId - 1;
            let n = per_mm.iter().find(|(m, _)| *m == mm).map(|(_, n)| *n).unwrap_or(0);
            // A slot may undercount (mappings added while both slots were taken), never
            // overcount.
            if lf.mm_id_mapcount[s] < 1 || lf.mm_id_mapcount[s] > n {
                return Err(format!(
                    "folio {head:?}: mm slot {s} counts {} mappings by mm {mm}, found {n}",
                    lf.mm_id_mapcount[s]
                ));
            }
        }
        if per_mm.len() > 1 && !hp.flags.contains(PageFlags::MAYBE_SHARED) {
            return Err(format!(
                "folio {head:?} is mapped by {} mms but not maybe-shared",
                per_mm.len()
            ));
        }
        Ok(())
    }

    /// The deferred split queue: linked both ways, queued folios flagged and large.
    fn check_ds_queue(&self) -> Result<(), String> {
        let (mut at, mut prev, mut n) = (self.ds_queue.head, NIL, 0u64);
        while at != NIL {
            let p = self.memmap.page(Pfn(at as u64));
            if !p.flags.contains(PageFlags::DEFERRED | PageFlags::HEAD) || p.order < 2 {
                return Err(format!("deferred split queue: bad entry {at:#x} ({p:?})"));
            }
            let links = self.memmap.large(Pfn(at as u64)).deferred;
            if links.prev != prev {
                return Err(format!("deferred split queue: bad link at {at:#x} ({links:?})"));
            }
            n += 1;
            if n > self.ds_queue.len {
                return Err("deferred split queue longer than its length".into());
            }
            prev = at;
            at = links.next;
        }
        if n != self.ds_queue.len || prev != self.ds_queue.tail {
            return Err(format!("deferred split queue: {n} entries, len {}", self.ds_queue.len));
        }
        Ok(())
    }

    fn check_folios(&self, seen: &Seen) -> Result<(), String> {
        self.check_ds_queue()?;
        let mut heads: BTreeMap<u64, (i32, i32)> = BTreeMap::new();
        for (pfn, n) in &seen.pte_maps {
            self.check_tail_in_folio(Pfn(*pfn))?;
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
        for h in seen.pmd_maps.keys() {
            heads.entry(*h).or_default();
        }
        // Folios in the swap cache are in use, mapped or not.
        let cached: BTreeMap<u64, i32> = self
            .swap
            .iter()
            .flat_map(|si| si.cache.iter())
            .map(|(f, _)| (f.0, self.memmap.folio_nr_pages(f) as i32))
            .collect();
        for h in cached.keys() {
            heads.entry(*h).or_default();
        }
        // So are folios in a shmem page cache, which holds a reference to each.
        for (_, inode) in self.shmem.inodes() {
            for e in inode.mapping.i_pages.values() {
                if let CacheEntry::Folio(f) = e {
                    heads.entry(f.0).or_default();
                }
            }
        }
        let mut nr_anon: BTreeMap<u32, i64> = BTreeMap::new();
        let mut partial: BTreeMap<u32, i64> = BTreeMap::new();
        for (h, (maps, pages_mapped)) in &heads {
            let f = Pfn(*h);
            let hp = self.memmap.page(f);
            let order = self.memmap.folio_order(f);
            let pmd = seen.pmd_maps.get(h).copied().unwrap_or(0);
            let mapcount = maps + pmd;
            // A page cache holds a reference per page.
            let page_cache = if self.shmem.folio_inode(f).is_some() {
                1 << order
            } else {
                0
            };
            if mapcount > 0 && !hp.flags.contains(PageFlags::ANON) && page_cache == 0 {
                return Err(format!("folio {f:?} is mapped but neither anon nor in a page cache"));
            }
            if hp.flags.contains(PageFlags::SWAPCACHE) != cached.contains_key(h) {
                return Err(format!(
                    "folio {f:?}: flags {:?} disagree with the swap cache",
                    hp.flags
                ));
            }
            if self.memmap.folio_mapcount(f) != mapcount {
                return Err(format!(
                    "folio {f:?}: folio_mapcount {} but {mapcount} mappings",
                    self.memmap.folio_mapcount(f)
                ));
            }
            let cache_refs = cached.get(h).copied().unwrap_or(0) + page_cache;
            let refcount = self.memmap.folio_ref_count(f);
            if refcount != mapcount + cache_refs {
                return Err(format!(
                    "folio {f:?}: refcount {refcount} but {mapcount} mappings and {cache_refs} cache references"
                ));
            }
            if order > 0 {
                self.check_folio_pages(f)?;
                self.check_mm_slots(f, seen)?;
                let lf = self.memmap.large(f);
                if lf.entire_mapcount != pmd || lf.nr_pages_mapped != *pages_mapped {
                    return Err(format!(
                        "folio {f:?}: entire {} nr_pages_mapped {} but {pmd} and {pages_mapped}",
                        lf.entire_mapcount, lf.nr_pages_mapped
                    ));
                }
                let partially = pmd == 0 && *pages_mapped > 0 && (*pages_mapped as u64) < (1 << order);
                // Only anon folios are queued for deferred split.
                let anon = hp.flags.contains(PageFlags::ANON);
                if partially && anon && order > 1 && !hp.flags.contains(PageFlags::PARTIALLY_MAPPED) {
                    return Err(format!("folio {f:?} is partially mapped but not marked"));
                }
                if hp.flags.contains(PageFlags::PARTIALLY_MAPPED) {
                    *partial.entry(order).or_default() += 1;
                    if !hp.flags.contains(PageFlags::DEFERRED) {
                        return Err(format!("folio {f:?} marked partially mapped but not queued"));
                    }
                }
            }
            if hp.flags.contains(PageFlags::ANON) {
                *nr_anon.entry(order).or_default() += 1;
            }
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
        // The lists after the folios: a head's links are found by its flags, so a head
        // overwritten as a tail breaks its list, and the folio check names the cause.
        self.lruvec.check(&self.memmap)?;
        // Every page is either free, a table, reserved, the huge zero page, or mapped.
        let mut used: u64 = heads.keys().map(|h| self.memmap.folio_nr_pages(Pfn(*h))).sum();
        used += seen.tables;
        if let Some(z) = self.huge_zero_folio {
            used += self.memmap.folio_nr_pages(z);
        }
        let total = self.memmap.nr_pages() - 16;
        if self.nr_free_pages() + used != total {
            return Err(format!(
                "leak: {} free + {used} in use != {total} pages",
                self.nr_free_pages()
            ));
        }
        // Every large folio in use holds exactly one counts slot.
        let large = heads.keys().filter(|h| self.memmap.folio_order(Pfn(**h)) > 0).count()
            + self
                .huge_zero_folio
                .map_or(0, |z| (self.memmap.folio_order(z) > 0) as usize);
        if self.memmap.nr_large() != large {
            return Err(format!(
                "leak: {} large-folio count slots for {large} large folios",
                self.memmap.nr_large()
            ));
        }
        Ok(())
    }
}
