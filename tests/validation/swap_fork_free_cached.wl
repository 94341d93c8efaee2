# Swap-cache folios under MADV_FREE and pageout. The child reads two pages through the
# swap cache; the parent drops the first one's slot (DONTNEED), so MADV_FREE may free
# that folio's swap and make it lazyfree (pageout then discards it), while the second,
# whose slot the parent still holds, stays swap-backed and is reclaimed clean, without
# a write. The child's reread maps the zero page, then reads the second page back once;
# the parent finds it in the swap cache.
swapon 64M
mmap buf 128K nohugepage
touch buf
madvise buf 0 128K pageout
fork child
@child touch buf 0 8K read
madvise buf 0 4K dontneed
mark free
@child madvise buf 0 8K free
mark pageout
@child madvise buf 0 8K pageout
mark reread
@child touch buf 0 8K read
touch buf 4K 4K read
