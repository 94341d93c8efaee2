# After a fork, read-only and back does not make shared pages writable: the writes
# still copy.
set hugepages-64kB/enabled always
mmap buf 256K
touch buf
fork child
mprotect buf 0 256K r
mprotect buf 0 256K rw
touch buf 0 64K
@child exit
touch buf 64K 64K
