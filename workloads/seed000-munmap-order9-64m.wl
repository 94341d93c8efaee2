# Seed 000's order-9 munmap, 64 MiB (32 folios): each PMD-mapped THP pte-mapped by
# splitting its VMA for a moment (one page's vm_flags changed and back, as the seed's
# benchmark does with MADV_DONTFORK/MADV_DOFORK), so set_ptes maps every 64K block
# contiguous and no pte changes after. data/seed000-munmap-insns.json was measured with it.
mmap buf 64M hugepage
touch buf
madvise buf 0M 4K nohugepage
madvise buf 0M 4K hugepage
madvise buf 2M 4K nohugepage
madvise buf 2M 4K hugepage
madvise buf 4M 4K nohugepage
madvise buf 4M 4K hugepage
madvise buf 6M 4K nohugepage
madvise buf 6M 4K hugepage
madvise buf 8M 4K nohugepage
madvise buf 8M 4K hugepage
madvise buf 10M 4K nohugepage
madvise buf 10M 4K hugepage
madvise buf 12M 4K nohugepage
madvise buf 12M 4K hugepage
madvise buf 14M 4K nohugepage
madvise buf 14M 4K hugepage
madvise buf 16M 4K nohugepage
madvise buf 16M 4K hugepage
madvise buf 18M 4K nohugepage
madvise buf 18M 4K hugepage
madvise buf 20M 4K nohugepage
madvise buf 20M 4K hugepage
madvise buf 22M 4K nohugepage
madvise buf 22M 4K hugepage
madvise buf 24M 4K nohugepage
madvise buf 24M 4K hugepage
madvise buf 26M 4K nohugepage
madvise buf 26M 4K hugepage
madvise buf 28M 4K nohugepage
madvise buf 28M 4K hugepage
madvise buf 30M 4K nohugepage
madvise buf 30M 4K hugepage
madvise buf 32M 4K nohugepage
madvise buf 32M 4K hugepage
madvise buf 34M 4K nohugepage
madvise buf 34M 4K hugepage
madvise buf 36M 4K nohugepage
madvise buf 36M 4K hugepage
madvise buf 38M 4K nohugepage
madvise buf 38M 4K hugepage
madvise buf 40M 4K nohugepage
madvise buf 40M 4K hugepage
madvise buf 42M 4K nohugepage
madvise buf 42M 4K hugepage
madvise buf 44M 4K nohugepage
madvise buf 44M 4K hugepage
madvise buf 46M 4K nohugepage
madvise buf 46M 4K hugepage
madvise buf 48M 4K nohugepage
madvise buf 48M 4K hugepage
madvise buf 50M 4K nohugepage
madvise buf 50M 4K hugepage
madvise buf 52M 4K nohugepage
madvise buf 52M 4K hugepage
madvise buf 54M 4K nohugepage
madvise buf 54M 4K hugepage
madvise buf 56M 4K nohugepage
madvise buf 56M 4K hugepage
madvise buf 58M 4K nohugepage
madvise buf 58M 4K hugepage
madvise buf 60M 4K nohugepage
madvise buf 60M 4K hugepage
madvise buf 62M 4K nohugepage
madvise buf 62M 4K hugepage
mark measured
munmap buf
