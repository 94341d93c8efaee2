set hugepages-64kB/enabled always
repeat 4
  mmap buf 256K
  touch buf
  munmap buf
end
mmap keep 256K
touch keep
