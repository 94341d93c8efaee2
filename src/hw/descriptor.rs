//! VMSAv8-64 stage-1 translation table descriptors, as stored in simulated memory.
//!
//! ```text
//!  63  59 58  56 55 54  53  52  51  50    48 47           12 11 10 9 8 7   6   5 4   2 1 0
//! +------+------+--+---+---+----+---+-------+----------------+--+--+---+---+---+--+-----+-+-+
//! | PBHA | SW   |SW|UXN|PXN|CONT|DBM| res0  | output address |nG|AF|SH |AP2|AP1|NS|Attr |T|V|
//! |      |uffd  |D |   |   |    |   |       | [47:page_shift]|  |  |   |RO |USR|  |Indx | | |
//! +------+------+--+---+---+----+---+-------+----------------+--+--+---+---+---+--+-----+-+-+
//! ```
//! `T` (bit 1) is 1 for a table or page descriptor and 0 for a block. Bits 55..58 are
//! ignored by hardware and used by Linux: PTE_DIRTY (55), PTE_SPECIAL (56), PTE_UFFD_WP (58).
//! PTE_WRITE is the DBM bit (51). When !VALID, nG doubles as PTE_PRESENT_INVALID (PROT_NONE).
//! All raw bit handling lives in this file.

use super::addr::{Granule, Pfn, PhysAddr, PTE_LEVEL};
use bitflags::bitflags;

bitflags! {
    /// Attribute bits of a stage-1 EL1&0 descriptor (the Linux names where Linux has one).
    #[derive(Clone, Copy, Debug, PartialEq, Eq, Hash)]
    pub struct Attr: u64 {
        const VALID = 1 << 0;
        /// Table (levels 0-2) or page (level 3) when set; block when clear.
        const TABLE_OR_PAGE = 1 << 1;
        const ATTRINDX0 = 1 << 2;
        const ATTRINDX1 = 1 << 3;
        const ATTRINDX2 = 1 << 4;
        const NS = 1 << 5;
        /// AP[1]: accessible at EL0.
        const USER = 1 << 6;
        /// AP[2]: read-only.
        const RDONLY = 1 << 7;
        const SH0 = 1 << 8;
        const SH1 = 1 << 9;
        /// Access flag.
        const AF = 1 << 10;
        /// Not global: the TLB entry is tagged with the ASID.
        const NG = 1 << 11;
        /// Dirty bit modifier; Linux's PTE_WRITE.
        const DBM = 1 << 51;
        const CONT = 1 << 52;
        const PXN = 1 << 53;
        const UXN = 1 << 54;
        /// Software: PTE_DIRTY.
        const SW_DIRTY = 1 << 55;
        /// Software: PTE_SPECIAL.
        const SW_SPECIAL = 1 << 56;
        /// Software: PTE_UFFD_WP.
        const SW_UFFD_WP = 1 << 58;
    }
}

bitflags! {
    /// Hierarchical attributes of a table descriptor: they restrict everything the
    /// table maps, whatever the leaf descriptors below say.
    #[derive(Clone, Copy, Debug, PartialEq, Eq, Hash)]
    pub struct TableAttr: u64 {
        const PXN_TABLE = 1 << 59;
        const UXN_TABLE = 1 << 60;
    }
}

/// Inner-shareable (SH = 0b11).
pub const SH_INNER: Attr = Attr::SH0.union(Attr::SH1);
/// MT_NORMAL is AttrIndx 0 in Linux's MAIR layout.
pub const MT_NORMAL: u64 = 0;

/// Output-address mask for a 48-bit PA.
const OA_MASK: u64 = 0x0000_ffff_ffff_f000;

/// One 64-bit descriptor word.
#[derive(Clone, Copy, PartialEq, Eq, Hash, Default)]
#[repr(transparent)]
pub struct Desc(pub u64);

impl std::fmt::Debug for Desc {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        write!(f, "Desc({:#018x})", self.0)
    }
}

/// What a descriptor is, decoded for a given level.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum DescKind {
    /// Bit 0 clear: faults. May still carry software state (swap entry, PROT_NONE).
    Invalid,
    /// Points at the next-level table.
    Table(PhysAddr),
    /// Maps a block at level 1 or 2.
    Block(PhysAddr),
    /// Maps a page at level 3.
    Page(PhysAddr),
    /// Bit 1 clear at level 3, or a block where the granule forbids one: reserved, faults.
    Reserved,
}

impl Desc {
    pub const ZERO: Desc = Desc(0);

    #[inline]
    pub const fn attrs(self) -> Attr {
        Attr::from_bits_retain(self.0)
    }
    #[inline]
    pub const fn has(self, a: Attr) -> bool {
        self.0 & a.bits() == a.bits()
    }
    #[inline]
    pub const fn with(self, a: Attr) -> Desc {
        Desc(self.0 | a.bits())
    }
    #[inline]
    pub const fn without(self, a: Attr) -> Desc {
        Desc(self.0 & !a.bits())
    }
    #[inline]
    pub const fn is_valid(self) -> bool {
        self.0 & 1 != 0
    }
    #[inline]
    pub const fn is_none(self) -> bool {
        self.0 == 0
    }
    /// The output address (table, block or page base).
    #[inline]
    pub const fn oa(self) -> PhysAddr {
        PhysAddr(self.0 & OA_MASK)
    }
    #[inline]
    pub fn pfn(self, g: Granule) -> Pfn {
        self.oa().to_pfn(g)
    }
    /// Replace the output address, keeping every attribute.
    #[inline]
    pub const fn with_oa(self, pa: PhysAddr) -> Desc {
        Desc((self.0 & !OA_MASK) | (pa.0 & OA_MASK))
    }
    /// A table descriptor pointing at `table`.
    #[inline]
    pub const fn table(table: PhysAddr) -> Desc {
        Desc((table.0 & OA_MASK) | 0b11)
    }
    /// A table descriptor pointing at `table` with hierarchical attributes.
    #[inline]
    pub const fn table_with(table: PhysAddr, attrs: TableAttr) -> Desc {
        Desc(Desc::table(table).0 | attrs.bits())
    }
    /// The hierarchical attributes of a table descriptor.
    #[inline]
    pub const fn table_attrs(self) -> TableAttr {
        TableAttr::from_bits_truncate(self.0)
    }
    /// A level-3 page descriptor.
    #[inline]
    pub const fn page(pa: PhysAddr, attrs: Attr) -> Desc {
        Desc((pa.0 & OA_MASK) | attrs.bits() | 0b11)
    }
    /// A level-1/2 block descriptor.
    #[inline]
    pub const fn block(pa: PhysAddr, attrs: Attr) -> Desc {
        Desc(((pa.0 & OA_MASK) | attrs.bits() | 1) & !0b10)
    }

    /// Whether this is a table descriptor at `level`: what `kind` calls `Table`,
    /// without building the rest of the decode.
    #[inline]
    pub const fn is_table(self, level: u8) -> bool {
        level < PTE_LEVEL && self.0 & 0b11 == 0b11
    }

    /// Decode for `level` under granule `g`.
    pub fn kind(self, level: u8, g: Granule) -> DescKind {
        if !self.is_valid() {
            return DescKind::Invalid;
        }
        let table_bit = self.0 & 0b10 != 0;
        match (level == PTE_LEVEL, table_bit) {
            (true, true) => DescKind::Page(self.oa()),
            (true, false) => DescKind::Reserved,
            (false, true) => DescKind::Table(self.oa()),
            (false, false) if g.block_allowed_at(level) => DescKind::Block(self.oa()),
            (false, false) => DescKind::Reserved,
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    const ALL_BITS: [Attr; 19] = [
        Attr::VALID,
        Attr::TABLE_OR_PAGE,
        Attr::ATTRINDX0,
        Attr::ATTRINDX1,
        Attr::ATTRINDX2,
        Attr::NS,
        Attr::USER,
        Attr::RDONLY,
        Attr::SH0,
        Attr::SH1,
        Attr::AF,
        Attr::NG,
        Attr::DBM,
        Attr::CONT,
        Attr::PXN,
        Attr::UXN,
        Attr::SW_DIRTY,
        Attr::SW_SPECIAL,
        Attr::SW_UFFD_WP,
    ];

    #[test]
    fn every_bit_round_trips_without_touching_the_output_address() {
        for g in [Granule::K4, Granule::K16, Granule::K64] {
            let pa = PhysAddr(0x1234 << g.page_shift());
            for a in ALL_BITS {
                let d = Desc::page(pa, Attr::empty()).with(a);
                assert!(d.has(a), "{a:?}");
                assert_eq!(d.oa(), pa);
                let cleared = d.without(a);
                if a != Attr::VALID && a != Attr::TABLE_OR_PAGE {
                    assert!(!cleared.has(a));
                    assert_eq!(cleared.kind(3, g), DescKind::Page(pa));
                }
            }
        }
    }

    #[test]
    fn the_contiguous_bit_is_bit_52() {
        assert_eq!(Attr::CONT.bits(), 1 << 52);
        assert_eq!(Attr::AF.bits(), 1 << 10);
        assert_eq!(Attr::NG.bits(), 1 << 11);
        assert_eq!(Attr::DBM.bits(), 1 << 51);
        assert_eq!(Attr::PXN.bits(), 1 << 53);
        assert_eq!(Attr::UXN.bits(), 1 << 54);
    }

    #[test]
    fn table_attributes_sit_in_bits_59_and_60_and_leave_the_address_alone() {
        let pa = PhysAddr(0x4000_0000);
        let d = Desc::table_with(pa, TableAttr::PXN_TABLE | TableAttr::UXN_TABLE);
        assert_eq!(d.0 >> 59 & 0b11, 0b11);
        assert_eq!(d.kind(1, Granule::K4), DescKind::Table(pa));
        assert_eq!(
            Desc::table_with(pa, TableAttr::UXN_TABLE).table_attrs(),
            TableAttr::UXN_TABLE
        );
        assert!(Desc::table(pa).table_attrs().is_empty());
    }

    #[test]
    fn kinds_per_level_and_granule() {
        let pa = PhysAddr(0x4000_0000);
        assert_eq!(Desc::table(pa).kind(0, Granule::K4), DescKind::Table(pa));
        assert_eq!(Desc::block(pa, Attr::AF).kind(1, Granule::K4), DescKind::Block(pa));
        assert_eq!(Desc::block(pa, Attr::AF).kind(1, Granule::K16), DescKind::Reserved);
        assert_eq!(Desc::block(pa, Attr::AF).kind(2, Granule::K64), DescKind::Block(pa));
        assert_eq!(Desc::block(pa, Attr::AF).kind(3, Granule::K4), DescKind::Reserved);
        assert_eq!(Desc(0).kind(3, Granule::K4), DescKind::Invalid);
        assert_eq!(Desc::page(pa, Attr::AF).kind(3, Granule::K4), DescKind::Page(pa));
        for d in [
            Desc(0),
            Desc::table(pa),
            Desc::block(pa, Attr::AF),
            Desc::page(pa, Attr::AF),
            Desc(0b10),
        ] {
            for level in 0..=PTE_LEVEL {
                let table = matches!(d.kind(level, Granule::K4), DescKind::Table(_));
                assert_eq!(d.is_table(level), table, "{d:?} at level {level}");
            }
        }
    }

    #[test]
    fn with_oa_keeps_attributes() {
        let d = Desc::page(PhysAddr(0x1000), Attr::AF | Attr::CONT | Attr::UXN);
        let e = d.with_oa(PhysAddr(0x7_0000_0000));
        assert_eq!(
            e.attrs() - Attr::from_bits_retain(OA_MASK),
            d.attrs() - Attr::from_bits_retain(OA_MASK)
        );
        assert_eq!(e.oa(), PhysAddr(0x7_0000_0000));
    }
}
