/*
 * Seed 004: contpte_ptep_get, gathering the access and dirty bits of a 16-entry
 * contpte block into orig_pte, in the four forms the seed compares. Freestanding:
 * the pte helpers are written out as arm64's pgtable.h defines them (v6.12), so
 * the compiler sees the same bit tests and updates the kernel's build does.
 */
#include "ptep_get.h"

#define pte_val(p)	((p).pte)
#define __pte(v)	((pte_t){ (v) })

/*
 * READ_ONCE: one volatile access of the object with its own type. For a pte_t
 * that is a volatile copy of a struct, not of its pteval_t: clang keeps such a
 * copy's temporary in memory, so each pte read is a load and a store to the
 * stack, as in the clang-built kernel's contpte_ptep_get.
 */
#define READ_ONCE(x)	(*(const volatile __typeof__(x) *)&(x))

static inline pte_t __ptep_get(pte_t *ptep)
{
	return READ_ONCE(*ptep);
}

static inline pte_t *contpte_align_down(pte_t *ptep)
{
	return (pte_t *)((unsigned long)ptep & ~(sizeof(*ptep) * CONT_PTES - 1));
}

static inline int pte_write(pte_t pte)
{
	return !!(pte_val(pte) & PTE_WRITE);
}

/* Hardware DBM dirty: writable and no longer read-only. */
static inline int pte_hw_dirty(pte_t pte)
{
	return pte_write(pte) && !(pte_val(pte) & PTE_RDONLY);
}

static inline int pte_sw_dirty(pte_t pte)
{
	return !!(pte_val(pte) & PTE_DIRTY);
}

static inline int pte_dirty(pte_t pte)
{
	return pte_sw_dirty(pte) || pte_hw_dirty(pte);
}

static inline int pte_young(pte_t pte)
{
	return !!(pte_val(pte) & PTE_AF);
}

static inline pte_t pte_mkdirty(pte_t pte)
{
	pte = __pte(pte_val(pte) | PTE_DIRTY);
	if (pte_write(pte))
		pte = __pte(pte_val(pte) & ~PTE_RDONLY);
	return pte;
}

static inline pte_t pte_mkyoung(pte_t pte)
{
	return __pte(pte_val(pte) | PTE_AF);
}

/* The original: read all 16 ptes whatever they hold. */
__attribute__((noinline)) pte_t ptep_get_full_scan(pte_t *ptep, pte_t orig_pte)
{
	pte_t pte;
	int i;

	ptep = contpte_align_down(ptep);
	for (i = 0; i < CONT_PTES; i++, ptep++) {
		pte = __ptep_get(ptep);
		if (pte_dirty(pte))
			orig_pte = pte_mkdirty(orig_pte);
		if (pte_young(pte))
			orig_pte = pte_mkyoung(orig_pte);
	}
	return orig_pte;
}

/* The seed's modification 1: one loop, stop once orig_pte is young and dirty. */
__attribute__((noinline)) pte_t ptep_get_mod1(pte_t *ptep, pte_t orig_pte)
{
	pte_t pte;
	int i;

	ptep = contpte_align_down(ptep);
	for (i = 0; i < CONT_PTES; i++, ptep++) {
		pte = __ptep_get(ptep);
		if (pte_dirty(pte)) {
			orig_pte = pte_mkdirty(orig_pte);
			if (pte_young(orig_pte))
				break;
		}
		if (pte_young(pte)) {
			orig_pte = pte_mkyoung(orig_pte);
			if (pte_dirty(orig_pte))
				break;
		}
	}
	return orig_pte;
}

/*
 * The seed's modification 2: find the first young or dirty pte, then scan on
 * for the other bit only. The dirty arm re-reads the same pte: it may be young.
 */
__attribute__((noinline)) pte_t ptep_get_mod2(pte_t *ptep, pte_t orig_pte)
{
	pte_t pte;
	int i;

	ptep = contpte_align_down(ptep);
	for (i = 0; i < CONT_PTES; i++, ptep++) {
		pte = __ptep_get(ptep);
		if (pte_dirty(pte)) {
			orig_pte = pte_mkdirty(orig_pte);
			for (; i < CONT_PTES; i++, ptep++) {
				pte = __ptep_get(ptep);
				if (pte_young(pte)) {
					orig_pte = pte_mkyoung(orig_pte);
					break;
				}
			}
			break;
		}
		if (pte_young(pte)) {
			orig_pte = pte_mkyoung(orig_pte);
			for (i++, ptep++; i < CONT_PTES; i++, ptep++) {
				pte = __ptep_get(ptep);
				if (pte_dirty(pte)) {
					orig_pte = pte_mkdirty(orig_pte);
					break;
				}
			}
			break;
		}
	}
	return orig_pte;
}

/*
 * Upstream's merged early exit (v6.17's contpte.c). Its loop is modification 2's
 * (the v4/v5 patch open-codes the two inner loops the same way), kept as its own
 * function so the measurement shows, rather than assumes, that the two agree.
 */
__attribute__((noinline)) pte_t ptep_get_early_exit(pte_t *ptep, pte_t orig_pte)
{
	pte_t pte;
	int i;

	ptep = contpte_align_down(ptep);
	for (i = 0; i < CONT_PTES; i++, ptep++) {
		pte = __ptep_get(ptep);
		if (pte_dirty(pte)) {
			orig_pte = pte_mkdirty(orig_pte);
			for (; i < CONT_PTES; i++, ptep++) {
				pte = __ptep_get(ptep);
				if (pte_young(pte)) {
					orig_pte = pte_mkyoung(orig_pte);
					break;
				}
			}
			break;
		}
		if (pte_young(pte)) {
			orig_pte = pte_mkyoung(orig_pte);
			i++;
			ptep++;
			for (; i < CONT_PTES; i++, ptep++) {
				pte = __ptep_get(ptep);
				if (pte_dirty(pte)) {
					orig_pte = pte_mkdirty(orig_pte);
					break;
				}
			}
			break;
		}
	}
	return orig_pte;
}

__attribute__((noinline)) pte_t ptep_get_empty(pte_t *ptep, pte_t orig_pte)
{
	(void)ptep;
	return orig_pte;
}
