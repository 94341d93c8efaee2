//! mm/filemap.c: the page cache of the model's one kind of file, shmem (an
//! address_space's i_pages, holding folios or, for shmem, the swap entries of pages
//! written out), and the fault-around that maps what it already holds
//! (filemap_map_pages, reached through do_fault_around).

use super::memory::VmFault;
use super::mm_types::{MmId, Vma};
use super::pgtable::PmdPtr;
use super::Kernel;
use crate::arch::arm64::pgtable::Pte;
use crate::hw::Pfn;
use crate::kcount::KernelEvent;
use std::collections::BTreeMap;

/// An i_pages entry: a folio in the cache, or (xa_is_value) the swap slot its page
/// went to.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum CacheEntry {
    Folio(Pfn),
    Swap(u64),
}

/// struct address_space, reduced to its xarray (by page index) and nrpages.
#[derive(Clone, Debug, Default)]
pub struct AddressSpace {
    pub i_pages: BTreeMap<u64, CacheEntry>,
    pub nrpages: u64,
}

impl Kernel {
    /// filemap_get_entry: the entry at `index` of `inode`'s page cache; a folio comes
    /// with a reference taken (folio_try_get).
    pub fn filemap_get_entry(&mut self, inode: u32, index: u64) -> Option<CacheEntry> {
        let e = self.shmem.inode(inode).mapping.i_pages.get(&index).copied()?;
        if let CacheEntry::Folio(f) = e {
            self.folio_ref_add(f, 1);
        }
        Some(e)
    }

    /// filemap_map_pages (vm_ops->map_pages, from do_fault_around): map every page of
    /// [start_pgoff, end_pgoff] the cache holds uptodate whose pte is none, a folio at
    /// a time (filemap_map_folio_range): a large folio wholly, beyond the window too,
    /// when it lies in the VMA and one page table (shmem: 6.18+), each run of none
    /// ptes with one set_pte_range and its references; a run without the faulting
    /// address is mapped old where the architecture wants prefaulted ptes old (arm64
    /// with hardware AF). True (VM_FAULT_NOPAGE) when the faulting address got its page.
    /// On a none pmd (filemap_map_pmd): nothing cached in the window leaves it none; a
    /// PMD-sized first folio is mapped by the pmd (do_set_pmd); else the pte table
    /// goes in (pmd_install of do_fault_around's preallocated one).
    #[allow(clippy::too_many_arguments)]
    pub fn filemap_map_pages(
        &mut self,
        mm: MmId,
        vma: &Vma,
        pmd: PmdPtr,
        addr: u64,
        start_pgoff: u64,
        end_pgoff: u64,
    ) -> bool {
        self.arch.kc.inc(KernelEvent::FilemapMapPages);
        let g = self.arch.granule();
        let shift = g.page_shift();
        let inode = vma.file.expect("a file VMA");
        let amm = self.arch_mm(mm);
        if self.pxd_get(2, pmd).is_none() {
            let first =
                (self.shmem.inode(inode).mapping.i_pages.range(start_pgoff..=end_pgoff)).find_map(|(_, e)| match e {
                    CacheEntry::Folio(f) => Some(*f),
                    CacheEntry::Swap(_) => None,
                });
            let Some(folio) = first else {
                return false;
            };
            if self.memmap.folio_order(folio) == g.pmd_order() {
                self.folio_ref_add(folio, 1);
                if super::huge_memory::do_set_pmd(self, mm, vma, pmd, addr, folio, false) == VmFault::Done {
                    return true;
                }
                self.folio_put(folio);
            }
            if !self.pte_alloc(mm, pmd, addr) {
                return false;
            }
        }
        let fault_index = vma.linear_page_index(addr, shift);
        // (folio, first index of the window in it, last index of the window in it)
        let mut folios: Vec<(Pfn, u64, u64)> = Vec::new();
        for (i, e) in self.shmem.inode(inode).mapping.i_pages.range(start_pgoff..=end_pgoff) {
            if let CacheEntry::Folio(f) = e {
                match folios.last_mut() {
                    Some((last, _, end)) if last == f => *end = *i,
                    _ => folios.push((*f, *i, *i)),
                }
            }
        }
        let vma_first = vma.pgoff;
        let vma_last = vma.pgoff + (vma.len() >> shift) - 1;
        let pmd_pages = 1u64 << (g.pmd_order());
        let mut ret = false;
        for (folio, mut first, mut last) in folios {
            let findex = self.memmap.page_index(folio);
            let nr = self.memmap.folio_nr_pages(folio);
            if nr > 1 && self.map_whole_folio_faultaround {
                let (lo, hi) = (findex, findex + nr - 1);
                let va = |i: u64| (vma.start >> shift) + i - vma.pgoff;
                if lo >= vma_first && hi <= vma_last && va(lo) / pmd_pages == va(hi) / pmd_pages {
                    (first, last) = (lo, hi);
                }
            }
            let mut run: Option<u64> = None;
            for index in first..=last + 1 {
                let none = index <= last && {
                    let at = vma.start + ((index - vma.pgoff) << shift);
                    let ptep = self.pte_offset_map(pmd, at).expect("the fault allocated the table");
                    self.arch.ptep_get(amm, ptep).pte_none()
                };
                match (none, run) {
                    (true, None) => run = Some(index),
                    (false, Some(from)) => {
                        let count = index - from;
                        let at = vma.start + ((from - vma.pgoff) << shift);
                        let ptep = self.pte_offset_map(pmd, at).expect("the fault allocated the table");
                        let prefault = !(from..index).contains(&fault_index);
                        self.folio_ref_add(folio, count as i32);
                        let page = Pfn(folio.0 + from - findex);
                        self.set_pte_range(mm, vma, folio, page, count, ptep, at, false, prefault);
                        self.mm_mut(mm).rss_shmem += count as i64;
                        ret |= !prefault;
                        run = None;
                    }
                    _ => {}
                }
            }
        }
        ret
    }

    /// set_pte_range for `nr` pages of a file folio from `page`: the VMA's
    /// protection, made old when prefaulted, dirty on a write fault, or when writable
    /// and the folio is dirty already (6.15+, unless `fault-dirty=write`); then the
    /// file rmap and the ptes (set_ptes: contiguous where a whole aligned block is).
    #[allow(clippy::too_many_arguments)]
    pub fn set_pte_range(
        &mut self,
        mm: MmId,
        vma: &Vma,
        folio: Pfn,
        page: Pfn,
        nr: u64,
        ptep: crate::arch::arm64::pgtable::PtePtr,
        addr: u64,
        write: bool,
        prefault: bool,
    ) {
        let g = self.arch.granule();
        let amm = self.arch_mm(mm);
        let mut entry = Pte::pfn_pte(page, super::memory::vm_page_prot(vma), g);
        if prefault && self.arch.hw.cfg.features.hafdbs {
            entry = entry.pte_mkold();
        }
        let dirty_folio = !self.fault_dirty_write_only && self.memmap.folio_test(folio, super::folio::PageFlags::DIRTY);
        if write || (entry.pte_write() && dirty_folio) {
            entry = entry.pte_mkdirty();
        }
        self.folio_add_file_rmap_ptes(folio, page, nr, mm);
        self.arch
            .set_ptes(amm, addr, ptep, entry, nr as usize, Some((folio, nr)));
    }
}
