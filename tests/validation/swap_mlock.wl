# mlock of swapped-out memory swaps it back in (populate).
swapon 64M
mmap buf 256K nohugepage
touch buf
madvise buf 0 256K pageout
mlock buf
touch buf
