# Partially unmapped 64K folios split by shrink, then the whole region paged out
# after MADV_FREE: every page is order 0 and discarded.
set hugepages-64kB/enabled always
mmap buf 512K
touch buf
madvise buf 0 16K dontneed
madvise buf 128K 32K dontneed
shrink
madvise buf 0 512K free
madvise buf 0 512K pageout
touch buf 0 512K read
