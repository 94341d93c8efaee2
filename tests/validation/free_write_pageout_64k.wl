# MADV_FREE, then writes re-dirty four 64K folios: pageout keeps those (swap-backed
# again) and discards the rest.
set hugepages-64kB/enabled always
mmap buf 1M
touch buf
madvise buf 0 1M free
touch buf 0 256K
madvise buf 0 1M pageout
