# khugepaged swaps in up to max_ptes_swap (64) swap ptes of a range before collapsing
# it, and leaves a range with more (thp_scan_exceed_swap_pte).
swapon 64M
mmap anchor 2M hugepage
mmap few 2M nohugepage
mmap many 2M nohugepage
touch few
touch many
madvise few 0 128K pageout
madvise many 0 512K pageout
madvise few 0 2M hugepage
madvise many 0 2M hugepage
mark scan
khugepaged
