# Pageout splits 64K folios of which only every fourth page was written: the
# zero-filled pages are remapped to the shared zero page.
set hugepages-64kB/enabled always
mmap buf 1M
touch buf 0 1M write stride=16K
madvise buf 0 1M pageout
