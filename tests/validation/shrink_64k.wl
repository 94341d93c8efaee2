# The deferred split shrinker on demand (shrink): three partially mapped 64K folios
# are split and their unmapped pages freed; touching again maps order-0 pages.
set hugepages-64kB/enabled always
mmap buf 256K
touch buf
madvise buf 0 32K dontneed
madvise buf 64K 16K dontneed
madvise buf 136K 8K dontneed
mark shrink
shrink
mark retouch
touch buf
