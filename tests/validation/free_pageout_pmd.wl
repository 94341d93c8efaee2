# A lazyfree PMD THP under pageout: the 6.18 host splits the pmd and discards the
# ptes (thp_split_pmd, no folio split); reads then map zero pages pte by pte.
mmap buf 2M hugepage
touch buf
mark free
madvise buf 0 2M free
mark pageout
madvise buf 0 2M pageout
mark retouch
touch buf 0 2M read
