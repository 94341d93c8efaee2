# One touch per 64 KiB is enough to fill the region.
set hugepages-64kB/enabled always
mmap buf 4M
touch buf 0 4M write stride=64K
