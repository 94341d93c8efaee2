# Swap on zram: 1 MiB of order-0 pages paged out, then read back.
swapon 64M
mmap buf 1M nohugepage
touch buf
madvise buf 0 1M pageout
mark swapin
touch buf read
