pub mod tlbflush;
