set hugepages-512kB/enabled always
mmap buf 4M
touch buf
