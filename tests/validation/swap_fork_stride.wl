# Readahead with a stride: the child reads every other page, so the window never
# grows on adjacency, misses and hits both occur; then the parent reads all.
swapon 64M
mmap buf 256K nohugepage
touch buf
madvise buf 0 256K pageout
fork child
mark child
@child touch buf read stride=8K
mark parent
touch buf read
