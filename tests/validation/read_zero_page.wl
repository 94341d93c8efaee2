# Read faults map the shared zero page (no mTHP for reads).
set hugepages-64kB/enabled always
mmap buf 1M
touch buf read
