# A hole punched by munmap before any fault: both remaining VMAs fault independently.
set hugepages-64kB/enabled always
mmap buf 1M
munmap buf 256K 4K
touch buf 0 256K
touch buf 260K 764K
