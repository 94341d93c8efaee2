# MADV_PAGEOUT of whole PMD THPs without swap: pmd and folio split, thp_swpout_fallback.
mmap buf 4M hugepage
touch buf
madvise buf 0 4M pageout
