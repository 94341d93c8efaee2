pub mod thp_sysfs;
