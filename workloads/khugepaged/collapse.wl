# khugepaged collapses a MADV_HUGEPAGE range of base pages whose first 64 ptes are
# none (max_ptes_none is 511 by default): one thp_collapse_alloc, the pmd cleared and
# its range flushed (pmdp_collapse_flush), the none pages zeroed in the THP. `anchor`,
# never faulted in, has no anon_vma and so registers nothing; `buf`'s madvise does.
mmap anchor 2M hugepage
mmap buf 2M nohugepage
touch buf 256K 1792K
madvise buf 0 2M hugepage
mark scan
khugepaged
mark after
touch buf
