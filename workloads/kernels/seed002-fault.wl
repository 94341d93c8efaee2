# Seed 002 on 6.1 and 6.12: 16 MiB written once with the kernel's default THP settings
# and no per-size knob set (enabled=madvise, a VMA without MADV_HUGEPAGE): order-0 faults on both (mTHP sizes are off by default).
mmap buf 16M
touch buf
