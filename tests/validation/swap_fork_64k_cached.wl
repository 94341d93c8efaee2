# Once the child has gone the slots are the parent's alone again (count 1), but a 64K
# swap-in still needs none of its slots in the swap cache (can_swapin_thp): the
# folio whose first pages the child read stays cached, so the parent's fault inside it
# reads order 0; the folios the child never touched come back whole.
set hugepages-64kB/enabled always
swapon 64M
mmap buf 256K
touch buf
madvise buf 0 256K pageout
fork child
@child touch buf 0 4K read
@child exit
mark parent
touch buf 32K 4K read
mark rest
touch buf read
