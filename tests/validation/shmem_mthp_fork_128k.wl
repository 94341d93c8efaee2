# A forked child's read faults on 128K shmem folios: fault-around (64K around the
# address) maps a large folio wholly when it lies in the VMA and one page table (6.18+),
# so each fault maps 32 pages; the child's writes then take no fault.
set hugepages-128kB/shmem_enabled always
mmap buf 1M shared
touch buf
fork child
mark child
@child touch buf read
@child touch buf write
mark exit
@child exit
