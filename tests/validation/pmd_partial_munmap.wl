# Unmap 4 KiB in the middle of a PMD THP: the PMD is split.
mmap buf 4M hugepage
touch buf
mark unmap
munmap buf 1M 4K
