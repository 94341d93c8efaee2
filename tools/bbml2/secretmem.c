/*
 * memfd_secret(2) as a static guest program for the qemu-arm64 runner (its
 * "program" job): the user-space way to make a 7.3 kernel change its linear
 * map at run time. Each page of a secret memory area, when first faulted,
 * leaves the linear map (secretmem_fault: set_direct_map_invalid_noflush,
 * then flush_tlb_kernel_range of that one page; arch/arm64/mm/pageattr.c and
 * mm/secretmem.c of Debian's 7.3.4 source). With BBM Level 3 the linear map
 * is kept in blocks, so the first change inside a block splits it on demand
 * (split_kernel_leaf_mapping, arch/arm64/mm/mmu.c); without, it is
 * pte-mapped already and nothing splits. Freeing the pages puts them back
 * (set_direct_map_default_noflush), without a flush.
 *
 * Windows (tools/qemu/plugin.c), announced by "@@FOLIOLAB-PROGRAM-WINDOWS 2":
 * the faults of PAGES pages (memfd_secret, ftruncate and mmap before it),
 * then munmap and close, which free them.
 *
 * Usage: secretmem PAGES
 */
#define _GNU_SOURCE
#include <stdio.h>
#include <stdlib.h>
#include <sys/mman.h>
#include <sys/syscall.h>
#include <unistd.h>

#define PAGE 4096ul
/* arm64's (asm-generic) number; glibc 2.36 has no wrapper. */
#define NR_MEMFD_SECRET 447

#define START_MARK() __asm__ volatile("hint #120" ::: "memory")
#define STOP_MARK() __asm__ volatile("hint #121" ::: "memory")
#define ABORT_MARK() __asm__ volatile("hint #123" ::: "memory")

static void fail(const char *what)
{
	ABORT_MARK();
	printf("secretmem: %s failed\n", what);
	fflush(stdout);
	exit(1);
}

int main(int argc, char **argv)
{
	unsigned long pages = argc > 1 ? strtoul(argv[1], NULL, 0) : 0;

	if (pages == 0 || pages > 4096) {
		printf("usage: secretmem PAGES (1 to 4096)\n");
		return 2;
	}
	printf("@@FOLIOLAB-PROGRAM-WINDOWS 2\n");
	fflush(stdout);
	START_MARK();
	int fd = syscall(NR_MEMFD_SECRET, 0);
	if (fd < 0)
		fail("memfd_secret");
	if (ftruncate(fd, pages * PAGE))
		fail("ftruncate");
	volatile char *p = mmap(NULL, pages * PAGE, PROT_READ | PROT_WRITE, MAP_SHARED, fd, 0);
	if (p == MAP_FAILED)
		fail("mmap");
	for (unsigned long i = 0; i < pages; i++)
		p[i * PAGE] = 1;
	STOP_MARK();
	START_MARK();
	if (munmap((void *)p, pages * PAGE))
		fail("munmap");
	close(fd);
	STOP_MARK();
	return 0;
}
