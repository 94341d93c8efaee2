# MADV_FREE of a range that cuts 64K folios: the partly covered ones are split.
set hugepages-64kB/enabled always
mmap buf 1M
touch buf
madvise buf 32K 256K free
touch buf 0 1M read
touch buf 0 128K
