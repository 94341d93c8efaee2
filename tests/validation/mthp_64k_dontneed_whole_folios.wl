# DONTNEED of whole aligned folios frees them; re-touch refaults 64 KiB folios.
set hugepages-64kB/enabled always
mmap buf 1M
touch buf
madvise buf 128K 256K dontneed
mark retouch
touch buf 128K 256K
