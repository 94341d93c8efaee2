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
pub use machine::{Features, FirstTouch, LocalTlbi, Machine, MachineConfig, Tlbi};
pub use memory::{PhysMem, TableId};
pub use walk::WalkHint;

use std::hash::{BuildHasherDefault, Hasher};

/// A map keyed by an integer (a pfn, a packed address): hashed by one multiply, as the
/// keys are already well spread and SipHash would dominate the cost of a probe.
pub type IntMap<V> = std::collections::HashMap<u64, V, BuildHasherDefault<MulHasher>>;

/// `IntMap`'s hasher.
#[derive(Default)]
pub struct MulHasher(u64);

impl Hasher for MulHasher {
    fn write(&mut self, bytes: &[u8]) {
        for &b in bytes {
            self.write_u64(b as u64);
        }
    }
    #[inline]
    fn write_u64(&mut self, n: u64) {
        self.0 = (self.0 ^ n).wrapping_mul(0x9e37_79b9_7f4a_7c15);
    }
    #[inline]
    fn finish(&self) -> u64 {
        self.0 ^ (self.0 >> 29)
    }
}
