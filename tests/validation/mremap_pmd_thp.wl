# mremap of PMD-mapped THPs, PMD-aligned on both sides: each huge pmd moves whole
# (move_huge_pmd), no split; then a move of order-0 memory over a whole pmd moves the
# pte table whole (move_normal_pmd).
mmap buf 4M hugepage
touch buf
mark move_thp
mremap buf 4M move
touch buf read
mmap small 2M nohugepage
touch small
mark move_table
mremap small 2M move
touch small
