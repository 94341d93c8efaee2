# A hot 1 MiB region read after every 128K written of a 16 MiB one, through an 8 MiB
# limit. The first reclaim finds every page young and wraps the inactive list, so the
# hot pages go out once; read back, they are found referenced on two trips round the
# list and activated (pgactivate), after which reclaim leaves them resident.
# Not in the validation suite: the host does not repeat its counts here
# (docs/research/lru-reclaim.md).
swapon 64M
memlimit 8M
mmap hot 1M nohugepage
mmap buf 16M nohugepage
touch hot
touch buf 0K 128K
touch hot read
touch buf 128K 128K
touch hot read
touch buf 256K 128K
touch hot read
touch buf 384K 128K
touch hot read
touch buf 512K 128K
touch hot read
touch buf 640K 128K
touch hot read
touch buf 768K 128K
touch hot read
touch buf 896K 128K
touch hot read
touch buf 1024K 128K
touch hot read
touch buf 1152K 128K
touch hot read
touch buf 1280K 128K
touch hot read
touch buf 1408K 128K
touch hot read
touch buf 1536K 128K
touch hot read
touch buf 1664K 128K
touch hot read
touch buf 1792K 128K
touch hot read
touch buf 1920K 128K
touch hot read
touch buf 2048K 128K
touch hot read
touch buf 2176K 128K
touch hot read
touch buf 2304K 128K
touch hot read
touch buf 2432K 128K
touch hot read
touch buf 2560K 128K
touch hot read
touch buf 2688K 128K
touch hot read
touch buf 2816K 128K
touch hot read
touch buf 2944K 128K
touch hot read
touch buf 3072K 128K
touch hot read
touch buf 3200K 128K
touch hot read
touch buf 3328K 128K
touch hot read
touch buf 3456K 128K
touch hot read
touch buf 3584K 128K
touch hot read
touch buf 3712K 128K
touch hot read
touch buf 3840K 128K
touch hot read
touch buf 3968K 128K
touch hot read
touch buf 4096K 128K
touch hot read
touch buf 4224K 128K
touch hot read
touch buf 4352K 128K
touch hot read
touch buf 4480K 128K
touch hot read
touch buf 4608K 128K
touch hot read
touch buf 4736K 128K
touch hot read
touch buf 4864K 128K
touch hot read
touch buf 4992K 128K
touch hot read
touch buf 5120K 128K
touch hot read
touch buf 5248K 128K
touch hot read
touch buf 5376K 128K
touch hot read
touch buf 5504K 128K
touch hot read
touch buf 5632K 128K
touch hot read
touch buf 5760K 128K
touch hot read
touch buf 5888K 128K
touch hot read
touch buf 6016K 128K
touch hot read
touch buf 6144K 128K
touch hot read
touch buf 6272K 128K
touch hot read
touch buf 6400K 128K
touch hot read
touch buf 6528K 128K
touch hot read
touch buf 6656K 128K
touch hot read
touch buf 6784K 128K
touch hot read
touch buf 6912K 128K
touch hot read
touch buf 7040K 128K
touch hot read
touch buf 7168K 128K
touch hot read
touch buf 7296K 128K
touch hot read
touch buf 7424K 128K
touch hot read
touch buf 7552K 128K
touch hot read
touch buf 7680K 128K
touch hot read
touch buf 7808K 128K
touch hot read
touch buf 7936K 128K
touch hot read
touch buf 8064K 128K
touch hot read
touch buf 8192K 128K
touch hot read
touch buf 8320K 128K
touch hot read
touch buf 8448K 128K
touch hot read
touch buf 8576K 128K
touch hot read
touch buf 8704K 128K
touch hot read
touch buf 8832K 128K
touch hot read
touch buf 8960K 128K
touch hot read
touch buf 9088K 128K
touch hot read
touch buf 9216K 128K
touch hot read
touch buf 9344K 128K
touch hot read
touch buf 9472K 128K
touch hot read
touch buf 9600K 128K
touch hot read
touch buf 9728K 128K
touch hot read
touch buf 9856K 128K
touch hot read
touch buf 9984K 128K
touch hot read
touch buf 10112K 128K
touch hot read
touch buf 10240K 128K
touch hot read
touch buf 10368K 128K
touch hot read
touch buf 10496K 128K
touch hot read
touch buf 10624K 128K
touch hot read
touch buf 10752K 128K
touch hot read
touch buf 10880K 128K
touch hot read
touch buf 11008K 128K
touch hot read
touch buf 11136K 128K
touch hot read
touch buf 11264K 128K
touch hot read
touch buf 11392K 128K
touch hot read
touch buf 11520K 128K
touch hot read
touch buf 11648K 128K
touch hot read
touch buf 11776K 128K
touch hot read
touch buf 11904K 128K
touch hot read
touch buf 12032K 128K
touch hot read
touch buf 12160K 128K
touch hot read
touch buf 12288K 128K
touch hot read
touch buf 12416K 128K
touch hot read
touch buf 12544K 128K
touch hot read
touch buf 12672K 128K
touch hot read
touch buf 12800K 128K
touch hot read
touch buf 12928K 128K
touch hot read
touch buf 13056K 128K
touch hot read
touch buf 13184K 128K
touch hot read
touch buf 13312K 128K
touch hot read
touch buf 13440K 128K
touch hot read
touch buf 13568K 128K
touch hot read
touch buf 13696K 128K
touch hot read
touch buf 13824K 128K
touch hot read
touch buf 13952K 128K
touch hot read
touch buf 14080K 128K
touch hot read
touch buf 14208K 128K
touch hot read
touch buf 14336K 128K
touch hot read
touch buf 14464K 128K
touch hot read
touch buf 14592K 128K
touch hot read
touch buf 14720K 128K
touch hot read
touch buf 14848K 128K
touch hot read
touch buf 14976K 128K
touch hot read
touch buf 15104K 128K
touch hot read
touch buf 15232K 128K
touch hot read
touch buf 15360K 128K
touch hot read
touch buf 15488K 128K
touch hot read
touch buf 15616K 128K
touch hot read
touch buf 15744K 128K
touch hot read
touch buf 15872K 128K
touch hot read
touch buf 16000K 128K
touch hot read
touch buf 16128K 128K
touch hot read
touch buf 16256K 128K
touch hot read
mark end
touch hot read
