# Seed 001's own benchmark, as near as private anonymous memory comes to it. The seed's
# (patch 4/4 of the batched-TLB series, in its commit text) maps 1 MiB MAP_SHARED|
# MAP_ANONYMOUS (shmem), writes it, then 10,000 times reads every page back (a swap-in)
# and MADV_PAGEOUTs it, on zram, on one CPU (taskset -c 4). The model has no shmem: this
# is the same loop on a private mapping, 100 rounds (every round after the first does
# the same work). Unlike shmem, a private page read back stays clean in the swap cache,
# so its next page-out frees it without writing it to zram again.
swapon 64M
mmap buf 1M nohugepage
touch buf
madvise buf 0 1M pageout
mark loop
repeat 100
touch buf read
madvise buf 0 1M pageout
end
