# swap_full_reuse.wl with the device mostly free: a fault that finds its folio in the
# swap cache keeps it there (the slot stays allocated) and maps it read-only, so each
# write that follows faults once more (do_wp_page frees the swap and reuses the folio).
swapon 64M
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
