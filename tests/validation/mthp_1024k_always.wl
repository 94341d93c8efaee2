set hugepages-1024kB/enabled always
mmap buf 8M
touch buf
