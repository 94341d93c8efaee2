# exit_many with 16K pages: children fork, write part of the 64K folios and exit.
set hugepages-64kB/enabled always
mmap buf 1M
touch buf
repeat 3
fork c
@c touch buf 0 256K
@c touch buf 512K 16K
@c exit
end
touch buf 0 128K
touch buf 512K 64K
