# MADV_DONTNEED one page at a time over 64 KiB folios (the step=S extension), then a re-touch.
set hugepages-64kB/enabled always
mmap buf 1M
touch buf
mark dontneed
madvise buf 0x10000 0x20000 dontneed step=4K
mark retouch
touch buf
