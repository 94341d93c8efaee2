# Default knobs: PMD inherit + top-level madvise, region hinted.
mmap buf 8M hugepage
touch buf
