# MADV_NOHUGEPAGE disables every size.
set enabled always
set hugepages-64kB/enabled always
mmap buf 4M nohugepage
touch buf
