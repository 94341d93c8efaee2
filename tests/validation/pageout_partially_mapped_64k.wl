# A 64K folio half unmapped (partially mapped, queued) and whole ones under pageout.
set hugepages-64kB/enabled always
mmap buf 1M
touch buf
munmap buf 0 32K
madvise buf 32K 992K pageout
