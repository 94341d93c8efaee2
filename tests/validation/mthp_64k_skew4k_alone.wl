# Only 64 KiB enabled, 4 KiB off: head and tail are order 0.
set hugepages-64kB/enabled always
mmap buf 4M skew=4K
touch buf
