# memfd_secret: sixteen pages, written and then read (one fault each, no
# fault-around: secretmem has no map_pages), freed half by half: the first
# munmap keeps the file and its pages, the second frees all sixteen.
mmap s 64K secret
mark fault
touch s
touch s read
mark unmap_half
munmap s 0 32K
mark free
munmap s
