# MADV_HUGEPAGE given after part of the region was faulted.
set hugepages-64kB/enabled madvise
mmap buf 1M
touch buf 0 256K
madvise buf 0 1M hugepage
touch buf 256K 768K
