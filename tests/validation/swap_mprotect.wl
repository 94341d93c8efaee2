# Swapped-out pages read back under PROT_READ map read-only; a write after PROT_WRITE
# then takes the write fault.
swapon 64M
mmap buf 256K nohugepage
touch buf
madvise buf 0 256K pageout
mprotect buf 0 256K r
touch buf read
mprotect buf 0 256K rw
touch buf
