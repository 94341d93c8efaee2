# MADV_FREE of half a PMD THP splits the THP; of a whole one keeps it.
mmap buf 4M hugepage
touch buf 0 4K
touch buf 2M 4K
madvise buf 0 1M free
madvise buf 2M 2M free
touch buf 0 2M
touch buf 2M 2M
