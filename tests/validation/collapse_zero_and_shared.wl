# MADV_COLLAPSE: a region with only zero-page reads has no anon_vma and is not
# collapsed; pages shared with a child (write-protected) are collapsed (6.18 no longer
# needs a writable pte); the child keeps its own pages.
mmap buf 2M
mmap other 2M
touch buf read
touch other 0 64K
fork child
madvise buf 0 2M collapse
madvise other 0 2M collapse
@child touch other 0 8K
touch other
