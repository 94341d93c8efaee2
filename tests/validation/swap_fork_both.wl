# Both sides write shared swapped-out pages: the child's write copies the swap-cache
# folio (the parent's pte still holds the slot); the parent's write then finds the
# folio in the swap cache, frees the slot (should_try_to_free_swap) and reuses it.
swapon 64M
mmap buf 128K nohugepage
touch buf
madvise buf 0 128K pageout
fork child
mark child
@child touch buf 0 64K
mark parent
touch buf
