# One page of each 64K folio made read-only and back: on arm64 each mprotect unfolds
# the contpte block (contpte_convert, with its TLBI unless the kernel trusts the CPU
# with BBML2_NOABORT) and the second lets it fold again.
set hugepages-64kB/enabled always
mmap buf 256K
touch buf
mark refold
mprotect buf 0 4K r
mprotect buf 0 4K rw
mprotect buf 64K 4K r
mprotect buf 64K 4K rw
mprotect buf 132K 4K r
mprotect buf 132K 4K rw
mprotect buf 252K 4K r
mprotect buf 252K 4K rw
mark retouch
touch buf
