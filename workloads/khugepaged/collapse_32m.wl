# khugepaged over 32M of base pages, its last 2M never touched: with 4K pages fifteen
# PMD ranges collapse (the last has no page table), with 16K pages (a 32M PMD) the one
# range collapses with its 128 none ptes (max_ptes_none 2047 there).
mmap anchor 32M hugepage
mmap buf 32M nohugepage
touch buf 0 30M
madvise buf 0 32M hugepage
mark scan
khugepaged
