pub mod memblock;
pub mod thp_sysfs;
