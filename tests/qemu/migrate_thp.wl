# PMD-mapped THPs, and one split by a DONTNEED of its first page, moved to node 1.
machine nodes=2
mmap buf 8M hugepage
touch buf
madvise buf 0 4K dontneed
mark migrate
migrate buf node=1
