# inherit + top-level madvise without MADV_HUGEPAGE: base pages only.
set hugepages-64kB/enabled inherit
mmap buf 1M
touch buf
