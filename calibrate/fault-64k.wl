# Calibration: 64 KiB mTHP write faults (16 pages zeroed per fault), then munmap.
set hugepages-64kB/enabled always
mmap buf 256M
mark fault
touch buf
mark munmap
munmap buf
