/* Issue 33, defect 1: writes to write-only memory. mmap(PROT_WRITE) then a write, a
 * read-only mapping made write-only by mprotect then written, and a fork child that
 * writes its copy: arm64 (and x86) map write-only as read-write. */
#define _GNU_SOURCE
#include <sys/mman.h>
#include <sys/wait.h>
#include <unistd.h>

int main(void)
{
	char *p = mmap(0, 4096, PROT_WRITE, MAP_PRIVATE | MAP_ANONYMOUS, -1, 0);
	char *q = mmap(0, 4 * 4096, PROT_READ, MAP_PRIVATE | MAP_ANONYMOUS, -1, 0);
	if (p == MAP_FAILED || q == MAP_FAILED)
		return 1;
	p[0] = 1;
	mprotect(q, 4 * 4096, PROT_WRITE);
	for (int i = 0; i < 4; i++)
		q[i * 4096] = 1;
	pid_t c = fork();
	if (c == 0) {
		p[0] = 2;
		_exit(0);
	}
	waitpid(c, 0, 0);
	return 0;
}
