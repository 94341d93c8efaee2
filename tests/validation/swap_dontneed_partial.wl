# Pageout of part of each 64K folio splits it first; DONTNEED of swapped-out pages
# frees their slots; the rest read back.
set hugepages-64kB/enabled always
swapon 64M
mmap buf 1M
touch buf
madvise buf 0 32K pageout
madvise buf 512K 512K pageout
madvise buf 512K 256K dontneed
touch buf read
