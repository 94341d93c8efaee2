/*
 * QEMU TCG plugin (API version 1, as QEMU 7.2 ships it) for foliolab's
 * qemu-arm64 and qemu-x86_64 targets. Between a start marker (HINT #120 on
 * arm64; on x86-64 the NOP "nopl 0x464c4f00+120(%rax)", 0f 1f 80 and the
 * displacement, which no compiler emits) and a stop marker (#121, or +121)
 * that the guest runner executes around each op, it counts, in kernel mode
 * only (PC in the upper half; on x86-64 at or above 1 << 63):
 *   - on arm64: TLBI (SYS, op0=1, CRn=8) by kind, DSB by option, ISB; on
 *     x86-64: INVLPG, INVPCID (its type is in a register: not told apart),
 *     and moves to CR3 (an address-space switch, and a flush of its
 *     non-global entries without PCID's no-flush bit) and to CR4 (toggling
 *     PGE flushes the global entries too); each under the kernel function
 *     that contains its PC;
 *   - entries of the kernel functions listed in the symbol file with a '*';
 *   - instructions executed, in kernel mode per function (the symbol whose
 *     range holds the PC: an inlined function counts under its caller), and in
 *     user mode in all.
 * A pause marker (#122) stops the counting until the stop marker (a
 * fork's child that runs before its parent has closed the window); outside a
 * window it does nothing. An abort marker (HINT #123) closes the window, or
 * writes an empty one if none is open (an op whose process died before or
 * after opening it), so windows and ops stay paired one to one. (Marker
 * numbers below are HINT's on arm64, the NOP's displacement less 0x464c4f00
 * on x86-64.)
 * At each stop marker it appends to the output file one line per counter
 * that moved, "<window> <event> <function> <count>", then "<window> end";
 * instructions are the events "insns" (kernel, per function) and "user.insns"
 * (function "-").
 * Windows are numbered from 0 in boot order; the host pairs them with the
 * runner's ops. Single vCPU only (-smp 1), which the runner is given.
 *
 * One more window, written first as "boot ..." lines, covers the kernel's
 * building of its linear map at boot: it opens at the first entry of the
 * function marked '<' in the symbol file and closes at the first entry of
 * the one marked '>' after it (map_mem's first and last calls, which the
 * host chooses per kernel).
 *
 * Instructions are counted per translation block, with an inline add at the
 * block's start (no call): each block's instructions go to its functions'
 * running totals whether a window is open or not, and a window's count is the
 * totals' difference between its close and its open. A marker inside a block
 * corrects for the block's instructions after it (known at translation): a
 * window holds the instructions after its opening instruction up to and
 * including its closing one. Under -icount, QEMU ends a block early rather than
 * take an interrupt inside it, so an interrupt never splits a block; an
 * instruction that faults (a user store's page fault) ends its block there,
 * and the block's instructions after it, counted at its start, count again
 * when they run after the fault: a few instructions per fault, the same on
 * every run.
 *
 * Arguments: syms=PATH (lines "ADDR NAME", text symbols, sorted or not;
 * "ADDR *NAME" marks a function whose entries are counted, "ADDR <NAME" and
 * "ADDR >NAME" the boot window's bounds), out=PATH, and insns=off to count no
 * instructions (the blocks get no inline adds: what counting costs).
 *
 * The plugin API's declarations are in ../qemu-plugin-api.h.
 */
#include <inttypes.h>
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "../qemu-plugin-api.h"

/* HINT #imm is 0xd503201f with imm in bits [11:5]. */
#define HINT(imm) (0xd503201fu | ((uint32_t)(imm) << 5))
#define START 120
#define STOP 121
#define PAUSE 122
#define ABORT 123
#define KERNEL_VA 0xffff000000000000ull
/* The x86-64 marker: nopl disp32(%rax) with disp32 = MARK_X86 + the number. */
#define MARK_X86 0x464c4f00u
#define KERNEL_VA_X86 0x8000000000000000ull

/* The guest is x86-64 (qemu-system-x86_64), else arm64. */
static int x86;
static uint64_t kernel_va = KERNEL_VA;

struct sym {
	uint64_t addr;
	char *name;
	char mark;	/* '*' entries counted, '<' '>' boot window bounds, or 0 */
};

static struct sym *syms;
static size_t nsyms;

/* Instruction totals by symbol index; index nsyms holds kernel PCs below the
 * first symbol, USER user mode. snap: the totals at the window's open; acc:
 * the window's counts so far. live: the indices that have been translated,
 * the only ones whose totals can have moved. */
#define USER (nsyms + 1)
static uint64_t *insns, *snap;
static int64_t *acc;
static size_t *live, nlive;
static char *is_live;

/* The instructions of a block after a marker in it: per symbol index. */
struct suffix {
	size_t n;
	struct {
		size_t sym;
		uint64_t n;
	} seg[];
};

/* One counter: an event at one translated instruction. Instructions are
 * retranslated now and then, so one (event, function) may have several; the
 * host sums them. */
struct counter {
	char event[24];
	const char *fn;
	uint64_t n;
	struct counter *next_dirty;
	int dirty;
};

static struct counter *dirty;
static enum { CLOSED, OPEN, PAUSED } state;
static enum { BOOT_BEFORE, BOOT_IN, BOOT_DONE } boot;
static unsigned long window;
static unsigned long errors;
static FILE *out;
static int count_insns = 1;

static int by_addr(const void *a, const void *b)
{
	const struct sym *x = a, *y = b;

	return (x->addr > y->addr) - (x->addr < y->addr);
}

static int load_syms(const char *path)
{
	FILE *f = fopen(path, "r");
	char line[512];
	size_t cap = 0;

	if (!f)
		return -1;
	while (fgets(line, sizeof(line), f)) {
		char name[400];
		uint64_t addr;

		if (sscanf(line, "%" SCNx64 " %399s", &addr, name) != 2)
			continue;
		if (nsyms == cap) {
			cap = cap ? 2 * cap : 1 << 16;
			syms = realloc(syms, cap * sizeof(*syms));
			if (!syms)
				return -1;
		}
		syms[nsyms].addr = addr;
		syms[nsyms].mark = strchr("*<>", name[0]) ? name[0] : 0;
		syms[nsyms].name = strdup(name + !!syms[nsyms].mark);
		nsyms++;
	}
	fclose(f);
	qsort(syms, nsyms, sizeof(*syms), by_addr);
	insns = calloc(nsyms + 2, sizeof(*insns));
	snap = calloc(nsyms + 2, sizeof(*snap));
	acc = calloc(nsyms + 2, sizeof(*acc));
	live = calloc(nsyms + 2, sizeof(*live));
	is_live = calloc(nsyms + 2, 1);
	return insns && snap && acc && live && is_live ? 0 : -1;
}

/* The symbol containing pc: the last one at or below it. */
static const struct sym *lookup(uint64_t pc)
{
	size_t lo = 0, hi = nsyms;

	while (lo < hi) {
		size_t mid = (lo + hi) / 2;

		if (syms[mid].addr <= pc)
			lo = mid + 1;
		else
			hi = mid;
	}
	return lo ? &syms[lo - 1] : NULL;
}

static const char *tlbi_kind(uint32_t op1, uint32_t crm, uint32_t op2, char *buf, size_t len)
{
	static const char *const va[8] = { "vmalle1", "vae1", "aside1", "vaae1", NULL, "vale1", NULL, "vaale1" };
	static const char *const range[8] = { NULL, "rvae1", NULL, "rvaae1", NULL, "rvale1", NULL, "rvaale1" };
	/* CRm: 1 outer shareable, 2 range inner, 3 inner, 5 range outer, 6 range, 7 local. */
	static const char *const shareability[8] = { NULL, "os", "is", "is", NULL, "os", "", "" };
	const char *base = NULL;

	if (op1 == 0 && crm < 8 && shareability[crm])
		base = (crm == 2 || crm == 5 || crm == 6) ? range[op2] : va[op2];
	if (base)
		snprintf(buf, len, "tlbi.%s%s", base, shareability[crm]);
	else
		snprintf(buf, len, "tlbi.op1_%u_crm_%u_op2_%u", op1, crm, op2);
	return buf;
}

/* The event an instruction is, or NULL. */
static const char *classify(uint32_t op, char *buf, size_t len)
{
	static const char *const dsb[16] = { NULL, "dsb.oshld", "dsb.oshst", "dsb.osh", NULL,
					     "dsb.nshld", "dsb.nshst", "dsb.nsh", NULL, "dsb.ishld",
					     "dsb.ishst", "dsb.ish", NULL, "dsb.ld", "dsb.st", "dsb.sy" };

	if ((op & 0xfff8f000u) == 0xd5088000u)
		return tlbi_kind((op >> 16) & 7, (op >> 8) & 15, (op >> 5) & 7, buf, len);
	if ((op & 0xfffff0ffu) == 0xd503309fu)
		return dsb[(op >> 8) & 15];
	if ((op & 0xfffff0ffu) == 0xd50330dfu)
		return "isb";
	return NULL;
}

/* The x86-64 event an instruction is, or NULL: past its legacy prefixes and
 * REX, 0f 01 /7 with a memory operand (INVLPG; register forms are SWAPGS and
 * RDTSCP), 0f 22 /3 and /4 (MOV to CR3, CR4), 66 0f 38 82 (INVPCID). */
static const char *classify_x86(const uint8_t *b, size_t n)
{
	size_t i = 0;
	int opsize = 0;

	static const uint8_t legacy[] = { 0x66, 0x67, 0xf0, 0xf2, 0xf3, 0x2e, 0x36, 0x3e, 0x26, 0x64, 0x65 };

	for (; i < n && memchr(legacy, b[i], sizeof(legacy)); i++)
		opsize |= b[i] == 0x66;
	if (i < n && (b[i] & 0xf0) == 0x40)
		i++;
	if (i + 3 > n || b[i] != 0x0f)
		return NULL;
	if (b[i + 1] == 0x01 && (b[i + 2] >> 6) != 3 && ((b[i + 2] >> 3) & 7) == 7)
		return "x86.invlpg";
	if (b[i + 1] == 0x22 && ((b[i + 2] >> 3) & 7) == 3)
		return "x86.cr3_write";
	if (b[i + 1] == 0x22 && ((b[i + 2] >> 3) & 7) == 4)
		return "x86.cr4_write";
	if (opsize && i + 4 <= n && b[i + 1] == 0x38 && b[i + 2] == 0x82)
		return "x86.invpcid";
	return NULL;
}

/* The marker number (START ... ABORT) an instruction is, or 0. */
static int marker_of(const uint8_t *b, size_t n)
{
	uint32_t op, disp;

	if (!x86 && n == sizeof(op)) {
		memcpy(&op, b, sizeof(op));
		for (int m = START; m <= ABORT; m++)
			if (op == HINT(m))
				return m;
	}
	if (x86 && n == 7 && b[0] == 0x0f && b[1] == 0x1f && b[2] == 0x80) {
		memcpy(&disp, b + 3, sizeof(disp));
		if (disp >= MARK_X86 + START && disp <= MARK_X86 + ABORT)
			return (int)(disp - MARK_X86);
	}
	return 0;
}

static void on_event(unsigned int vcpu, void *udata)
{
	struct counter *c = udata;

	(void)vcpu;
	if (state != OPEN)
		return;
	c->n++;
	if (!c->dirty) {
		c->dirty = 1;
		c->next_dirty = dirty;
		dirty = c;
	}
}

/* Opens the instruction counts: the totals now, and the marker's block's
 * instructions after it. */
static void open_insns(const struct suffix *after)
{
	if (!count_insns)
		return;
	for (size_t i = 0; i < nlive; i++)
		snap[live[i]] = insns[live[i]];
	for (size_t i = 0; i < after->n; i++)
		acc[after->seg[i].sym] += after->seg[i].n;
}

/* Adds the totals' moves since the open, less the marker's block's
 * instructions after it (counted at the block's start). */
static void take_insns(const struct suffix *after)
{
	if (!count_insns)
		return;
	for (size_t i = 0; i < nlive; i++)
		acc[live[i]] += insns[live[i]] - snap[live[i]];
	for (size_t i = 0; i < after->n; i++)
		acc[after->seg[i].sym] -= after->seg[i].n;
}

static void on_start(unsigned int vcpu, void *udata)
{
	(void)vcpu;
	if (state != CLOSED)
		errors++;	/* a window opened inside another */
	state = OPEN;
	open_insns(udata);
}

static void on_pause(unsigned int vcpu, void *udata)
{
	(void)vcpu;
	if (state == OPEN) {
		state = PAUSED;
		take_insns(udata);
	}
}

/* Writes the window's counters under `label` and closes it. */
static void write_window(const char *label)
{
	state = CLOSED;
	while (dirty) {
		struct counter *c = dirty;

		fprintf(out, "%s %s %s %" PRIu64 "\n", label, c->event, c->fn, c->n);
		c->n = 0;
		c->dirty = 0;
		dirty = c->next_dirty;
	}
	for (size_t i = 0; i < nlive; i++) {
		size_t k = live[i];

		if (acc[k] && k == USER)
			fprintf(out, "%s user.insns - %" PRId64 "\n", label, acc[k]);
		else if (acc[k])
			fprintf(out, "%s insns %s %" PRId64 "\n", label, k < nsyms ? syms[k].name : "?", acc[k]);
		acc[k] = 0;
	}
	fprintf(out, "%s end\n", label);
	fflush(out);
}

static void close_window(void)
{
	char label[24];

	snprintf(label, sizeof(label), "%lu", window++);
	write_window(label);
}

static void on_boot_open(unsigned int vcpu, void *udata)
{
	(void)vcpu;
	if (boot == BOOT_BEFORE && state == CLOSED) {
		boot = BOOT_IN;
		state = OPEN;
		open_insns(udata);
	}
}

static void on_boot_close(unsigned int vcpu, void *udata)
{
	(void)vcpu;
	if (boot == BOOT_IN) {
		boot = BOOT_DONE;
		take_insns(udata);
		write_window("boot");
	}
}

static void on_stop(unsigned int vcpu, void *udata)
{
	(void)vcpu;
	if (state == CLOSED) {
		errors++;
		return;
	}
	if (state == OPEN)
		take_insns(udata);
	close_window();
}

static void on_abort(unsigned int vcpu, void *udata)
{
	(void)vcpu;
	if (state == OPEN)
		take_insns(udata);
	close_window();
}

static struct counter *counter(const char *event, const char *fn)
{
	struct counter *c = calloc(1, sizeof(*c));

	if (c) {
		snprintf(c->event, sizeof(c->event), "%s", event);
		c->fn = fn;
	}
	return c;
}

/* The symbol index an instruction's instructions count under. */
static size_t insn_sym(uint64_t pc)
{
	const struct sym *s;

	if (pc < kernel_va)
		return USER;
	s = lookup(pc);
	return s ? (size_t)(s - syms) : nsyms;
}

/* Instructions from..n-1 of the block as runs of one symbol each: registered
 * as the block's inline adds (at_start), or returned (a marker's suffix). */
static struct suffix *runs(struct qemu_plugin_tb *tb, size_t from, size_t n, int at_start)
{
	struct suffix *r = calloc(1, sizeof(*r) + (n - from) * sizeof(r->seg[0]));

	if (!r)
		return NULL;
	for (size_t i = from; i < n; i++) {
		size_t k = insn_sym(qemu_plugin_insn_vaddr(qemu_plugin_tb_get_insn(tb, i)));

		if (!r->n || r->seg[r->n - 1].sym != k)
			r->seg[r->n++].sym = k;
		r->seg[r->n - 1].n++;
		if (!is_live[k]) {
			is_live[k] = 1;
			snap[k] = insns[k];
			live[nlive++] = k;
		}
	}
	if (at_start) {
		for (size_t i = 0; count_insns && i < r->n; i++)
			qemu_plugin_register_vcpu_tb_exec_inline(tb, QEMU_PLUGIN_INLINE_ADD_U64,
								 &insns[r->seg[i].sym], r->seg[i].n);
		free(r);
		return NULL;
	}
	return r;
}

/* Registers cb at a marker, with the block's instructions after it. */
static void marker(struct qemu_plugin_tb *tb, size_t i, size_t n, qemu_plugin_vcpu_udata_cb_t cb)
{
	struct suffix *after = runs(tb, i + 1, n, 0);

	if (after)
		qemu_plugin_register_vcpu_insn_exec_cb(qemu_plugin_tb_get_insn(tb, i), cb,
						       QEMU_PLUGIN_CB_NO_REGS, after);
	else
		errors++;
}

static void on_tb_trans(qemu_plugin_id_t id, struct qemu_plugin_tb *tb)
{
	size_t n = qemu_plugin_tb_n_insns(tb);

	(void)id;
	runs(tb, 0, n, 1);
	for (size_t i = 0; i < n; i++) {
		struct qemu_plugin_insn *insn = qemu_plugin_tb_get_insn(tb, i);
		static const qemu_plugin_vcpu_udata_cb_t on_marker[] = {
			[START] = on_start, [STOP] = on_stop, [PAUSE] = on_pause, [ABORT] = on_abort
		};
		uint64_t pc = qemu_plugin_insn_vaddr(insn);
		const uint8_t *bytes = qemu_plugin_insn_data(insn);
		size_t size = qemu_plugin_insn_size(insn);
		int mark = marker_of(bytes, size);
		uint32_t op = 0;
		char buf[24];
		const char *event;
		const struct sym *s;
		struct counter *c;

		if (size == sizeof(op))
			memcpy(&op, bytes, sizeof(op));
		if (mark)
			marker(tb, i, n, on_marker[mark]);
		if (pc < kernel_va)
			continue;
		s = lookup(pc);
		if (s && s->mark == '*' && s->addr == pc && (c = counter("call", s->name)))
			qemu_plugin_register_vcpu_insn_exec_cb(insn, on_event, QEMU_PLUGIN_CB_NO_REGS, c);
		if (s && s->mark == '<' && s->addr == pc)
			marker(tb, i, n, on_boot_open);
		if (s && s->mark == '>' && s->addr == pc)
			marker(tb, i, n, on_boot_close);
		event = x86 ? classify_x86(bytes, size) : classify(op, buf, sizeof(buf));
		if (event && (c = counter(event, s ? s->name : "?")))
			qemu_plugin_register_vcpu_insn_exec_cb(insn, on_event, QEMU_PLUGIN_CB_NO_REGS, c);
	}
}

static void on_atexit(qemu_plugin_id_t id, void *udata)
{
	(void)id;
	(void)udata;
	fprintf(out, "windows %lu errors %lu\n", window, errors + (unsigned long)(state != CLOSED));
	fclose(out);
}

__attribute__((visibility("default"))) int qemu_plugin_install(qemu_plugin_id_t id,
							       const qemu_info_t *info, int argc,
							       char **argv)
{
	const char *sym_path = NULL, *out_path = NULL;

	x86 = info && info->target_name && !strcmp(info->target_name, "x86_64");
	if (x86)
		kernel_va = KERNEL_VA_X86;
	for (int i = 0; i < argc; i++) {
		if (!strncmp(argv[i], "syms=", 5))
			sym_path = argv[i] + 5;
		else if (!strncmp(argv[i], "out=", 4))
			out_path = argv[i] + 4;
		else if (!strcmp(argv[i], "insns=off"))
			count_insns = 0;
		else
			return -1;
	}
	if (!sym_path || !out_path || load_syms(sym_path))
		return -1;
	out = fopen(out_path, "w");
	if (!out)
		return -1;
	qemu_plugin_register_vcpu_tb_trans_cb(id, on_tb_trans);
	qemu_plugin_register_atexit_cb(id, on_atexit, NULL);
	return 0;
}
