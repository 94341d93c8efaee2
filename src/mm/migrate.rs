//! mm/migrate.c: moving anon folios to another NUMA node. move_pages(2)'s
//! do_pages_move isolates the folio of each page, migrate_pages hands them to
//! migrate_pages_batch a PMD's worth of pages at a time, which unmaps the whole batch
//! (try_to_migrate with TTU_BATCH_FLUSH: each pte's TLBI issued without waiting),
//! waits for those TLBIs once (try_to_unmap_flush: seed 001's other beneficiary), then
//! per folio copies it to a new folio on the target node and maps that from the
//! migration entries (remove_migration_ptes).

use super::folio::PageFlags;
use super::huge_memory::{
    deferred_split_folio, folio_unqueue_deferred_split, remove_migration_pmd, split_folio_to_list,
};
use super::memory::vm_page_prot;
use super::mm_types::{MmId, VmFlags};
use super::rmap::{MigrationEntry, TtuFlags};
use super::vmstat::{MthpStat, VmEvent};
use super::Kernel;
use crate::arch::arm64::pgtable::{pmd_trans_huge, MigrationKind, Pte};
use crate::hw::Pfn;
use crate::kcount::KernelEvent;
use std::collections::BTreeSet;

/// struct migrate_pages_stats: what migrate_pages counts into vmstat at the end.
#[derive(Clone, Copy, Debug, Default, PartialEq, Eq)]
struct MigratePagesStats {
    nr_succeeded: i64,
    nr_failed_pages: i64,
    nr_thp_succeeded: i64,
    nr_thp_failed: i64,
    nr_thp_split: i64,
    nr_split: i64,
}

/// A batch member that try_to_migrate has unmapped, with its destination.
struct Unmapped {
    src: Pfn,
    dst: Pfn,
    entries: Vec<MigrationEntry>,
}

/// How one page of a move_pages call ended (its `status` entry).
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum PageStatus {
    /// On this node (moved there, or already there).
    Node(usize),
    /// -EFAULT: nothing migratable (no VMA, or the shared zero page).
    Fault,
    /// -ENOENT: not mapped.
    NoEnt,
    /// -EACCES: mapped by more than one process (MPOL_MF_MOVE_ALL not given).
    Acces,
    /// -EBUSY: the folio was isolated already (another page of a large folio queued
    /// before it).
    Busy,
}

/// The folios do_pages_move has isolated for its next migrate_pages call, in order.
#[derive(Default)]
struct PageList {
    folios: Vec<Pfn>,
    isolated: BTreeSet<Pfn>,
}

/// The result of migrate_pages: the count of folios not migrated, or -ENOMEM.
type MigrateRc = Result<i64, ()>;

impl Kernel {
    /// do_pages_move for one range of `mm`: every page from `start` to `end` to node
    /// `node`, the pages looked up in order and their folios queued while the target
    /// stays the same; a page that is not queued (already on the node, or its folio
    /// queued already by an earlier page) first sends the queue off. Returns each
    /// page's status, and move_pages' return value: 0, the count of pages not
    /// migrated, or -ENOMEM (the pages after the failure then keep no status: None).
    pub fn do_pages_move(&mut self, mm: MmId, start: u64, end: u64, node: usize) -> (Vec<Option<PageStatus>>, i64) {
        let ps = self.arch.granule().page_size();
        let nr_pages = ((end - start) / ps) as usize;
        let mut status = vec![None; nr_pages];
        // migrate_prep: lru_add_drain_all, so that every folio is on an LRU list.
        self.lru_add_drain();
        let mut pagelist = PageList::default();
        let mut first = 0;
        for i in 0..nr_pages {
            let addr = start + i as u64 * ps;
            match self.add_folio_for_migration(mm, addr, node, &mut pagelist) {
                None => continue,
                Some(s) => status[i] = Some(s),
            }
            let err = self.move_pages_and_store_status(node, &mut pagelist, &mut status, first, i, nr_pages);
            if err != 0 {
                // Page i is accounted for already.
                return (status, if err > 0 { err - 1 } else { err });
            }
            first = i + 1;
        }
        let err = self.move_pages_and_store_status(node, &mut pagelist, &mut status, first, nr_pages, nr_pages);
        (status, err)
    }

    /// move_pages_and_store_status: migrate the queue; the pages `first..i` queued get
    /// the node as status, or the call ends with the count of pages not migrated (those
    /// of the queue that failed plus every page not yet looked at).
    fn move_pages_and_store_status(
        &mut self,
        node: usize,
        pagelist: &mut PageList,
        status: &mut [Option<PageStatus>],
        first: usize,
        i: usize,
        nr_pages: usize,
    ) -> i64 {
        if pagelist.folios.is_empty() {
            return 0;
        }
        let list = std::mem::take(pagelist);
        match self.migrate_pages(list.folios, node) {
            Ok(0) => {
                for s in &mut status[first..i] {
                    s.get_or_insert(PageStatus::Node(node));
                }
                0
            }
            Ok(failed) => failed + (nr_pages - i) as i64,
            Err(()) => -12,
        }
    }

    /// add_folio_for_migration: find the folio mapping `addr` (folio_walk_start, the
    /// zero pages included) and isolate it onto `pagelist` for node `node` (None),
    /// unless it is there already, shared, or isolated by an earlier page (the page's
    /// status then).
    fn add_folio_for_migration(
        &mut self,
        mm: MmId,
        addr: u64,
        node: usize,
        pagelist: &mut PageList,
    ) -> Option<PageStatus> {
        // vma_lookup and vma_migratable, which every anon VMA the model has is.
        if self.mm(mm).find_vma(addr).is_none() {
            return Some(PageStatus::Fault);
        }
        let Some(pfn) = self.folio_walk_start(mm, addr) else {
            return Some(PageStatus::NoEnt);
        };
        let folio = self.memmap.folio_of(pfn);
        if self.is_zero_pfn(pfn) || self.huge_zero_folio == Some(folio) {
            return Some(PageStatus::Fault);
        }
        if self.pfn_to_nid(folio) == node {
            return Some(PageStatus::Node(node));
        }
        if self.folio_maybe_mapped_shared(folio) {
            return Some(PageStatus::Acces);
        }
        // folio_isolate_lru: fails for a folio already off the LRU (isolated by an
        // earlier page of it).
        if !pagelist.isolated.insert(folio) || !self.folio_isolate_lru(folio) {
            return Some(PageStatus::Busy);
        }
        pagelist.folios.push(folio);
        None
    }

    /// folio_walk_start: the page mapped at `addr` by a present pte or pmd (reading the
    /// tables as the walk does).
    fn folio_walk_start(&mut self, mm: MmId, addr: u64) -> Option<Pfn> {
        let g = self.arch.granule();
        let pmd = self.pmd_offset(mm, addr)?;
        let d = self.pxd_get(2, pmd);
        if pmd_trans_huge(d) {
            return Some(Pfn(d.pfn(g).0 + ((addr & (g.pmd_size() - 1)) >> g.page_shift())));
        }
        let ptep = self.pte_offset_map(pmd, addr)?;
        let amm = self.arch_mm(mm);
        let pte = self.arch.ptep_get(amm, ptep);
        pte.pte_present().then(|| pte.pte_pfn(g))
    }

    /// migrate_pages (MIGRATE_SYNC, MR_SYSCALL, alloc_migration_target with
    /// __GFP_THISNODE): the isolated folios of `from`, a PMD's worth of pages per
    /// migrate_pages_batch, then the pieces of any split, counted into vmstat at the
    /// end. Folios not migrated are put back (their isolation reference dropped).
    fn migrate_pages(&mut self, mut from: Vec<Pfn>, nid: usize) -> MigrateRc {
        let max_batch = 1u64 << self.arch.granule().pmd_order();
        let mut stats = MigratePagesStats::default();
        let mut rc_gather: MigrateRc = Ok(0);
        let mut ret_folios = Vec::new();
        while !from.is_empty() {
            let (mut nr_pages, mut cut) = (0, from.len());
            for (i, &f) in from.iter().enumerate() {
                nr_pages += self.memmap.folio_nr_pages(f);
                if nr_pages >= max_batch {
                    cut = i + 1;
                    break;
                }
            }
            let rest = from.split_off(cut);
            let mut folios = std::mem::replace(&mut from, rest);
            let mut split_folios = Vec::new();
            let rc = self.migrate_pages_sync(&mut folios, nid, &mut split_folios, &mut stats);
            ret_folios.append(&mut folios);
            if rc.is_err() {
                rc_gather = rc;
                ret_folios.append(&mut split_folios);
                break;
            }
            if !split_folios.is_empty() {
                // Failures not counted: the large folio counted as one already.
                let _ = self.migrate_pages_batch(&mut split_folios, nid, None, &mut stats);
                ret_folios.append(&mut split_folios);
            }
            rc_gather = rc_gather.and_then(|g| rc.map(|r| g + r));
        }
        ret_folios.append(&mut from);
        if ret_folios.is_empty() {
            rc_gather = Ok(0);
        }
        // putback_movable_pages.
        for f in ret_folios {
            self.folio_putback_lru(f);
        }
        self.stat.count_vm_events(VmEvent::PgmigrateSuccess, stats.nr_succeeded);
        self.stat.count_vm_events(VmEvent::PgmigrateFail, stats.nr_failed_pages);
        self.stat
            .count_vm_events(VmEvent::ThpMigrationSuccess, stats.nr_thp_succeeded);
        self.stat
            .count_vm_events(VmEvent::ThpMigrationFail, stats.nr_thp_failed);
        self.stat
            .count_vm_events(VmEvent::ThpMigrationSplit, stats.nr_thp_split);
        rc_gather
    }

    /// migrate_pages_sync: the batch in MIGRATE_ASYNC mode first. The folios it could
    /// not migrate would be retried one at a time in MIGRATE_SYNC mode; in the model a
    /// folio fails only for want of memory (which ends the call) or by being split
    /// (whose pieces go to `split_folios`), so none is left to retry.
    fn migrate_pages_sync(
        &mut self,
        from: &mut Vec<Pfn>,
        nid: usize,
        split_folios: &mut Vec<Pfn>,
        stats: &mut MigratePagesStats,
    ) -> MigrateRc {
        let mut astats = MigratePagesStats::default();
        let rc = self.migrate_pages_batch(from, nid, Some(split_folios), &mut astats);
        stats.nr_succeeded += astats.nr_succeeded;
        stats.nr_thp_succeeded += astats.nr_thp_succeeded;
        stats.nr_thp_split += astats.nr_thp_split;
        stats.nr_split += astats.nr_split;
        if rc.is_err() {
            stats.nr_failed_pages += astats.nr_failed_pages;
            stats.nr_thp_failed += astats.nr_thp_failed;
            return rc;
        }
        stats.nr_thp_failed += astats.nr_thp_split;
        debug_assert!(from.is_empty(), "a folio left to retry synchronously");
        Ok(astats.nr_split)
    }

    /// migrate_pages_batch: unmap every folio of `from` (allocating its destination
    /// first), one try_to_unmap_flush for the whole batch, then move each. A partially
    /// mapped large folio on the deferred split queue is split instead; a large folio
    /// whose destination cannot be allocated is split (its pieces to `split_folios`);
    /// a small one ends the unmapping with -ENOMEM. Folios migrated leave `from`.
    fn migrate_pages_batch(
        &mut self,
        from: &mut Vec<Pfn>,
        nid: usize,
        mut split_folios: Option<&mut Vec<Pfn>>,
        stats: &mut MigratePagesStats,
    ) -> MigrateRc {
        let pmd_order = self.arch.granule().pmd_order();
        let mut nr_failed = 0;
        let mut rc_saved = false;
        let mut unmapped = Vec::new();
        let mut left = Vec::new();
        let mut folios = std::mem::take(from).into_iter();
        for folio in folios.by_ref() {
            let order = self.memmap.folio_order(folio);
            let nr_pages = 1i64 << order;
            let is_thp = (order == pmd_order) as i64;
            if nr_pages > 2
                && self.memmap.folio_test(folio, PageFlags::DEFERRED)
                && self.memmap.folio_test(folio, PageFlags::PARTIALLY_MAPPED)
                && self.try_split_folio(folio, split_folios.as_deref_mut())
            {
                nr_failed += 1;
                stats.nr_thp_failed += is_thp;
                stats.nr_thp_split += is_thp;
                stats.nr_split += 1;
                continue;
            }
            // Only our reference is left (an unmapped piece of a split): done.
            if self.memmap.folio_ref_count(folio) == 1 {
                self.folio_put(folio);
                stats.nr_succeeded += nr_pages;
                stats.nr_thp_succeeded += is_thp;
                continue;
            }
            match self.migrate_folio_unmap(folio, nid) {
                Some(u) => unmapped.push(u),
                None => {
                    nr_failed += 1;
                    stats.nr_thp_failed += is_thp;
                    if order > 0 && self.try_split_folio(folio, split_folios.as_deref_mut()) {
                        stats.nr_thp_split += is_thp;
                        stats.nr_split += 1;
                        continue;
                    }
                    stats.nr_failed_pages += nr_pages;
                    rc_saved = true;
                    left.push(folio);
                    break;
                }
            }
        }
        left.extend(folios);
        *from = left;
        // Flush TLBs for all unmapped folios.
        self.try_to_unmap_flush();
        for u in unmapped {
            let order = self.memmap.folio_order(u.src);
            self.migrate_folio_move(u);
            stats.nr_succeeded += 1 << order;
            stats.nr_thp_succeeded += (order == pmd_order) as i64;
        }
        if rc_saved {
            Err(())
        } else {
            Ok(nr_failed)
        }
    }

    /// try_split_folio: split an isolated large folio to order 0, its pieces (each with
    /// an isolation reference) and the head onto `list` (split_folio_to_list; with no
    /// list the pieces are put back). False if it could not be split.
    fn try_split_folio(&mut self, folio: Pfn, list: Option<&mut Vec<Pfn>>) -> bool {
        let mut pieces = Vec::new();
        if !split_folio_to_list(self, folio, &mut pieces) {
            return false;
        }
        pieces.push(folio);
        match list {
            Some(l) => l.append(&mut pieces),
            None => pieces.into_iter().for_each(|p| self.folio_put(p)),
        }
        true
    }

    /// migrate_folio_unmap: allocate the destination on `nid` (alloc_migration_target:
    /// the same order, on that node only), then replace every mapping of `src` with a
    /// migration entry. In MIGRATE_ASYNC mode, the only one the model runs (see
    /// migrate_pages_sync), try_to_migrate gets TTU_BATCH_FLUSH: the TLB flush is
    /// deferred when the tlb-batch variant allows it. None: no memory on the node
    /// (-ENOMEM).
    fn migrate_folio_unmap(&mut self, src: Pfn, nid: usize) -> Option<Unmapped> {
        let order = self.memmap.folio_order(src);
        let dst = self.folio_alloc_node(order, nid)?;
        let entries = self.try_to_migrate(src, TtuFlags::BATCH_FLUSH);
        debug_assert_eq!(self.memmap.folio_mapcount(src), 0, "try_to_migrate left {src:?} mapped");
        Some(Unmapped { src, dst, entries })
    }

    /// migrate_folio_move: copy `src` to `dst` (move_to_new_folio: folio_mc_copy, the
    /// mapping moved and the flags with it), map `dst` from the migration entries,
    /// requeue it for deferred split where `src` was queued, and let `src` go (its
    /// last reference is the isolation's).
    fn migrate_folio_move(&mut self, u: Unmapped) {
        let Unmapped { src, dst, entries } = u;
        let order = self.memmap.folio_order(src);
        let nr = 1u64 << order;
        let deferred = order > 1 && self.memmap.folio_test(src, PageFlags::DEFERRED);
        let partially_mapped = deferred && self.memmap.folio_test(src, PageFlags::PARTIALLY_MAPPED);
        // folio_mc_copy: the data, page by page (the model's is whether a page was written).
        self.arch.kc.inc(KernelEvent::FolioMcCopy);
        self.arch.kc.add(KernelEvent::FolioMcCopyPages, nr);
        for i in 0..nr {
            let (s, d) = (Pfn(src.0 + i), Pfn(dst.0 + i));
            self.memmap.page_mut(d).nonzero = self.memmap.page(s).nonzero;
            let index = self.memmap.page_index(s);
            self.memmap.set_page_index(d, 1, index);
        }
        // __folio_migrate_mapping: only the isolation reference is left on `src`,
        // and the swap cache's, which move to `dst` with its slots.
        let cached = self.memmap.folio_test(src, PageFlags::SWAPCACHE);
        debug_assert_eq!(
            self.memmap.folio_ref_count(src),
            1 + if cached { nr as i32 } else { 0 },
            "{src:?} referenced beyond its isolation"
        );
        if cached {
            self.__swap_cache_replace_folio(src, dst);
        }
        if let Some(cg) = self.memcg.as_mut() {
            cg.migrate(src, dst, nr);
        }
        folio_unqueue_deferred_split(self, src);
        let moved = self.memmap.page(src).flags & (PageFlags::ANON | PageFlags::SWAPBACKED);
        self.memmap.folio_set(dst, moved);
        if order > 0 && moved.contains(PageFlags::ANON) {
            self.stat.mod_mthp_stat(order, MthpStat::NrAnon, 1);
        }
        // folio_migrate_flags.
        for f in [PageFlags::DIRTY, PageFlags::MLOCKED] {
            if self.memmap.folio_test(src, f) {
                self.memmap.folio_set(dst, f);
            }
        }
        for e in &entries {
            if e.pmd {
                remove_migration_pmd(self, e.mm, e.ptep, e.addr, dst);
            } else {
                remove_migration_pte(self, e, src, dst, false);
            }
        }
        if deferred {
            deferred_split_folio(self, dst, partially_mapped);
        }
        self.folio_add_lru(dst);
        self.folio_put(dst);
        self.folio_put(src);
    }
}

/// remove_migration_pte for the migration entry at `e`, which names a page of `src`:
/// map the page at the same index in `dst` (a folio, or with `src == dst` after a split
/// the page itself, now a folio of its own) with what the entry kept (write
/// permission, exclusivity, young, and dirty if the folio is), taking a reference;
/// or with `map_unused_to_zeropage` (try_to_map_unused_to_zeropage, 6.12+) a page
/// that holds only zeroes becomes a pte of the shared zero page, taking none.
pub fn remove_migration_pte(k: &mut Kernel, e: &MigrationEntry, src: Pfn, dst: Pfn, map_unused_to_zeropage: bool) {
    let g = k.arch.granule();
    let amm = k.arch_mm(e.mm);
    let old = k.arch.__ptep_get(e.ptep);
    let kind = old.migration_kind().expect("a migration entry");
    let new = Pfn(dst.0 + (old.migration_entry_pfn(g).0 - src.0));
    let folio = k.memmap.folio_of(new);
    let vma = k.mm(e.mm).find_vma(e.addr).expect("a mapping outside any VMA");
    let p = k.memmap.page(new);
    let locked = p.flags.contains(PageFlags::MLOCKED) || vma.flags.contains(VmFlags::LOCKED);
    if map_unused_to_zeropage && !p.nonzero && !locked {
        let zero = Pte::pfn_pte(k.zero_pfn, vm_page_prot(&vma), g).pte_mkspecial();
        k.arch.set_ptes(amm, e.addr, e.ptep, zero, 1, None);
        k.mm_mut(e.mm).rss_anon -= 1;
        return;
    }
    k.folio_ref_add(folio, 1);
    let mut pte = Pte::pfn_pte(new, vm_page_prot(&vma), g);
    if !old.is_migration_entry_young(g) {
        pte = pte.pte_mkold();
    }
    if k.memmap.folio_test(folio, PageFlags::DIRTY) && old.is_migration_entry_dirty(g) {
        pte = pte.pte_mkdirty();
    }
    if kind == MigrationKind::Write {
        pte = pte.pte_mkwrite();
    }
    let nr = k.memmap.folio_nr_pages(folio);
    k.folio_add_anon_rmap_ptes(folio, new, 1, e.mm, kind != MigrationKind::Read);
    k.arch.set_ptes(amm, e.addr, e.ptep, pte, 1, Some((folio, nr)));
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::hw::check::Violation;
    use crate::hw::{Event, MachineConfig};
    use crate::mm::rmap::TlbBatchVariant;
    use crate::report::PageKind;
    use crate::sim::tests::{assert_clean, boot_with};
    use crate::sim::user_access;

    const BASE: u64 = 0x1000_0000_0000;
    const K4: u64 = 4096;

    /// Two nodes of 512 MiB, 8 CPUs (0-3 on node 0), the mm on CPU 0.
    fn two_nodes(tlb_batch: TlbBatchVariant, knobs: &[(&str, &str)]) -> (Kernel, MmId) {
        let cfg = MachineConfig {
            nodes: 2,
            ram_bytes: 1 << 30,
            ..MachineConfig::default()
        };
        let (mut k, mm) = boot_with(cfg, knobs);
        k.tlb_batch = tlb_batch;
        (k, mm)
    }

    /// `len` bytes mapped at BASE and written page by page from `cpu`.
    fn written(k: &mut Kernel, mm: MmId, len: u64, flags: VmFlags, cpu: usize) {
        k.do_mmap(mm, BASE, len, VmFlags::READ | VmFlags::WRITE | flags)
            .unwrap();
        k.switch_mm(cpu, mm);
        for a in (BASE..BASE + len).step_by(K4 as usize) {
            user_access(k, mm, cpu, a, true).unwrap();
        }
    }

    /// The node of every mapped page.
    fn nodes_of(k: &Kernel, mm: MmId, len: u64) -> Vec<usize> {
        (BASE..BASE + len)
            .step_by(K4 as usize)
            .filter_map(|a| k.page_table_pfn(mm, a).map(|p| k.pfn_to_nid(p)))
            .collect()
    }

    /// What each page is mapped as and whether it holds data: all migration may not change.
    fn contents(k: &Kernel, mm: MmId, len: u64) -> Vec<(Option<PageKind>, bool)> {
        (BASE..BASE + len)
            .step_by(K4 as usize)
            .map(|a| {
                let nonzero = k.page_table_pfn(mm, a).is_some_and(|p| k.memmap.page(p).nonzero);
                (k.page_kind(mm, a), nonzero)
            })
            .collect()
    }

    /// Migrate the whole of `len` at BASE to node 1 and check the result is the same
    /// memory on node 1, the hardware checkers silent; returns (TLBIs, DSB ISHs).
    fn migrate_all(k: &mut Kernel, mm: MmId, len: u64) -> (u64, u64) {
        let before = contents(k, mm, len);
        assert!(nodes_of(k, mm, len).iter().all(|n| *n == 0));
        let (tlbi, ish) = (k.arch.hw.ev.get(Event::TlbiTotal), k.arch.hw.ev.get(Event::DsbIsh));
        let nr = k
            .memmap
            .folio_nr_pages(k.memmap.folio_of(k.page_table_pfn(mm, BASE).unwrap()));
        let (status, rc) = k.do_pages_move(mm, BASE, BASE + len, 1);
        assert_eq!(rc, 0);
        // The second page of a large folio finds it isolated by the first (-EBUSY).
        for (i, s) in status.iter().enumerate() {
            let want = if nr > 1 && i as u64 % nr == 1 {
                PageStatus::Busy
            } else {
                PageStatus::Node(1)
            };
            assert_eq!(*s, Some(want), "page {i}");
        }
        assert!(nodes_of(k, mm, len).iter().all(|n| *n == 1));
        assert_eq!(contents(k, mm, len), before);
        assert_clean(k);
        (
            k.arch.hw.ev.get(Event::TlbiTotal) - tlbi,
            k.arch.hw.ev.get(Event::DsbIsh) - ish,
        )
    }

    #[test]
    fn a_cpu_allocates_on_its_own_node_first_then_on_the_others() {
        let cfg = MachineConfig {
            nodes: 2,
            ram_bytes: 64 << 20,
            ..MachineConfig::default()
        };
        let (mut k, mm) = boot_with(cfg, &[]);
        assert_eq!(
            (0..8).map(|c| k.cpu_to_node(c)).collect::<Vec<_>>(),
            [0, 0, 0, 0, 1, 1, 1, 1]
        );
        // 48 MiB from CPU 4: node 1's 32 MiB first, then node 0's.
        written(&mut k, mm, 48 << 20, VmFlags::NOHUGEPAGE, 4);
        let nodes = nodes_of(&k, mm, 48 << 20);
        assert_eq!(nodes[0], 1);
        assert_eq!(nodes[nodes.len() - 1], 0);
        assert!(nodes.windows(2).all(|w| w[0] >= w[1]), "node 1 until it is full");
        assert_clean(&k);
    }

    #[test]
    fn order0_pages_move_with_one_dsb_per_batch_deferred_and_one_per_pte_sync() {
        // 1024 pages: two batches of 512 (NR_MAX_BATCHED_MIGRATION).
        for (variant, dsbs) in [(TlbBatchVariant::Sync, 1024), (TlbBatchVariant::Deferred, 2)] {
            let (mut k, mm) = two_nodes(variant, &[]);
            written(&mut k, mm, 1024 * K4, VmFlags::NOHUGEPAGE, 0);
            assert_eq!(migrate_all(&mut k, mm, 1024 * K4), (1024, dsbs), "{variant:?}");
            assert_eq!(k.stat.event(VmEvent::PgmigrateSuccess), 1024);
            assert_eq!(k.arch.kc.get(KernelEvent::FolioMcCopyPages), 1024);
            let flushes = k.arch.kc.get(KernelEvent::ArchTlbbatchFlush);
            assert_eq!(flushes, if variant == TlbBatchVariant::Deferred { 2 } else { 0 });
        }
    }

    #[test]
    fn a_64k_folio_moves_whole_each_in_its_own_call_and_refolds() {
        // Per folio: 16 TLBIs and a DSB to unfold the block, 16 pte TLBIs, 16 and a DSB
        // to fold the new one; the ptes' DSBs are one per pte (sync) or one (deferred).
        for (variant, dsbs) in [(TlbBatchVariant::Sync, 18), (TlbBatchVariant::Deferred, 3)] {
            let (mut k, mm) = two_nodes(variant, &[("hugepages-64kB/enabled", "always")]);
            written(&mut k, mm, 64 * 16 * K4, VmFlags::empty(), 0);
            assert_eq!(
                migrate_all(&mut k, mm, 64 * 16 * K4),
                (64 * 48, 64 * dsbs),
                "{variant:?}"
            );
            assert_eq!(k.stat.event(VmEvent::PgmigrateSuccess), 1024);
            assert_eq!(k.stat.event(VmEvent::ThpMigrationSuccess), 0);
            assert_eq!(k.arch.kc.get(KernelEvent::FolioMcCopy), 64);
            // The new folio is queued as the old one was when its first pte went.
            assert_eq!(k.stat.mthp(4, MthpStat::SplitDeferred), 128);
            assert_eq!(k.stat.mthp(4, MthpStat::NrAnonPartiallyMapped), 64);
        }
    }

    #[test]
    fn a_pmd_mapped_thp_migrates_as_a_thp_through_a_pmd_migration_entry() {
        let (mut k, mm) = two_nodes(TlbBatchVariant::Deferred, &[]);
        written(&mut k, mm, 4 << 20, VmFlags::HUGEPAGE, 0);
        // pmdp_invalidate's flush, never deferred: one TLBI and DSB per THP.
        assert_eq!(migrate_all(&mut k, mm, 4 << 20), (2, 2));
        assert_eq!(k.stat.event(VmEvent::ThpMigrationSuccess), 2);
        assert_eq!(k.stat.event(VmEvent::PgmigrateSuccess), 1024);
        assert_eq!(k.stat.event(VmEvent::ThpSplitPmd), 0);
    }

    #[test]
    fn a_partially_mapped_thp_is_split_and_its_pieces_migrate() {
        let (mut k, mm) = two_nodes(TlbBatchVariant::Deferred, &[]);
        written(&mut k, mm, 2 << 20, VmFlags::HUGEPAGE, 0);
        k.do_madvise(mm, BASE, BASE + K4, crate::mm::madvise::Madv::DontNeed)
            .unwrap();
        let (status, rc) = k.do_pages_move(mm, BASE, BASE + (2 << 20), 1);
        assert_eq!((status[0], rc), (Some(PageStatus::NoEnt), 0));
        assert_eq!(nodes_of(&k, mm, 2 << 20), [1; 511]);
        assert_eq!(k.stat.event(VmEvent::ThpMigrationFail), 1);
        assert_eq!(k.stat.event(VmEvent::ThpMigrationSplit), 1);
        // 511 mapped pages and the unmapped head, whose last reference was ours.
        assert_eq!(k.stat.event(VmEvent::PgmigrateSuccess), 512);
        assert_eq!(k.arch.kc.get(KernelEvent::FolioMcCopyPages), 511);
        assert_clean(&k);
    }

    #[test]
    fn pages_already_there_or_not_migratable_get_a_status_and_no_work() {
        let (mut k, mm) = two_nodes(TlbBatchVariant::Deferred, &[]);
        written(&mut k, mm, 4 * K4, VmFlags::NOHUGEPAGE, 4);
        k.do_mmap(mm, BASE + 4 * K4, 2 * K4, VmFlags::READ | VmFlags::WRITE)
            .unwrap();
        user_access(&mut k, mm, 4, BASE + 4 * K4, false).unwrap();
        let tlbi = k.arch.hw.ev.get(Event::TlbiTotal);
        let (status, rc) = k.do_pages_move(mm, BASE, BASE + 8 * K4, 1);
        assert_eq!(rc, 0);
        let node1 = Some(PageStatus::Node(1));
        assert_eq!(
            status,
            [
                node1,
                node1,
                node1,
                node1,
                Some(PageStatus::Fault),
                Some(PageStatus::NoEnt),
                Some(PageStatus::Fault),
                Some(PageStatus::Fault)
            ]
        );
        assert_eq!(k.stat.event(VmEvent::PgmigrateSuccess), 0);
        assert_eq!(k.arch.hw.ev.get(Event::TlbiTotal), tlbi);
        assert_clean(&k);
    }

    #[test]
    fn a_full_target_node_fails_the_call_with_enomem_and_leaves_the_pages() {
        let cfg = MachineConfig {
            nodes: 2,
            ram_bytes: 64 << 20,
            ..MachineConfig::default()
        };
        let (mut k, mm) = boot_with(cfg, &[]);
        // 40 MiB from CPU 4 fill node 1 (32 MiB) and spill onto node 0.
        written(&mut k, mm, 40 << 20, VmFlags::NOHUGEPAGE, 4);
        let on0 = (BASE..BASE + (40 << 20))
            .step_by(K4 as usize)
            .find(|a| k.pfn_to_nid(k.page_table_pfn(mm, *a).unwrap()) == 0)
            .unwrap();
        let before = contents(&k, mm, 40 << 20);
        let (status, rc) = k.do_pages_move(mm, on0, on0 + 4 * K4, 1);
        assert_eq!((status, rc), (vec![None; 4], -12));
        assert_eq!(k.stat.event(VmEvent::PgmigrateFail), 1);
        assert_eq!(k.stat.event(VmEvent::PgmigrateSuccess), 0);
        assert_eq!(contents(&k, mm, 40 << 20), before);
        assert_clean(&k);
    }

    #[test]
    fn an_mlocked_folio_moves_and_stays_mlocked() {
        let (mut k, mm) = two_nodes(TlbBatchVariant::Deferred, &[("hugepages-64kB/enabled", "always")]);
        written(&mut k, mm, 32 * K4, VmFlags::empty(), 0);
        k.do_mlock(mm, BASE, BASE + 32 * K4).unwrap();
        migrate_all(&mut k, mm, 32 * K4);
        let folio = k.memmap.folio_of(k.page_table_pfn(mm, BASE).unwrap());
        assert!(k.memmap.folio_test(folio, PageFlags::MLOCKED));
        assert_eq!(k.stat.event(VmEvent::PgmigrateSuccess), 32);
    }

    /// Without the batch's try_to_unmap_flush the TLBIs are still pending when the old
    /// folio is freed: the stale-translation checker catches it.
    #[test]
    fn dropping_the_batch_flush_leaves_a_stale_translation() {
        let (mut k, mm) = two_nodes(TlbBatchVariant::Deferred, &[]);
        written(&mut k, mm, K4, VmFlags::NOHUGEPAGE, 0);
        let folio = k.page_table_pfn(mm, BASE).unwrap();
        k.folio_ref_add(folio, 1);
        let u = k.migrate_folio_unmap(folio, 1).unwrap();
        k.migrate_folio_move(u);
        // The old translation is still live when the new pte is written and when the
        // old page is freed.
        let v = k.arch.hw.take_violations();
        assert!(
            matches!(v[..], [Violation::BreakBeforeMake { .. }, Violation::StaleTranslation { pfn, .. }] if pfn == folio),
            "{v:?}"
        );
    }
}
