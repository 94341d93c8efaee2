# MADV_COLLAPSE of a range half swapped out: MADV_COLLAPSE takes any number of swap
# ptes (max_ptes_swap limits khugepaged only) and swaps them in first
# (__collapse_huge_page_swapin: do_swap_page outside a fault, so pgmajfault counts
# each read but the task's fault counts do not move).
swapon 64M
mmap buf 2M
touch buf
madvise buf 0 1M pageout
mark collapse
madvise buf 0 2M collapse
