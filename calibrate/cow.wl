# Calibration: copy-on-write faults after fork (a page copied per fault).
mmap buf 128M nohugepage
touch buf
fork child
mark cow
@child touch buf
mark exit
@child exit
