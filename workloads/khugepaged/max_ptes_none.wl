# khugepaged leaves a range with more none ptes than max_ptes_none as it is
# (thp_scan_exceed_none_pte), and collapses the one within the limit.
set khugepaged/max_ptes_none 64
mmap anchor 2M hugepage
mmap sparse 2M nohugepage
mmap dense 2M nohugepage
touch sparse 0 1M
touch dense 0 1792K
madvise sparse 0 2M hugepage
madvise dense 0 2M hugepage
mark scan
khugepaged
