mmap buf 4M hugepage
touch buf
mark dontneed
madvise buf 0 1M dontneed
mark retouch
touch buf 0 1M
