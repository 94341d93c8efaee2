/*
 * Seed 004's benchmark as a static guest program for the qemu-arm64 runner
 * (its "program" job, tools/qemu/runner.c), written here from the test the
 * seed describes: Xavier's reply in the thread "[mm/contpte v3 1/1]
 * mm/contpte: Optimize loop to reduce redundant operations"
 * (linux-arm-kernel, 2025-04-22, quoted by Barry Song on 2025-04-30;
 * ../../../shared/seeds/004_*.txt). What it does, in its order:
 *   - a 64 KiB-aligned buffer of 4096 contpte blocks (16 pages of 4 KiB each,
 *     256 MiB) from posix_memalign, with 64 KiB mTHP on and 2 MiB THP off
 *     (the seed's blocks are contpte ranges of 16 ptes, never PMD maps) so each
 *     block is one folio mapped by a contpte range;
 *   - every page written, then read back (all 16 ptes young and dirty);
 *   - scenarios 2 and 3: MADV_FREE then MADV_COLD over the buffer, which leave
 *     every pte old and clean;
 *   - scenario 2: pte 8 of each block read (young, still clean);
 *   - mlock then munlock of the whole buffer, LOOPS times (the seed: 500);
 *   - free.
 * The seed's scenarios: 1, all 16 ptes young and dirty; 2, only pte 8 young,
 * none dirty; 3, none young or dirty.
 *
 * It marks four plugin windows (tools/qemu/plugin.c): the setup (allocation
 * to the last step before the loop), the first mlock/munlock loop, the other
 * loops, and the free. Their sum is the benchmark's instructions, the figure
 * the seed's table gives per variant (the seed's count also has the
 * process's start and exit, a few hundred thousand instructions beside its
 * tens of billions); the first loop apart, since it may differ from the
 * rest, lets a run of a few loops stand for the seed's 500.
 * Before the setup it prints "@@FOLIOLAB-PROGRAM-WINDOWS 4"; any failure
 * prints a line and exits non-zero, closing an open window empty.
 *
 * Usage: seed004 SCENARIO [LOOPS]
 */
#define _GNU_SOURCE
#include <fcntl.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/mman.h>
#include <unistd.h>

#define PAGE 4096ul
#define CONT_PTES 16ul
#define BLOCK (CONT_PTES * PAGE)
#define SIZE (4096ul * BLOCK)
/* The pte of each block that scenario 2 makes young (the seed's YOUNG_BIT). */
#define YOUNG_PTE 8ul
#define MTHP_64K "/sys/kernel/mm/transparent_hugepage/hugepages-64kB/enabled"
#define THP_2M "/sys/kernel/mm/transparent_hugepage/hugepages-2048kB/enabled"

#define START_MARK() __asm__ volatile("hint #120" ::: "memory")
#define STOP_MARK() __asm__ volatile("hint #121" ::: "memory")
#define ABORT_MARK() __asm__ volatile("hint #123" ::: "memory")

static void fail(const char *what)
{
	ABORT_MARK();
	printf("seed004: %s failed\n", what);
	fflush(stdout);
	exit(1);
}

static void set_knob(const char *path, const char *value)
{
	int fd = open(path, O_WRONLY);

	if (fd < 0 || write(fd, value, strlen(value)) != (ssize_t)strlen(value))
		fail(path);
	close(fd);
}

static void mlock_munlock(char *buf)
{
	if (mlock(buf, SIZE))
		fail("mlock");
	if (munlock(buf, SIZE))
		fail("munlock");
}

static void write_and_read(volatile char *buf)
{
	for (unsigned long i = 0; i < SIZE; i += PAGE) {
		buf[i] = 'a';
		(void)buf[i];
	}
}

static void make_old_and_clean(char *buf)
{
	if (madvise(buf, SIZE, MADV_FREE))
		fail("madvise(MADV_FREE)");
	if (madvise(buf, SIZE, MADV_COLD))
		fail("madvise(MADV_COLD)");
}

static void make_one_young(volatile char *buf)
{
	for (unsigned long i = 0; i < SIZE; i += BLOCK)
		(void)buf[i + YOUNG_PTE * PAGE];
}

int main(int argc, char **argv)
{
	int scenario = argc > 1 ? atoi(argv[1]) : 0;
	long loops = argc > 2 ? atol(argv[2]) : 500;
	char *buf;

	if (scenario < 1 || scenario > 3 || loops < 2) {
		printf("usage: seed004 1|2|3 [LOOPS >= 2]\n");
		return 2;
	}
	set_knob(MTHP_64K, "always");
	set_knob(THP_2M, "never");
	printf("@@FOLIOLAB-PROGRAM-WINDOWS 4\n");
	fflush(stdout);
	START_MARK();
	if (posix_memalign((void **)&buf, BLOCK, SIZE))
		fail("posix_memalign");
	write_and_read(buf);
	if (scenario != 1)
		make_old_and_clean(buf);
	if (scenario == 2)
		make_one_young(buf);
	STOP_MARK();
	START_MARK();
	mlock_munlock(buf);
	STOP_MARK();
	START_MARK();
	for (long j = 1; j < loops; j++)
		mlock_munlock(buf);
	STOP_MARK();
	START_MARK();
	free(buf);
	STOP_MARK();
	return 0;
}
