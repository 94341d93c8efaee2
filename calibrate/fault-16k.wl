# Calibration: 16 KiB mTHP write faults (4 pages zeroed per fault), then munmap.
set hugepages-16kB/enabled always
mmap buf 256M 
mark fault
touch buf
mark munmap
munmap buf
