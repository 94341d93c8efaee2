set hugepages-128kB/enabled always
mmap buf 4M
touch buf
