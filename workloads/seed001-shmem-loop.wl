# Seed 001's own benchmark (patch 4/4 of the batched-TLB series, in its commit text):
# 1 MiB of MAP_SHARED|MAP_ANONYMOUS (shmem), written, then 10,000 times every page read
# back (a swap-in) and MADV_PAGEOUTed, on zram, on one CPU (taskset -c 4). Here 100
# rounds: every round after the first does the same work. A page read back is dirty
# (shmem_swapin_folio drops its slot), so each page-out writes it to zram again.
swapon 64M
mmap buf 1M shared
touch buf
madvise buf 0 1M pageout
mark loop
repeat 100
touch buf read
madvise buf 0 1M pageout
end
