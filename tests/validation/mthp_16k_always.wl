# 16 KiB mTHP alone: one fault per 16 KiB folio.
set hugepages-16kB/enabled always
mmap buf 4M
touch buf
