# Zero-page reads before a fork; the child reads and writes, the parent writes.
set hugepages-64kB/enabled always
mmap buf 256K
touch buf read
touch buf 0 64K
fork child
@child touch buf read
@child touch buf 128K 64K
touch buf 64K 64K
