# Seed 001's migration benchmark with 64 KiB folios (contpte blocks): move_pages of
# 64 MiB to node 1 on a two-node machine. move_pages sends each large
# folio off on its own (the next page of it finds it isolated: -EBUSY), so every folio is
# one migrate_pages call with its own try_to_unmap_flush; try_to_migrate_one clears the
# folio's ptes one at a time, the first unfolding the contpte block.
machine nodes=2
set hugepages-64kB/enabled always
mmap buf 64M
touch buf
mark migrate
migrate buf node=1
