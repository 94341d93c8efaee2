# mprotect read-only in the middle of 64K folios, then back to read-write: the VMA
# splits and merges again, and exclusive pages become writable without faults.
set hugepages-64kB/enabled always
mmap buf 1M
touch buf
mprotect buf 100K 200K r
touch buf 0 1M read
mprotect buf 100K 200K rw
touch buf
touch buf 0 64K
