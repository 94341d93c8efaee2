# Partial munmap inside 64 KiB folios: deferred split, then re-touch next to it.
set hugepages-64kB/enabled always
mmap buf 1M
touch buf
mark unmap
munmap buf 0x35000 80K
mark retouch
touch buf 0 0x35000
