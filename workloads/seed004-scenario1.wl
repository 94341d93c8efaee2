# Seed 004 scenario 1: a 256 MiB, 64K-aligned buffer of 64 KiB folios, every pte young
# and dirty; mlock/munlock it 500 times. Each mlock/munlock walks the ptes with
# ptep_get (contpte_ptep_get gathers young/dirty over each block).
# Compare: --set ptep_get=full-scan|early-exit|mod1|mod2
set hugepages-64kB/enabled always
mmap buf 256M
touch buf
mark mlock-munlock
repeat 500
mlock buf
munlock buf
end
