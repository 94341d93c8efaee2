# MADV_PAGEOUT of part of a PMD THP: madvise splits it (frozen pmd: no split_deferred),
# the order-0 pages are activated.
mmap buf 4M hugepage
touch buf
madvise buf 0 1M pageout
