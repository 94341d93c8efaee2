# The PMD size enabled through its own knob while the top level says never.
set enabled never
set hugepages-2048kB/enabled always
mmap buf 8M
touch buf
