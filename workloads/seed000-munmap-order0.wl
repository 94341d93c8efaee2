# Seed 000 microbenchmark: munmap of a populated 1 GiB mapping of order-0 folios.
# Compare zap variants: foliolab run THIS --set zap=per-pte / --set zap=batched
mmap buf 1G populate
mark munmap
munmap buf
