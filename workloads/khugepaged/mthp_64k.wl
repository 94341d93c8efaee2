# With only 64K enabled (madvise) and max_ptes_none at its maximum, 7.2+'s khugepaged
# collapses each 64K block of a MADV_HUGEPAGE range that has a present pte into a 64K
# folio (max_ptes_none scaled to 15); before 7.2 khugepaged collapses to the PMD
# order only, which is not enabled, so nothing registers the mm and nothing moves.
set hugepages-2048kB/enabled never
set hugepages-64kB/enabled madvise
mmap anchor 2M hugepage
mmap buf 2M nohugepage
touch buf 0 1M stride=16K
madvise buf 0 2M hugepage
mark scan
khugepaged
mark after
touch buf 0 1M
# A second scan finds the 64K folios: for each it allocates a 64K folio and flushes
# the pmd's range before __collapse_huge_page_isolate sees the range mapped by a
# folio that large (SCAN_PTE_MAPPED_HUGEPAGE) and frees it.
mark again
khugepaged
