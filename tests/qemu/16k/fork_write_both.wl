# fork_write_both with 16K pages: parent and child write different parts of the 64K folios.
set hugepages-64kB/enabled always
mmap buf 1M
touch buf
fork child
touch buf 0 128K stride=32K
@child touch buf 512K 64K
@child touch buf 0 16K
touch buf 768K 16K
