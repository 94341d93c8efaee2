# MADV_DONTNEED of 20 pages at 3*64K+5*4K inside 64 KiB folios, then a re-touch:
# with 16 KiB enabled too, the holes refill with 16 KiB folios where aligned (8 faults).
set hugepages-16kB/enabled always
set hugepages-64kB/enabled always
mmap buf 1M
touch buf
mark dontneed
madvise buf 0x35000 80K dontneed
mark retouch
touch buf 0x35000 80K
