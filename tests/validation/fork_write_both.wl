# After a fork, parent and child write different parts of the shared 64K folios:
# each write copies one page; the untouched folios stay shared.
set hugepages-64kB/enabled always
mmap buf 1M
touch buf
fork child
touch buf 0 128K stride=16K
@child touch buf 512K 64K
@child touch buf 0 16K
touch buf 768K 4K
