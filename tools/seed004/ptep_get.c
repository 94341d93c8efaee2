/*
 * Seed 004: contpte_ptep_get, gathering the access and dirty bits of a 16-entry
 * contpte block into orig_pte, in the four forms the seed compares. Freestanding:
 * the pte helpers are written out as arm64's pgtable.h defines them (v6.12), so
 * the compiler sees the same bit tests and updates the kernel's build does.
 */
#include "ptep_get.h"

/* READ_ONCE: one volatile 64-bit load per pte, never merged or hoisted. */
static inline pteval_t __ptep_get(pteval_t *ptep)
{
	return *(volatile pteval_t *)ptep;
}

static inline pteval_t *contpte_align_down(pteval_t *ptep)
{
	return (pteval_t *)((unsigned long)ptep & ~(sizeof(*ptep) * CONT_PTES - 1));
}

static inline int pte_write(pteval_t pte)
{
	return !!(pte & PTE_WRITE);
}

/* Hardware DBM dirty: writable and no longer read-only. */
static inline int pte_hw_dirty(pteval_t pte)
{
	return pte_write(pte) && !(pte & PTE_RDONLY);
}

static inline int pte_sw_dirty(pteval_t pte)
{
	return !!(pte & PTE_DIRTY);
}

static inline int pte_dirty(pteval_t pte)
{
	return pte_sw_dirty(pte) || pte_hw_dirty(pte);
}

static inline int pte_young(pteval_t pte)
{
	return !!(pte & PTE_AF);
}

static inline pteval_t pte_mkdirty(pteval_t pte)
{
	pte |= PTE_DIRTY;
	if (pte_write(pte))
		pte &= ~PTE_RDONLY;
	return pte;
}

static inline pteval_t pte_mkyoung(pteval_t pte)
{
	return pte | PTE_AF;
}

/* The original: read all 16 ptes whatever they hold. */
__attribute__((noinline)) pteval_t ptep_get_full_scan(pteval_t *ptep, pteval_t orig_pte)
{
	pteval_t pte;
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
__attribute__((noinline)) pteval_t ptep_get_mod1(pteval_t *ptep, pteval_t orig_pte)
{
	pteval_t pte;
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
__attribute__((noinline)) pteval_t ptep_get_mod2(pteval_t *ptep, pteval_t orig_pte)
{
	pteval_t pte;
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
__attribute__((noinline)) pteval_t ptep_get_early_exit(pteval_t *ptep, pteval_t orig_pte)
{
	pteval_t pte;
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

__attribute__((noinline)) pteval_t ptep_get_empty(pteval_t *ptep, pteval_t orig_pte)
{
	(void)ptep;
	return orig_pte;
}
