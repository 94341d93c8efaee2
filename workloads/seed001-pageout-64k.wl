# Seed 001 with 64 KiB folios: lazyfree large folios are unmapped one folio per batch
# (folio_unmap_pte_batch, 6.16+) under tlb-batch=deferred; tlb-batch=sync clears and
# flushes pte by pte, unfolding each contpte block first.
set hugepages-64kB/enabled always
mmap buf 64M
touch buf
madvise buf 0 64M free
mark pageout
madvise buf 0 64M pageout
