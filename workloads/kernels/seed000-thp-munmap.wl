# Seed 000 on 6.1 and 6.12: munmap of memory mapped by pte-mapped large folios. Four
# PMD THPs, each pmd split by a one-page MADV_DONTNEED, so every folio is pte-mapped
# (511 ptes) when munmap zaps it: 6.1 clears pte by pte, 6.12 a folio batch at a time.
mmap a 2M hugepage
mmap b 2M hugepage
mmap c 2M hugepage
mmap d 2M hugepage
touch a
touch b
touch c
touch d
madvise a 0 4K dontneed
madvise b 0 4K dontneed
madvise c 0 4K dontneed
madvise d 0 4K dontneed
mark munmap
munmap a
munmap b
munmap c
munmap d
