/* workloads/mthp-fault-64k.wl as a program, for the output-keys test and the guide's
 * side-by-side of `run`, `replay` and `native`: 64 MiB mapped and written once, a
 * write per page. Build it as `main`, the name the workload gives its process, so a
 * replay of its recording reports `proc.main.minflt` as `run` and `native` do. */
#include <sys/mman.h>

int main(void)
{
	unsigned long len = 64UL << 20;
	char *buf = mmap(0, len, PROT_READ | PROT_WRITE, MAP_PRIVATE | MAP_ANONYMOUS, -1, 0);
	if (buf == MAP_FAILED)
		return 1;
	for (unsigned long i = 0; i < len; i += 4096)
		buf[i] = 1;
	return 0;
}
