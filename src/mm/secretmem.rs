//! mm/secretmem.c: memfd_secret(2). A secretmem file's pages are its page cache, each
//! allocated zeroed at its first fault and taken out of the kernel's linear map
//! (set_direct_map_invalid_noflush, then flush_tlb_kernel_range of the page), and put
//! back as the file lets it go (secretmem_free_folio: set_direct_map_default_noflush,
//! no flush). The mapping must be shared; it has no map_pages, so a read fault maps
//! its own page only. The pseudo filesystem's inodes share the model's inode table
//! with shmem's (`shmem.rs`), flagged `secret`.

use super::filemap::CacheEntry;
use super::memory::VmFault;
use super::mm_types::{MmId, VmFlags, Vma};
use super::mmap::VmaError;
use super::Kernel;
use crate::hw::Pfn;

impl Kernel {
    /// vma_is_secretmem: a mapping of a memfd_secret file.
    pub fn vma_is_secretmem(&self, vma: &Vma) -> bool {
        vma.file.is_some_and(|ino| self.shmem.inode(ino).secret)
    }

    /// memfd_secret, ftruncate to `len` and mmap(MAP_SHARED | MAP_FIXED_NOREPLACE) of
    /// the file (secretmem_mmap_prepare: VM_DONTDUMP, secretmem_vm_ops).
    pub fn secretmem_mmap(&mut self, mm: MmId, addr: u64, len: u64) -> Result<(), VmaError> {
        self.do_mmap(mm, addr, len, VmFlags::READ | VmFlags::WRITE | VmFlags::SHARED)?;
        let ino = self
            .mm(mm)
            .find_vma(addr)
            .and_then(|v| v.file)
            .expect("a shared VMA has a file");
        self.shmem.set_secret(ino);
        Ok(())
    }

    /// secretmem_fault: the cached page, or a new zeroed one taken out of the linear
    /// map, added to the cache (filemap_add_folio: charged, on the LRU) and flushed
    /// from the TLBs. Returns the folio and page with a reference for the caller.
    pub fn secretmem_fault(&mut self, vma: &Vma, index: u64) -> Result<(Pfn, Pfn, VmFault), VmFault> {
        let ino = vma.file.expect("a secretmem VMA");
        if let Some(CacheEntry::Folio(f)) = self.filemap_get_entry(ino, index) {
            return Ok((f, f, VmFault::Done));
        }
        let folio = self.folio_alloc(0).ok_or(VmFault::Oom)?;
        self.arch.clear_pages(1);
        self.arch.set_direct_map_invalid_noflush(folio);
        if !self.mem_cgroup_charge(folio, true) {
            self.arch.set_direct_map_default_noflush(folio);
            self.folio_put(folio);
            return Err(VmFault::Oom);
        }
        self.shmem_add_to_page_cache(folio, ino, index);
        self.folio_add_lru(folio);
        self.arch.flush_tlb_kernel_page(folio);
        Ok((folio, folio, VmFault::Done))
    }

    /// secretmem_free_folio (a_ops->free_folio, as the cache lets the folio go): back
    /// into the linear map, unflushed (an invalid entry is never cached), and zeroed.
    pub(super) fn secretmem_free_folio(&mut self, folio: Pfn) {
        self.arch.set_direct_map_default_noflush(folio);
        self.arch.clear_pages(1);
    }
}

#[cfg(test)]
mod tests {
    use crate::hw::{Event, MachineConfig};
    use crate::mm::Kernel;
    use crate::sim::tests::boot_with as boot;
    use crate::sim::user_access;

    const BASE: u64 = 0x1000_0000_0000;
    const K4: u64 = 4096;

    /// (TLBI VAALE1IS, DSB ISHST, ISB) of `f`.
    fn barriers(k: &mut Kernel, f: impl FnOnce(&mut Kernel)) -> [u64; 3] {
        let before = k.arch.hw.ev.clone();
        f(k);
        let ev = k.arch.hw.ev.since(&before);
        [Event::TlbiVaale1is, Event::DsbIshst, Event::Isb].map(|e| ev.get(e))
    }

    #[test]
    fn each_page_leaves_the_linear_map_with_one_kernel_tlbi_and_returns_unflushed() {
        let (mut k, mm) = boot(MachineConfig::default(), &[]);
        k.switch_mm(0, mm);
        k.secretmem_mmap(mm, BASE, 4 * K4).unwrap();
        let faults = barriers(&mut k, |k| {
            for i in 0..4 {
                user_access(k, mm, 0, BASE + i * K4, true).unwrap();
            }
        });
        assert_eq!(faults[0], 4, "one flush_tlb_kernel_range per page");
        // Touching a page again neither faults nor flushes.
        let again = barriers(&mut k, |k| user_access(k, mm, 0, BASE, false).unwrap());
        assert_eq!(again, [0, 0, 0]);
        assert_eq!(k.shmem.nr_cached(), 4);
        let freed = barriers(&mut k, |k| k.do_munmap(mm, BASE, BASE + 4 * K4));
        assert_eq!(freed[0], 0, "no kernel TLBI when the pages come back");
        assert_eq!(k.shmem.nr_cached(), 0);
    }
}
