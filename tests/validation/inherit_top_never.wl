set enabled never
set hugepages-64kB/enabled inherit
mmap buf 1M hugepage
touch buf
