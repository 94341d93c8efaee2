//! mm/filemap.c: the page cache of the model's one kind of file, shmem (an
//! address_space's i_pages, holding folios or, for shmem, the swap entries of pages
//! written out), and the fault-around that maps what it already holds
//! (filemap_map_pages, reached through do_fault_around).

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
    /// [start_pgoff, end_pgoff] the cache holds uptodate whose pte is none, each with
    /// its own reference and file rmap; a page other than the faulting one is mapped
    /// old where the architecture wants prefaulted ptes old (arm64 with hardware AF).
    /// True (VM_FAULT_NOPAGE) when the faulting address got its page.
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
        let fault_index = vma.linear_page_index(addr, shift);
        let folios: Vec<(u64, Pfn)> = (self.shmem.inode(inode).mapping.i_pages)
            .range(start_pgoff..=end_pgoff)
            .filter_map(|(i, e)| match e {
                CacheEntry::Folio(f) => Some((*i, *f)),
                CacheEntry::Swap(_) => None,
            })
            .collect();
        let mut ret = false;
        for (index, folio) in folios {
            let at = vma.start + ((index - vma.pgoff) << shift);
            let ptep = self.pte_offset_map(pmd, at).expect("the fault allocated the table");
            if !self.arch.ptep_get(amm, ptep).pte_none() {
                continue;
            }
            let prefault = index != fault_index;
            self.folio_ref_add(folio, 1);
            self.set_pte_range(mm, vma, folio, ptep, at, false, prefault);
            self.mm_mut(mm).rss_shmem += 1;
            ret |= !prefault;
        }
        ret
    }

    /// set_pte_range for a file folio (one page): the VMA's protection, made old when
    /// prefaulted, dirty on a write fault, or when writable and the folio is dirty
    /// already (6.15+, unless `fault-dirty=write`); then the file rmap and the pte.
    #[allow(clippy::too_many_arguments)]
    pub fn set_pte_range(
        &mut self,
        mm: MmId,
        vma: &Vma,
        folio: Pfn,
        ptep: crate::arch::arm64::pgtable::PtePtr,
        addr: u64,
        write: bool,
        prefault: bool,
    ) {
        let g = self.arch.granule();
        let amm = self.arch_mm(mm);
        let mut entry = Pte::pfn_pte(folio, super::memory::vm_page_prot(vma), g);
        if prefault && self.arch.hw.cfg.features.hafdbs {
            entry = entry.pte_mkold();
        }
        let dirty_folio = !self.fault_dirty_write_only && self.memmap.folio_test(folio, super::folio::PageFlags::DIRTY);
        if write || (entry.pte_write() && dirty_folio) {
            entry = entry.pte_mkdirty();
        }
        self.folio_add_file_rmap_ptes(folio, folio, 1, mm);
        self.arch.set_ptes(amm, addr, ptep, entry, 1, Some((folio, 1)));
    }
}
