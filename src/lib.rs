//! foliolab: a deterministic, executable model of the Linux arm64 memory-management
//! subsystem. `hw` is the simulated hardware; `arch::arm64` mirrors
//! `arch/arm64/{include/asm,mm}`; `mm` mirrors the kernel's `mm/`; `workload` is the
//! workload language; `report` the output shape shared by model and host runs.

pub mod arch;
pub mod cmd;
pub mod compare;
pub mod cpumask;
pub mod hostcpu;
pub mod hostmem;
pub mod html;
pub mod hw;
pub mod input;
pub mod kbuild;
pub mod kcount;
pub mod mm;
pub mod native;
#[cfg(feature = "python")]
pub mod python;
pub mod report;
pub mod reproduce;
pub mod sim;
pub mod store;
pub mod suggest;
pub mod sweep;
pub mod time;
pub mod trace;
pub mod workload;
