# memfd_secret: read faults allocate and map the page too (secretmem_fault has
# no zero page), four pages of a region whose process exits: exit frees them.
mmap s 16K secret
mark fault
touch s read
mark exit
exit
