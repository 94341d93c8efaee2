# 64 MiB written once with 64 KiB mTHP: 1024 faults, 1024 contpte-mapped folios.
set hugepages-64kB/enabled always
mmap buf 64M
touch buf
