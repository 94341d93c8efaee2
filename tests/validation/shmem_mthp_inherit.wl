# Per-size `inherit` follows the top-level shmem_enabled: with the top at never the
# 64K size set to inherit allocates nothing large; at always it allocates 64K folios
# (the PMD size set to never first, so that only 64K is large). A size set to
# never stays off whatever the top says.
set hugepages-2048kB/shmem_enabled never
set hugepages-64kB/shmem_enabled inherit
mmap a 256K shared
mark never
touch a
set shmem_enabled always
mmap b 256K shared
mark always
touch b
set hugepages-64kB/shmem_enabled never
mmap c 256K shared
mark off
touch c
set shmem_enabled never
