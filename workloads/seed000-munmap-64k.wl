# Seed 000 with contpte: munmap of a populated 1 GiB mapping of 64 KiB folios.
# zap=per-pte unfolds every contpte block (16 TLBIs each); zap=batched clears blocks whole.
set hugepages-64kB/enabled always
mmap buf 1G populate
mark munmap
munmap buf
