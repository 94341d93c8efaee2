# Seed 004 scenario 2: 256 MiB of 64 KiB folios, only pte 8 of each block young, none dirty
# (the seed's test code reads buf[i + YOUNG_BIT * PAGE_SIZE] with YOUNG_BIT 8; its prose
# says "the 8th", but index 8 is what ran and what tools/seed004 measured)
# (MADV_FREE + MADV_COLD clear young and dirty), then mlock/munlock 500 times.
# Compare: --set ptep_get=full-scan|early-exit|mod1|mod2
set hugepages-64kB/enabled always
mmap buf 256M
touch buf
madvise buf 0 256M free
madvise buf 0 256M cold
touch buf 32K 0xFFF8000 read stride=64K
mark mlock-munlock
repeat 500
mlock buf
munlock buf
end
