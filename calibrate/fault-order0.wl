# Calibration: order-0 anonymous write faults, then munmap of what they mapped.
mmap buf 256M nohugepage
mark fault
touch buf
mark munmap
munmap buf
