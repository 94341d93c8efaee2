# PROT_NONE pages stay mapped (pagemap shows them present); back to rw they are
# written without faults.
set hugepages-64kB/enabled always
mmap buf 512K
touch buf
mprotect buf 0 256K none
mprotect buf 0 256K rw
touch buf
mprotect buf 64K 4K r
touch buf 300K 200K
