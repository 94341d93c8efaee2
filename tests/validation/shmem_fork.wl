# Fork of a shared mapping: the child gets no page tables (no anon_vma, no CoW) and
# faults the pages in from the page cache, 16 at a time (fault-around, 64K); its writes
# take no fault (the ptes are writable). MADV_PAGEOUT skips pages two mms map.
mmap buf 1M shared
touch buf
fork child
mark child
@child touch buf read
@child touch buf 0 64K write
mark both
madvise buf 0 1M pageout
touch buf read
mark exit
@child exit
