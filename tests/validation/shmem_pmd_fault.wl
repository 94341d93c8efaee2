# PMD-size shmem folios (shmem_enabled always, the PMD size inherit): a write fault
# allocates the folio (thp_file_alloc, shmem_alloc) and finish_fault maps it with one
# pmd (do_set_pmd: thp_file_mapped); a read fault on an empty block does the same.
# MADV_DONTNEED of whole folios clears their pmds, the folios stay cached; a read
# fault maps each again with one pmd through fault-around (filemap_map_pmd). With 16K
# pages the PMD is 32M: one folio per 32M.
set shmem_enabled always
mmap buf 64M shared
mark write
touch buf 0 32M
mark read
touch buf 32M 32M read
mark dontneed
madvise buf 0 32M dontneed
mark reread
touch buf 0 32M read
mark munmap
munmap buf
