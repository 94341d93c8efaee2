# Per-size inherit follows the top level: always.
set enabled always
set hugepages-64kB/enabled inherit
set hugepages-2048kB/enabled never
mmap buf 4M
touch buf
