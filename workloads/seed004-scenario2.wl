# Seed 004 scenario 2: 256 MiB of 64 KiB folios, only the 8th pte of each block young, none dirty
# (MADV_FREE + MADV_COLD clear young and dirty), then mlock/munlock 500 times.
# Compare: --set ptep_get=full-scan|early-exit|mod1|mod2
set hugepages-64kB/enabled always
mmap buf 256M
touch buf
madvise buf 0 256M free
madvise buf 0 256M cold
touch buf 28K 0xFFF9000 read stride=64K
mark mlock-munlock
repeat 500
mlock buf
munlock buf
end
