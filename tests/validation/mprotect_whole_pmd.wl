# mprotect over whole PMD-mapped THPs changes the pmds in place (change_huge_pmd):
# PROT_NONE and back, read-only and back; no pmd is split.
mmap buf 4M hugepage
touch buf
mprotect buf 0 2M none
mprotect buf 0 2M rw
mprotect buf 2M 2M r
touch buf 0 2M read
mprotect buf 0 4M rw
touch buf
