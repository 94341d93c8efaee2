set hugepages-64kB/enabled always
mmap buf 1M
mlock buf
touch buf
munlock buf
