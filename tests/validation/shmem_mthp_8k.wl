# Order-1 shmem folios (8K): shmem allows order 1, anonymous memory does not
# (THP_ORDERS_ALL_FILE_DEFAULT against THP_ORDERS_ALL_ANON). A write fault allocates
# the 8K folio and maps both its ptes; zapped, it stays cached and a read maps it
# again through fault-around.
set hugepages-8kB/shmem_enabled always
mmap buf 1M shared
mark write
touch buf 0 512K
mark read
touch buf 512K 512K read
mark dontneed
madvise buf 0 512K dontneed
mark reread
touch buf 0 512K read
