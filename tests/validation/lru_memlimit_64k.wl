# Direct reclaim in a memory cgroup with 64K mTHP: near the limit the mTHP charge
# (no reclaim in its gfp) fails and the fault falls back to order 0, which reclaims;
# reclaim writes 64K folios out whole while slots allow.
set hugepages-64kB/enabled always
swapon 64M
memlimit 8M
mmap buf 16M
touch buf
mark readback
touch buf read
