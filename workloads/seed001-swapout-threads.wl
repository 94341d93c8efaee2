# Seed 001, per page reclaimed: 16 MiB of written order-0 pages swapped out to a zram
# device with MADV_PAGEOUT, while the process has a thread running on every CPU of the
# machine (so x86's shootdown IPIs each of them; arm64 broadcasts whatever the threads).
# A written page's pte is dirty, so before each folio's writeout try_to_unmap_flush_dirty
# waits for its TLBIs: the deferred flush saves no wait here, only moves it.
swapon 64M
mmap buf 16M nohugepage
touch buf
threads all
mark pageout
madvise buf 0 16M pageout
