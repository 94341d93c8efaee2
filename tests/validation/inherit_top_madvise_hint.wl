# inherit + top-level madvise with the hint: 64 KiB folios (PMD size too small here).
set hugepages-64kB/enabled inherit
mmap buf 1M hugepage
touch buf
