# 64 MiB touched with 64 KiB mTHP always: one fault per 64 KiB folio.
set hugepages-64kB/enabled always
mmap buf 64M
touch buf
