# A 12 MiB buffer written twice through an 8 MiB limit: the second pass faults its
# swapped-out pages back in (major faults) while reclaim pushes the rest out.
swapon 64M
memlimit 8M
mmap buf 12M nohugepage
touch buf
mark second
touch buf
