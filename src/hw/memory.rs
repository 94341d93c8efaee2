//! Simulated physical memory.
//!
//! RAM is a range of frames; only frames that hold translation tables have host
//! storage, so a 1 TiB machine costs nothing until its tables exist. Table frames are
//! found through a map from frame to slot:
//!
//! ```text
//!  pfn ──► slots[pfn] ──► words[slot << bits ..]
//!          (hash map)      (one table page)
//! ```
//! Every table's storage lives in one flat array and a TableId is the offset of its
//! first word there, so a descriptor read is one indexed load: the walker's critical path
//! (which remembers the TableIds it found, `WalkHint`, and so rarely asks the map).
//! The array is reserved whole (`HugeBuf`) for the most tables the machine can hold, so
//! a new table neither moves the others nor is zeroed by the model: the host hands out
//! zeroed pages as slots are first used, a chunk of them at a time (`POPULATE_BYTES`,
//! then 2 MiB host pages).
//! The map costs a few bytes per table; an index by frame would cost host pages where
//! tables lie (a 4K page of it per 1024 frames: a 1 GiB order-0 run's 512 pte tables,
//! one every 512 frames, made the host fault in 256 pages of it for 2 KiB of entries).

use super::addr::{Granule, Pfn, PhysAddr};
use super::descriptor::Desc;
use crate::hostmem::HugeBuf;

/// Table storage the host is asked to back at once when a new slot needs it: in one
/// call, the 16 host pages of `hostmem`'s 64 KiB head, so a small run has the host clear
/// at most 60 KiB it does not use; past them, a 2 MiB page at a time.
const POPULATE_BYTES: usize = 64 << 10;

/// Host bytes the frame-to-slot map takes per table: a 16-byte entry and its control
/// byte, at the map's lowest load (just grown, 7/16 full).
const MAP_BYTES_PER_TABLE: u64 = 40;

/// A handle to the storage of one table frame (the offset of its first word in
/// `PhysMem::words`); valid until the frame's storage is released.
#[derive(Clone, Copy, Debug, PartialEq, Eq, Hash)]
pub struct TableId(u32);

impl TableId {
    /// Names no table: the placeholder in an empty TLB slot. Never a table's offset,
    /// which is a multiple of the table size.
    pub const NONE: TableId = TableId(u32::MAX);

    /// A number no other live table has, for use as a map key.
    #[inline]
    pub const fn key(self) -> u32 {
        self.0
    }
}

impl Default for TableId {
    fn default() -> TableId {
        TableId::NONE
    }
}

pub struct PhysMem {
    granule: Granule,
    nr_frames: u64,
    /// The slot of every frame that holds a table.
    slots: super::IntMap<u32>,
    /// Descriptor words of every table slot, slot after slot: room for `max_slots`
    /// slots, the first `frame_pfn.len()` of them ever used.
    words: HugeBuf<u64>,
    max_slots: usize,
    /// log2 of the descriptors in one table.
    table_bits: u32,
    frame_pfn: Vec<Pfn>,
    free_slots: Vec<u32>,
    /// Bumped whenever a frame gains or loses table storage, so a memo of which
    /// table a frame's storage is (`WalkHint`) knows when it may have gone stale.
    table_epoch: u64,
    /// Bumped by every write that may change a table descriptor (any but a
    /// `write_leaf`), so a memo of where a walk's upper levels led (`WalkHint`) can
    /// stand in for re-reading them while it is unchanged.
    upper_gen: u64,
    /// Bumped by every descriptor write of any level and whenever table storage is
    /// gained or lost, so a memo of a table's contents knows when it may be stale.
    desc_gen: u64,
}

impl PhysMem {
    pub fn new(granule: Granule, ram_bytes: u64) -> PhysMem {
        let nr_frames = ram_bytes >> granule.page_shift();
        let table_bits = granule.bits_per_level();
        // Every frame could hold a table, up to what a u32 TableId can name.
        let max_slots = nr_frames.min(Self::max_tables(granule)) as usize;
        PhysMem {
            granule,
            nr_frames,
            slots: super::IntMap::default(),
            // SAFETY: all-zero bytes are a valid u64 (an invalid descriptor). The
            // reservation is address space; the host backs it, zeroed, as slots are
            // first used. Slots are handed out from the first up, so huge pages past
            // the head: a 1 GiB order-0 run's 2 MiB of tables is one host fault there.
            words: unsafe { HugeBuf::zeroed(max_slots << table_bits) },
            max_slots,
            table_bits,
            frame_pfn: Vec::new(),
            free_slots: Vec::new(),
            table_epoch: 0,
            upper_gen: 0,
            desc_gen: 0,
        }
    }
    pub fn granule(&self) -> Granule {
        self.granule
    }
    pub fn nr_frames(&self) -> u64 {
        self.nr_frames
    }
    pub fn ram_bytes(&self) -> u64 {
        self.nr_frames << self.granule.page_shift()
    }
    /// Number of frames that currently have table storage.
    pub fn table_frames(&self) -> usize {
        self.frame_pfn.len() - self.free_slots.len()
    }

    /// Give `pfn` zeroed table storage (the frame is about to hold a translation table).
    pub fn materialize_table(&mut self, pfn: Pfn) -> TableId {
        assert!(pfn.0 < self.nr_frames, "{pfn:?} beyond RAM");
        let slot = match self.free_slots.pop() {
            Some(slot) => {
                let id = self.id_of_slot(slot);
                self.table_mut(id).fill(0);
                self.frame_pfn[slot as usize] = pfn;
                slot
            }
            None => {
                // Fails only on a machine with more frames than a TableId can name.
                assert!(
                    self.frame_pfn.len() < self.max_slots,
                    "no table slot left (a TableId names at most 2^32 descriptors)"
                );
                self.frame_pfn.push(pfn);
                self.populate_slots(self.frame_pfn.len());
                (self.frame_pfn.len() - 1) as u32
            }
        };
        let old = self.slots.insert(pfn.0, slot);
        assert!(old.is_none(), "{pfn:?} already holds a table");
        self.table_epoch += 1;
        self.desc_gen += 1;
        self.id_of_slot(slot)
    }

    /// Have the host back the first `slots` slots' storage, writable, a chunk ahead.
    /// Not left to the first access: reading a never-used slot (a pte_none check before
    /// the first set_pte) would map the host's zero page, and the first descriptor
    /// write would fault a second time.
    fn populate_slots(&mut self, slots: usize) {
        self.words.populate_to(slots << self.table_bits, POPULATE_BYTES);
    }

    /// Drop the table storage of `pfn` (the frame no longer holds a table).
    pub fn release_table(&mut self, pfn: Pfn) {
        let slot = self
            .slots
            .remove(&pfn.0)
            .unwrap_or_else(|| panic!("{pfn:?} holds no table"));
        // A free slot names no frame, so a stale TableId never passes for a live one.
        self.frame_pfn[slot as usize] = Pfn(u64::MAX);
        self.free_slots.push(slot);
        self.table_epoch += 1;
        self.desc_gen += 1;
    }

    /// Changes whenever the frame -> table storage mapping does.
    #[inline]
    pub fn table_epoch(&self) -> u64 {
        self.table_epoch
    }

    /// The table storage of `pfn`, if it holds a table.
    #[inline]
    pub fn table_id(&self, pfn: Pfn) -> Option<TableId> {
        self.slots.get(&pfn.0).map(|&slot| self.id_of_slot(slot))
    }
    #[inline]
    pub fn table_id_of(&self, pa: PhysAddr) -> Option<TableId> {
        self.table_id(pa.to_pfn(self.granule))
    }
    #[inline]
    pub fn table_pfn(&self, id: TableId) -> Pfn {
        self.frame_pfn[(id.0 >> self.table_bits) as usize]
    }
    #[inline]
    fn id_of_slot(&self, slot: u32) -> TableId {
        TableId(slot << self.table_bits)
    }
    #[inline]
    pub fn read(&self, id: TableId, index: usize) -> Desc {
        Desc(self.words[self.word(id, index)])
    }
    #[inline]
    fn word(&self, id: TableId, index: usize) -> usize {
        debug_assert!(index < 1 << self.table_bits);
        id.0 as usize + index
    }
    /// Write a descriptor of any level.
    #[inline]
    pub fn write(&mut self, id: TableId, index: usize, d: Desc) {
        self.upper_gen += 1;
        self.write_leaf(id, index, d);
    }
    /// Write a descriptor no walk follows to another table, before or after: any
    /// level-3 entry, or new access and dirty bits of a block. The upper generation stands.
    #[inline]
    pub fn write_leaf(&mut self, id: TableId, index: usize, d: Desc) {
        let w = self.word(id, index);
        self.desc_gen += 1;
        self.words[w] = d.0;
    }
    /// Write `nr` level-3 entries from `index`, the `i`th `first + i * step` (a run of
    /// pages' ptes, each the next frame's, or of empty ones): what `nr` calls of
    /// `write_leaf` leave, in one pass over the table. A progression, not a word per
    /// index from the caller, so the pass is vector stores.
    #[inline]
    pub fn write_leaf_run(&mut self, id: TableId, index: usize, nr: usize, first: u64, step: u64) {
        debug_assert!(index + nr <= 1 << self.table_bits);
        let w = self.word(id, index);
        self.desc_gen += nr as u64;
        for (i, slot) in self.words[w..w + nr].iter_mut().enumerate() {
            *slot = first.wrapping_add(step.wrapping_mul(i as u64));
        }
    }
    /// Changes whenever a descriptor above level 3 may have.
    #[inline]
    pub fn upper_gen(&self) -> u64 {
        self.upper_gen
    }
    /// Changes whenever any descriptor may have.
    #[inline]
    pub fn desc_gen(&self) -> u64 {
        self.desc_gen
    }
    /// The whole table, for bulk scans.
    #[inline]
    pub fn table(&self, id: TableId) -> &[u64] {
        let w = self.word(id, 0);
        &self.words[w..w + (1 << self.table_bits)]
    }
    #[inline]
    pub fn table_mut(&mut self, id: TableId) -> &mut [u64] {
        self.upper_gen += 1;
        self.desc_gen += 1;
        let w = self.word(id, 0);
        &mut self.words[w..w + (1 << self.table_bits)]
    }
    /// The most table frames storage holds: a TableId is a u32 word offset.
    pub fn max_tables(granule: Granule) -> u64 {
        (u32::MAX as u64 - 1) >> granule.bits_per_level()
    }

    /// Host bytes table storage needs for `tables` table frames: a page of
    /// descriptors each, its entry in the frame-to-slot map, and what is backed ahead
    /// of the last (at most the rest of a huge page).
    pub fn host_bytes_needed(granule: Granule, tables: u64) -> u64 {
        tables
            .saturating_mul(granule.page_size() + MAP_BYTES_PER_TABLE)
            .saturating_add(crate::hostmem::MAX_AHEAD)
    }

    /// Host bytes held by table storage (for memory reports).
    pub fn host_bytes(&self) -> usize {
        // The map's buckets are an eighth more than its capacity, 17 bytes each.
        self.words.populated() * 8 + self.slots.capacity() * 17 * 8 / 7
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn a_terabyte_costs_nothing_until_tables_exist() {
        let mut m = PhysMem::new(Granule::K4, 1 << 40);
        assert_eq!(m.nr_frames(), 1 << 28);
        assert_eq!(m.host_bytes(), 0);
        let id = m.materialize_table(Pfn((1 << 28) - 1));
        m.write(id, 511, Desc(0xabc3));
        assert_eq!(m.read(id, 511), Desc(0xabc3));
        assert!(m.host_bytes() < 1 << 20);
    }

    #[test]
    fn table_storage_needs() {
        assert_eq!(PhysMem::max_tables(Granule::K4), (1 << 23) - 1);
        let one = PhysMem::host_bytes_needed(Granule::K4, 1);
        assert_eq!(one, 4096 + MAP_BYTES_PER_TABLE + crate::hostmem::MAX_AHEAD);
    }

    #[test]
    fn released_storage_is_reused_zeroed() {
        let mut m = PhysMem::new(Granule::K16, 1 << 30);
        let a = m.materialize_table(Pfn(10));
        m.write(a, 3, Desc(7));
        m.release_table(Pfn(10));
        assert!(m.table_id(Pfn(10)).is_none());
        let b = m.materialize_table(Pfn(11));
        assert_eq!(a, b);
        assert_eq!(m.read(b, 3), Desc(0));
        assert_eq!(m.table_pfn(b), Pfn(11));
        assert_eq!(m.table(b).len(), 2048);
    }
}
