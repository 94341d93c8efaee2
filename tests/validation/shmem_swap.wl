# Shared anonymous memory through swap on zram: MADV_PAGEOUT unmaps each page through
# the file rmap and shmem_writeout puts it in the swap cache, writes it and leaves the
# slot in the page cache; a read fault swaps it back in (shmem_swapin_folio, skipping
# the swap cache on zram: a major fault), dirty, so the next page-out writes it again.
swapon 64M
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
