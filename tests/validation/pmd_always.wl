# PMD THP with enabled=always: one fault per 2 MiB.
set enabled always
mmap buf 8M
touch buf
