mmap buf 1M ro
touch buf read
