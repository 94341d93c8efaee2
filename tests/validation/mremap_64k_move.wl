# mremap of 256 KiB of written 64 KiB mTHP folios, moved whole to the other half of
# the slot and back (MREMAP_FIXED): move_ptes moves each contpte block as one batch
# from 6.17 (mremap-batch), pte by pte before; the pages never fault again.
set hugepages-64kB/enabled always
mmap buf 256K
touch buf
mark move
mremap buf 256K move
mark back
mremap buf 256K move
mark retouch
touch buf
