/*
 * QEMU TCG plugin (API version 1, as QEMU 7.2 ships it): counts the guest
 * instructions executed between a start marker (HINT #100..#104) and the stop
 * marker (HINT #110), excluding both markers, and logs one line per span:
 * "MARKER COUNT". Single-threaded guests only, which the harness is.
 *
 * The plugin API's declarations are in ../qemu-plugin-api.h.
 */
#include <stdint.h>
#include <stdio.h>
#include <string.h>

#include "../qemu-plugin-api.h"

/* HINT #imm is 0xd503201f with imm in bits [11:5]. */
#define HINT(imm) (0xd503201fu | ((uint32_t)(imm) << 5))
#define START_FIRST 100
#define START_LAST 104
#define STOP 110

static int open_marker;	/* the span's start marker, 0 outside a span */
static uint64_t count;
static unsigned int spans;
static unsigned int errors;

static void on_insn(unsigned int vcpu, void *udata)
{
	(void)vcpu;
	(void)udata;
	count++;
}

static void on_start(unsigned int vcpu, void *udata)
{
	(void)vcpu;
	if (open_marker)
		errors++;	/* a span opened inside another */
	open_marker = (int)(uintptr_t)udata;
	/* on_insn runs for this marker too, after this callback: start below zero. */
	count = (uint64_t)-1;
}

static void on_stop(unsigned int vcpu, void *udata)
{
	char line[64];

	(void)vcpu;
	(void)udata;
	if (!open_marker) {
		errors++;
		return;
	}
	snprintf(line, sizeof(line), "%d %llu\n", open_marker, (unsigned long long)count);
	qemu_plugin_outs(line);
	open_marker = 0;
	spans++;
}

/*
 * Every instruction gets the counting callback (callbacks run before the
 * instruction executes); markers get theirs first. Counting outside a span is
 * wasted but harmless: the start marker resets it.
 */
static void on_tb_trans(qemu_plugin_id_t id, struct qemu_plugin_tb *tb)
{
	size_t n = qemu_plugin_tb_n_insns(tb);

	(void)id;
	for (size_t i = 0; i < n; i++) {
		struct qemu_plugin_insn *insn = qemu_plugin_tb_get_insn(tb, i);
		uint32_t op = 0;

		if (qemu_plugin_insn_size(insn) == sizeof(op))
			memcpy(&op, qemu_plugin_insn_data(insn), sizeof(op));
		for (int m = START_FIRST; m <= START_LAST; m++)
			if (op == HINT(m))
				qemu_plugin_register_vcpu_insn_exec_cb(insn, on_start, QEMU_PLUGIN_CB_NO_REGS,
								       (void *)(uintptr_t)m);
		if (op == HINT(STOP))
			qemu_plugin_register_vcpu_insn_exec_cb(insn, on_stop, QEMU_PLUGIN_CB_NO_REGS, NULL);
		else
			qemu_plugin_register_vcpu_insn_exec_cb(insn, on_insn, QEMU_PLUGIN_CB_NO_REGS, NULL);
	}
}

static void on_atexit(qemu_plugin_id_t id, void *udata)
{
	char line[64];

	(void)id;
	(void)udata;
	snprintf(line, sizeof(line), "spans %u errors %u\n", spans, errors + !!open_marker);
	qemu_plugin_outs(line);
}

__attribute__((visibility("default"))) int qemu_plugin_install(qemu_plugin_id_t id,
							       const qemu_info_t *info, int argc,
							       char **argv)
{
	(void)info;
	(void)argv;
	if (argc)
		return -1;
	qemu_plugin_register_vcpu_tb_trans_cb(id, on_tb_trans);
	qemu_plugin_register_atexit_cb(id, on_atexit, NULL);
	return 0;
}
