# MADV_PAGEOUT of part of a 64K shmem folio: the walk splits the folio (mthp split;
# split_folio unmaps it and leaves its pages unmapped in the page cache) and pages
# nothing out there; the rest of the range goes out whole per folio.
swapon 64M
set hugepages-64kB/shmem_enabled always
mmap buf 1M shared
touch buf
mark partial
madvise buf 0 32K pageout
mark rest
madvise buf 0 1M pageout
mark read
touch buf read
