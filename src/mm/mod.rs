//! The kernel model: mirrors the kernel's mm/ with the same file and function names.

pub mod folio;
pub mod page_alloc;
pub mod thp_sysfs;
pub mod vmstat;
