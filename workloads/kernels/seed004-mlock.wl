# Seed 004 on 6.12 (no released Debian kernel has the change): 4 MiB of young and dirty
# 64 KiB folios mlocked and munlocked 5 times; each pass reads every pte through
# contpte_ptep_get.
set hugepages-64kB/enabled always
mmap buf 4M
touch buf
mark mlock-munlock
repeat 5
mlock buf
munlock buf
end
