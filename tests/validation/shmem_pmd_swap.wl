# PMD-size shmem folios through swap on zram. MADV_PAGEOUT unmaps each (its pmd
# cleared: thp_split_pmd) and shmem_writeout writes it: whole with CONFIG_THP_SWAP
# (4K pages: thp_swpout), else split first (16K pages: thp_split_page, then every
# page alone). A read fault brings it back. A page-out of part of a PMD-mapped folio
# splits it and pages nothing out (its pages are left unmapped in the page cache).
swapon 128M
set shmem_enabled always
mmap buf 64M shared
touch buf 0 32M
mark pageout
madvise buf 0 32M pageout
mark swapin
touch buf 0 32M read
mark partial
madvise buf 0 1M pageout
mark reread
touch buf 0 2M read
