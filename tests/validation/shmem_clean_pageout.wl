# A shmem page only ever read is clean: MADV_PAGEOUT drops it from the page cache
# without writing it (a hole reads back as zeroes), where a written one goes to swap.
swapon 64M
mmap buf 512K shared
touch buf 0 256K read
touch buf 256K 256K
mark pageout
madvise buf 0 512K pageout
mark read
touch buf read
