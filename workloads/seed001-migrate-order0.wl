# Seed 001's other beneficiary: page migration (move_pages to node 1 of 64 MiB of order-0
# anon memory). Needs a two-node machine (its `machine` line). migrate_pages_batch
# unmaps 512 folios per batch; tlb-batch=deferred issues each pte's TLBI without waiting
# and one DSB ISH per batch (try_to_unmap_flush), tlb-batch=sync a DSB per pte
# (ptep_clear_flush). Compare `--each tlb-batch=sync,deferred`.
machine nodes=2
mmap buf 64M
touch buf
mark migrate
migrate buf node=1
