# Seed 001's other beneficiary: page migration (move_pages to node 1 of 64 MiB of order-0
# anon memory). Needs a two-node machine: `run ... --set nodes=2`. migrate_pages_batch
# unmaps 512 folios per batch; tlb-batch=deferred issues each pte's TLBI without waiting
# and one DSB ISH per batch (try_to_unmap_flush), tlb-batch=sync a DSB per pte
# (ptep_clear_flush). Compare `--set nodes=2 --each tlb-batch=sync,deferred`.
mmap buf 64M
touch buf
mark migrate
migrate buf node=1
