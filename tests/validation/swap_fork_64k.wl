# 64K mTHP swapped out whole, then shared by fork: the child's swap-in is order 0
# through the swap cache, not a large folio (the slots' count is 2).
set hugepages-64kB/enabled always
swapon 64M
mmap buf 256K
touch buf
madvise buf 0 256K pageout
fork child
mark child
@child touch buf read
mark exit
@child exit
mark parent
touch buf read
