set use_zero_page 0
mmap buf 4M hugepage
touch buf read
