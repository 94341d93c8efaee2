# With more than half the swap device in use (vm_swap_full), a fault that finds its
# folio in the swap cache frees the slot once no other pte holds it
# (should_try_to_free_swap) and maps the folio writable: the writes that follow do not
# fault. The child's read left the folios cached; the parent reads them after the
# child has gone. (swap_fork_pageout_again.wl has the device mostly free.)
swapon 4M
mmap buf 3M nohugepage
touch buf
madvise buf 0 3M pageout
fork child
@child touch buf 0 4K read
@child exit
mark read
touch buf 4K 16K read
mark write
touch buf 4K 16K
