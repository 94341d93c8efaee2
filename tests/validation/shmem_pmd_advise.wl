# The top-level shmem_enabled with the PMD size at its default (inherit): advise
# allocates PMD-size shmem folios only where MADV_HUGEPAGE asked, within_size where
# the folio lies inside i_size (the mapping's length), never nowhere.
set shmem_enabled advise
mmap a 32M shared hugepage
mmap b 32M shared
mark advise
touch a
touch b
set shmem_enabled within_size
mmap c 40M shared
mark within_size
touch c
set shmem_enabled never
mmap d 32M shared hugepage
mark never
touch d
