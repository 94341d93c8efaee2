# After fork every page is shared (and the child, a fork of a registered mm, is
# registered too): more than max_ptes_shared (256) shared ptes, khugepaged collapses
# neither process's range (thp_scan_exceed_share_pte, once per mm).
mmap anchor 2M hugepage
mmap buf 2M nohugepage
touch buf
madvise buf 0 2M hugepage
fork child
mark scan
khugepaged
