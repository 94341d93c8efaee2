# MADV_FREE of swapped-out pages frees their slots: a read maps the zero page.
swapon 64M
mmap buf 256K nohugepage
touch buf
madvise buf 0 256K pageout
madvise buf 0 128K free
touch buf read
