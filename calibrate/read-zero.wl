# Calibration: read faults that map the shared zero page (nothing allocated or zeroed).
mmap buf 256M nohugepage
mark read
touch buf read
mark munmap
munmap buf
