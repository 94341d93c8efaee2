# 16 KiB off alignment: 16 KiB folios lead up to the first 64 KiB boundary.
set hugepages-16kB/enabled always
set hugepages-64kB/enabled always
mmap buf 4M skew=16K
touch buf
