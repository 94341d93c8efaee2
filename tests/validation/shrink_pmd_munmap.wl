# A PMD THP half unmapped, then shrink: split to order 0.
mmap buf 4M hugepage
touch buf
munmap buf 0 1M
mark shrink
shrink
mark retouch
touch buf 1M 3M
