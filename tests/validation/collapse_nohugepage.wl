# MADV_COLLAPSE refuses a VM_NOHUGEPAGE region.
mmap buf 2M nohugepage
touch buf
madvise buf 0 2M collapse
