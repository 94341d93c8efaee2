# Shared anonymous memory with 64K shmem folios (hugepages-64kB/shmem_enabled always):
# a write fault allocates the 64K folio around the address (shmem_alloc) and
# finish_fault maps all 16 of its ptes at once (contpte on arm64), so 1 MiB takes 16
# faults. MADV_DONTNEED zaps the ptes, the folios stay cached; a read fault maps each
# folio again through fault-around.
set hugepages-64kB/shmem_enabled always
mmap buf 1M shared
mark write
touch buf 0 512K
mark read
touch buf read
mark dontneed
madvise buf 0 512K dontneed
mark reread
touch buf 0 512K read
mark munmap
munmap buf
