# dontneed_step_64k with 16K pages: one MADV_DONTNEED call per 16K page.
set hugepages-64kB/enabled always
mmap buf 1M
touch buf
mark dontneed
madvise buf 0x10000 0x20000 dontneed step=16K
mark retouch
touch buf
