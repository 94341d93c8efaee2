# Shared anonymous memory (shmem): a write fault allocates its page in the inode's page
# cache (shmem_fault, do_shared_fault); a read of a hole allocates a zeroed page too.
# MADV_DONTNEED zaps the ptes but the pages stay cached, so reading them again maps 16
# a fault (fault-around); munmap zaps the file ptes (the dirty ones delay their rmap
# until the TLB flush).
mmap buf 1M shared
mark write
touch buf 0 512K
mark read
touch buf read
mark dontneed
madvise buf 0 512K dontneed
mark reread
touch buf 0 512K read
mark munmap
munmap buf
