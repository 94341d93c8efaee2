# MADV_FREE then MADV_PAGEOUT of whole 64K folios: each is discarded in one batch.
set hugepages-64kB/enabled always
mmap buf 1M
touch buf
madvise buf 0 1M free
madvise buf 0 1M pageout
