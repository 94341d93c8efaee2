//! Address newtypes and the translation granule.
//!
//! ```text
//!  48-bit VA, 4K granule (4 levels)
//!  47      39 38      30 29      21 20      12 11        0
//! +----------+----------+----------+----------+-----------+
//! | L0 index | L1 index | L2 index | L3 index | page off  |
//! +----------+----------+----------+----------+-----------+
//! ```
//! With 16K pages the index is 11 bits and the page offset 14 bits (L0 has
//! only 2 entries); with 64K pages the index is 13 bits, the offset 16 bits,
//! and the walk starts at L1 (64 entries).

use std::fmt;

macro_rules! addr_newtype {
    ($(#[$m:meta])* $name:ident) => {
        $(#[$m])*
        #[derive(Clone, Copy, PartialEq, Eq, PartialOrd, Ord, Hash, Default)]
        #[repr(transparent)]
        pub struct $name(pub u64);
        impl fmt::Debug for $name {
            fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
                write!(f, concat!(stringify!($name), "({:#x})"), self.0)
            }
        }
    };
}

addr_newtype!(
    /// A physical address.
    PhysAddr
);
addr_newtype!(
    /// A virtual address.
    VirtAddr
);
addr_newtype!(
    /// A physical frame number: a physical address shifted right by the page shift.
    Pfn
);

/// An address-space identifier (8 or 16 bits on real hardware).
pub type Asid = u16;

/// The translation granule (base page size). The discriminant is the page shift, so
/// every size the model derives from the granule is arithmetic rather than a match.
#[derive(Clone, Copy, Debug, PartialEq, Eq, Hash, serde::Serialize, serde::Deserialize)]
#[repr(u8)]
pub enum Granule {
    #[serde(rename = "4K")]
    K4 = 12,
    #[serde(rename = "16K")]
    K16 = 14,
    #[serde(rename = "64K")]
    K64 = 16,
}

/// The level of the last translation table (the pte level).
pub const PTE_LEVEL: u8 = 3;

impl Granule {
    #[inline]
    pub const fn page_shift(self) -> u32 {
        self as u32
    }
    pub const fn page_size(self) -> u64 {
        1 << self.page_shift()
    }
    /// Bits of VA resolved per level (page_shift - 3: a table is one page of 8-byte entries).
    pub const fn bits_per_level(self) -> u32 {
        self.page_shift() - 3
    }
    /// Entries in a full table (PTRS_PER_PTE).
    pub const fn ptrs_per_table(self) -> usize {
        1 << self.bits_per_level()
    }
    /// The level a 48-bit VA walk starts at.
    pub const fn start_level(self) -> u8 {
        match self {
            Granule::K4 | Granule::K16 => 0,
            Granule::K64 => 1,
        }
    }
    /// Shift of the VA span one entry at `level` maps.
    pub const fn level_shift(self, level: u8) -> u32 {
        self.page_shift() + (3 - level as u32) * self.bits_per_level()
    }
    /// Number of valid entries in a table at `level` for a 48-bit VA.
    pub const fn entries_at(self, level: u8) -> usize {
        let top = 48u32;
        let shift = self.level_shift(level);
        let bits = top - shift;
        let b = if bits > self.bits_per_level() {
            self.bits_per_level()
        } else {
            bits
        };
        1 << b
    }
    /// Index of `va` in the table at `level`.
    #[inline]
    pub const fn index(self, va: u64, level: u8) -> usize {
        ((va >> self.level_shift(level)) as usize) & (self.entries_at(level) - 1)
    }
    /// CONFIG_ARM64_CONT_PTE_SHIFT.
    pub const fn cont_pte_shift(self) -> u32 {
        match self {
            Granule::K4 => 4,
            Granule::K16 => 7,
            Granule::K64 => 5,
        }
    }
    /// CONT_PTES: entries in a contiguous pte block.
    pub const fn cont_ptes(self) -> usize {
        1 << self.cont_pte_shift()
    }
    /// CONT_PTE_SIZE in bytes.
    pub const fn cont_pte_size(self) -> u64 {
        (self.cont_ptes() as u64) << self.page_shift()
    }
    /// CONFIG_ARM64_CONT_PMD_SHIFT.
    pub const fn cont_pmd_shift(self) -> u32 {
        match self {
            Granule::K4 => 4,
            Granule::K16 => 5,
            Granule::K64 => 5,
        }
    }
    pub const fn cont_pmds(self) -> usize {
        1 << self.cont_pmd_shift()
    }
    pub const fn pmd_shift(self) -> u32 {
        self.level_shift(2)
    }
    pub const fn pmd_size(self) -> u64 {
        1 << self.pmd_shift()
    }
    pub const fn pud_shift(self) -> u32 {
        self.level_shift(1)
    }
    /// Entries a contiguous descriptor block spans at `level` (1 where CONT is not allowed).
    pub const fn cont_entries_at(self, level: u8) -> usize {
        match level {
            3 => self.cont_ptes(),
            2 => self.cont_pmds(),
            _ => 1,
        }
    }
    /// Whether a block descriptor is allowed at `level` (48-bit OA, no LPA2).
    pub const fn block_allowed_at(self, level: u8) -> bool {
        matches!((self, level), (_, 2) | (Granule::K4, 1))
    }
    /// log2 of every VA span a leaf TLB entry can cover, ascending: for each level that
    /// may hold a leaf, its page or block, then a contiguous run of them where allowed
    /// (4K: 4K, 64K, 2M, 32M, 1G; 16K: 16K, 2M, 32M, 1G; 64K: 64K, 2M, 512M, 16G).
    pub fn leaf_span_shifts(self) -> Vec<u32> {
        (self.start_level()..=PTE_LEVEL)
            .rev()
            .filter(|&l| l == PTE_LEVEL || self.block_allowed_at(l))
            .flat_map(|l| {
                let shift = self.level_shift(l);
                let cont = self.cont_entries_at(l).trailing_zeros();
                std::iter::once(shift).chain((cont > 0).then_some(shift + cont))
            })
            .collect()
    }
    /// PMD_ORDER: order of a folio that a PMD maps.
    pub const fn pmd_order(self) -> u32 {
        self.pmd_shift() - self.page_shift()
    }
    pub fn name(self) -> &'static str {
        match self {
            Granule::K4 => "4K",
            Granule::K16 => "16K",
            Granule::K64 => "64K",
        }
    }
    pub fn parse(s: &str) -> Option<Granule> {
        match s {
            "4K" | "4k" | "4096" => Some(Granule::K4),
            "16K" | "16k" | "16384" => Some(Granule::K16),
            "64K" | "64k" | "65536" => Some(Granule::K64),
            _ => None,
        }
    }
}

impl Pfn {
    #[inline]
    pub fn to_phys(self, g: Granule) -> PhysAddr {
        PhysAddr(self.0 << g.page_shift())
    }
}

impl PhysAddr {
    #[inline]
    pub fn to_pfn(self, g: Granule) -> Pfn {
        Pfn(self.0 >> g.page_shift())
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn level_geometry_matches_the_kernel() {
        let g = Granule::K4;
        assert_eq!(g.level_shift(3), 12);
        assert_eq!(g.level_shift(2), 21);
        assert_eq!(g.level_shift(1), 30);
        assert_eq!(g.level_shift(0), 39);
        assert_eq!(g.entries_at(0), 512);
        assert_eq!(Granule::K16.entries_at(0), 2);
        assert_eq!(Granule::K16.pmd_shift(), 25);
        assert_eq!(Granule::K64.start_level(), 1);
        assert_eq!(Granule::K64.entries_at(1), 64);
        assert_eq!(Granule::K64.pmd_shift(), 29);
    }

    #[test]
    fn cont_block_sizes() {
        assert_eq!(Granule::K4.cont_ptes(), 16);
        assert_eq!(Granule::K16.cont_ptes(), 128);
        assert_eq!(Granule::K64.cont_ptes(), 32);
        assert_eq!(Granule::K4.cont_pte_size(), 64 << 10);
        assert_eq!(Granule::K16.cont_pte_size(), 2 << 20);
        assert_eq!(Granule::K64.cont_pte_size(), 2 << 20);
        assert_eq!(Granule::K4.pmd_order(), 9);
        assert_eq!(Granule::K16.pmd_order(), 11);
        assert_eq!(Granule::K64.pmd_order(), 13);
    }

    #[test]
    fn leaf_spans_per_granule() {
        assert_eq!(Granule::K4.leaf_span_shifts(), [12, 16, 21, 25, 30]);
        assert_eq!(Granule::K16.leaf_span_shifts(), [14, 21, 25, 30]);
        assert_eq!(Granule::K64.leaf_span_shifts(), [16, 21, 29, 34]);
    }
}
