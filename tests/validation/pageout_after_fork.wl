# After fork the 64K folios are mapped by both: MADV_FREE and MADV_PAGEOUT leave them.
set hugepages-64kB/enabled always
mmap buf 1M
touch buf
fork child
madvise buf 0 1M free
madvise buf 0 1M pageout
@child madvise buf 0 1M pageout
