# The order walk of shmem_alloc_and_add_folio: 64K and 16K shmem folios allowed, a
# region skewed by 16K. A fault whose 64K block would leave the region, or whose 64K
# block of the page cache already holds a page, takes the next order (16K), and below
# that order 0; a whole 64K block inside takes 64K.
set hugepages-64kB/shmem_enabled always
set hugepages-16kB/shmem_enabled always
mmap buf 256K shared skew=16K
mark first
touch buf 0 4K
mark rest
touch buf
