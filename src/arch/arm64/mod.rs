pub mod contpte;
pub mod fixmap;
pub mod mmu;
pub mod pgtable;
pub mod tlb;
pub mod tlbflush;
