//! The kernel model: mirrors the kernel's mm/ with the same file and function names.
//! `Kernel` holds what the real kernel keeps in globals (memmap, zone, vmstat, THP
//! knobs, the deferred split queue) plus the mms of the model's processes.

pub mod debug;
pub mod filemap;
pub mod folio;
pub mod fork;
pub mod huge_memory;
pub mod khugepaged;
pub mod madvise;
pub mod memblock;
pub mod memcontrol;
pub mod memory;
pub mod migrate;
pub mod mlock;
pub mod mm_types;
pub mod mmap;
pub mod mmu_gather;
pub mod mprotect;
pub mod mremap;
pub mod page_alloc;
pub mod pgtable;
pub mod rmap;
pub mod secretmem;
pub mod shmem;
pub mod swap;
pub mod swap_state;
pub mod swapfile;
pub mod thp_sysfs;
pub mod vmscan;
pub mod vmstat;

use crate::arch::arm64::pgtable::{Arch, ArchMm};
use crate::hw::{Asid, Machine, MachineConfig, Pfn};
use crate::kcount::KernelEvent;
use folio::{MemMap, PageFlags, NIL};
use mm_types::{MmId, MmStruct, Vma};
use page_alloc::Buddy;
use thp_sysfs::ThpKnobs;
use vmstat::{MthpStat, VmStats};

/// How zap_pte_range clears present ptes (seed 000).
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum ZapVariant {
    /// Before seed 000: one pte at a time (ptep_get_and_clear_full), one rmap and one
    /// gather slot per page.
    PerPte,
    /// After: folio_pte_batch + clear_full_ptes / get_and_clear_full_ptes.
    Batched,
}

/// Frames kept out of the allocator at the bottom of RAM: pfn 0 is the zero page.
const RESERVED_FRAMES: u64 = 16;

/// The deferred split queue (ds_queue), linked through the folios' list links.
#[derive(Default)]
pub struct DeferredSplitQueue {
    pub head: u32,
    pub tail: u32,
    pub len: u64,
}

pub struct Kernel {
    pub arch: Arch,
    pub memmap: MemMap,
    /// Each NUMA node's zone (NODE_DATA(nid)'s one zone), node 0 first.
    pub node_zones: Vec<Buddy>,
    /// Pages per node: node n spans [n * node_span, (n + 1) * node_span), the last
    /// node also any remainder.
    node_span: u64,
    /// numa_node_id(): the node of the CPU the kernel is running on (switch_mm).
    pub numa_node: usize,
    pub knobs: ThpKnobs,
    pub stat: VmStats,
    pub mms: Vec<Option<MmStruct>>,
    pub zero_pfn: Pfn,
    pub huge_zero_folio: Option<Pfn>,
    pub ds_queue: DeferredSplitQueue,
    pub zap: ZapVariant,
    /// How reclaim flushes the TLB of the ptes it clears (seed 001).
    pub tlb_batch: rmap::TlbBatchVariant,
    /// The reclaimer's pending deferred flush (current->tlb_ubc).
    pub tlb_ubc: rmap::TlbUbc,
    /// mprotect skips the flush of ptes whose change the TLB cannot hold stale
    /// (arm64's pte_needs_flush, 6.19); otherwise every changed present pte is
    /// flushed (the generic pte_needs_flush, 6.18).
    pub prot_flush_elide: bool,
    /// A write fault on a page of a large anon folio that is no longer
    /// PageAnonExclusive always copies the page (`cow-reuse=order0`, up to 6.14),
    /// instead of reusing the folio once this mm maps it alone (6.15+, 1da190f4d0a6).
    pub cow_reuse_order0: bool,
    /// change_pte_range changes one pte at a time (ptep_modify_prot_start /
    /// ptep_modify_prot_commit), as before cac1db8c3aad "mm: optimize mprotect() by
    /// PTE batching" (6.17); otherwise per folio batch (6.17+).
    pub mprotect_per_pte: bool,
    /// How move_ptes moves a folio's ptes (`mremap-batch`).
    pub mremap_batch: mremap::MremapBatch,
    /// A write fault on the huge zero pmd splits it and copies one page on the pte
    /// path, as before 1ced09e0331f "mm: allocate THP on hugezeropage wp-fault"
    /// (6.13); otherwise it maps a new THP (6.13+).
    pub huge_zero_wp_split: bool,
    /// try_to_unmap_one unmaps a lazyfree large folio one pte at a time (6.12); since
    /// 354dffd29575 (6.15) it takes the folio's ptes in one batch.
    pub lazyfree_unmap_per_pte: bool,
    /// try_to_unmap_one discards a lazyfree PMD-mapped THP at its pmd
    /// (unmap_huge_pmd_locked; Debian's 7.0 and 7.2) instead of splitting the pmd.
    pub lazyfree_pmd_discard: bool,
    /// __collapse_huge_page_copy_succeeded clears the old ptes one at a time (6.12);
    /// since 4ea3594a4741 (6.17) a folio's ptes at once.
    pub collapse_copy_per_pte: bool,
    /// folio_mlock_step reads every pte of a large folio (dc68badcede4, 6.6 to 6.10);
    /// since 6.11 folio_pte_batch steps over it.
    pub mlock_walk_per_pte: bool,
    /// A collapse whose ptes are all write-protected fails with SCAN_PAGE_RO (6.12);
    /// 6.18 collapses non-writable anon ranges too.
    pub collapse_ro_refuse: bool,
    /// khugepaged collapses anonymous ranges to every enabled mTHP order
    /// (mthp_collapse, Nico Pache's series, 7.2); before, to the PMD order only.
    pub khugepaged_mthp: bool,
    /// khugepaged's mm list (mm_slots in khugepaged_scan.mm_head order): the mms
    /// khugepaged_enter_vma registered.
    pub khugepaged_mm: Vec<MmId>,
    /// khugepaged/pages_collapsed and khugepaged/full_scans.
    pub khugepaged_pages_collapsed: u64,
    pub khugepaged_full_scans: u64,
    /// split_folio_to_list queues the tail pages last first (__split_huge_page, up to
    /// 6.14); since 00527733d0dc8 (6.15) in address order.
    pub split_list_reversed: bool,
    /// The swap allocator takes a free cluster before a nonfull one (up to 6.17).
    pub swap_free_first: bool,
    /// do_swap_page maps an exclusive folio writable only on a write fault (up to
    /// 6.10); since c18160dba5ff on a read fault too.
    pub swapin_write_fault_only: bool,
    /// remap_page maps the zero-filled pages of a split anon THP to the shared zero
    /// page (RMP_USE_SHARED_ZEROPAGE, b1f202060afe, 6.12); before, every page stays.
    pub split_zeropage: bool,
    /// MADV_PAGEOUT clears the young bits it walks, as MADV_COLD does, through the
    /// mmu_gather (before 2864f3d0f583, 6.9); since, reclaim ignores references.
    pub pageout_clears_young: bool,
    /// __split_huge_pmd_locked with freeze removes each page's rmap, which queues the
    /// THP for deferred split while it is being split (before 96d82deb743a, 6.2).
    pub pmd_freeze_rmap_per_page: bool,
    /// mprotect makes writable only dirty exclusive anon ptes and never a pmd (before
    /// c27f479ef542 and d84887739d5c, 6.2); since, any exclusive anon pte or pmd.
    pub mprotect_mkwrite_dirty_pte_only: bool,
    /// Rmap removal is page_remove_rmap, a call per page or pmd (before the folio
    /// rmap API, b06dc281aa99, 6.8); since, folio_remove_rmap_ptes per batch.
    pub rmap_page_api: bool,
    /// Testing only (`inject=extra-fault`): account the next fault twice.
    pub inject_extra_fault: bool,
    /// Testing only (`inject=drop-flush`): try_to_unmap_flush forgets its flush.
    pub inject_drop_flush: bool,
    /// The tables the last software walk went through (a host-side memo).
    pgtable_hint: crate::hw::WalkHint,
    /// Storage for the next mmu_gather's page list (see `tlb_gather_mmu`).
    gather_pages: mmu_gather::GatherPages,
    /// The swap device (swapon), if any: a zram-like one, written synchronously.
    pub swap: Option<swapfile::SwapInfo>,
    /// The LRU lists reclaim scans (the workload's cgroup's, or the node's).
    pub lruvec: swap::Lruvec,
    /// Shmem swap-in reads through the swap cache with swap_cluster_readahead (before
    /// 1dd44c0af4fa, 6.14); since, a synchronous device's page is read directly.
    pub shmem_swapin_cluster: bool,
    /// do_swap_page on a synchronous device reads every slot through the swap cache
    /// without readahead and then tries to free the cache (f1879e8a0c60, ab08be8dc96a,
    /// 7.0); before, only a slot another pte shares went through the cache, with
    /// swapin_readahead, and a read fault kept it cached.
    pub swapin_sync_cache: bool,
    /// The swap cache is an XArray per 64 MiB swap address space, under its xa_lock
    /// (up to 6.17), not each cluster's swap table under the cluster lock
    /// (8578e0c00dcf, 6.18): only what `kernel.swap_cache.*` counts differs.
    pub swap_cache_xarray: bool,
    /// swap_cluster_readahead's window state.
    pub swap_cluster_ra: swap_state::ClusterRa,
    /// A read fault maps a writable file page clean even when its folio is dirty
    /// (before 4e92030c05dc "mm: set the pte dirty if the folio is already dirty",
    /// 6.15); since, dirty.
    pub fault_dirty_write_only: bool,
    /// Fault-around maps a large folio wholly where it can (6.18+, `faultaround=folio`).
    pub map_whole_folio_faultaround: bool,
    /// try_to_unmap clears a large file folio's ptes a run at a time (7.0+,
    /// `file-unmap=batched`), else one at a time.
    pub file_unmap_batched: bool,
    /// shmem_writeout counts the split of a large folio it cannot swap out whole as
    /// swpout_fallback (7.0+).
    pub shmem_split_counts_fallback: bool,
    /// shmem_writeout splits every large folio before writing it (before 6.12's large
    /// folio swap-out for shmem).
    pub shmem_swapout_split: bool,
    /// The shmem inodes behind shared anonymous mappings, and their page caches.
    pub shmem: shmem::Shmem,
    /// The workload's memory cgroup (`memlimit`), if any.
    pub memcg: Option<memcontrol::MemCgroup>,
    /// Direct reclaim runs (the kernel's allocstall_<zone> events; kept out of reports,
    /// since which zone's counter moves depends on the machine's zone layout).
    pub nr_direct_reclaim: u64,
    next_asid: Asid,
    next_anon_vma: u64,
}

impl Kernel {
    pub fn boot(cfg: MachineConfig) -> Kernel {
        let g = cfg.granule;
        let hw = Machine::new(cfg);
        let nr = hw.mem.nr_frames();
        let mut memmap = MemMap::new(nr);
        memmap.online(Pfn(0), Pfn(RESERVED_FRAMES));
        let zero_pfn = Pfn(0);
        memmap.page_mut(zero_pfn).flags = PageFlags::RESERVED | PageFlags::INUSE;
        let knobs = ThpKnobs::new(g);
        let nodes = cfg.nodes.max(1) as u64;
        let node_span = nr / nodes;
        let node_zones = (0..nodes)
            .map(|n| {
                let start = (n * node_span).max(RESERVED_FRAMES);
                let end = if n + 1 == nodes { nr } else { (n + 1) * node_span };
                Buddy::new(g, Pfn(start), Pfn(end))
            })
            .collect();
        let mut arch = Arch::new(hw);
        arch.linear = crate::arch::arm64::pageattr::LinearMap::new(false, nr << g.page_shift());
        Kernel {
            arch,
            node_zones,
            node_span,
            numa_node: 0,
            memmap,
            stat: VmStats::new(g.pmd_order()),
            knobs,
            mms: Vec::new(),
            zero_pfn,
            huge_zero_folio: None,
            ds_queue: DeferredSplitQueue {
                head: NIL,
                tail: NIL,
                len: 0,
            },
            zap: ZapVariant::Batched,
            tlb_batch: rmap::TlbBatchVariant::Deferred,
            prot_flush_elide: false,
            cow_reuse_order0: false,
            split_zeropage: true,
            pageout_clears_young: false,
            pmd_freeze_rmap_per_page: false,
            mprotect_mkwrite_dirty_pte_only: false,
            rmap_page_api: false,
            mprotect_per_pte: false,
            mremap_batch: mremap::MremapBatch::Hinted,
            huge_zero_wp_split: false,
            lazyfree_unmap_per_pte: false,
            lazyfree_pmd_discard: false,
            collapse_copy_per_pte: false,
            mlock_walk_per_pte: false,
            collapse_ro_refuse: false,
            khugepaged_mthp: false,
            khugepaged_mm: Vec::new(),
            khugepaged_pages_collapsed: 0,
            khugepaged_full_scans: 0,
            split_list_reversed: false,
            swap_free_first: false,
            swapin_write_fault_only: false,
            inject_extra_fault: false,
            inject_drop_flush: false,
            tlb_ubc: rmap::TlbUbc::default(),
            pgtable_hint: Default::default(),
            gather_pages: Default::default(),
            nr_direct_reclaim: 0,
            swap: None,
            lruvec: Default::default(),
            shmem: Default::default(),
            shmem_swapin_cluster: false,
            swapin_sync_cache: false,
            swap_cache_xarray: false,
            swap_cluster_ra: Default::default(),
            fault_dirty_write_only: false,
            map_whole_folio_faultaround: true,
            file_unmap_batched: false,
            shmem_split_counts_fallback: false,
            shmem_swapout_split: false,
            memcg: None,
            next_asid: 1,
            next_anon_vma: 1,
        }
    }

    #[inline]
    pub fn mm(&self, id: MmId) -> &MmStruct {
        self.mms[id].as_ref().expect("mm is gone")
    }
    #[inline]
    pub fn mm_mut(&mut self, id: MmId) -> &mut MmStruct {
        self.mms[id].as_mut().expect("mm is gone")
    }
    #[inline]
    pub fn arch_mm(&self, id: MmId) -> ArchMm {
        ArchMm {
            asid: self.mm(id).asid,
            user: true,
        }
    }

    /// mm_alloc + pgd_alloc: a new empty address space with its own ASID.
    pub fn mm_alloc(&mut self) -> Option<MmId> {
        let g = self.arch.granule();
        // ASID rollover (arm64's new_context) is not modeled: every mm of a run gets
        // an ASID of its own, and none is left after the last.
        if self.next_asid == Asid::MAX {
            return None;
        }
        let (pgd, pgd_table) = self.pgtable_alloc(g.start_level())?;
        let asid = self.next_asid;
        self.next_asid += 1;
        self.mms.push(Some(MmStruct::new(asid, pgd, pgd_table)));
        Some(self.mms.len() - 1)
    }

    /// anon_vma_alloc: a new anon_vma id.
    pub fn anon_vma_alloc(&mut self) -> u64 {
        self.next_anon_vma += 1;
        self.next_anon_vma
    }

    /// anon_vma_prepare: give `vma` an anon_vma before it maps anon folios.
    #[inline]
    pub fn anon_vma_prepare(&mut self, mm: MmId, vma: &Vma) {
        // A VMA's anon_vma is only ever set, so a copy that has one is current.
        if vma.anon_vma.is_none() {
            self.__anon_vma_prepare(mm, vma);
        }
    }

    /// The tree lookup behind anon_vma_prepare, for a copy of the VMA without one.
    fn __anon_vma_prepare(&mut self, mm: MmId, vma: &Vma) {
        if self.mm(mm).vmas()[&vma.start].anon_vma.is_none() {
            let id = self.anon_vma_alloc();
            self.mm_mut(mm).vmas_mut().get_mut(&vma.start).unwrap().anon_vma = Some(id);
            self.obj_cgroup_charge(memcontrol::ANON_VMA_SIZE);
            self.obj_cgroup_charge(memcontrol::ANON_VMA_CHAIN_SIZE);
        }
    }

    /// Point a CPU at an mm (switch_mm); the kernel now runs on that CPU's node.
    pub fn switch_mm(&mut self, cpu: usize, mm: MmId) {
        self.numa_node = self.cpu_to_node(cpu);
        let g = self.arch.granule();
        let (pgd, asid) = (self.mm(mm).pgd, self.mm(mm).asid);
        self.arch.switch_mm(cpu, pgd.to_phys(g), asid);
    }

    #[inline]
    pub fn is_zero_pfn(&self, pfn: Pfn) -> bool {
        pfn == self.zero_pfn
    }

    /// cpu_to_node: CPUs are spread over the nodes in order, as evenly as they go.
    pub fn cpu_to_node(&self, cpu: usize) -> usize {
        cpu * self.node_zones.len() / self.arch.hw.cpus.len()
    }

    /// pfn_to_nid: the node whose RAM holds `pfn`. One node answers without the
    /// division (a 64-bit divide's latency, on every allocation and free).
    #[inline]
    pub fn pfn_to_nid(&self, pfn: Pfn) -> usize {
        let last = self.node_zones.len() - 1;
        if last == 0 {
            return 0;
        }
        ((pfn.0 / self.node_span) as usize).min(last)
    }

    /// Free pages on every node.
    pub fn nr_free_pages(&self) -> u64 {
        self.node_zones.iter().map(|z| z.free_pages).sum()
    }

    /// get_page_from_freelist over the zonelist of the running CPU's node: that node
    /// first, then the others in node order.
    #[inline]
    pub(crate) fn alloc_pages_local(&mut self, order: u32) -> Option<Pfn> {
        let local = self.numa_node;
        if let Some(pfn) = self.node_zones[local].alloc(&mut self.memmap, order) {
            return Some(pfn);
        }
        let mm = &mut self.memmap;
        (self.node_zones.iter_mut().enumerate())
            .filter(|(n, _)| *n != local)
            .find_map(|(_, z)| z.alloc(mm, order))
    }

    /// vma_alloc_folio: a new folio of `order` from the local node first, or None when
    /// no node has a block that large. An order-0 allocation (GFP_HIGHUSER_MOVABLE,
    /// which may reclaim) that fails runs direct reclaim and tries again before giving
    /// up (OOM). The allocator hands out pages down to the last (the min watermark's
    /// reserve is not modelled); free memory of the node under its low watermark
    /// afterwards runs kswapd.
    #[inline]
    pub fn folio_alloc(&mut self, order: u32) -> Option<Pfn> {
        let pfn = match self.alloc_pages_local(order) {
            Some(pfn) => pfn,
            None if order == 0 && self.try_to_free_pages() => self.alloc_pages_local(0)?,
            None => return None,
        };
        Some(self.prep_new_folio(pfn, order))
    }

    /// __alloc_pages_node with __GFP_THISNODE: a folio of `order` on node `nid` only
    /// (a migration target; no reclaim, as alloc_migration_target's allocation may
    /// fail and the migration then fails or splits).
    pub fn folio_alloc_node(&mut self, order: u32, nid: usize) -> Option<Pfn> {
        let pfn = self.node_zones[nid].alloc(&mut self.memmap, order)?;
        Some(self.prep_new_folio(pfn, order))
    }

    /// The struct page set-up and counting of a new folio.
    #[inline(always)]
    fn prep_new_folio(&mut self, pfn: Pfn, order: u32) -> Pfn {
        self.memmap.prep_new_folio(pfn, order);
        self.arch.kc.inc(KernelEvent::FolioAlloc);
        self.arch.kc.add(KernelEvent::FolioAllocPages, 1 << order);
        // wakeup_kswapd: under the low watermark, kswapd balances the node (here, at
        // once; see vmscan::kswapd).
        let nid = self.pfn_to_nid(pfn);
        if self.node_zones[nid].free_pages < self.node_zones[nid].wmark.low {
            self.kswapd(nid);
        }
        pfn
    }

    /// folio_ref_sub_and_test: drop `refs` references; whether that was the last and
    /// the folio must be freed (reserved pages never are).
    #[inline]
    fn folio_ref_sub_and_test(&mut self, folio: Pfn, refs: i32) -> bool {
        self.arch.kc.inc(KernelEvent::FolioRefAtomic);
        let reserved = self.memmap.folio_test(folio, PageFlags::RESERVED);
        let r = &mut self.memmap.folio_head_mut(folio).refcount;
        *r -= refs;
        debug_assert!(*r >= 0, "folio {folio:?} refcount underflow");
        *r == 0 && !reserved
    }

    /// folio_ref_add: one atomic_add of `n` references (even of 0, as the kernel's
    /// do_anonymous_page adds nr_pages - 1).
    #[inline]
    pub fn folio_ref_add(&mut self, folio: Pfn, n: i32) {
        self.arch.kc.inc(KernelEvent::FolioRefAtomic);
        self.memmap.folio_ref_add(folio, n);
    }

    /// folio_put_refs: drop references; the last one frees the folio.
    pub fn folio_put_refs(&mut self, folio: Pfn, refs: i32) {
        if self.folio_ref_sub_and_test(folio, refs) {
            self.free_folio(folio);
        }
    }

    /// folios_put_refs (free_pages_and_swap_cache): drop each folio's references and
    /// free those that reach zero, in order. Folios of one order freed at consecutive
    /// pfns go back as one run (free_unref_folios too takes them as a batch); the
    /// allocator, the lists and the memmap end up exactly as freeing them one at a
    /// time leaves them.
    pub fn folios_put_refs(&mut self, folios: impl IntoIterator<Item = (Pfn, i32)>) {
        let (mut start, mut end, mut order) = (0, 0, 0);
        for (folio, refs) in folios {
            if !self.folio_ref_sub_and_test(folio, refs) {
                continue;
            }
            let o = self.memmap.folio_order(folio);
            if end == folio.0 && o == order && end != start {
                end += 1 << o;
            } else {
                self.free_folios(start..end, order);
                (start, end, order) = (folio.0, folio.0 + (1 << o), o);
            }
        }
        self.free_folios(start..end, order);
    }

    /// __folio_put / free_pages_prepare of the folios of `order` filling pfns `run`:
    /// each unqueued from the deferred split queue and its per-size anon count dropped,
    /// all taken off the LRU, uncharged, their struct pages reset and given back as
    /// one range, the hardware checker told of each folio in turn.
    fn free_folios(&mut self, run: std::ops::Range<u64>, order: u32) {
        if run.is_empty() {
            return;
        }
        let heads = run.clone().step_by(1 << order);
        self.arch.kc.add(KernelEvent::FolioFree, (run.end - run.start) >> order);
        // Off the LRU first: a large folio's links are in the record released below.
        self.lru_forget_run(run.clone(), order);
        if order > 0 {
            let mut anon = 0;
            for head in heads.clone() {
                huge_memory::folio_unqueue_deferred_split(self, Pfn(head));
                anon += i64::from(self.memmap.folio_test(Pfn(head), PageFlags::ANON));
                self.memmap.release_large(Pfn(head));
            }
            self.stat.mod_mthp_stat(order, MthpStat::NrAnon, -anon);
        }
        if self.memcg.is_some() {
            for head in heads.clone() {
                self.mem_cgroup_uncharge(Pfn(head), 1 << order);
            }
        }
        let (start, nr) = (Pfn(run.start), run.end - run.start);
        self.memmap.clear_pages(start, nr, order);
        // A run may cross from one node's RAM into the next's.
        let mut at = start.0;
        while at < run.end {
            let nid = self.pfn_to_nid(Pfn(at));
            let node_end = if nid + 1 == self.node_zones.len() {
                u64::MAX
            } else {
                (nid as u64 + 1) * self.node_span
            };
            let n = run.end.min(node_end) - at;
            self.node_zones[nid].free_range(&mut self.memmap, Pfn(at), n);
            at += n;
        }
        // One report per folio, as one-at-a-time frees give.
        for head in heads {
            self.arch.hw.frames_freed(Pfn(head), 1 << order);
        }
    }

    /// Give a block back to its node's zone.
    pub(crate) fn free_pages_to_node(&mut self, pfn: Pfn, order: u32) {
        let nid = self.pfn_to_nid(pfn);
        self.node_zones[nid].free(&mut self.memmap, pfn, order);
    }

    #[inline]
    pub fn folio_put(&mut self, folio: Pfn) {
        self.folio_put_refs(folio, 1);
    }

    /// __folio_put: free one folio.
    fn free_folio(&mut self, folio: Pfn) {
        let order = self.memmap.folio_order(folio);
        self.free_folios(folio.0..folio.0 + (1 << order), order);
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use swap::LruList;

    /// A kernel holding anon folios of `orders`, allocated in turn and counted per
    /// size, each on the LRU (the last order-0 ones still in the lru_add batch); of
    /// every third folio, those of order 2 and up partially mapped on the deferred
    /// split queue.
    fn holding(orders: &[u32]) -> (Kernel, Vec<Pfn>) {
        let mut k = Kernel::boot(MachineConfig::default());
        let mut folios = Vec::new();
        for (i, &order) in orders.iter().enumerate() {
            let f = k.folio_alloc(order).unwrap();
            k.memmap.folio_set(f, PageFlags::ANON | PageFlags::SWAPBACKED);
            k.stat.mod_mthp_stat(order, MthpStat::NrAnon, 1);
            if i % 3 == 0 {
                huge_memory::deferred_split_folio(&mut k, f, true);
            }
            k.folio_add_lru(f);
            folios.push(f);
        }
        (k, folios)
    }

    /// All that freeing touches: the allocator, the struct pages of `pfns`, the lists
    /// and the batch, the counts, the deferred split queue, and the large-folio slots
    /// (as the folios of `orders` allocated again are given them).
    fn state(k: &mut Kernel, pfns: std::ops::Range<u64>, orders: &[u32]) -> String {
        let mut out = k.node_zones[0].snapshot(&mut k.memmap);
        for lru in LruList::EVICTABLE {
            let on: Vec<Pfn> = k.lruvec.iter_from_tail(&k.memmap, lru).collect();
            out += &format!("{lru:?} {} {on:?}\n", k.lruvec.size(lru));
        }
        out += &format!("{:?} {:?} {:?}\n", k.lruvec.fbatch, k.stat, k.arch.kc);
        out += &format!("{} {} {}\n", k.ds_queue.head, k.ds_queue.len, k.memmap.nr_large());
        for p in pfns {
            out += &format!("{:?}\n", k.memmap.page(Pfn(p)));
        }
        for &order in orders {
            let f = k.folio_alloc(order).unwrap();
            out += &format!("{f:?} {:?}\n", k.memmap.page(f));
        }
        out
    }

    #[test]
    fn freeing_runs_of_folios_leaves_all_as_freeing_them_in_turn_does() {
        // Runs of 64K folios with order-0 and order-2 ones between, freed in the order
        // allocated but for two swaps and three kept: runs break on an order, a gap, a
        // pfn going back; the lists keep the kept folios.
        let orders = [4, 4, 4, 4, 0, 0, 0, 4, 4, 2, 2, 2, 0, 4, 4, 4, 4, 4, 4, 4, 4, 0, 0];
        let kept = [3, 10, 20];
        let (mut run, folios) = holding(&orders);
        let (mut one_by_one, _) = holding(&orders);
        let mut freed: Vec<Pfn> = (0..folios.len())
            .filter(|i| !kept.contains(i))
            .map(|i| folios[i])
            .collect();
        freed.swap(2, 6);
        freed.swap(14, 15);
        assert!(run.lruvec.fbatch.len() >= 2 && run.ds_queue.len >= 5);
        run.folios_put_refs(freed.iter().map(|&f| (f, 1)));
        for &f in &freed {
            one_by_one.folio_put(f);
        }
        assert_eq!(run.memmap.nr_large(), 3);
        assert_eq!(run.arch.kc.get(KernelEvent::FolioFree), freed.len() as u64);
        let on: Vec<Pfn> = run.lruvec.iter_from_tail(&run.memmap, LruList::InactiveAnon).collect();
        assert_eq!(on, kept.map(|i| folios[i]));
        assert_eq!(
            run.lruvec.size(LruList::InactiveAnon),
            kept.map(|i| 1u64 << orders[i]).iter().sum::<u64>()
        );
        assert_eq!(run.stat.mthp(4, MthpStat::NrAnon), 2);
        let lo = folios.iter().map(|f| f.0).min().unwrap();
        let hi = folios.iter().map(|f| f.0 + 16).max().unwrap();
        assert_eq!(
            state(&mut run, lo..hi, &orders),
            state(&mut one_by_one, lo..hi, &orders)
        );
    }
}
