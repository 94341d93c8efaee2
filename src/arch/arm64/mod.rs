pub mod contpte;
pub mod pgtable;
pub mod tlbflush;
