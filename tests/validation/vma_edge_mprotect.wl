# mprotect splits the VMA: folios cannot cross the new edges.
set hugepages-64kB/enabled always
mmap buf 1M
mprotect buf 20K 40K r
touch buf 0 20K
touch buf 60K 964K
