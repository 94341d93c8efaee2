# Faults going down the VMA page by page: each window ends at the fault address
# (swap_vma_ra_win's backward case), so the pages below are read ahead.
swapon 64M
mmap buf 64K nohugepage
touch buf
madvise buf 0 64K pageout
fork child
mark down
@child touch buf 60K 4K read
@child touch buf 56K 4K read
@child touch buf 52K 4K read
@child touch buf 48K 4K read
@child touch buf 44K 4K read
@child touch buf 40K 4K read
@child touch buf 36K 4K read
@child touch buf 32K 4K read
@child touch buf 28K 4K read
@child touch buf 24K 4K read
@child touch buf 20K 4K read
@child touch buf 16K 4K read
@child touch buf 12K 4K read
@child touch buf 8K 4K read
@child touch buf 4K 4K read
@child touch buf 0K 4K read
