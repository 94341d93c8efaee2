# MADV_FREE then MADV_PAGEOUT: clean lazyfree pages are discarded (pglazyfreed).
mmap buf 1M
touch buf
madvise buf 0 1M free
madvise buf 0 1M pageout
