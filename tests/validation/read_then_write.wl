# Write after read: the zero page is replaced page by page.
set hugepages-64kB/enabled always
mmap buf 1M
touch buf read
mark write
touch buf write
