pub mod contpte;
pub mod contpte_insns;
pub mod fixmap;
pub mod mmu;
pub mod page;
pub mod pgtable;
pub mod tlb;
pub mod tlbflush;
