# Seed 000 microbenchmark: madvise(MADV_DONTNEED) of each page of a populated 1 GiB
# mapping of order-0 folios (262144 calls). Compare --set zap=per-pte / zap=batched.
mmap buf 1G populate
mark dontneed
madvise buf 0 1G dontneed step=4K
