# Seed 001's benchmark (patch 4/4 of the batched-TLB series, in its commit text: 1 MiB
# of MAP_SHARED|MAP_ANONYMOUS memory written, then read back and MADV_PAGEOUTed to
# zram in a loop) in its nearest private-memory shape, 10 rounds to keep guest time
# short: shmem ops are not in the workload language yet (being added).
# workloads/seed001-swap-loop.wl is the same loop, 100 rounds.
swapon 64M
mmap buf 1M nohugepage
touch buf
madvise buf 0 1M pageout
mark loop
repeat 10
touch buf read
madvise buf 0 1M pageout
end
