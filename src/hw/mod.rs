//! The simulated hardware. Nothing here knows about Linux.

pub mod addr;
pub mod check;
pub mod cpu;
pub mod descriptor;
pub mod events;
pub mod machine;
pub mod memory;
pub mod residency;
pub mod tlb;
pub mod walk;

pub use addr::{Asid, Granule, Pfn, PhysAddr, VirtAddr};
pub use descriptor::{Attr, Desc, DescKind, TableAttr};
pub use events::{Event, Events};
pub use machine::{Features, LocalTlbi, Machine, MachineConfig, Tlbi};
pub use memory::{PhysMem, TableId};
pub use walk::WalkHint;
