mmap buf 4M hugepage
touch buf read
mark write
touch buf 0 4K write
