/* A program that makes every address-space operation foliolab records, for the
 * record/replay tests: brk, mmap, read and write faults, mprotect, MADV_DONTNEED,
 * mremap that moves, fork (copy-on-write), posix_spawn (a CLONE_VM child), a thread,
 * a file mapping, read(2) into a fresh buffer, munmap. Deterministic: one thread at
 * a time touches memory (the thread is joined before anything else runs). */
#define _GNU_SOURCE
#include <fcntl.h>
#include <pthread.h>
#include <spawn.h>
#include <stdlib.h>
#include <string.h>
#include <sys/mman.h>
#include <sys/wait.h>
#include <unistd.h>

#define PAGE 4096UL
extern char **environ;

static void touch(char *p, size_t len, size_t stride)
{
	for (size_t i = 0; i < len; i += stride)
		p[i] = 1;
}

static void *thread_main(void *arg)
{
	char *p = mmap(NULL, 64 * PAGE, PROT_READ | PROT_WRITE, MAP_PRIVATE | MAP_ANONYMOUS, -1, 0);
	touch(p, 64 * PAGE, PAGE);
	munmap(p, 64 * PAGE);
	return arg;
}

int main(int argc, char **argv)
{
	/* brk: grow the heap by 256K and touch it, shrink it by half. */
	char *heap = sbrk(0);
	sbrk(256 * 1024);
	touch(heap, 256 * 1024, PAGE);
	sbrk(-128 * 1024);

	/* 1M anonymous: read faults (zero page) on the first 16 pages, then writes. */
	size_t len = 256 * PAGE;
	char *a = mmap(NULL, len, PROT_READ | PROT_WRITE, MAP_PRIVATE | MAP_ANONYMOUS, -1, 0);
	volatile char sink = 0;
	for (size_t i = 0; i < 16 * PAGE; i += PAGE)
		sink += a[i];
	touch(a, len, PAGE);

	/* mprotect a range read-only and back; MADV_DONTNEED a quarter and touch it again. */
	mprotect(a + 32 * PAGE, 32 * PAGE, PROT_READ);
	mprotect(a + 32 * PAGE, 32 * PAGE, PROT_READ | PROT_WRITE);
	madvise(a + 128 * PAGE, 64 * PAGE, MADV_DONTNEED);
	touch(a + 128 * PAGE, 64 * PAGE, PAGE);

	/* mremap: grow 64 pages to 512 where they cannot grow in place, so they move. */
	char *m = mmap(NULL, 64 * PAGE, PROT_READ | PROT_WRITE, MAP_PRIVATE | MAP_ANONYMOUS, -1, 0);
	touch(m, 64 * PAGE, PAGE);
	char *block = mmap(m + 64 * PAGE, PAGE, PROT_READ, MAP_PRIVATE | MAP_ANONYMOUS | MAP_FIXED_NOREPLACE, -1, 0);
	char *n = mremap(m, 64 * PAGE, 512 * PAGE, MREMAP_MAYMOVE);
	touch(n, 512 * PAGE, PAGE);
	munmap(block, PAGE);

	/* fork: the child writes to half of `a` (copy-on-write) and exits. */
	pid_t c = fork();
	if (c == 0) {
		touch(a, len / 2, PAGE);
		_exit(0);
	}
	waitpid(c, NULL, 0);
	touch(a, len, PAGE);

	/* posix_spawn: a CLONE_VM child until it execs. */
	pid_t s;
	char *args[] = { "true", NULL };
	if (posix_spawnp(&s, "true", NULL, NULL, args, environ) == 0)
		waitpid(s, NULL, 0);

	/* A thread with its own mapping. */
	pthread_t t;
	pthread_create(&t, NULL, thread_main, NULL);
	pthread_join(t, NULL);

	/* A file mapping, and read(2) of the file into a fresh buffer (kernel faults). */
	int fd = open(argv[0], O_RDONLY);
	char *f = mmap(NULL, 4 * PAGE, PROT_READ, MAP_PRIVATE, fd, 0);
	sink += f[0] + f[2 * PAGE];
	char *buf = mmap(NULL, 8 * PAGE, PROT_READ | PROT_WRITE, MAP_PRIVATE | MAP_ANONYMOUS, -1, 0);
	if (pread(fd, buf, 8 * PAGE, 0) < 0)
		return 1;
	close(fd);

	munmap(a, len);
	munmap(n, 512 * PAGE);
	return sink == 42 ? 3 : 0;
}
