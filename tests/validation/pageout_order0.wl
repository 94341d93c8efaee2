# MADV_PAGEOUT without swap: order-0 anon pages cannot be written out; they are
# activated and stay mapped.
mmap buf 1M
touch buf
madvise buf 0 1M pageout
