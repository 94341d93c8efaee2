# Seed 002 with large anonymous folios (6.12 only: 6.1 has no per-size knobs): the same
# 16 MiB written once with 64 KiB folios, a fault per folio.
set hugepages-64kB/enabled always
mmap buf 16M
touch buf
