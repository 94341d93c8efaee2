# Several children fork, write and exit; the parent then reuses the 64K folios it
# maps alone (one fault per page, no copies).
set hugepages-64kB/enabled always
mmap buf 1M
touch buf
repeat 3
fork c
@c touch buf 0 256K
@c touch buf 512K 8K
@c exit
end
touch buf 0 128K
touch buf 512K 64K
