# 64K shmem folios through swap on zram: MADV_PAGEOUT unmaps each folio through the
# file rmap and shmem_writeout writes it whole (CONFIG_THP_SWAP: one 64K run of slots,
# mthp swpout), leaving one large swap entry in the page cache; a read fault reads the
# folio back whole (shmem_swap_alloc_folio at the entry's order: mthp swpin, one major
# fault per 64K), dirty, and maps it whole.
swapon 64M
set hugepages-64kB/shmem_enabled always
mmap buf 1M shared
touch buf
mark pageout
madvise buf 0 1M pageout
mark swapin
touch buf read
mark again
madvise buf 0 1M pageout
mark partial
touch buf 0 256K read
