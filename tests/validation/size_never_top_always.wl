# Sizes set to never stay off whatever the top level says (PMD inherits always).
set enabled always
set hugepages-2048kB/enabled never
mmap buf 4M
touch buf
