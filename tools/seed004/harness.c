/*
 * Seed 004 harness: calls each contpte_ptep_get variant on chosen block states,
 * each call bracketed by marker hints that insn_plugin.so counts between. The
 * harness cannot see the counts; it prints the JSON with a placeholder
 * "@INDEX:MARKER@" per call, which scripts/seed004-insns fills from the plugin's
 * log, checking that the marker numbers agree.
 *
 * usage: harness CC_VERSION CFLAGS QEMU_VERSION
 */
#include <stdio.h>
#include <stdlib.h>

#include "ptep_get.h"

/*
 * HINT #100..#104 open a measurement (the number says which function), HINT #110
 * closes it. Unallocated hints execute as NOPs. x0/x1 are bound before the start
 * marker, so the counted span is the blr and the callee through its ret.
 */
#define MARKED_CALL(start, fn, ptep, orig)                                        \
	({                                                                        \
		register pteval_t x0 asm("x0") = (pteval_t)(unsigned long)(ptep); \
		register pteval_t x1 asm("x1") = (orig);                          \
		asm volatile("hint #" #start "\n\t"                               \
			     "blr %2\n\t"                                         \
			     "hint #110"                                          \
			     : "+r"(x0), "+r"(x1)                                 \
			     : "r"(fn)                                            \
			     : "x2", "x3", "x4", "x5", "x6", "x7", "x8", "x9",    \
			       "x10", "x11", "x12", "x13", "x14", "x15", "x16",   \
			       "x17", "x18", "x30", "cc", "memory");              \
		x0;                                                               \
	})

enum { FULL_SCAN, MOD1, MOD2, EARLY_EXIT, NR_VARIANTS, EMPTY = NR_VARIANTS };

static const char *const names[NR_VARIANTS] = { "full-scan", "mod1", "mod2", "early-exit" };

/* The block: 128-byte aligned, as a page table's 16-entry contpte run is. */
static pteval_t block[CONT_PTES] __attribute__((aligned(sizeof(pteval_t) * CONT_PTES)));

static unsigned int nr_measured;

static pteval_t call(int fn, pteval_t *ptep, pteval_t orig)
{
	switch (fn) {
	case FULL_SCAN:
		return MARKED_CALL(100, ptep_get_full_scan, ptep, orig);
	case MOD1:
		return MARKED_CALL(101, ptep_get_mod1, ptep, orig);
	case MOD2:
		return MARKED_CALL(102, ptep_get_mod2, ptep, orig);
	case EARLY_EXIT:
		return MARKED_CALL(103, ptep_get_early_exit, ptep, orig);
	default:
		return MARKED_CALL(104, ptep_get_empty, ptep, orig);
	}
}

/* A writable private anonymous contpte mapping, normal memory (attrindx 0). */
static pteval_t pte_base(int i)
{
	return ((0x80000ULL + i) << 12) | PTE_TYPE_PAGE | PTE_USER | PTE_SHARED | PTE_NG |
	       PTE_WRITE | PTE_CONT | PTE_PXN | PTE_UXN;
}

/* Clean: read-only until DBM (or a fault) clears PTE_RDONLY. */
static pteval_t pte_state(int i, int young, int dirty)
{
	pteval_t pte = pte_base(i);

	if (dirty)
		pte |= PTE_DIRTY;	/* as a write fault's pte_mkdirty leaves it */
	else
		pte |= PTE_RDONLY;
	if (young)
		pte |= PTE_AF;
	return pte;
}

/* What every variant must return: orig_pte with the block's OR of A and D. */
static pteval_t expected(pteval_t orig)
{
	int young = 0, dirty = 0;

	for (int i = 0; i < CONT_PTES; i++) {
		young |= !!(block[i] & PTE_AF);
		dirty |= (block[i] & PTE_DIRTY) || ((block[i] & PTE_WRITE) && !(block[i] & PTE_RDONLY));
	}
	if (dirty)
		orig = (orig | PTE_DIRTY) & ~PTE_RDONLY;
	if (young)
		orig |= PTE_AF;
	return orig;
}

/* One measured call of `fn` with ptep = &block[k], orig_pte = block[k]. */
static void measure(int fn, int k)
{
	pteval_t got = call(fn, &block[k], block[k]);

	if (fn != EMPTY && got != expected(block[k])) {
		fprintf(stderr, "harness: %s returned %#llx, expected %#llx\n", names[fn], got,
			expected(block[k]));
		exit(1);
	}
	printf("@%u:%d@", nr_measured++, 100 + fn);
}

/*
 * Sweep layouts. ONLY: pte y is the one young pte, pte d the one dirty pte.
 * FROM: every pte from y on is young, every pte from d on dirty. Position
 * CONT_PTES means none.
 */
enum layout { ONLY, FROM };

static void fill(enum layout l, int y, int d)
{
	for (int i = 0; i < CONT_PTES; i++) {
		int young = l == ONLY ? i == y : i >= y;
		int dirty = l == ONLY ? i == d : i >= d;

		block[i] = pte_state(i, young, dirty);
	}
}

static void scenario(const char *key, const char *desc, const char *orig_desc, int k, int last)
{
	printf("    \"%s\": {\n      \"blocks\": \"%s\",\n      \"orig_pte\": \"%s\",\n", key,
	       desc, orig_desc);
	for (int fn = 0; fn < NR_VARIANTS; fn++) {
		printf("      \"%s\": ", names[fn]);
		measure(fn, k);
		printf("%s\n", fn == NR_VARIANTS - 1 ? "" : ",");
	}
	printf("    }%s\n", last ? "" : ",");
}

static void sweep(enum layout l, const char *key, int last)
{
	printf("    \"%s\": {\n", key);
	for (int fn = 0; fn < NR_VARIANTS; fn++) {
		printf("      \"%s\": [\n", names[fn]);
		for (int y = 0; y <= CONT_PTES; y++) {
			printf("        [");
			for (int d = 0; d <= CONT_PTES; d++) {
				fill(l, y, d);
				measure(fn, 0);
				printf("%s", d == CONT_PTES ? "" : ", ");
			}
			printf("]%s\n", y == CONT_PTES ? "" : ",");
		}
		printf("      ]%s\n", fn == NR_VARIANTS - 1 ? "" : ",");
	}
	printf("    }%s\n", last ? "" : ",");
}

int main(int argc, char **argv)
{
	if (argc != 4) {
		fprintf(stderr, "usage: harness CC_VERSION CFLAGS QEMU_VERSION\n");
		return 2;
	}
	printf("{\n");
	printf("  \"what\": \"instructions executed per contpte_ptep_get call (seed 004), "
	       "counted by a QEMU TCG plugin from the blr that calls the variant through its ret\",\n");
	printf("  \"cc\": \"%s\",\n  \"cflags\": \"%s\",\n  \"qemu\": \"%s\",\n", argv[1],
	       argv[2], argv[3]);
	printf("  \"pte_old_clean\": \"%#llx\",\n", pte_state(0, 0, 0));
	printf("  \"pte_young\": \"PTE_AF (bit 10) set\",\n");
	printf("  \"pte_dirty\": \"PTE_DIRTY (bit 55) set and PTE_RDONLY (bit 7) clear, "
	       "as pte_mkdirty leaves a writable pte\",\n");

	fill(ONLY, CONT_PTES, CONT_PTES);
	printf("  \"empty_call\": ");
	measure(EMPTY, 0);
	printf(",\n");

	printf("  \"scenarios\": {\n");
	fill(FROM, 0, 0);
	scenario("1", "all 16 ptes young and dirty", "pte 0: young, dirty", 0, 0);
	fill(ONLY, 8, CONT_PTES);
	scenario("2", "only pte 8 young, none dirty", "pte 0: old, clean", 0, 0);
	scenario("2-orig8", "only pte 8 young, none dirty", "pte 8: young, clean", 8, 0);
	fill(ONLY, CONT_PTES, CONT_PTES);
	scenario("3", "no pte young or dirty", "pte 0: old, clean", 0, 1);
	printf("  },\n");

	printf("  \"sweep_axes\": \"[first young pte][first dirty pte], 0..15, 16 = none; "
	       "ptep and orig_pte are pte 0\",\n");
	printf("  \"sweep\": {\n");
	sweep(ONLY, "only", 0);
	sweep(FROM, "from", 1);
	printf("  }\n}\n");
	return 0;
}
