/*
 * foliolab's guest runner: /init of the qemu-arm64 initramfs. It does in the
 * guest what src/native does on the host (read src/native/worker.rs and
 * perf.rs; this is the same measurement):
 *   - a worker process per workload process, each op sent to its worker over a
 *     socket, in file order;
 *   - an op's faults = sampled minor faults inside the live regions + the
 *     getrusage delta the samples do not cover (GUP faults); faults elsewhere
 *     are diagnostics, never counted;
 *   - workers keep their own memory faulted in outside op windows;
 *   - /proc/vmstat and the mTHP stats snapshotted around each op;
 *   - the final layout from pagemap and kpageflags.
 * Around each op it executes HINT #120 / HINT #121, which the TCG plugin
 * (plugin.c) takes as the op's window for TLBI, DSB, ISB and call counts. The
 * process that does the op marks it, so the window holds the op's own kernel
 * work and not the runner's messaging: a worker around its system call or
 * touch loop, the orchestrator around a knob write or a shrink. Exceptions:
 *   - fork: the window closes when the parent returns from clone; a child
 *     that runs first pauses it (HINT #122) before its first user instruction,
 *     so the child's own copy-on-write of runner memory stays outside;
 *   - exit: the worker opens the window and exits; the orchestrator closes it
 *     once the process is gone.
 * A fork or an exit also copies or tears down the runner's own memory. So
 * before either, a twin forked from the worker without the workload's regions
 * (MADV_DONTFORK) does the same (forks, or exits) in a window of its own,
 * which the host subtracts: what is left is the workload's part, less the
 * work a fork or exit does once per mm (flush_tlb_mm), which the host leaves
 * out of the model's side too (as_guest_measures in src/native/qemu.rs).
 * After the last op an idle window as long as the ops' (at least 200 ms)
 * measures what the guest's own background (kworkers, timers) moves. The
 * runner quiets khugepaged, vmstat's fold and proactive compaction at boot,
 * and never polls while an op runs (pidfd waits): anything that wakes inside
 * a window would preempt the op. Kernel work that waits for the runner's first
 * sleep is done before a window that sleeps: khugepaged's list is never empty
 * (khugepaged_anchor), the thread is seen asleep after each THP knob write
 * (khugepaged_settle), and zram's init free is waited for (await_init_free).
 *
 * /jobs lists what to do, a line each: "kallsyms" prints the kernel's text
 * symbols ("kallsyms FILE": into the host's FILE, arm64 through semihosting), "iomem" prints /proc/iomem (each line after "@@FOLIOLAB-IOMEM "),
 * "workload PATH" runs one flattened workload (written by
 * src/native/qemu.rs; its format is described there), "program PATH ARG..."
 * runs a static program of the host's (tools/seed004/bench.c) that marks its
 * own windows, its output on the console, then prints
 * "@@FOLIOLAB-PROGRAM-STATUS <wait status>". Results go to the
 * console between "@@FOLIOLAB-BEGIN" and "@@FOLIOLAB-END" lines, as one JSON
 * line per workload after a "@@FOLIOLAB-START" line (the host times the
 * workload between the two). Then the guest powers off.
 */
#define _GNU_SOURCE
#include <dirent.h>
#include <errno.h>
#include <fcntl.h>
#include <linux/perf_event.h>
#include <linux/reboot.h>
#include <signal.h>
#include <stdarg.h>
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/mman.h>
#include <poll.h>
#include <sched.h>
#include <sys/mount.h>
#include <sys/wait.h>
#include <sys/reboot.h>
#include <sys/resource.h>
#include <sys/socket.h>
#include <sys/stat.h>
#include <sys/syscall.h>
#include <termios.h>
#include <time.h>
#include <unistd.h>

/* The plugin's window markers (plugin.c): open (120), close (121), pause (122)
 * and close-or-empty (123). On arm64 HINT #n, on x86-64 a 7-byte NOP whose
 * displacement is MARK_X86 + n (nopl disp32(%rax), 0f 1f 80 disp32), which no
 * compiler emits. MARK is the marker as assembler text. */
#if defined(__aarch64__)
#define MARK(n) "hint #" #n
#elif defined(__x86_64__)
#define MARK(n) "nopl 0x464c4f00+" #n "(%%rax)"
#else
#error "the runner is built for aarch64 or x86-64"
#endif
#define START_MARK() __asm__ volatile(MARK(120) ::: "memory")
#define STOP_MARK() __asm__ volatile(MARK(121) ::: "memory")
#define ABORT_MARK() __asm__ volatile(MARK(123) ::: "memory")

/* glibc 2.36's headers predate it; the value is the kernel's uapi one. */
#ifndef MADV_COLLAPSE
#define MADV_COLLAPSE 25
#endif

#define MAX_STEPS 65536
#define MAX_PROCS 64
#define MAX_REGIONS 64
#define MAX_KEYS 512
#define NAME 64
#define CHUNK 4096
#define DATA_PAGES 128
#define MAX_STRAYS 16
/* The most pages one migrate moves (64 MiB of 4K pages). */
#define MAX_MIGRATE 16384
#define MPOL_MF_MOVE (1 << 1)

struct step {
	char kind[16];
	char proc[NAME];
	char a[NAME];	/* region, child, knob or label */
	char b[NAME];	/* knob value, advice, prot */
	uint64_t addr, len, stride, step;
	uint64_t to, to_len;	/* mremap: the new address and size */
	int write, hugepage, nohugepage, populate, ro, whole;
	int shared;	/* mmap: MAP_SHARED (shmem: 1; memfd_secret: 2) */
	int node;	/* migrate's target NUMA node */
};

struct region {
	char name[NAME];
	uint64_t addr, size;
};

static struct step steps[MAX_STEPS];
static int nsteps;
static char procs[MAX_PROCS][NAME];
static int nprocs;
static int socks[MAX_PROCS][2];	/* [0] the orchestrator's end, [1] the worker's */
static pid_t pids[MAX_PROCS];
static char vmstat_keys[MAX_KEYS][NAME];
static int nvmstat;
static char missing[MAX_KEYS][NAME];	/* vmstat keys this kernel lacks */
static int nmissing;
static char mthp_keys[MAX_KEYS][NAME];
static char mthp_paths[MAX_KEYS][160];
static int mthp_fds[MAX_KEYS];
static int nmthp;
static int vmstat_fd = -1;
static char buf[1 << 16];
static char out[8 << 20];	/* a workload's JSON line */
static size_t outlen;
static char msg[4 << 20];	/* one message between orchestrator and worker */
static int console = 1;

static void emit(const char *fmt, ...)
{
	va_list ap;

	va_start(ap, fmt);
	outlen += vsnprintf(out + outlen, sizeof(out) - outlen, fmt, ap);
	va_end(ap);
	if (outlen >= sizeof(out))
		outlen = sizeof(out) - 1;
}

static void put(int fd, const char *s, size_t n)
{
	while (n) {
		ssize_t w = write(fd, s, n);

		if (w <= 0)
			return;
		s += w;
		n -= w;
	}
}

/* Appends s to the output as a JSON string. */
static void emit_str(const char *s)
{
	emit("\"");
	for (; *s; s++) {
		if (*s == '"' || *s == '\\')
			emit("\\%c", *s);
		else if ((unsigned char)*s < 0x20)
			emit("\\u%04x", *s);
		else
			emit("%c", *s);
	}
	emit("\"");
}

static int send_msg(int fd, const char *m, uint32_t n)
{
	if (write(fd, &n, 4) != 4)
		return -1;
	for (uint32_t done = 0; done < n;) {
		ssize_t w = write(fd, m + done, n - done);

		if (w <= 0)
			return -1;
		done += w;
	}
	return 0;
}

/* The next message, NUL-terminated in msg; -1 at end of stream. */
static int recv_msg(int fd)
{
	uint32_t n, done = 0;

	if (read(fd, &n, 4) != 4 || n >= sizeof(msg))
		return -1;
	while (done < n) {
		ssize_t r = read(fd, msg + done, n - done);

		if (r <= 0)
			return -1;
		done += r;
	}
	msg[n] = 0;
	return 0;
}

static int64_t minflt(void)
{
	struct rusage ru;

	getrusage(RUSAGE_SELF, &ru);
	return ru.ru_minflt;
}

static uint64_t now_ns(void)
{
	struct timespec t;

	clock_gettime(CLOCK_MONOTONIC, &t);
	return (uint64_t)t.tv_sec * 1000000000u + t.tv_nsec;
}

/* A descriptor that polls readable once pid has exited (-1 if it already has). */
static int pidfd_of(pid_t pid)
{
	return pid > 0 ? syscall(SYS_pidfd_open, pid, 0) : -1;
}

/* Blocks until the process behind pidfd has exited, never waking before: a
 * polling loop's wake-ups would preempt the work measured in a window (a zap
 * that breaks for need_resched re-reads its ptes), at times that vary. */
static void wait_gone(int pidfd)
{
	struct pollfd pfd = { .fd = pidfd, .events = POLLIN };

	if (pidfd < 0)
		return;
	while (poll(&pfd, 1, -1) < 0 && errno == EINTR)
		;
	close(pidfd);
}

/* ---- the fault sampler (src/native/perf.rs) ---- */

struct sampler {
	int fd;
	volatile char *ring;
	size_t len;
	uint64_t data_size;
};

struct tally {
	uint64_t inside, total, lost;
	uint64_t strays[MAX_STRAYS][2];
	int nstrays;
};

static size_t page_size(void)
{
	return (size_t)sysconf(_SC_PAGESIZE);
}

static void sampler_discard(struct sampler *s);

static int sampler_open(struct sampler *s)
{
	struct perf_event_attr attr;
	size_t page = page_size();

	memset(&attr, 0, sizeof(attr));
	attr.type = PERF_TYPE_SOFTWARE;
	attr.size = sizeof(attr);
	attr.config = PERF_COUNT_SW_PAGE_FAULTS_MIN;
	attr.sample_period = 1;
	attr.sample_type = PERF_SAMPLE_IP | PERF_SAMPLE_ADDR;
	attr.exclude_hv = 1;
	s->fd = syscall(SYS_perf_event_open, &attr, 0, -1, -1, 0);
	if (s->fd < 0)
		return -1;
	s->len = (1 + DATA_PAGES) * page;
	s->data_size = DATA_PAGES * page;
	s->ring = mmap(NULL, s->len, PROT_READ | PROT_WRITE, MAP_SHARED, s->fd, 0);
	if (s->ring == MAP_FAILED)
		return -1;
	for (size_t off = 0; off < s->len; off += page)
		(void)s->ring[off];
	/* data_tail is written on every drain: take its write fault now. */
	sampler_discard(s);
	return 0;
}

static volatile uint64_t *ring_word(struct sampler *s, size_t off)
{
	return (volatile uint64_t *)(s->ring + off);
}

static void sampler_discard(struct sampler *s)
{
	uint64_t head = *ring_word(s, offsetof(struct perf_event_mmap_page, data_head));

	__atomic_thread_fence(__ATOMIC_SEQ_CST);
	*ring_word(s, offsetof(struct perf_event_mmap_page, data_tail)) = head;
}

static uint64_t ring_u64(struct sampler *s, uint64_t pos)
{
	return *ring_word(s, page_size() + pos % s->data_size);
}

static struct region regions[MAX_REGIONS];
static int nregions;
static uint64_t extra_span[2];	/* the region an mmap is creating */

static int inside(uint64_t a)
{
	for (int i = 0; i < nregions; i++)
		if (a >= regions[i].addr && a < regions[i].addr + regions[i].size)
			return 1;
	return a >= extra_span[0] && a < extra_span[1];
}

static void sampler_drain(struct sampler *s, struct tally *t)
{
	uint64_t head = *ring_word(s, offsetof(struct perf_event_mmap_page, data_head));
	uint64_t tail;

	__atomic_thread_fence(__ATOMIC_ACQUIRE);
	tail = *ring_word(s, offsetof(struct perf_event_mmap_page, data_tail));
	while (tail < head) {
		uint64_t hdr = ring_u64(s, tail), size = hdr >> 48;

		if ((uint32_t)hdr == PERF_RECORD_SAMPLE) {
			uint64_t ip = ring_u64(s, tail + 8), addr = ring_u64(s, tail + 16);

			t->total++;
			if (inside(addr)) {
				t->inside++;
			} else if (t->nstrays < MAX_STRAYS) {
				t->strays[t->nstrays][0] = addr;
				t->strays[t->nstrays][1] = ip;
				t->nstrays++;
			}
		} else if ((uint32_t)hdr == PERF_RECORD_LOST) {
			t->lost += ring_u64(s, tail + 16);
		}
		tail += size < 8 ? 8 : size;
	}
	__atomic_thread_fence(__ATOMIC_RELEASE);
	*ring_word(s, offsetof(struct perf_event_mmap_page, data_tail)) = tail;
}

/* ---- a worker (src/native/worker.rs) ---- */

/* Touches enough stack that no op grows it. */
static __attribute__((noinline)) void grow_stack(void)
{
	volatile char big[256 << 10];

	memset((char *)big, 0, sizeof(big));
}

/* Faults in everything but the live regions, by their real addresses; a twin
 * only maps what it can without writing, so it keeps the worker's pages. */
static void warm_up_as(int twin)
{
	FILE *f;
	char line[512];
	static char maps[1 << 16];
	size_t n;

	if (!twin)
		grow_stack();
	f = fopen("/proc/self/maps", "r");
	if (!f)
		return;
	n = fread(maps, 1, sizeof(maps) - 1, f);
	maps[n] = 0;
	fclose(f);
	for (char *p = maps, *nl; *p; p = nl + 1) {
		unsigned long start, end;
		char perms[5] = "", path[256] = "";
		int in_region = 0;

		nl = strchr(p, '\n');
		if (!nl)
			break;
		snprintf(line, sizeof(line), "%.*s", (int)(nl - p), p);
		if (sscanf(line, "%lx-%lx %4s %*s %*s %*s %255s", &start, &end, perms, path) < 3)
			continue;
		for (int i = 0; i < nregions; i++)
			in_region |= start < regions[i].addr + regions[i].size && regions[i].addr < end;
		if (in_region || !strncmp(path, "[v", 2) || perms[0] != 'r')
			continue;
		/* Order-0 whatever the workload's knobs, so a twin's teardown is the same. */
		madvise((void *)start, end - start, MADV_NOHUGEPAGE);
		madvise((void *)start, end - start,
			perms[1] == 'w' && perms[3] == 'p' && !twin ? MADV_POPULATE_WRITE : MADV_POPULATE_READ);
	}
}

static void warm_up(void)
{
	warm_up_as(0);
}

static int advice(const char *a)
{
	static const struct { const char *name; int adv; } table[] = {
		{ "dontneed", MADV_DONTNEED }, { "free", MADV_FREE }, { "pageout", MADV_PAGEOUT },
		{ "cold", MADV_COLD }, { "hugepage", MADV_HUGEPAGE },
		{ "nohugepage", MADV_NOHUGEPAGE }, { "collapse", MADV_COLLAPSE },
	};

	for (size_t i = 0; i < sizeof(table) / sizeof(table[0]); i++)
		if (!strcmp(a, table[i].name))
			return table[i].adv;
	return -1;
}

/* move_pages(2)'s arrays: static, so warm_up has faulted them in before any window. */
static void *mp_pages[MAX_MIGRATE];
static int mp_nodes[MAX_MIGRATE], mp_status[MAX_MIGRATE];

/* An mmap's outcome: 0 at the step's address, else -1 (EEXIST: unmapped again). */
static int placed(void *p, const struct step *st)
{
	if (p == MAP_FAILED)
		return -1;
	if ((uint64_t)p != st->addr) {
		munmap(p, st->len);
		errno = EEXIST;
		return -1;
	}
	return 0;
}

/* memfd_secret(2)'s number (asm-generic's, arm64's, and x86-64's too; glibc 2.36
 * has no wrapper). */
#define NR_MEMFD_SECRET 447

/*
 * `mmap R SIZE secret`: memfd_secret, ftruncate to the size, a MAP_SHARED mapping
 * of it at the placed address, close (the mapping keeps the file, so the pages
 * are freed, and put back in the linear map, when the last of it is unmapped).
 */
static int secret_mmap(const struct step *st)
{
	int fd = syscall(NR_MEMFD_SECRET, 0);
	void *p;

	if (fd < 0)
		return -1;
	if (ftruncate(fd, st->len)) {
		close(fd);
		return -1;
	}
	p = mmap((void *)st->addr, st->len, PROT_READ | PROT_WRITE, MAP_SHARED | MAP_FIXED_NOREPLACE, fd, 0);
	close(fd);
	return placed(p, st);
}

static int exec_op(const struct step *st, struct sampler *s, struct tally *t)
{
	if (!strcmp(st->kind, "mmap") && st->shared == 2)
		return secret_mmap(st);
	if (!strcmp(st->kind, "mmap")) {
		int prot = st->ro ? PROT_READ : PROT_READ | PROT_WRITE;
		int flags = (st->shared ? MAP_SHARED : MAP_PRIVATE) | MAP_ANONYMOUS |
			    MAP_FIXED_NOREPLACE | (st->populate ? MAP_POPULATE : 0);
		void *p = mmap((void *)st->addr, st->len, prot, flags, -1, 0);

		if (placed(p, st))
			return -1;
		if (st->hugepage)
			return madvise(p, st->len, MADV_HUGEPAGE);
		if (st->nohugepage)
			return madvise(p, st->len, MADV_NOHUGEPAGE);
		return 0;
	}
	if (!strcmp(st->kind, "touch")) {
		uint64_t n = 0;

		for (uint64_t p = st->addr; p < st->addr + st->len; p += st->stride) {
			if (st->write)
				*(volatile char *)p = 1;
			else
				(void)*(volatile char *)p;
			if (++n % CHUNK == 0)
				sampler_drain(s, t);
		}
		return 0;
	}
	if (!strcmp(st->kind, "madvise")) {
		int adv = advice(st->b), r = 0;

		for (uint64_t at = st->addr; at < st->addr + st->len; at += st->step)
			r |= madvise((void *)at, st->step, adv);
		/* A collapse that cannot be done is an outcome, not a failure. */
		return adv == MADV_COLLAPSE ? 0 : r;
	}
	if (!strcmp(st->kind, "munmap"))
		return munmap((void *)st->addr, st->len);
	if (!strcmp(st->kind, "mremap")) {
		/* Moved to the address the host chose (MREMAP_FIXED), or in place. */
		int flags = st->to != st->addr ? MREMAP_MAYMOVE | MREMAP_FIXED : 0;
		void *p = mremap((void *)st->addr, st->len, st->to_len, flags, (void *)st->to);

		if (p == MAP_FAILED)
			return -1;
		if ((uint64_t)p != st->to) {
			errno = EFAULT;
			return -1;
		}
		return 0;
	}
	if (!strcmp(st->kind, "mprotect")) {
		int prot = !strcmp(st->b, "none") ? PROT_NONE
			 : !strcmp(st->b, "r")    ? PROT_READ
						  : PROT_READ | PROT_WRITE;
		return mprotect((void *)st->addr, st->len, prot);
	}
	if (!strcmp(st->kind, "migrate")) {
		uint64_t ps = (uint64_t)sysconf(_SC_PAGESIZE), n = st->len / ps;

		if (n > MAX_MIGRATE) {
			errno = E2BIG;
			return -1;
		}
		for (uint64_t i = 0; i < n; i++) {
			mp_pages[i] = (void *)(st->addr + i * ps);
			mp_nodes[i] = st->node;
		}
		return syscall(__NR_move_pages, 0, n, mp_pages, mp_nodes, mp_status, MPOL_MF_MOVE) < 0 ? -1 : 0;
	}
	if (!strcmp(st->kind, "mlock"))
		return mlock((void *)st->addr, st->len);
	if (!strcmp(st->kind, "munlock"))
		return munlock((void *)st->addr, st->len);
	errno = EINVAL;
	return -1;
}

static void track(const struct step *st)
{
	if (!strcmp(st->kind, "mmap") && nregions < MAX_REGIONS) {
		snprintf(regions[nregions].name, NAME, "%s", st->a);
		regions[nregions].addr = st->addr;
		regions[nregions].size = st->len;
		nregions++;
	} else if (!strcmp(st->kind, "munmap") && st->whole) {
		for (int i = 0; i < nregions; i++)
			if (!strcmp(regions[i].name, st->a))
				regions[i] = regions[--nregions];
	} else if (!strcmp(st->kind, "mremap")) {
		for (int i = 0; i < nregions; i++)
			if (!strcmp(regions[i].name, st->a)) {
				regions[i].addr = st->to;
				regions[i].size = st->to_len;
			}
	}
}

/* "ok MINFLT RUNNER PID" then a diagnostic per line, as worker.rs's attribute(). */
static int reply_op(int fd, int64_t rusage, const struct tally *t, int64_t runner, pid_t pid)
{
	int n = snprintf(msg, sizeof(msg), "ok %lld %lld %d\n",
			 (long long)(t->inside + (rusage > (int64_t)t->total ? rusage - (int64_t)t->total : 0)),
			 (long long)runner, (int)pid);

	for (int i = 0; i < t->nstrays; i++)
		n += snprintf(msg + n, sizeof(msg) - n,
			      "runner fault outside the workload's regions at %#llx, code at %#llx\n",
			      (unsigned long long)t->strays[i][0], (unsigned long long)t->strays[i][1]);
	if (t->total - t->inside > (uint64_t)t->nstrays)
		n += snprintf(msg + n, sizeof(msg) - n, "%llu more runner faults outside the regions\n",
			      (unsigned long long)(t->total - t->inside - t->nstrays));
	if (t->lost)
		n += snprintf(msg + n, sizeof(msg) - n, "the perf ring dropped %llu fault samples\n",
			      (unsigned long long)t->lost);
	if (rusage < (int64_t)t->total)
		n += snprintf(msg + n, sizeof(msg) - n, "perf sampled %llu faults but getrusage counted %lld\n",
			      (unsigned long long)t->total, (long long)rusage);
	return send_msg(fd, msg, n);
}

static int reply_err(int fd, const char *what)
{
	int n = snprintf(msg, sizeof(msg), "err %s", what);

	return send_msg(fd, msg, n);
}

#define PM_PRESENT (1ull << 63)
#define PM_SWAP (1ull << 62)
#define PM_PFN ((1ull << 55) - 1)
#define KPF_COMPOUND_HEAD (1ull << 15)
#define KPF_COMPOUND_TAIL (1ull << 16)
#define KPF_ZERO_PAGE (1ull << 24)
#define MAX_FOLIO_PAGES (1ull << 18)
#define KIND_ZERO (-1)
#define KIND_SWAP (-2)
#define KIND_NONE (-3)

static uint64_t kpf(int fd, uint64_t pfn)
{
	uint64_t f = 0;

	if (pread(fd, &f, 8, pfn * 8) != 8)
		return 0;
	return f;
}

/* The folio order of pfn, as layout.rs's Classifier; -1 on a tail without head. */
static int folio_order(int fd, uint64_t pfn, uint64_t *head_out, uint64_t *n_out)
{
	uint64_t head = pfn, n = 1;

	while (!(kpf(fd, head) & KPF_COMPOUND_HEAD)) {
		if (head == 0 || pfn - head >= MAX_FOLIO_PAGES)
			return -1;
		head--;
	}
	while (n < MAX_FOLIO_PAGES && (kpf(fd, head + n) & KPF_COMPOUND_TAIL))
		n++;
	*head_out = head;
	*n_out = n;
	return 63 - __builtin_clzll(n);
}

/* Appends "NAME":[[first,n,kind],...] for one region to msg at *len. */
static int region_layout(const struct region *r, size_t *len)
{
	static uint64_t entries[4096];
	size_t page = page_size();
	uint64_t pages = r->size / page, last_head = 0, last_n = 0;
	int pm = open("/proc/self/pagemap", O_RDONLY), kf = open("/proc/kpageflags", O_RDONLY);
	int last_order = 0, run_kind = KIND_NONE, first_run = 1;
	uint64_t run_first = 0, run_n = 0;

	if (pm < 0 || kf < 0)
		return -1;
	*len += snprintf(msg + *len, sizeof(msg) - *len, "\"%s\":[", r->name);
	for (uint64_t base = 0; base < pages; base += 4096) {
		uint64_t n = pages - base < 4096 ? pages - base : 4096;

		if (pread(pm, entries, n * 8, (r->addr / page + base) * 8) != (ssize_t)(n * 8))
			return -1;
		for (uint64_t i = 0; i <= n; i++) {
			int kind = KIND_NONE;
			uint64_t e = i < n ? entries[i] : 0, pfn = e & PM_PFN;

			if (i < n && (e & PM_SWAP)) {
				kind = KIND_SWAP;
			} else if (i < n && (e & PM_PRESENT)) {
				uint64_t f;

				if (!pfn)
					return -2;
				if (last_n && pfn >= last_head && pfn < last_head + last_n) {
					kind = last_order;
				} else if ((f = kpf(kf, pfn)) & KPF_ZERO_PAGE) {
					kind = KIND_ZERO;
				} else if (!(f & (KPF_COMPOUND_HEAD | KPF_COMPOUND_TAIL))) {
					kind = 0;
				} else {
					kind = last_order = folio_order(kf, pfn, &last_head, &last_n);
					if (kind < 0)
						return -1;
				}
			}
			if (i == n && base + n < pages)
				break;	/* the run goes on in the next batch */
			if (kind == run_kind && kind != KIND_NONE && run_first + run_n == base + i) {
				run_n++;
				continue;
			}
			if (run_kind != KIND_NONE) {
				*len += snprintf(msg + *len, sizeof(msg) - *len, "%s[%llu,%llu,", first_run ? "" : ",",
						 (unsigned long long)run_first, (unsigned long long)run_n);
				*len += snprintf(msg + *len, sizeof(msg) - *len,
						 run_kind == KIND_ZERO ? "\"zero\"]" : run_kind == KIND_SWAP ? "\"swap\"]" : "%d]",
						 run_kind);
				first_run = 0;
			}
			run_kind = kind;
			run_first = base + i;
			run_n = 1;
		}
	}
	*len += snprintf(msg + *len, sizeof(msg) - *len, "]");
	close(pm);
	close(kf);
	return 0;
}

/* The layout of every region that still has a mapping. */
static void layout(int fd)
{
	size_t len = snprintf(msg, sizeof(msg), "ok ");

	for (int i = 0; i < nregions; i++) {
		unsigned char v;
		int live = 0;

		/* mincore fails with ENOMEM on a range with no mapping at all. */
		for (uint64_t a = regions[i].addr; a < regions[i].addr + regions[i].size && !live;
		     a += page_size())
			live = mincore((void *)a, page_size(), &v) == 0;
		if (!live)
			continue;
		if (len > 3)
			len += snprintf(msg + len, sizeof(msg) - len, ",");
		switch (region_layout(&regions[i], &len)) {
		case -1:
			reply_err(fd, "reading pagemap or kpageflags");
			return;
		case -2:
			reply_err(fd, "pagemap shows no page frame numbers");
			return;
		}
	}
	send_msg(fd, msg, len);
}

/*
 * fork() inside an op window: the parent closes the window as clone returns,
 * before it writes any memory (which fork has just made copy-on-write); a
 * child scheduled first pauses it. No libc wrapper, whose fork handlers write.
 * The stub runs from an anonymous page, which fork copies (a file-backed text
 * page it leaves to fault in the child, before the child could pause).
 */
#if defined(__aarch64__)
#define FORK_STUB_BODY \
	"\tmov x8, #" "220" "\n"	/* __NR_clone */ \
	"\tmov x0, #" "17" "\n"	/* SIGCHLD */ \
	"\tmov x1, #0\n\tmov x2, #0\n\tmov x3, #0\n\tmov x4, #0\n" \
	"\thint #120\n" \
	"\tsvc #0\n" \
	"\tcbz x0, 1f\n" \
	"\thint #121\n" \
	"\tret\n" \
	"1:\thint #122\n" \
	"\tret\n"
#else
/* clone(SIGCHLD, 0, 0, 0, 0); ret only reads the stack fork made copy-on-write. */
#define FORK_STUB_BODY \
	"\tmov $56, %eax\n"	/* __NR_clone */ \
	"\tmov $17, %edi\n"	/* SIGCHLD */ \
	"\txor %esi, %esi\n\txor %edx, %edx\n\txor %r10d, %r10d\n\txor %r8d, %r8d\n" \
	"\tnopl 0x464c4f00+120(%rax)\n" \
	"\tsyscall\n" \
	"\ttest %rax, %rax\n" \
	"\tjz 1f\n" \
	"\tnopl 0x464c4f00+121(%rax)\n" \
	"\tret\n" \
	"1:\tnopl 0x464c4f00+122(%rax)\n" \
	"\tret\n"
#endif
__asm__(".pushsection .rodata.fork_stub,\"a\"\n"
	".balign 4\n"
	".globl fork_stub_start\n.hidden fork_stub_start\n"
	".globl fork_stub_end\n.hidden fork_stub_end\n"
	"fork_stub_start:\n"
	FORK_STUB_BODY
	"fork_stub_end:\n"
	".popsection\n");
extern const char fork_stub_start[], fork_stub_end[];
static long (*fork_stub)(void);

static int make_fork_stub(void)
{
	size_t n = (uintptr_t)fork_stub_end - (uintptr_t)fork_stub_start;
	char *p = mmap(NULL, page_size(), PROT_READ | PROT_WRITE, MAP_PRIVATE | MAP_ANONYMOUS, -1, 0);

	if (p == MAP_FAILED)
		return -1;
	memcpy(p, fork_stub_start, n);
	__builtin___clear_cache(p, p + n);
	if (mprotect(p, page_size(), PROT_READ | PROT_EXEC))
		return -1;
	fork_stub = (long (*)(void))(void *)p;
	return 0;
}

static pid_t fork_in_window(void)
{
	return fork_stub();
}

/* Keeps the workload's regions out of (or back in) the next fork: a twin gets
 * the runner's memory only, and forking it leaves the worker's ptes as they are
 * (a fork write-protects the parent's, which would change the op it measures). */
static void regions_dontfork(int dontfork)
{
	for (int i = 0; i < nregions; i++)
		madvise((void *)regions[i].addr, regions[i].size, dontfork ? MADV_DONTFORK : MADV_DOFORK);
}

/* Opens the window and exits, touching no memory (a write to a page the last
 * fork made copy-on-write would fault inside the window); nor does the kernel,
 * told to clear no thread id at exit (glibc's fork asks for one in the TLS). */
static __attribute__((noreturn)) void exit_in_window(void)
{
	syscall(SYS_set_tid_address, NULL);
#if defined(__aarch64__)
	__asm__ volatile(MARK(120) "\n\t"
			 "mov x0, #0\n\t"
			 "mov x8, #94\n\t"	/* __NR_exit_group */
			 "svc #0" ::: "memory");
#else
	__asm__ volatile(MARK(120) "\n\t"
			 "xor %%edi, %%edi\n\t"
			 "mov $231, %%eax\n\t"	/* __NR_exit_group */
			 "syscall" ::: "memory");
#endif
	__builtin_unreachable();
}

/* The runner's own teardown for an exit op: a twin of this worker, without the
 * workload's regions, maps its runner memory as the worker has it, and exits
 * in a window; the worker closes the window once the twin is gone. Returns the
 * twin's faults, all the runner's. */
static int64_t exit_twin(void)
{
	int64_t faults = 0;
	int fds[2], go[2];
	pid_t twin;

	if (pipe(fds))
		return 0;
	if (pipe(go)) {
		close(fds[0]);
		close(fds[1]);
		return 0;
	}
	regions_dontfork(1);
	twin = fork();
	regions_dontfork(0);
	if (twin == 0) {
		char c;

		/* The twin exits holding the worker's files and no others: it
		 * closes the two pipes (the last references to them once the
		 * worker has closed its ends) before its window, not at exit. */
		close(fds[0]);
		close(go[1]);
		warm_up_as(1);
		(void)minflt();	/* getrusage's own stack, faulted in before the count */
		faults = minflt();
		if (write(fds[1], &faults, sizeof(faults)) != sizeof(faults) || read(go[0], &c, 1) != 1)
			_exit(1);
		close(fds[1]);
		close(go[0]);
		exit_in_window();
	}
	close(fds[1]);
	close(go[0]);
	if (twin < 0 || read(fds[0], &faults, sizeof(faults)) != sizeof(faults))
		faults = 0;
	close(fds[0]);
	/* The wait below, once outside the window: its writes to memory the twin
	 * still shares are copies here, not faults inside the twin's window. */
	{
		int pfd = pidfd_of(twin);
		struct pollfd probe = { .fd = pfd, .events = POLLIN };

		(void)poll(&probe, 1, 0);
		errno = 0;
		if (write(go[1], "g", 1) != 1) {
			close(pfd);
			pfd = -1;
		}
		close(go[1]);
		wait_gone(pfd);
	}
	STOP_MARK();
	return faults;
}

/* The runner's own part of a fork op: a twin of this worker, without the
 * workload's regions, forks in a window, its child exiting at once. Returns the faults of the twin
 * and its child, all the runner's. */
static int64_t fork_twin(void)
{
	int64_t faults = 0;
	int fds[2];
	pid_t twin;

	if (pipe(fds))
		return 0;
	regions_dontfork(1);
	twin = fork();
	regions_dontfork(0);
	if (twin == 0) {
		struct rusage ru = { 0 };
		pid_t child;

		/* Reaped here, so wait4 reports the children's faults. */
		signal(SIGCHLD, SIG_DFL);
		/* The worker has forked (this twin) before its measured fork; so does
		 * the twin. A process's first fork copies 4 ptes with barriers
		 * (__set_ptes) that its later forks do not. */
		for (int i = 0; i < 2; i++) {
			child = i ? fork_in_window() : fork();
			if (child == 0)
				_exit(0);
			if (child > 0 && wait4(child, NULL, 0, &ru) > 0)
				faults += ru.ru_minflt;
		}
		faults += minflt();
		if (write(fds[1], &faults, sizeof(faults)) != sizeof(faults))
			_exit(1);
		_exit(0);
	}
	close(fds[1]);
	if (twin < 0 || read(fds[0], &faults, sizeof(faults)) != sizeof(faults))
		faults = 0;
	close(fds[0]);
	wait_gone(pidfd_of(twin));
	return faults;
}

static void worker(int me)
{
	struct sampler s;
	static struct tally t;
	int ok = sampler_open(&s) == 0;

	warm_up();
	for (;;) {
		int fd = socks[me][1], id;
		const struct step *st;

		if (recv_msg(fd))
			_exit(0);
		if (!strcmp(msg, "layout")) {
			layout(fd);
			continue;
		}
		if (!strcmp(msg, "warm")) {
			warm_up();
			send_msg(fd, "ok", 2);
			continue;
		}
		id = atoi(msg);
		st = &steps[id];
		if (!ok) {
			reply_err(fd, "perf_event_open(minor page faults) failed");
			continue;
		}
		memset(&t, 0, sizeof(t));
		if (!strcmp(st->kind, "fork")) {
			int64_t twin = fork_twin();
			pid_t pid = fork_in_window();

			if (pid == 0) {
				for (me = 0; strcmp(procs[me], st->a); me++)
					;
				close(s.fd);
				ok = sampler_open(&s) == 0;
				/* A new task's min_flt starts at 0: all of it is the runner's. */
				reply_op(socks[me][1], 0, &t, minflt(), 0);
				continue;
			}
			reply_op(fd, 0, &t, twin, pid);
			continue;
		}
		if (!strcmp(st->kind, "exit")) {
			/* The perf ring is not inherited, so the twin has none: unmap it. */
			munmap((void *)s.ring, s.len);
			close(s.fd);
			reply_op(fd, 0, &t, exit_twin(), 0);
			/* The orchestrator reads this worker's faults while it waits here. */
			if (recv_msg(fd))
				_exit(1);
			exit_in_window();
		}
		extra_span[0] = extra_span[1] = 0;
		if (!strcmp(st->kind, "mmap")) {
			extra_span[0] = st->addr;
			extra_span[1] = st->addr + st->len;
		}
		sampler_discard(&s);
		int64_t before = minflt();
		START_MARK();
		int r = exec_op(st, &s, &t);
		STOP_MARK();
		int64_t after = minflt();

		sampler_drain(&s, &t);
		if (r) {
			snprintf(buf, sizeof(buf), "%s failed: %s", st->kind, strerror(errno));
			reply_err(fd, buf);
			continue;
		}
		track(st);
		reply_op(fd, after - before, &t, 0, 0);
	}
}

/* ---- the orchestrator (src/native/mod.rs) ---- */

static int proc_index(const char *name)
{
	for (int i = 0; i < nprocs; i++)
		if (!strcmp(procs[i], name))
			return i;
	return -1;
}

static void open_counters(void)
{
	ssize_t n;
	int kept = 0;

	nmthp = nmissing = 0;
	vmstat_fd = open("/proc/vmstat", O_RDONLY);
	n = vmstat_fd < 0 ? -1 : pread(vmstat_fd, buf, sizeof(buf) - 1, 0);
	buf[n > 0 ? n : 0] = 0;
	/* The keys this kernel has; the others are unavailable, never guessed. */
	for (int i = 0; i < nvmstat; i++) {
		char key[NAME + 2];

		snprintf(key, sizeof(key), "\n%.62s ", vmstat_keys[i]);
		if (strstr(buf, key) || !strncmp(buf, key + 1, strlen(key + 1)))
			memmove(vmstat_keys[kept++], vmstat_keys[i], NAME);
		else
			memmove(missing[nmissing++], vmstat_keys[i], NAME);
	}
	nvmstat = kept;
	/* hugepages-<kb>kB, by size as stats.rs orders them. */
	for (long kb = 1; kb <= (1L << 30); kb *= 2) {
		char dir[160];
		struct dirent **files;
		int m;

		snprintf(dir, sizeof(dir), "/sys/kernel/mm/transparent_hugepage/hugepages-%ldkB/stats", kb);
		m = scandir(dir, &files, NULL, alphasort);
		for (int i = 0; i < m; i++) {
			if (files[i]->d_name[0] != '.' && nmthp < MAX_KEYS) {
				snprintf(mthp_keys[nmthp], NAME, "mthp.%ldkB.%.40s", kb, files[i]->d_name);
				snprintf(mthp_paths[nmthp], sizeof(mthp_paths[0]), "%.110s/%.40s", dir, files[i]->d_name);
				mthp_fds[nmthp] = open(mthp_paths[nmthp], O_RDONLY);
				if (mthp_fds[nmthp] >= 0)
					nmthp++;
			}
			free(files[i]);
		}
		if (m > 0)
			free(files);
	}
}

static void close_counters(void)
{
	for (int i = 0; i < nmthp; i++)
		close(mthp_fds[i]);
	if (vmstat_fd >= 0)
		close(vmstat_fd);
}

static long long value_of(const char *text, const char *key)
{
	size_t k = strlen(key);

	for (const char *p = text; p && *p; p = strchr(p, '\n'), p = p ? p + 1 : p)
		if (!strncmp(p, key, k) && p[k] == ' ')
			return atoll(p + k + 1);
	return 0;
}

static void snapshot(long long *v)
{
	ssize_t n = pread(vmstat_fd, buf, sizeof(buf) - 1, 0);

	buf[n > 0 ? n : 0] = 0;
	for (int i = 0; i < nvmstat; i++)
		v[i] = value_of(buf, vmstat_keys[i]);
	for (int i = 0; i < nmthp; i++) {
		char b[32];
		ssize_t m = pread(mthp_fds[i], b, sizeof(b) - 1, 0);

		b[m > 0 ? m : 0] = 0;
		v[nvmstat + i] = atoll(b);
	}
}

static int write_file(const char *path, const char *value)
{
	int fd = open(path, O_WRONLY | O_TRUNC), r;

	if (fd < 0)
		return -1;
	r = write(fd, value, strlen(value)) == (ssize_t)strlen(value) ? 0 : -1;
	close(fd);
	return r;
}

static int set_knob(const char *knob, const char *value)
{
	char path[256];

	snprintf(path, sizeof(path), "/sys/kernel/mm/transparent_hugepage/%s", knob);
	return write_file(path, value);
}

#define KHUGEPAGED "/sys/kernel/mm/transparent_hugepage/khugepaged/"
/* The `khugepaged` op's error when the thread is stopped (src/native/qemu reads it). */
#define KHUGEPAGED_OFF "khugepaged is not running: no THP size it collapses to is enabled"

static long long khugepaged_full_scans(void)
{
	char b[32];
	int fd = open(KHUGEPAGED "full_scans", O_RDONLY);
	ssize_t n = fd < 0 ? -1 : read(fd, b, sizeof(b) - 1);

	if (fd >= 0)
		close(fd);
	if (n <= 0)
		return -1;
	b[n] = 0;
	return atoll(b);
}

/* The khugepaged kthread (comm "khugepaged", a child of kthreadd), or 0 when
 * it is stopped (no THP size it collapses to is enabled). */
static pid_t khugepaged_pid(void)
{
	DIR *d = opendir("/proc");
	struct dirent *e;
	pid_t found = 0;

	while (d && !found && (e = readdir(d))) {
		char path[64], text[256], *c, state;
		int fd, n, ppid;

		if (e->d_name[0] < '1' || e->d_name[0] > '9')
			continue;
		snprintf(path, sizeof(path), "/proc/%d/stat", atoi(e->d_name));
		fd = open(path, O_RDONLY);
		n = fd < 0 ? 0 : read(fd, text, sizeof(text) - 1);
		if (fd >= 0)
			close(fd);
		text[n > 0 ? n : 0] = 0;
		c = strrchr(text, ')');
		/* Not one that a stop has ended (kthread_stop returns as it exits). */
		if (!strncmp(text + strcspn(text, "("), "(khugepaged)", 12) && c &&
		    sscanf(c + 1, " %c %d", &state, &ppid) == 2 && ppid == 2 && state != 'Z' && state != 'X')
			found = atoi(e->d_name);
	}
	if (d)
		closedir(d);
	return found;
}

static char stat_of(pid_t pid, long long *minflt);

/* Waits until khugepaged sleeps in its wait (its main loop, inlined into
 * khugepaged or not), or does not exist: a sleep knob's write, or a THP knob's
 * that starts the thread, runs a scan first, at the runner's next sleep. 0, or
 * -4 with the reason in msg (a guard against a hang, not a tolerance). A
 * thread being stopped is gone already (kthread_stop waits for its exit). */
static int khugepaged_settle(void)
{
	pid_t pid = khugepaged_pid();
	char path[64], wchan[64];

	for (int i = 0; pid && i < 30000; i++) {
		long long m;
		int fd, n;
		char state = stat_of(pid, &m);

		if (!state || state == 'Z' || state == 'X')
			return 0;
		snprintf(path, sizeof(path), "/proc/%d/wchan", (int)pid);
		fd = open(path, O_RDONLY);
		n = fd < 0 ? 0 : read(fd, wchan, sizeof(wchan) - 1);
		if (fd >= 0)
			close(fd);
		wchan[n > 0 ? n : 0] = 0;
		if (state == 'S' && (!strcmp(wchan, "khugepaged") || !strcmp(wchan, "khugepaged_wait_work")))
			return 0;
		usleep(1000);
	}
	if (!pid)
		return 0;
	snprintf(msg, sizeof(msg), "khugepaged (pid %d) not back asleep in 30 s of the guest's clock (wchan '%s')",
		 (int)pid, wchan);
	return -4;
}

/* Keeps khugepaged's mm list from ever being empty, as the host runner means
 * to (src/native/khugepaged.rs): a child that registers its mm and sleeps
 * until power-off. On an empty list, the mm that joins it wakes khugepaged
 * for a scan (__khugepaged_enter), which runs at the runner's next sleep: a
 * fork op's wait, before the fork (measured on 6.12: shared.wl's parent
 * scanned alone, its collapse allocated before the fork and given up in the
 * `khugepaged` op's window, one share exceed instead of two). With the list
 * never empty, khugepaged sleeps until a sleep knob's write (the `khugepaged`
 * op). A separate process, so that no worker (forked from the orchestrator)
 * inherits the registration (khugepaged_fork).
 * MADV_HUGEPAGE registers an mm only for a VMA with an anon_vma
 * (__thp_vma_allowable_orders outside a fault), so the VMA is one page more
 * than a PMD range, that page (below the range) faulted in: a scan covers
 * only the whole PMD range, which has no page table (SCAN_PMD_NULL, nothing
 * counted). */
static void khugepaged_anchor(void)
{
	size_t page = page_size(), pmd = page * (page / 8);
	int ready[2];
	pid_t pid;
	char c;

	if (pipe(ready))
		return;
	pid = fork();
	if (pid == 0) {
		char *p = mmap(NULL, 3 * pmd, PROT_READ | PROT_WRITE, MAP_PRIVATE | MAP_ANONYMOUS | MAP_NORESERVE,
			       -1, 0);

		if (p != MAP_FAILED) {
			char *range = (char *)(((uintptr_t)p + page + pmd - 1) & ~(uintptr_t)(pmd - 1));

			munmap(p, range - page - p);
			munmap(range + pmd, p + 3 * pmd - range - pmd);
			range[-1] = 1;
			madvise(range - page, pmd + page, MADV_HUGEPAGE);
		}
		write(ready[1], "r", 1);
		for (;;)
			pause();
	}
	if (pid > 0)
		read(ready[0], &c, 1);
	close(ready[0]);
	close(ready[1]);
}

/* The "khugepaged" op: one khugepaged_do_scan. Parked (scan_sleep_millisecs
 * at its maximum, pages_to_scan past any workload since boot, so every scan
 * ends at the list's head, and the anchor's mm on the list), khugepaged wakes
 * for a write of scan_sleep_millisecs (__sleep_millisecs_store), scans its
 * whole mm list once from the head (full_scans + 1), and parks again with the
 * value written, the same. The runner sleeps meanwhile (it is real-time:
 * khugepaged runs only while it blocks), polling full_scans every 10 ms of the
 * guest's clock, which -icount makes the same on every run, then until the
 * thread sleeps again, so that the window holds the whole scan. No thread (no
 * THP size it collapses to is enabled): the op does not apply. */
static int khugepaged_scan(void)
{
	long long n0 = khugepaged_full_scans();
	struct timespec ts = { 0, 10 * 1000 * 1000 };

	if (!khugepaged_pid()) {
		snprintf(msg, sizeof(msg), "%s", KHUGEPAGED_OFF);
		return -4;
	}
	if (n0 < 0 || write_file(KHUGEPAGED "scan_sleep_millisecs", "4294967295"))
		return -2;
	for (int i = 0; i < 1000; i++) {
		nanosleep(&ts, NULL);
		if (khugepaged_full_scans() > n0)
			return khugepaged_settle();
	}
	snprintf(msg, sizeof(msg), "khugepaged did not scan in 10 s of the guest's clock");
	return -4;
}

static int by_name(const void *a, const void *b)
{
	return strcmp(a, b);
}

/* Whether this workload's `swapon` put zram0 to use (taken down after it). */
static int swap_on;

#define TRACING "/sys/kernel/tracing/"

/* Both workqueue execution events of the trace buffer on ("1") or off ("0"). */
static int work_events(const char *on)
{
	return write_file(TRACING "events/workqueue/workqueue_execute_start/enable", on) ||
	       write_file(TRACING "events/workqueue/workqueue_execute_end/enable", on);
}

/* Whether trace line `line` is event `ev` of work function do_free_init. */
static int free_init_event(const char *line, const char *ev)
{
	const char *f = strstr(line, ev);

	f = f ? strstr(f, ": function ") : NULL;
	return f && !strcmp(f + 11, "do_free_init");
}

/*
 * Loading a module queues the free of its init sections: do_init_module puts
 * them on a list that the work do_free_init frees after a grace period
 * (synchronize_rcu, then execmem_free: a vfree of memory mapped with
 * VM_FLUSH_RESET_PERMS, whose direct map reset (set_direct_map_*_noflush) and
 * purge of the lazily freed vmap areas issue TLBI VMALLE1IS in
 * flush_tlb_kernel_range). The work runs when the real-time runner first
 * sleeps: unwaited for, inside the first op that waits (measured: swap.wl's
 * `khugepaged` op, 4 VMALLE1IS on 7.3, 6 on 6.12, or none when an earlier
 * workload of the batch had loaded zram). So the loads run under the
 * workqueue's trace events, and the runner blocks on trace_pipe until a
 * do_free_init that started after the last load has ended (the work is not
 * reentrant: one that started before it ends first). 0, or -4 with the
 * reason in msg.
 */
static int await_init_free(void)
{
	static char b[1 << 14];
	size_t len = 0;
	int fd = open(TRACING "trace_pipe", O_RDONLY), stage = 0;

	if (fd < 0 || write_file(TRACING "trace_marker", "foliolab-loaded")) {
		snprintf(msg, sizeof(msg), "tracefs for the modules' init free: %s", strerror(errno));
		return -4;
	}
	while (stage < 3) {
		ssize_t n = read(fd, b + len, sizeof(b) - 1 - len);
		char *line = b, *e;

		if (n <= 0) {
			snprintf(msg, sizeof(msg), "trace_pipe: %s", n ? strerror(errno) : "end of file");
			close(fd);
			return -4;
		}
		len += n;
		b[len] = 0;
		while (stage < 3 && (e = strchr(line, '\n'))) {
			*e = 0;
			if (stage == 0 && strstr(line, "foliolab-loaded"))
				stage = 1;
			else if (stage == 1 && free_init_event(line, "workqueue_execute_start:"))
				stage = 2;
			else if (stage == 2 && free_init_event(line, "workqueue_execute_end:"))
				stage = 3;
			line = e + 1;
		}
		len -= line - b;
		memmove(b, line, len);
		/* A line longer than the buffer is no event of ours. */
		if (len == sizeof(b) - 1)
			len = 0;
	}
	close(fd);
	return 0;
}

/*
 * The `swapon` step's preparation, outside its window: load zram and what it
 * needs (the initramfs's /modules, named in load order by scripts/setup-qemu),
 * and wait for the deferred free of their init sections (await_init_free),
 * size zram0 and write a swap header (version 1, the last page, the magic at the
 * end of the first page). 0, or -4 with the reason in msg.
 */
static int zram_prepare(uint64_t size)
{
	static char names[16][NAME];
	size_t page = page_size();
	uint32_t version = 1, last = size / page - 1;
	char value[32], *header;
	struct dirent *e;
	int n = 0, loaded = 0, fd, r = 0;
	DIR *d = opendir("/modules");

	if (!d) {
		snprintf(msg, sizeof(msg), "no zram modules in the initramfs (run scripts/setup-qemu)");
		return -4;
	}
	while ((e = readdir(d)) && n < 16)
		if (e->d_name[0] != '.' && strlen(e->d_name) < NAME)
			memcpy(names[n++], e->d_name, strlen(e->d_name) + 1);
	qsort(names, n, NAME, by_name);
	/* A kernel with zram built in (ours, built from source) has no module to
	 * load, no init free to wait for, and may have no tracing at all. */
	if (n && (work_events("1") || write_file(TRACING "trace", ""))) {
		closedir(d);
		snprintf(msg, sizeof(msg), "the workqueue's trace events: %s", strerror(errno));
		return -4;
	}
	for (int i = 0; i < n && !r; i++) {
		fd = openat(dirfd(d), names[i], O_RDONLY);
		if (fd < 0 || (syscall(SYS_finit_module, fd, "", 0) && errno != EEXIST)) {
			snprintf(msg, sizeof(msg), "loading %s: %s", names[i], strerror(errno));
			r = -4;
		} else {
			loaded += errno != EEXIST;
			errno = 0;
		}
		if (fd >= 0)
			close(fd);
	}
	closedir(d);
	if (!r && loaded)
		r = await_init_free();
	if (n) {
		work_events("0");
		write_file(TRACING "trace", "");
	}
	if (r)
		return r;
	snprintf(value, sizeof(value), "%llu", (unsigned long long)size);
	if (write_file("/sys/block/zram0/disksize", value)) {
		snprintf(msg, sizeof(msg), "zram0 disksize %s: %s", value, strerror(errno));
		return -4;
	}
	header = calloc(1, page);
	memcpy(header + 1024, &version, 4);
	memcpy(header + 1028, &last, 4);
	memcpy(header + page - 10, "SWAPSPACE2", 10);
	fd = open("/dev/zram0", O_WRONLY);
	if (fd < 0 || write(fd, header, page) != (ssize_t)page || fsync(fd)) {
		snprintf(msg, sizeof(msg), "the swap header on /dev/zram0: %s", strerror(errno));
		return -4;
	}
	close(fd);
	free(header);
	return 0;
}

/* Process pid's state letter and minor faults from /proc/PID/stat; 0 if gone. */
static char stat_of(pid_t pid, long long *minflt)
{
	char path[64], text[1024], state = 0;
	int fd, n;

	snprintf(path, sizeof(path), "/proc/%d/stat", (int)pid);
	fd = open(path, O_RDONLY);
	if (fd < 0)
		return 0;
	n = read(fd, text, sizeof(text) - 1);
	close(fd);
	text[n > 0 ? n : 0] = 0;
	{
		char *p = strrchr(text, ')');

		if (!p || sscanf(p + 1, " %c %*d %*d %*d %*d %*d %*u %lld", &state, minflt) != 2)
			return 0;
	}
	return state;
}

/* Process pid's minor faults once it sleeps (in its next read of the socket). */
static long long minflt_blocked(pid_t pid)
{
	long long m = 0;
	char s;

	while ((s = stat_of(pid, &m)) && s != 'S')
		usleep(100);
	return m;
}

/* Waits for worker p's next message, in msg; -1 if it died first (its socket
 * stays open in its relatives, so its death is watched on a pidfd). Blocks
 * without waking in between (wait_gone says why). */
static int await_reply(int p)
{
	struct pollfd pfd[2] = { { .fd = socks[p][0], .events = POLLIN },
				 { .fd = pidfd_of(pids[p]), .events = POLLIN } };
	int r;

	while ((r = poll(pfd, 2, -1)) < 0 && errno == EINTR)
		;
	if (pfd[1].fd >= 0)
		close(pfd[1].fd);
	if (r < 0 || !(pfd[0].revents & POLLIN))
		return -1;
	return recv_msg(socks[p][0]);
}

/* Sends a command to a worker and waits for its reply in msg; -1 if it died. */
static int ask(int p, const char *cmd)
{
	if (send_msg(socks[p][0], cmd, strlen(cmd)))
		return -1;
	return await_reply(p);
}

static int parse_step(char *line, struct step *st)
{
	unsigned long long a = 0, l = 0, x = 0;
	int n;

	memset(st, 0, sizeof(*st));
	if (sscanf(line, "%15s%n", st->kind, &n) != 1)
		return -1;
	line += n;
	if (!strcmp(st->kind, "set"))
		return sscanf(line, "%63s %63s", st->a, st->b) == 2 ? 0 : -1;
	if (!strcmp(st->kind, "mark"))
		return sscanf(line, "%63s", st->a) == 1 ? 0 : -1;
	if (!strcmp(st->kind, "shrink") || !strcmp(st->kind, "khugepaged"))
		return 0;
	if (!strcmp(st->kind, "swapon")) {
		n = sscanf(line, "%llx", &l);
		st->len = l;
		return n == 1 ? 0 : -1;
	}
	if (!strcmp(st->kind, "mmap")) {
		/* A ninth field, shared, is given only when set. */
		st->shared = 0;
		n = sscanf(line, "%63s %63s %llx %llx %d %d %d %d %d", st->proc, st->a, &a, &l, &st->hugepage,
			   &st->nohugepage, &st->populate, &st->ro, &st->shared);
		st->addr = a;
		st->len = l;
		return n == 8 || n == 9 ? 0 : -1;
	}
	if (!strcmp(st->kind, "touch")) {
		n = sscanf(line, "%63s %llx %llx %d %llx", st->proc, &a, &l, &st->write, &x);
		st->addr = a;
		st->len = l;
		st->stride = x;
		return n == 5 && x ? 0 : -1;
	}
	if (!strcmp(st->kind, "madvise")) {
		n = sscanf(line, "%63s %llx %llx %63s %llx", st->proc, &a, &l, st->b, &x);
		st->addr = a;
		st->len = l;
		st->step = x;
		return n == 5 && x && advice(st->b) >= 0 ? 0 : -1;
	}
	if (!strcmp(st->kind, "munmap")) {
		n = sscanf(line, "%63s %63s %llx %llx %d", st->proc, st->a, &a, &l, &st->whole);
		st->addr = a;
		st->len = l;
		return n == 5 ? 0 : -1;
	}
	if (!strcmp(st->kind, "mremap")) {
		unsigned long long to = 0, to_len = 0;

		n = sscanf(line, "%63s %63s %llx %llx %llx %llx", st->proc, st->a, &a, &l, &to, &to_len);
		st->addr = a;
		st->len = l;
		st->to = to;
		st->to_len = to_len;
		return n == 6 && to_len ? 0 : -1;
	}
	if (!strcmp(st->kind, "mprotect")) {
		n = sscanf(line, "%63s %llx %llx %63s", st->proc, &a, &l, st->b);
		st->addr = a;
		st->len = l;
		return n == 4 ? 0 : -1;
	}
	if (!strcmp(st->kind, "migrate")) {
		n = sscanf(line, "%63s %llx %llx %d", st->proc, &a, &l, &st->node);
		st->addr = a;
		st->len = l;
		return n == 4 ? 0 : -1;
	}
	if (!strcmp(st->kind, "mlock") || !strcmp(st->kind, "munlock")) {
		n = sscanf(line, "%63s %llx %llx", st->proc, &a, &l);
		st->addr = a;
		st->len = l;
		return n == 3 ? 0 : -1;
	}
	if (!strcmp(st->kind, "fork"))
		return sscanf(line, "%63s %63s", st->proc, st->a) == 2 ? 0 : -1;
	if (!strcmp(st->kind, "exit"))
		return sscanf(line, "%63s", st->proc) == 1 ? 0 : -1;
	return -1;
}

/* Reads a flattened workload; an error message or NULL. */
static const char *load(const char *path)
{
	static char line[512], why[600];
	FILE *f = fopen(path, "r");

	nsteps = nprocs = nvmstat = 0;
	if (!f)
		return "cannot open the workload";
	while (fgets(line, sizeof(line), f)) {
		char word[NAME], value[NAME];

		line[strcspn(line, "\n")] = 0;
		if (sscanf(line, "proc %63s", word) == 1 && nprocs < MAX_PROCS) {
			snprintf(procs[nprocs++], NAME, "%s", word);
		} else if (sscanf(line, "vmstat %63s", word) == 1 && nvmstat < MAX_KEYS) {
			snprintf(vmstat_keys[nvmstat++], NAME, "%s", word);
		} else if (sscanf(line, "default %63s %63s", word, value) == 2) {
			/* The spec defaults, outside any window; a missing knob shows as unavailable. */
			set_knob(word, value);
		} else if (!strncmp(line, "step ", 5)) {
			if (nsteps == MAX_STEPS || parse_step(line + 5, &steps[nsteps])) {
				snprintf(why, sizeof(why), "bad step: %s", line);
				fclose(f);
				return why;
			}
			nsteps++;
		}
	}
	fclose(f);
	/* A default that starts khugepaged (after a workload that stopped it) runs
	 * its first scan now, not in the workload. */
	return khugepaged_settle() ? msg : NULL;
}

static void emit_keys(void)
{
	emit("\"keys\":[");
	for (int i = 0; i < nvmstat; i++)
		emit("%s\"vmstat.%s\"", i ? "," : "", vmstat_keys[i]);
	for (int i = 0; i < nmthp; i++)
		emit("%s\"%s\"", i + nvmstat ? "," : "", mthp_keys[i]);
	emit("],\"missing\":[");
	for (int i = 0; i < nmissing; i++)
		emit("%s\"vmstat.%s\"", i ? "," : "", missing[i]);
	emit("]");
}

/* The background window: idle as long as the ops' windows took (at least
 * 200 ms), counters and plugin window as for an op (src/native/mod.rs). */
static void background(uint64_t op_ns, int nkeys, long long *before, long long *after)
{
	uint64_t window = op_ns > 200000000u ? op_ns : 200000000u, t;

	snapshot(before);
	t = now_ns();
	START_MARK();
	usleep(window / 1000);
	STOP_MARK();
	t = now_ns() - t;
	snapshot(after);
	emit("],\"background\":{\"op_ms\":%.3f,\"window_ms\":%.3f,\"deltas\":[", op_ns / 1e6, t / 1e6);
	for (int k = 0; k < nkeys; k++)
		emit("%s%lld", k ? "," : "", after[k] - before[k]);
	emit("]}");
}

/*
 * Runs the loaded workload and emits {"keys", "missing", "ops": [[step, minflt,
 * runner, windows, [deltas], [diagnostics]], ...], "background", "layout"},
 * or "error" for the first op that failed. `windows` is how many plugin
 * windows the op took (2 for fork and exit: the twin's, then its own).
 */
static void run_workload(void)
{
	static long long before[2 * MAX_KEYS], after[2 * MAX_KEYS];
	int nkeys, first = 1;
	uint64_t t_op, op_ns = 0;
	int64_t self_flt;

	open_counters();
	nkeys = nvmstat + nmthp;
	for (int p = 0; p < nprocs; p++) {
		socketpair(AF_UNIX, SOCK_STREAM, 0, socks[p]);
		pids[p] = 0;
	}
	pids[0] = fork();
	if (pids[0] == 0) {
		for (int p = 0; p < nprocs; p++)
			close(socks[p][0]);
		nregions = 0;
		worker(0);
	}
	/* The worker warms up before its first op's window, not during it. */
	ask(0, "warm");
	warm_up();
	emit("{");
	emit_keys();
	emit(",\"ops\":[");
	for (int i = 0; i < nsteps; i++) {
		struct step *st = &steps[i];
		int p = proc_index(st->proc), c = -1, r = 0, windows = 1;
		long long flt = 0, runner = 0, child_pid = 0;
		char cmd[16];

		if (!strcmp(st->kind, "mark"))
			continue;
		snprintf(cmd, sizeof(cmd), "%d", i);
		snapshot(before);
		self_flt = minflt();
		t_op = now_ns();
		if (!strcmp(st->kind, "set")) {
			START_MARK();
			r = set_knob(st->a, st->b) ? -2 : 0;
			STOP_MARK();
			if (!r)
				r = khugepaged_settle();
		} else if (!strcmp(st->kind, "shrink")) {
			START_MARK();
			r = write_file("/proc/sys/vm/drop_caches", "2") ? -2 : 0;
			STOP_MARK();
		} else if (!strcmp(st->kind, "khugepaged")) {
			START_MARK();
			r = khugepaged_scan();
			STOP_MARK();
		} else if (!strcmp(st->kind, "swapon")) {
			/* Device setup: swapon(2)'s own kernel mappings (the vmalloc'd
			 * swap_map, a percpu chunk), which the model does not have, stay
			 * outside the window; /proc/vmstat still brackets the step. */
			r = zram_prepare(st->len);
			if (!r) {
				r = syscall(SYS_swapon, "/dev/zram0", 0) ? -2 : 0;
				swap_on = !r;
			}
			START_MARK();
			STOP_MARK();
		} else if (p < 0 || !pids[p]) {
			r = -3;
			ABORT_MARK();
		} else {
			long long m0 = 0;

			/* The copy-on-write of runner memory after a fork (the op's own, or
			 * an exit's twin's) is read from /proc (src/native/mod.rs). */
			if (!strcmp(st->kind, "fork") || !strcmp(st->kind, "exit"))
				m0 = minflt_blocked(pids[p]);
			/* The worker marks its op's window (the module comment). */
			r = ask(p, cmd);
			if (!r && sscanf(msg, "ok %lld %lld %lld", &flt, &runner, &child_pid) != 3)
				r = -4;
			if (!r && !strcmp(st->kind, "fork")) {
				long long f2, r2, p2;

				c = proc_index(st->a);
				pids[c] = child_pid;
				if (await_reply(c) || sscanf(msg, "ok %lld %lld %lld", &f2, &r2, &p2) != 3)
					r = -4;
				/* The worker reported its twin's faults; both sides' own are
				 * read once they block, as on the host (src/native/mod.rs). */
				if (!r)
					runner += minflt_blocked(pids[p]) - m0 - flt + minflt_blocked(pids[c]);
			}
			if (!r && !strcmp(st->kind, "exit")) {
				int pfd = pidfd_of(pids[p]);

				runner += minflt_blocked(pids[p]) - m0;
				if (send_msg(socks[p][0], "go", 2))
					r = -1;
				wait_gone(pfd);
				pids[p] = 0;
				STOP_MARK();
			}
			/* Exit and fork: the twin's window first (the module comment). */
			if (!strcmp(st->kind, "exit") || !strcmp(st->kind, "fork"))
				windows = 2;
			if (r == -1)
				ABORT_MARK();
		}
		op_ns += now_ns() - t_op;
		/* The orchestrator's own faults in the bracket are the runner's too. */
		runner += minflt() - self_flt;
		snapshot(after);
		if (r) {
			emit("],\"error\":");
			snprintf(buf, sizeof(buf), "step %d (%s): %.1000s", i, st->kind,
				 r == -1 ? "worker died" : r == -2 ? strerror(errno) : r == -3 ? "no such process" : msg);
			emit_str(buf);
			goto out;
		}
		emit("%s[%d,%lld,%lld,%d,[", first ? "" : ",", i, flt, runner, windows);
		first = 0;
		for (int k = 0; k < nkeys; k++)
			emit("%s%lld", k ? "," : "", after[k] - before[k]);
		emit("],[");
		/* Diagnostics: the lines after the first of the worker's reply. */
		{
			char *d = strchr(msg, '\n');
			int nd = 0;

			while (d && d[1]) {
				char *e = strchr(d + 1, '\n');

				if (e)
					*e = 0;
				emit(nd++ ? "," : "");
				emit_str(d + 1);
				d = e;
			}
		}
		emit("]]");
		if (c >= 0) {
			ask(p, "warm");
			ask(c, "warm");
		}
	}
	background(op_ns, nkeys, before, after);
	emit(",\"layout\":{");
	first = 1;
	for (int p = 0; p < nprocs; p++) {
		if (!pids[p])
			continue;
		if (ask(p, "layout") || strncmp(msg, "ok ", 3)) {
			emit("},\"layout_error\":");
			emit_str(msg);
			emit(",\"x\":{");
			break;
		}
		/* Region keys become "<proc>/<region>". */
		for (char *q = msg + 3; *q;) {
			char *name_end;

			if (*q == ',')
				q++;
			name_end = strchr(q + 1, '"');
			if (!name_end)
				break;
			emit("%s\"%s/%.*s", first ? "" : ",", procs[p], (int)(name_end - q - 1), q + 1);
			first = 0;
			q = name_end;
			{
				int depth = 0;
				char *e = q + 1;

				/* Copy through the matching close bracket of the runs. */
				do {
					e++;
					depth += *e == '[';
					depth -= *e == ']';
				} while (*e && depth);
				emit("%.*s", (int)(e - q + 1), q);
				q = e + 1;
			}
		}
	}
	emit("}");
out:
	emit("}");
	for (int p = 0; p < nprocs; p++) {
		close(socks[p][0]);
		if (pids[p])
			wait_gone(pidfd_of(pids[p]));
	}
	/* The next workload of the batch finds zram0 unused, as the first did. */
	if (swap_on) {
		syscall(SYS_swapoff, "/dev/zram0");
		write_file("/sys/block/zram0/reset", "1");
		swap_on = 0;
	}
	close_counters();
}

#ifdef __aarch64__
/*
 * A semihosting call (Arm's "Semihosting for AArch32 and AArch64"): QEMU run
 * with -semihosting-config enable=on,userspace=on serves it at EL0's
 * HLT #0xF000 itself, without the guest kernel. Its memory arguments must be
 * mapped: QEMU reads them through the page tables and takes no fault.
 */
static long semihost(long op, long *args)
{
	register long x0 asm("x0") = op;
	register long *x1 asm("x1") = args;

	asm volatile("hlt #0xf000" : "+r"(x0) : "r"(x1) : "memory");
	return x0;
}
#endif

/* The first n bytes of buf to the host's file `host`, or the console if none. */
static void flush_symbols(long host, size_t n)
{
#ifdef __aarch64__
	if (host >= 0) {
		long args[3] = { host, (long)buf, (long)n };

		semihost(0x05, args);	/* SYS_WRITE */
		return;
	}
#else
	(void)host;
#endif
	put(console, buf, n);
}

/*
 * Prints the kernel's text symbols, "ADDRESS NAME" a line, on the console, or
 * (arm64, `file` given) into the host's file `file` through semihosting, in
 * 64 KiB writes: 7.3's console moves 6 KB/s, so its 3 MB of symbols took
 * eight minutes there (6.12's whole boot and dump: 22-80 s).
 */
static void kallsyms(const char *file)
{
	FILE *f = fopen("/proc/kallsyms", "r");
	char line[512];
	long host = -1;
	size_t n = 0;

	if (!f)
		return;
#ifndef __aarch64__
	(void)file;
#else
	if (file) {
		/* SYS_OPEN (0x01) "w" (mode 4); the name copied to memory just written. */
		long args[3] = { (long)line, 4, (long)strlen(file) };

		snprintf(line, sizeof(line), "%s", file);
		host = semihost(0x01, args);
	}
#endif
	while (fgets(line, sizeof(line), f)) {
		char addr[32], type[4], name[400];

		if (sscanf(line, "%31s %3s %399s", addr, type, name) != 3 || strchr(line, '['))
			continue;
		if (type[0] != 't' && type[0] != 'T' && type[0] != 'W' && type[0] != 'w')
			continue;
		if (n + sizeof(line) > sizeof(buf)) {
			flush_symbols(host, n);
			n = 0;
		}
		n += snprintf(buf + n, sizeof(buf) - n, "%s %s\n", addr, name);
	}
	flush_symbols(host, n);
	fclose(f);
#ifdef __aarch64__
	if (host >= 0)
		semihost(0x02, &host);	/* SYS_CLOSE */
#endif
}

static void iomem(void)
{
	FILE *f = fopen("/proc/iomem", "r");
	char line[256];

	if (!f)
		return;
	while (fgets(line, sizeof(line), f)) {
		size_t n = snprintf(buf, sizeof(buf), "@@FOLIOLAB-IOMEM %s", line);

		put(console, buf, n);
	}
	fclose(f);
}

/* The "program" job: runs argv (space-separated in line) to its end, real-time
 * like the runner, its output on the console. */
static void program(char *line)
{
	char *argv[16];
	int argc = 0, status = -1;
	pid_t pid;

	for (char *t = strtok(line, " "); t && argc < 15; t = strtok(NULL, " "))
		argv[argc++] = t;
	argv[argc] = NULL;
	/* The runner ignores SIGCHLD (exited workers vanish at once); this wait
	 * needs the status. */
	signal(SIGCHLD, SIG_DFL);
	pid = argc ? fork() : -1;
	if (pid == 0) {
		dup2(console, 1);
		dup2(console, 2);
		execv(argv[0], argv);
		_exit(127);
	}
	if (pid > 0)
		waitpid(pid, &status, 0);
	signal(SIGCHLD, SIG_IGN);
	snprintf(buf, sizeof(buf), "@@FOLIOLAB-PROGRAM-STATUS %d\n", status);
	put(console, buf, strlen(buf));
}

/*
 * The capabilities the kernel found on the CPU ("CPU features: detected: ..."
 * in its log, which "quiet" keeps off the console): one "@@FOLIOLAB-CPUFEATURE"
 * line each, so the host's model can take the kernel's verdict (BBM Level 3).
 * /dev/kmsg gives a record a read, into a buffer on the stack: the runner's
 * memory, which every later window shares, stays as it was.
 */
static void cpu_features(void)
{
	const char *tag = "CPU features: detected: ";
	int fd = open("/dev/kmsg", O_RDONLY | O_NONBLOCK);
	char rec[1024];
	ssize_t n;

	if (fd < 0)
		return;
	while ((n = read(fd, rec, sizeof(rec) - 1)) > 0 || (n < 0 && errno == EPIPE)) {
		char *at, out[256];
		int m;

		if (n <= 0)
			continue;
		rec[n] = 0;
		at = strstr(rec, tag);
		if (!at)
			continue;
		m = snprintf(out, sizeof(out), "@@FOLIOLAB-CPUFEATURE %.*s\n", (int)strcspn(at + strlen(tag), "\n"),
			     at + strlen(tag));
		if (m > 0 && m < (int)sizeof(out))
			put(console, out, m);
	}
	close(fd);
}

int main(int argc, char **argv)
{
	const char *broken;
	FILE *jobs;
	char line[512];

	/* glibc registers rseq, and the kernel then writes the thread's rseq area on
	 * its return to user after a fork or a preemption: a copy-on-write fault of
	 * the runner's inside the op's window. Without it, none. */
	if (argc > 0 && !getenv("GLIBC_TUNABLES")) {
		setenv("GLIBC_TUNABLES", "glibc.pthread.rseq=0", 1);
		execv(argv[0], argv);
	}

	mkdir("/proc", 0755);
	mkdir("/sys", 0755);
	mkdir("/dev", 0755);
	mount("proc", "/proc", "proc", 0, NULL);
	mount("sysfs", "/sys", "sysfs", 0, NULL);
	mount("devtmpfs", "/dev", "devtmpfs", 0, NULL);
	mount("tracefs", "/sys/kernel/tracing", "tracefs", 0, NULL);
	console = open("/dev/console", O_WRONLY);
	if (console < 0)
		console = 1;
	/* Exited workers vanish at once, so an exit op can wait for the teardown. */
	signal(SIGCHLD, SIG_IGN);
	broken = make_fork_stub() ? "cannot map the fork stub" : NULL;
	/* khugepaged would collapse the workload's regions in the background,
	 * inside op windows; the model collapses only in a khugepaged op
	 * (khugepaged_scan). 49 days; each scan past any workload's size. */
	write_file(KHUGEPAGED "pages_to_scan", "4294967295");
	write_file(KHUGEPAGED "scan_sleep_millisecs", "4294967295");
	write_file(KHUGEPAGED "alloc_sleep_millisecs", "4294967295");
	khugepaged_anchor();
	khugepaged_settle();
	/* Nor may periodic kernel work run: a kworker or kcompactd that wakes inside
	 * a window preempts the op, and a zap that breaks for need_resched reads its
	 * pte again. vmstat's per-CPU fold every hour; no proactive compaction. */
	write_file("/proc/sys/vm/stat_interval", "3600");
	write_file("/proc/sys/vm/compaction_proactiveness", "0");
	/* And the runner runs real-time, unthrottled: no kernel thread of the
	 * guest's (rcu, kworkers, all SCHED_OTHER) can preempt an op, whenever its
	 * wake-up falls. Every wait of the runner's blocks, so none starves. */
	write_file("/proc/sys/kernel/sched_rt_runtime_us", "-1");
	{
		struct sched_param sp = { .sched_priority = 50 };

		sched_setscheduler(0, SCHED_FIFO, &sp);
	}
	put(console, "@@FOLIOLAB-BEGIN\n", 17);
	cpu_features();
	jobs = fopen("/jobs", "r");
	while (jobs && fgets(line, sizeof(line), jobs)) {
		char path[400];
		const char *why;

		line[strcspn(line, "\n")] = 0;
		if (!strcmp(line, "kallsyms") || !strncmp(line, "kallsyms ", 9)) {
			kallsyms(line[8] ? line + 9 : NULL);
			continue;
		}
		if (!strcmp(line, "iomem")) {
			iomem();
			continue;
		}
		if (!strncmp(line, "program ", 8)) {
			program(line + 8);
			continue;
		}
		if (sscanf(line, "workload %399s", path) != 1)
			continue;
		/* The host times each workload between this line and its result. */
		put(console, "@@FOLIOLAB-START\n", 17);
		outlen = 0;
		why = broken ? broken : load(path);
		if (why) {
			emit("{\"error\":");
			emit_str(why);
			emit("}");
		} else {
			run_workload();
		}
		emit("\n");
		put(console, "@@FOLIOLAB-RESULT ", 18);
		put(console, out, outlen);
	}
	put(console, "@@FOLIOLAB-END\n", 15);
	/* A write to the console returns once the tty has the bytes, not once the
	 * UART has sent them, and powering off discards what is left: up to its
	 * transmit buffer (a page), the end of a long last result and the END
	 * line (measured on 7.3 with 16K pages: the host got 114 KB of a result
	 * line, then "reboot: Power down", and QEMU exited with status 0). */
	tcdrain(console);
	sync();
	reboot(LINUX_REBOOT_CMD_POWER_OFF);
	return 0;
}
