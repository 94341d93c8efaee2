# A child writes to memory shared copy-on-write with its parent.
set hugepages-64kB/enabled always
mmap buf 1M
touch buf
fork child
mark child-writes
@child touch buf 0 64K
@child exit
mark parent-writes
touch buf 0 64K
