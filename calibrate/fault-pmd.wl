# Calibration: PMD THP write faults (512 pages zeroed per fault), then munmap.
set enabled always
mmap buf 512M hugepage
mark fault
touch buf
mark munmap
munmap buf
