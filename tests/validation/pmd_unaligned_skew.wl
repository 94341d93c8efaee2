# A hinted region 4 KiB off PMD alignment: only full aligned 2 MiB blocks get PMDs.
mmap buf 8M hugepage skew=4K
touch buf
