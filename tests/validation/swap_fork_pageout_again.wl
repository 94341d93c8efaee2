# Folios the child read through the swap cache stay cached after it exits, held by
# the parent's ptes; the parent maps them from the cache, and MADV_PAGEOUT then
# drops them without writing (clean, their slots still hold the data: no pswpout).
# The parent's next read skips the swap cache: its slots are its own again.
swapon 64M
mmap buf 128K nohugepage
touch buf
madvise buf 0 128K pageout
fork child
@child touch buf read
@child exit
mark cached
touch buf read
mark pageout
madvise buf 0 128K pageout
mark again
touch buf read
