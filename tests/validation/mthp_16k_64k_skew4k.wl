# The same region placed 4 KiB off alignment with 16 KiB and 64 KiB enabled:
# the unaligned head and tail fall back to smaller folios.
set hugepages-16kB/enabled always
set hugepages-64kB/enabled always
mmap buf 64M skew=4K
touch buf
