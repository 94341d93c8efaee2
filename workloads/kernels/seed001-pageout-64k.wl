# Seed 001 with 64 KiB folios (6.12 only): MADV_PAGEOUT of 16 MiB of lazyfree large
# folios.
set hugepages-64kB/enabled always
mmap buf 16M
touch buf
madvise buf 0 16M free
mark pageout
madvise buf 0 16M pageout
