# Seed 000 with 64 KiB folios (6.12 only: 6.1 has no mTHP): munmap of 16 MiB of
# contpte-mapped folios, cleared a block at a time without unfolding.
set hugepages-64kB/enabled always
mmap buf 16M populate
mark munmap
munmap buf
