# Two lazyfree PMD THPs, one re-dirtied: both pmds are split; the dirty one stays
# mapped by ptes, the clean one is discarded.
mmap buf 4M hugepage
touch buf
madvise buf 0 4M free
touch buf 0 64K
madvise buf 0 4M pageout
