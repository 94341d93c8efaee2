# Swap on zram: 1 MiB of 64K mTHP paged out whole (mthp swpout), the layout swap
# entries, then read back (order 0 here: the layout checks the pages present again).
set hugepages-64kB/enabled always
swapon 64M
mmap buf 1M
touch buf
madvise buf 0 1M pageout
mark swapin
touch buf 0 512K read
