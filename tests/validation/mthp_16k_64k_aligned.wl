set hugepages-16kB/enabled always
set hugepages-64kB/enabled always
mmap buf 64M
touch buf
