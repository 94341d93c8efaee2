# A sparsely written PMD THP, partly dontneed, then shrink: the split maps the
# zero-filled pages to the zero page.
mmap buf 2M hugepage
touch buf 0 2M write stride=64K
madvise buf 0 64K dontneed
mark shrink
shrink
