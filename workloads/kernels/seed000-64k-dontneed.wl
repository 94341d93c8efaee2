# Seed 000 with 64 KiB folios (6.12 only): MADV_DONTNEED page by page over 4 MiB of
# contpte-mapped folios; each call unfolds its block.
set hugepages-64kB/enabled always
mmap buf 4M populate
mark dontneed
madvise buf 0 4M dontneed step=4K
