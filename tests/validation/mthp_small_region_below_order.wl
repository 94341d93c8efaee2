# A 32 KiB region cannot hold a 64 KiB folio.
set hugepages-64kB/enabled always
set hugepages-16kB/enabled always
mmap buf 32K
touch buf
