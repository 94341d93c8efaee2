# Seed 000 on 6.1 and 6.12: MADV_DONTNEED one page at a time over pte-mapped large
# folios (two PMD THPs whose pmds a one-page MADV_DONTNEED split).
mmap a 2M hugepage
mmap b 2M hugepage
touch a
touch b
madvise a 0 4K dontneed
madvise b 0 4K dontneed
mark dontneed
madvise a 4K 0x1ff000 dontneed step=4K
madvise b 4K 0x1ff000 dontneed step=4K
