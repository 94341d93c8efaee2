# MADV_COLLAPSE of a base-page region into a PMD THP.
mmap buf 2M
touch buf
mark collapse
madvise buf 0 2M collapse
