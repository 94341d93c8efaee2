# MADV_FREE of whole 64K folios keeps them; writes re-dirty them without faults.
set hugepages-64kB/enabled always
mmap buf 512K
touch buf
madvise buf 0 256K free
touch buf
touch buf 0 512K read
