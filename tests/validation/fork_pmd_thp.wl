# A PMD THP after fork: the child's write splits its pmd and copies one page; the
# parent's write then splits too (the folio is shared).
mmap buf 2M hugepage
touch buf 0 4K
fork child
@child touch buf 4K 4K
touch buf 8K 4K
@child exit
touch buf 12K 4K
