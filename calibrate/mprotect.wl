# Calibration: mprotect of populated memory back and forth (pte rewrites per call).
mmap buf 64M nohugepage
touch buf
mark mprotect
repeat 10
  mprotect buf 0 64M r
  mprotect buf 0 64M rw
end
