# Seed 001 on 6.1 and 6.12: MADV_PAGEOUT of 16 MiB of order-0 pages made lazyfree
# (MADV_FREE), so no swap is needed: 6.1 flushes and waits per pte
# (ptep_clear_flush), 6.12 issues the TLBIs and waits once per batch.
mmap buf 16M nohugepage
touch buf
madvise buf 0 16M free
mark pageout
madvise buf 0 16M pageout
