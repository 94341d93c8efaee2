# mprotect_none_rw with 16K pages: none, back to rw, then one page read-only.
set hugepages-64kB/enabled always
mmap buf 512K
touch buf
mprotect buf 0 256K none
mprotect buf 0 256K rw
touch buf
mprotect buf 64K 16K r
touch buf 304K 192K
