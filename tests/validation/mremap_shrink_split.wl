# A move that keeps part of a large folio: mremap to a smaller size unmaps the tail
# first, cutting a 64 KiB folio (and a PMD THP) in two (deferred split), then moves
# the rest; a region at a skew that is not pmd-aligned moves its first pmd's table
# whole (try_realign_addr).
set hugepages-64kB/enabled always
mmap buf 256K
touch buf
mark shrink_move
mremap buf 208K move
touch buf
mmap big 4M hugepage
touch big
mark shrink_thp
mremap big 3M move
touch big read
mmap skewed 3M skew=1M nohugepage
touch skewed
mark realign
mremap skewed 3M move
touch skewed
