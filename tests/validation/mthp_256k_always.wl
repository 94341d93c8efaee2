set hugepages-256kB/enabled always
mmap buf 4M
touch buf
