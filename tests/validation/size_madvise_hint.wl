set hugepages-64kB/enabled madvise
mmap buf 1M hugepage
touch buf
