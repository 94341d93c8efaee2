# Seed 001, per page reclaimed: 16 MiB of order-0 pages made lazyfree (MADV_FREE) and
# discarded with MADV_PAGEOUT, while the process has a thread running on every CPU. No
# folio is written out, so the deferred flush waits once per 31 folios freed.
mmap buf 16M nohugepage
touch buf
madvise buf 0 16M free
threads all
mark pageout
madvise buf 0 16M pageout
