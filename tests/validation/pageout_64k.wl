# MADV_PAGEOUT of whole 64K folios without swap: each is split to try its pages one
# by one (swpout_fallback, split_deferred from the unmap), and every page stays mapped.
set hugepages-64kB/enabled always
mmap buf 1M
touch buf
madvise buf 0 1M pageout
