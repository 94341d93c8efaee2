set hugepages-32kB/enabled always
mmap buf 4M
touch buf
