# MADV_COLLAPSE of 64K folios with holes and zero pages into one PMD THP.
set hugepages-64kB/enabled always
mmap buf 4M
touch buf 0 2M stride=128K
touch buf 2M 1M read
touch buf 3M 4K
madvise buf 0 4M collapse
touch buf
