/* Seed 004: the contpte_ptep_get variants, over a block of CONT_PTES ptes. */
#ifndef SEED004_PTEP_GET_H
#define SEED004_PTEP_GET_H

typedef unsigned long long pteval_t;
/*
 * arm64's pte_t is a struct of one pteval_t (asm/pgtable-types.h), which
 * decides how a READ_ONCE of it compiles; passed and returned in one register, as
 * a pteval_t is.
 */
typedef struct {
	pteval_t pte;
} pte_t;

#define CONT_PTES 16

/* arm64's pte bits, as arch/arm64/include/asm/pgtable-hwdef.h and pgtable-prot.h. */
#define PTE_VALID	(1ULL << 0)
#define PTE_TYPE_PAGE	(3ULL << 0)
#define PTE_USER	(1ULL << 6)
#define PTE_RDONLY	(1ULL << 7)
#define PTE_SHARED	(3ULL << 8)
#define PTE_AF		(1ULL << 10)
#define PTE_NG		(1ULL << 11)
#define PTE_DBM		(1ULL << 51)
#define PTE_WRITE	PTE_DBM
#define PTE_CONT	(1ULL << 52)
#define PTE_PXN		(1ULL << 53)
#define PTE_UXN		(1ULL << 54)
#define PTE_DIRTY	(1ULL << 55)

pte_t ptep_get_full_scan(pte_t *ptep, pte_t orig_pte);
pte_t ptep_get_mod1(pte_t *ptep, pte_t orig_pte);
pte_t ptep_get_mod2(pte_t *ptep, pte_t orig_pte);
pte_t ptep_get_early_exit(pte_t *ptep, pte_t orig_pte);
/* Same signature, returns orig_pte: the call's fixed cost. */
pte_t ptep_get_empty(pte_t *ptep, pte_t orig_pte);

#endif
