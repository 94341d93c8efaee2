# mthp_64k_partial_munmap with 16K pages: a hole that cuts two 64K folios.
set hugepages-64kB/enabled always
mmap buf 1M
touch buf
mark unmap
munmap buf 0x34000 80K
mark retouch
touch buf 0 0x34000
