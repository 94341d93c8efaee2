# mprotect of 64K folios and of order-0 pages, read-only and back: since the batching
# (cac1db8c3aad, 6.17) change_pte_range looks up the folio of every batch
# (vm_normal_page), where 6.16 did only to make an exclusive page writable
# (kernel.change_pte_range.folio_lookups, model only: 4+16 each way on 7.3).
set hugepages-64kB/enabled always
mmap big 256K
touch big
set hugepages-64kB/enabled never
mmap small 64K
touch small
mark measured
mprotect big 0 256K r
mprotect small 0 64K r
mprotect big 0 256K rw
mprotect small 0 64K rw
