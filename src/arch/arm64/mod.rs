pub mod fixmap;
pub mod mmu;
pub mod tlbflush;
