# Seed 000 with contpte: madvise(MADV_DONTNEED) of each page of a populated 1 GiB
# mapping of 64 KiB folios. Every call hits a contpte block: zap=per-pte unfolds it,
# zap=batched cannot batch a single page either (the block is partly covered), so
# both unfold; compare with seed000-munmap-64k.wl where batching clears whole blocks.
set hugepages-64kB/enabled always
mmap buf 1G populate
mark dontneed
madvise buf 0 1G dontneed step=4K
