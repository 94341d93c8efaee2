set hugepages-64kB/enabled always
mmap buf 512K
touch buf
fork child
@child touch buf 0 16K
touch buf 256K 16K
@child mmap own 256K
@child touch own
