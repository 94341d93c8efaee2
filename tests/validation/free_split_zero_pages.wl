# A partial MADV_FREE splits a PMD THP whose pages were written only in part: the
# zero-filled pages come back as the shared zero page (RMP_USE_SHARED_ZEROPAGE).
mmap buf 2M hugepage
touch buf 0 1M stride=8K
madvise buf 0 4K free
touch buf 0 2M read
touch buf 0 64K
