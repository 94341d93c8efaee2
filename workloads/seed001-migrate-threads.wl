# Seed 001, per page migrated: move_pages of 16 MiB of order-0 pages to node 1 of a
# two-node machine, while the process has a thread running on every
# CPU. migrate_pages_batch unmaps 512 folios at a time: the deferred flush waits once
# per batch, the sync one once per page.
machine nodes=2
mmap buf 16M nohugepage
touch buf
threads all
mark migrate
migrate buf node=1
