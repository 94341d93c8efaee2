# Lazyfree 64K folios, paged out over a range cutting two of them: those are split
# and their covered pages discarded; whole ones are discarded.
set hugepages-64kB/enabled always
mmap buf 1M
touch buf
madvise buf 0 1M free
madvise buf 32K 256K pageout
