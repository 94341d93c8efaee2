# Seed 001: reclaim of 64 MiB of order-0 pages made lazyfree (MADV_FREE), paged out
# with MADV_PAGEOUT. Compare --set tlb-batch=sync (before: ptep_clear_flush, a TLBI and
# a DSB ISH per page) with tlb-batch=deferred (after: the TLBIs issued without waiting,
# one DSB ISH per 31 folios freed and at the end of each reclaim_pages batch).
mmap buf 64M nohugepage
touch buf
madvise buf 0 64M free
mark pageout
madvise buf 0 64M pageout
