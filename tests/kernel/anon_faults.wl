# 10 MiB of order-0 anonymous faults (2,560 with 4K pages), then munmap: each fault
# is one do_anonymous_page, so flush-per-anon-fault.patch adds exactly 2,560 TLBIs.
mmap buf 10M nohugepage
mark faults
touch buf
mark munmap
munmap buf
