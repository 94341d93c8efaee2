# A read of a PMD-aligned hugepage region maps the huge zero page.
mmap buf 4M hugepage
touch buf read
