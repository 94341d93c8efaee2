# MADV_FREE partly over folios shared with a child: shared folios are not split.
set hugepages-64kB/enabled always
mmap buf 512K
touch buf
fork child
madvise buf 16K 64K free
touch buf 0 128K
@child touch buf 0 128K
