# Once the child has exited, the parent's writes reuse the folios it maps alone:
# one fault per page, no copies.
set hugepages-64kB/enabled always
mmap buf 512K
touch buf
fork child
@child touch buf 0 8K
@child exit
mark reuse
touch buf 64K 128K
touch buf 0 64K
