# After fork the slots are shared (count 2): the child's read faults go through the
# swap cache and its vma readahead (swap_ra, swap_ra_hit); the parent then finds the
# child's folios in the swap cache (minor faults, no pswpin).
swapon 64M
mmap buf 128K nohugepage
touch buf
madvise buf 0 128K pageout
fork child
mark child
@child touch buf read
mark parent
touch buf read
