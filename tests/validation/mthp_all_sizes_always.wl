# Every size enabled: the largest that fits the aligned range wins.
set enabled always
set hugepages-16kB/enabled always
set hugepages-32kB/enabled always
set hugepages-64kB/enabled always
set hugepages-128kB/enabled always
set hugepages-256kB/enabled always
set hugepages-512kB/enabled always
set hugepages-1024kB/enabled always
mmap buf 8M skew=4K
touch buf
