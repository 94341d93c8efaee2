# MADV_COLLAPSE of a range whose swapped-out pages a child shares: the swap-in goes
# through the swap cache with readahead; the collapse copies the folios and leaves
# them cached (the child's ptes still hold the slots), so the child's reads are
# minor faults without I/O.
swapon 64M
mmap buf 2M
touch buf
madvise buf 0 256K pageout
fork child
mark collapse
madvise buf 0 2M collapse
mark child
@child touch buf 0 256K read
