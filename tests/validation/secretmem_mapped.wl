# memfd_secret: the region stays mapped to the end, so its layout compares: eight
# pages written of sixteen, each its own order-0 page-cache folio.
mmap s 64K secret
touch s 0 32K
