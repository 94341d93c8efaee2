# MAP_POPULATE faults the region in at mmap time.
set hugepages-64kB/enabled always
mmap buf 1M populate
