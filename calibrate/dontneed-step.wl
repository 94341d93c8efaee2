# Calibration: one madvise(MADV_DONTNEED) system call per page (seed 000's loop).
mmap buf 64M nohugepage
touch buf
mark dontneed
madvise buf 0 64M dontneed step=4K
