# fork_child_exit_reuse with 16K pages: the child writes one page, exits; the parent writes.
set hugepages-64kB/enabled always
mmap buf 512K
touch buf
fork child
@child touch buf 0 16K
@child exit
mark reuse
touch buf 64K 128K
touch buf 0 64K
