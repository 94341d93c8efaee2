# The 16K-page twin of tests/validation/contpte_refold_64k.wl: with 16K pages a contpte
# block is 2M (128 ptes), so 2M folios, one page of each block made read-only and back.
# Each mprotect unfolds the block (contpte_convert, with its TLBI unless the kernel
# trusts the CPU with BBML2_NOABORT) and the second lets it fold again. 16K pages only.
set hugepages-2048kB/enabled always
mmap buf 8M
touch buf
mark refold
mprotect buf 0 16K r
mprotect buf 0 16K rw
mprotect buf 2M 16K r
mprotect buf 2M 16K rw
mprotect buf 4176K 16K r
mprotect buf 4176K 16K rw
mprotect buf 8176K 16K r
mprotect buf 8176K 16K rw
mark retouch
touch buf
