# Direct reclaim in a memory cgroup: 16 MiB written through an 8 MiB limit pages
# the oldest out to zram; reading it back from the start swaps every page in.
swapon 64M
memlimit 8M
mmap buf 16M nohugepage
touch buf
mark readback
touch buf read
