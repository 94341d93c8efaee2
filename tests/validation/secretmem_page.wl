# memfd_secret: one page's first fault takes it out of the kernel's linear map
# (set_direct_map_invalid_noflush, then one TLBI VAALE1IS); with BBM Level 3 that
# splits a block of the linear map (no TLBI). The munmap frees it back, unflushed.
mmap s 4K secret
mark fault
touch s
mark free
munmap s
