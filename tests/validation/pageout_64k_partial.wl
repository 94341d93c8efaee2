# MADV_PAGEOUT of a range cutting 64K folios: the partly covered ones are split by
# madvise, the whole ones by reclaim (swpout_fallback).
set hugepages-64kB/enabled always
mmap buf 1M
touch buf
madvise buf 32K 256K pageout
