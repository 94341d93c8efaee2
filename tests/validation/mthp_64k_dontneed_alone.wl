# With only 64 KiB enabled, holes in partly mapped folios refill with base pages.
set hugepages-64kB/enabled always
mmap buf 1M
touch buf
madvise buf 0x35000 80K dontneed
mark retouch
touch buf 0x35000 80K
