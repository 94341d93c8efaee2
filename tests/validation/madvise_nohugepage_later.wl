set hugepages-64kB/enabled always
mmap buf 1M
touch buf 0 256K
madvise buf 512K 512K nohugepage
touch buf 256K 768K
