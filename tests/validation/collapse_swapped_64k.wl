# MADV_COLLAPSE swapping in 64K folios written out whole: each comes back as one
# large folio (mthp swpin), one pgmajfault per folio, then all are collapsed.
set hugepages-64kB/enabled always
swapon 64M
mmap buf 2M
touch buf
madvise buf 0 1M pageout
mark collapse
madvise buf 0 2M collapse
