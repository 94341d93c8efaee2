set hugepages-64kB/enabled always
mmap buf 1M
touch buf
madvise buf 0 1M free
touch buf 0 64K
