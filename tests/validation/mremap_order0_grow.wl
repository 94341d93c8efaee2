# mremap of order-0 pages: moved and grown (the new tail faults in), then grown in
# place and shrunk in place (the tail unmapped).
mmap buf 128K
touch buf
mark move_grow
mremap buf 192K move
mark touch
touch buf
mark grow_in_place
mremap buf 256K
touch buf 192K 64K
mark shrink
mremap buf 64K
touch buf
