pub mod contpte;
pub mod pgtable;
pub mod tlb;
pub mod tlbflush;
