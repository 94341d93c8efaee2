# The issue's measurement: 64 MiB with 64K mTHP, one write per page, then munmap.
set hugepages-64kB/enabled always
mmap buf 64M
mark faults
touch buf
mark munmap
munmap buf
