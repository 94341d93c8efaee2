//! arch/arm64/mm/mmu.c: building the kernel's linear map (map_mem) in init_mm's
//! tables, reaching each new table through the fixmap.
//!
//! The linear map sends `pa` to `PAGE_OFFSET + (pa - memstart)`. Each memblock range
//! is mapped by `__create_pgd_mapping`, whose walkers pick, at each step, the largest
//! mapping that the alignment of `addr | next | phys` and the flags allow:
//!
//! ```text
//!  __create_pgd_mapping   pgd loop (p4d folded)               [init_entries, level 0]
//!   alloc_init_pud        pud table; 1G blocks (4K only)      [alloc_init_cont, 1 / init_entries, 1]
//!    alloc_init_cont_pmd  pmd table, split into CONT_PMD runs [alloc_init_cont, 2]
//!     init_pmd            sections (+CONT when the run is aligned) [init_entries, 2]
//!      alloc_init_cont_pte pte table, split into CONT_PTE runs [alloc_init_cont, 3]
//!       init_pte          ptes (+CONT when the run is aligned)     [set_leaves]
//! ```
//! The three alloc_init_* levels and the two block-or-table loops are one generic
//! function each; the kernel names stay as the entry points. With 64K pages the root
//! is level 1 (the pud is folded into the pgd), so the walk starts at alloc_init_pud's
//! loop over the root itself.
//!
//! How a table is reached is the variant of seed 003's series ([`PgtableFixmap`]).

use super::fixmap::{FixSlot, Fixmap};
use crate::hw::addr::PTE_LEVEL;
use crate::hw::descriptor::SH_INNER;
use crate::hw::{Attr, Desc, DescKind, Event, Features, Granule, Machine, PhysAddr, TableAttr, TableId, VirtAddr};
use crate::mm::memblock::Memblock;
use bitflags::bitflags;

/// PAGE_OFFSET for VA_BITS = 48: since 5.11 the linear map is the bottom half of the
/// kernel's VA space, `-(1 << 48)`.
pub const PAGE_OFFSET: u64 = 0xffff_0000_0000_0000;

bitflags! {
    /// The `flags` of __create_pgd_mapping.
    #[derive(Clone, Copy, Debug, PartialEq, Eq)]
    pub struct MapFlags: u32 {
        /// No pud/pmd blocks: map with ptes.
        const NO_BLOCK_MAPPINGS = 1 << 0;
        /// No contiguous bit at either level.
        const NO_CONT_MAPPINGS = 1 << 1;
        /// PXNTable on every table descriptor (nothing below is kernel-executable).
        const NO_EXEC_MAPPINGS = 1 << 2;
    }
}

/// How the walkers reach page-table pages through the fixmap: the steps of Ryan
/// Roberts' series (v6.10) that ends with seed 003. Per new table (4K granule):
///
/// | variant              | kernel                     | zero at alloc | populate maps      | pte barriers |
/// |----------------------|----------------------------|---------------|--------------------|--------------|
/// | `per-cont-block`     | up to 6.9                  | FIX_PTE, 1 TLBI | per CONT block (32 TLBIs) | per pte |
/// | `per-table`          | + "Don't remap pgtables per-cont(pte\|pmd) block" | FIX_PTE, 1 TLBI | once, 1 TLBI | per pte |
/// | `alloc-and-populate` | + "Batch dsb and isb"      | FIX_PTE, 1 TLBI | once, 1 TLBI    | from the fixmap clear |
/// | `once`               | + seed 003, 6.10 onwards   | clear_page + DSB ISHST while mapped to populate | once, 1 TLBI | from the fixmap clear |
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum PgtableFixmap {
    PerContBlock,
    PerTable,
    AllocAndPopulate,
    Once,
}

impl PgtableFixmap {
    pub const ALL: [PgtableFixmap; 4] = [
        PgtableFixmap::PerContBlock,
        PgtableFixmap::PerTable,
        PgtableFixmap::AllocAndPopulate,
        PgtableFixmap::Once,
    ];

    pub fn name(self) -> &'static str {
        match self {
            PgtableFixmap::PerContBlock => "per-cont-block",
            PgtableFixmap::PerTable => "per-table",
            PgtableFixmap::AllocAndPopulate => "alloc-and-populate",
            PgtableFixmap::Once => "once",
        }
    }
    pub fn parse(s: &str) -> Option<PgtableFixmap> {
        PgtableFixmap::ALL.into_iter().find(|v| v.name() == s)
    }
    /// early_pgtable_alloc zeroes the page through FIX_PTE (everything before seed 003).
    fn zero_at_alloc(self) -> bool {
        self != PgtableFixmap::Once
    }
    /// init_pmd / init_pte map the table per contiguous block rather than once per table.
    fn per_cont_block(self) -> bool {
        self == PgtableFixmap::PerContBlock
    }
    /// set_pte issues DSB ISHST + ISB after each kernel pte (before "Batch dsb and isb").
    fn pte_barriers(self) -> bool {
        matches!(self, PgtableFixmap::PerContBlock | PgtableFixmap::PerTable)
    }
}

/// The `rodata=` boot parameter.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum Rodata {
    /// rodata_full: the linear alias of read-only memory is made read-only too, so the
    /// linear map must be splittable (CONFIG_RODATA_FULL_DEFAULT_ENABLED, the default).
    Full,
    /// Read-only kernel text and rodata; the linear map is left alone. (Recent kernels
    /// alias `on` to `full`; here `on` keeps its older meaning.)
    On,
    Off,
}

impl Rodata {
    pub fn name(self) -> &'static str {
        match self {
            Rodata::Full => "full",
            Rodata::On => "on",
            Rodata::Off => "off",
        }
    }
    pub fn parse(s: &str) -> Option<Rodata> {
        [Rodata::Full, Rodata::On, Rodata::Off]
            .into_iter()
            .find(|v| v.name() == s)
    }
}

/// What the kernel build and command line decide about the linear map.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub struct LinearMapConfig {
    pub pgtable_fixmap: PgtableFixmap,
    pub rodata: Rodata,
    pub debug_pagealloc: bool,
    /// KFENCE with a late-allocated pool, which needs a splittable linear map.
    pub kfence: bool,
    /// The kernel image's [_stext, __init_begin), physical: map_mem marks it NOMAP for
    /// its main loop, then maps the linear alias with NO_CONT_MAPPINGS only, so
    /// blocks even where the rest of the linear map is pte-granular.
    pub kernel_image: Option<(u64, u64)>,
    /// 7.3's map_mem (`map-mem=alias-first`): the kernel's linear alias first, with
    /// map_mem's own flags ([_text, __init_begin) from `kernel_image`, then
    /// `kernel_data`), then every memory range whole, over it; nothing is NOMAP. 6.12
    /// and 6.1 (`nomap-image`) map the banks around the image, then its alias.
    pub alias_first: bool,
    /// The kernel's data and bss, [__init_end, __bss_stop), physical: 7.3's map_mem
    /// maps it second (the guests give [_sdata, _end) from /proc/iomem's "Kernel
    /// data": _sdata is __init_end, and _end lies past __bss_stop in the same pte
    /// table on these kernels, so no table and no TLBI differs).
    pub kernel_data: Option<(u64, u64)>,
    /// Five levels of tables (pgtable_l5_enabled(): a 52-bit VA kernel with 4K pages,
    /// CONFIG_ARM64_LPA2, on an LPA2 CPU, as Debian's 6.12 under QEMU's `-cpu max`).
    pub five_levels: bool,
}

impl Default for LinearMapConfig {
    fn default() -> Self {
        LinearMapConfig {
            pgtable_fixmap: PgtableFixmap::Once,
            rodata: Rodata::Full,
            debug_pagealloc: false,
            kfence: false,
            kernel_image: None,
            alias_first: true,
            kernel_data: None,
            five_levels: false,
        }
    }
}

impl LinearMapConfig {
    /// Whether the linear map must be pte-granular: can_set_direct_map() up to 6.17
    /// (rodata=full, kfence, debug_pagealloc). 6.18's force_pte_mapping() drops the
    /// rodata and kfence reasons on BBML2_NOABORT CPUs, which split blocks on demand;
    /// debug_pagealloc still forces ptes. `bbml2` on therefore means a 6.18 kernel.
    pub fn force_pte_mapping(&self, features: &Features) -> bool {
        (!features.bbml2 && (self.rodata == Rodata::Full || self.kfence)) || self.debug_pagealloc
    }

    /// map_mem's flags: never executable, pte-granular when forced.
    pub fn map_mem_flags(&self, m: &Machine) -> MapFlags {
        let mut flags = MapFlags::NO_EXEC_MAPPINGS;
        if self.force_pte_mapping(&m.cfg.features) {
            flags |= MapFlags::NO_BLOCK_MAPPINGS | MapFlags::NO_CONT_MAPPINGS;
        }
        flags
    }
}

/// PAGE_KERNEL: normal memory, inner shareable, accessed, writable (DBM set, RDONLY
/// clear), never executable. Global unless KPTI (PTE_MAYBE_NG).
pub fn page_kernel(m: &Machine) -> Attr {
    let prot = Attr::AF | SH_INNER | Attr::DBM | Attr::PXN | Attr::UXN;
    if m.cfg.features.kpti {
        prot | Attr::NG
    } else {
        prot
    }
}

/// pgattr_change_is_safe: whether a live kernel entry may go from `old` to `new`
/// without break-before-make. Creating or removing a mapping always may; otherwise the
/// frame must stay, nG may not be cleared, and only PXN, RDONLY, DBM (PTE_WRITE) and
/// nG may differ: CONT may not change, though an entry written again as it was may
/// keep it (7.3's map_mem maps the banks over the kernel's contiguous alias).
pub fn pgattr_change_is_safe(old: Desc, new: Desc) -> bool {
    if !old.is_valid() || !new.is_valid() {
        return true;
    }
    let mutable = Attr::PXN | Attr::RDONLY | Attr::DBM | Attr::NG;
    old.oa() == new.oa() && (!old.has(Attr::NG) || new.has(Attr::NG)) && (old.0 ^ new.0) & !mutable.bits() == 0
}

/// ARM64_MEMSTART_ALIGN: memstart_addr is DRAM's start rounded down to this, so the
/// linear map can use the largest blocks (at least a 128M memory section).
pub fn memstart_align(g: Granule) -> u64 {
    let shift = match g {
        Granule::K4 => g.pud_shift(),
        Granule::K16 => g.pmd_shift() + g.cont_pmd_shift(),
        Granule::K64 => g.pmd_shift(),
    };
    1 << shift.max(27)
}

const TABLE_ALLOC: [Event; 4] = [
    Event::TableAllocL0,
    Event::TableAllocL1,
    Event::TableAllocL2,
    Event::TableAllocL3,
];
/// Descriptor writes by hardware level, under the 4-level names (a folded pud is the pgd).
const WRITE: [Event; 4] = [Event::PgdWrite, Event::PudWrite, Event::PmdWrite, Event::PteWrite];

/// init_mm: the kernel's address space. No ASID, global entries, rooted at
/// swapper_pg_dir in TTBR1.
#[derive(Clone, Debug)]
pub struct InitMm {
    /// swapper_pg_dir.
    pub pgd: PhysAddr,
    pgd_table: TableId,
    /// With five levels, the p4d table below swapper_pg_dir's linear-map entry, once
    /// the first __create_pgd_mapping has allocated it.
    p4d: std::cell::Cell<Option<PhysAddr>>,
    pub fixmap: Fixmap,
    /// memstart_addr: the physical address PAGE_OFFSET maps.
    pub memstart: PhysAddr,
    pub cfg: LinearMapConfig,
}

impl InitMm {
    /// Boot up to paging_init. The kernel image sits at the start of DRAM and is
    /// reserved; only its page-table pages are modelled: swapper_pg_dir, then the
    /// fixmap's bm_pud/bm_pmd/bm_pte (one per level below the root), linked by
    /// early_fixmap_init. TTBR1 points at swapper_pg_dir.
    pub fn new(m: &mut Machine, mb: &mut Memblock, cfg: LinearMapConfig) -> InitMm {
        let g = m.granule();
        let ps = g.page_size();
        let image = mb.start_of_dram();
        let pages = 4 - g.start_level() as u64;
        mb.reserve(image, pages * ps);
        let pgd_table = m.mem.materialize_table(image.to_pfn(g));
        let bm: Vec<PhysAddr> = (1..pages).map(|i| PhysAddr(image.0 + i * ps)).collect();
        let fixmap = Fixmap::early_fixmap_init(m, pgd_table, &bm);
        m.ttbr1 = Some(image);
        let memstart = PhysAddr(image.0 & !(memstart_align(g) - 1));
        InitMm {
            pgd: image,
            pgd_table,
            p4d: std::cell::Cell::new(None),
            fixmap,
            memstart,
            cfg,
        }
    }

    /// __phys_to_virt for the linear map.
    pub fn phys_to_virt(&self, pa: PhysAddr) -> VirtAddr {
        VirtAddr(PAGE_OFFSET + (pa.0 - self.memstart.0))
    }

    /// map_mem: map every memblock range, in order, with PAGE_KERNEL. (The kernel maps
    /// its own image separately, without the contiguous bit; not modelled.)
    pub fn map_mem(&self, m: &mut Machine, mb: &mut Memblock) {
        let flags = self.cfg.map_mem_flags(m);
        let prot = page_kernel(m);
        if self.cfg.alias_first {
            let alias = [self.cfg.kernel_image, self.cfg.kernel_data].into_iter().flatten();
            let banks = mb
                .memory()
                .iter()
                .map(|r| (r.base.0, r.base.0 + r.size))
                .collect::<Vec<_>>();
            for (s, e) in alias.chain(banks) {
                self.__create_pgd_mapping(m, mb, PhysAddr(s), self.phys_to_virt(PhysAddr(s)), e - s, prot, flags);
            }
            return;
        }
        for r in mb.memory().to_vec() {
            // for_each_mem_range skips the NOMAP image: what lies either side of it.
            let (start, end) = (r.base.0, r.base.0 + r.size);
            let parts = match self.cfg.kernel_image {
                Some((is, ie)) => vec![(start, end.min(is)), (start.max(ie), end)],
                None => vec![(start, end)],
            };
            for (s, e) in parts.into_iter().filter(|(s, e)| s < e) {
                self.__create_pgd_mapping(m, mb, PhysAddr(s), self.phys_to_virt(PhysAddr(s)), e - s, prot, flags);
            }
        }
        if let Some((start, end)) = self.cfg.kernel_image {
            let base = PhysAddr(start);
            let flags = MapFlags::NO_CONT_MAPPINGS;
            self.__create_pgd_mapping(m, mb, base, self.phys_to_virt(base), end - start, prot, flags);
        }
    }

    /// __create_pgd_mapping with early_pgtable_alloc: map `[virt, virt + size)` to
    /// `phys` in swapper_pg_dir, which is still writable through the kernel image, so
    /// the root is written directly.
    #[allow(clippy::too_many_arguments)]
    pub fn __create_pgd_mapping(
        &self,
        m: &mut Machine,
        mb: &mut Memblock,
        phys: PhysAddr,
        virt: VirtAddr,
        size: u64,
        prot: Attr,
        flags: MapFlags,
    ) {
        let g = m.granule();
        let mask = g.page_size() - 1;
        let (addr, end) = (virt.0 & !mask, (virt.0 + size + mask) & !mask);
        let mut w = Mapper {
            m,
            mb,
            fixmap: self.fixmap,
            scheme: self.cfg.pgtable_fixmap,
            flags,
        };
        if self.cfg.five_levels {
            self.p4d.set(Some(w.alloc_init_p4d(self.p4d.get())));
        }
        w.init_entries(self.pgd_table, g.start_level(), addr, end, phys.0 & !mask, prot);
        if self.cfg.five_levels {
            w.fixmap.clear(w.m, FixSlot::P4d);
        }
    }
}

/// paging_init's part in the linear map: set up init_mm, then map_mem.
pub fn paging_init(m: &mut Machine, mb: &mut Memblock, cfg: LinearMapConfig) -> InitMm {
    let mm = InitMm::new(m, mb, cfg);
    mm.map_mem(m, mb);
    mm
}

/// pXd_addr_end: the end of the entry of span `size` holding `addr`, or `end` if
/// sooner (wrapping, so the last entry of the VA space works).
fn addr_end(addr: u64, end: u64, size: u64) -> u64 {
    let boundary = (addr | (size - 1)).wrapping_add(1);
    if boundary.wrapping_sub(1) < end.wrapping_sub(1) {
        boundary
    } else {
        end
    }
}

/// A descriptor's location: what the kernel's `pmd_t *pmdp` points at.
#[derive(Clone, Copy, Debug)]
struct Entry {
    table: TableId,
    index: usize,
}

/// One __create_pgd_mapping call in progress.
struct Mapper<'a> {
    m: &'a mut Machine,
    mb: &'a mut Memblock,
    fixmap: Fixmap,
    scheme: PgtableFixmap,
    flags: MapFlags,
}

impl Mapper<'_> {
    /// The entries of a mapped table at `level` over [addr, end): blocks where the
    /// granule allows one at this level, addr and phys are aligned and the flags permit,
    /// otherwise tables below. This is the loop of __create_pgd_mapping (level 0), of
    /// alloc_init_pud (1) and init_pmd (2).
    fn init_entries(&mut self, table: TableId, level: u8, mut addr: u64, end: u64, mut phys: u64, prot: Attr) {
        let g = self.m.granule();
        let size = 1u64 << g.level_shift(level);
        let blocks = g.block_allowed_at(level) && !self.flags.contains(MapFlags::NO_BLOCK_MAPPINGS);
        while addr != end {
            let entry = Entry {
                table,
                index: g.index(addr, level),
            };
            // A table already there stays (7.3's `!pXd_table(old)`: map_mem maps the
            // kernel's alias first, then the banks over it).
            let free = |i: u64| !self.m.mem.read(table, entry.index + i as usize).is_table(level);
            if blocks && (addr | phys) & (size - 1) == 0 && end - addr >= size && free(0) {
                // pud_set_huge / pmd_set_huge for every whole block from here.
                let n = (0..(end - addr) / size).take_while(|&i| free(i)).count() as u64;
                self.set_leaves(entry, n as usize, level, addr, phys, prot);
                (addr, phys) = (addr + n * size, phys + n * size);
            } else {
                let next = addr_end(addr, end, size);
                match level + 1 {
                    1 => self.alloc_init_pud(entry, addr, next, phys, prot),
                    2 => self.alloc_init_cont_pmd(entry, addr, next, phys, prot),
                    _ => self.alloc_init_cont_pte(entry, addr, next, phys, prot),
                }
                (addr, phys) = (next, phys + (next - addr));
            }
        }
    }

    /// alloc_init_p4d with five levels: the pgd entry's p4d table, allocated, cleared
    /// and hooked in (set_pgd: DSB ISHST + ISB) on the first call, then reached through
    /// FIX_P4D on every call until the walk below it is done (the caller clears the
    /// slot). The work is the kernel's; the model's MMU translates with four levels,
    /// its TTBR1 root standing for this table, so the pgd above it is not walked.
    fn alloc_init_p4d(&mut self, p4d: Option<PhysAddr>) -> PhysAddr {
        match p4d {
            Some(pa) => {
                self.fixmap.set(self.m, FixSlot::P4d, pa);
                pa
            }
            None => {
                let pa = self.pgtable_alloc(0);
                self.fixmap.set(self.m, FixSlot::P4d, pa);
                if self.scheme == PgtableFixmap::Once {
                    self.init_clear_pgtable();
                }
                self.m.dsb_ishst();
                self.m.isb();
                pa
            }
        }
    }

    fn alloc_init_pud(&mut self, p4d: Entry, addr: u64, end: u64, phys: u64, prot: Attr) {
        self.alloc_init_cont(p4d, 1, addr, end, phys, prot);
    }
    fn alloc_init_cont_pmd(&mut self, pud: Entry, addr: u64, end: u64, phys: u64, prot: Attr) {
        self.alloc_init_cont(pud, 2, addr, end, phys, prot);
    }
    fn alloc_init_cont_pte(&mut self, pmd: Entry, addr: u64, end: u64, phys: u64, prot: Attr) {
        self.alloc_init_cont(pmd, 3, addr, end, phys, prot);
    }
    fn init_pmd(&mut self, pmd_table: TableId, addr: u64, end: u64, phys: u64, prot: Attr) {
        self.init_entries(pmd_table, 2, addr, end, phys, prot);
    }
    /// init_pte: one pte per page, from a freshly mapped pte table.
    fn init_pte(&mut self, pte_table: TableId, addr: u64, end: u64, phys: u64, prot: Attr) {
        let g = self.m.granule();
        let n = ((end - addr) >> g.page_shift()) as usize;
        self.set_leaves(
            Entry {
                table: pte_table,
                index: g.index(addr, PTE_LEVEL),
            },
            n,
            PTE_LEVEL,
            addr,
            phys,
            prot,
        );
    }

    /// alloc_init_pud (level 1), alloc_init_cont_pmd (2), alloc_init_cont_pte (3):
    /// make `parent` point at a table of `level` (allocating one if it is none), map
    /// the table in its fixmap slot, and fill [addr, end) in contiguous-block runs,
    /// setting CONT on runs that are aligned in VA and PA.
    fn alloc_init_cont(&mut self, parent: Entry, level: u8, mut addr: u64, end: u64, mut phys: u64, prot: Attr) {
        let g = self.m.granule();
        let slot = FixSlot::for_level(level);
        let old = self.m.mem.read(parent.table, parent.index);
        let (pa, mut mapped) = if old.is_none() {
            let pa = self.pgtable_alloc(level);
            // Seed 003: map the new table once, to clear it and then populate it.
            let mapped = (self.scheme == PgtableFixmap::Once).then(|| {
                let t = self.fixmap.set(self.m, slot, pa);
                self.init_clear_pgtable();
                t
            });
            self.populate(parent, level - 1, addr, pa);
            (pa, mapped)
        } else {
            match old.kind(level - 1, g) {
                DescKind::Table(pa) => (pa, None),
                _ => panic!(
                    "BUG: {old:?} at level {} is not a table (pXd_bad / pXd_sect)",
                    level - 1
                ),
            }
        };
        if mapped.is_none() && !self.scheme.per_cont_block() {
            mapped = Some(self.fixmap.set(self.m, slot, pa));
        }
        // The pud level has no contiguous runs: the whole range is one.
        let cont = (level != 1).then(|| g.cont_entries_at(level) as u64 * (1u64 << g.level_shift(level)));
        while addr != end {
            let (next, prot) = match cont {
                Some(span) => {
                    let next = addr_end(addr, end, span);
                    let aligned = (addr | next | phys) & (span - 1) == 0;
                    (
                        next,
                        if aligned
                            && !self.flags.contains(MapFlags::NO_CONT_MAPPINGS)
                            && !self.range_has_valid_noncont(pa, level, addr)
                        {
                            prot | Attr::CONT
                        } else {
                            prot
                        },
                    )
                }
                None => (end, prot),
            };
            // Before the series, init_pmd / init_pte mapped the table per run.
            let table = mapped.unwrap_or_else(|| self.fixmap.set(self.m, slot, pa));
            match level {
                3 => self.init_pte(table, addr, next, phys, prot),
                2 => self.init_pmd(table, addr, next, phys, prot),
                _ => self.init_entries(table, 1, addr, next, phys, prot),
            }
            if mapped.is_none() {
                self.fixmap.clear(self.m, slot);
            }
            (addr, phys) = (next, phys + (next - addr));
        }
        if mapped.is_some() {
            // The clear's TLBI sequence also publishes the entries written above.
            self.fixmap.clear(self.m, slot);
        }
    }

    /// pte_range_has_valid_noncont / pmd_range_has_valid_noncont (7.3): a run that
    /// already holds a valid entry without CONT (the kernel's alias mapped first) gets
    /// no CONT when mapped again.
    fn range_has_valid_noncont(&self, table: PhysAddr, level: u8, addr: u64) -> bool {
        let g = self.m.granule();
        let t = self.m.mem.table_id(table.to_pfn(g)).expect("a populated table");
        let first = g.index(addr, level);
        (first..first + g.cont_entries_at(level)).any(|i| {
            let d = self.m.mem.read(t, i);
            d.is_valid() && !d.is_table(level) && !d.has(Attr::CONT)
        })
    }

    /// early_pgtable_alloc: a page from memblock, which becomes a table of `level`.
    /// Before seed 003 it was zeroed here through FIX_PTE (free whatever the level,
    /// since the new table is not mapped yet): one map and one TLBI more per table.
    fn pgtable_alloc(&mut self, level: u8) -> PhysAddr {
        let g = self.m.granule();
        let ps = g.page_size();
        let pa = self.mb.phys_alloc(ps, ps).expect("Failed to allocate page table page");
        self.m.mem.materialize_table(pa.to_pfn(g));
        self.m.ev.inc(TABLE_ALLOC[level as usize]);
        if self.scheme.zero_at_alloc() {
            self.fixmap.set(self.m, FixSlot::Pte, pa);
            // memset(0): host storage starts zeroed, so the clear is counted, not repeated.
            self.m.ev.inc(Event::PageZero);
            self.fixmap.clear(self.m, FixSlot::Pte);
        }
        pa
    }

    /// init_clear_pgtable: clear_page, then DSB ISHST so that table walks see the
    /// zeroes before the table is hooked in.
    fn init_clear_pgtable(&mut self) {
        self.m.ev.inc(Event::PageZero);
        self.m.dsb_ishst();
    }

    /// __pXd_populate: point `entry` (at `level`) at the table `pa`. set_pXd follows a
    /// valid write with DSB ISHST + ISB.
    fn populate(&mut self, entry: Entry, level: u8, va: u64, pa: PhysAddr) {
        let mut attrs = TableAttr::UXN_TABLE;
        if self.flags.contains(MapFlags::NO_EXEC_MAPPINGS) {
            attrs |= TableAttr::PXN_TABLE;
        }
        let d = Desc::table_with(pa, attrs);
        self.m.write_desc(entry.table, entry.index, level, VirtAddr(va), d);
        self.m.ev.inc(WRITE[level as usize]);
        self.m.dsb_ishst();
        self.m.isb();
    }

    /// Write `n` consecutive leaves from `entry` mapping `phys` upwards: pages at level 3
    /// (init_pte), blocks above (pud_set_huge / pmd_set_huge). Each write is checked
    /// with pgattr_change_is_safe as the kernel does and, when the machine's checks are
    /// on, goes through it so break-before-make is checked too.
    fn set_leaves(&mut self, entry: Entry, n: usize, level: u8, va: u64, phys: u64, prot: Attr) {
        let shift = self.m.granule().level_shift(level);
        let first = if level == PTE_LEVEL {
            Desc::page(PhysAddr(phys), prot)
        } else {
            Desc::block(PhysAddr(phys), prot)
        };
        let desc = |i: usize| first.with_oa(PhysAddr(phys + ((i as u64) << shift)));
        let bug = |old: Desc, new: Desc| panic!("BUG: unsafe change of a live kernel entry {old:?} -> {new:?}");
        if self.m.checks {
            for i in 0..n {
                let (index, new) = (entry.index + i, desc(i));
                let old = self.m.mem.read(entry.table, index);
                if !pgattr_change_is_safe(old, new) {
                    bug(old, new);
                }
                self.m
                    .write_desc(entry.table, index, level, VirtAddr(va + ((i as u64) << shift)), new);
            }
        } else {
            // The hot loop of a pte-granular boot: plain stores within one table.
            let entries = &mut self.m.mem.table_mut(entry.table)[entry.index..entry.index + n];
            for (i, e) in entries.iter_mut().enumerate() {
                let new = desc(i);
                if !pgattr_change_is_safe(Desc(*e), new) {
                    bug(Desc(*e), new);
                }
                *e = new.0;
            }
        }
        let ev = &mut self.m.ev;
        ev.add(WRITE[level as usize], n as u64);
        // set_pmd / set_pud, and set_pte before "Batch dsb and isb": DSB ISHST + ISB after
        // each valid kernel entry. Barriers do nothing else in the model: counted in bulk.
        if level != PTE_LEVEL || self.scheme.pte_barriers() {
            ev.add(Event::DsbIshst, n as u64);
            ev.add(Event::Isb, n as u64);
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::hw::walk::{walk, Translation};
    use crate::hw::{Events, MachineConfig};

    const BASE: u64 = 0x4000_0000;
    const K: u64 = 1 << 10;
    const M: u64 = 1 << 20;
    const G: u64 = 1 << 30;

    struct Booted {
        m: Machine,
        mm: InitMm,
        /// map_mem's events.
        ev: Events,
    }

    /// Boot with RAM at `ranges` (offset from BASE, size), checks on, and check
    /// break-before-make was never violated.
    fn boot(g: Granule, ranges: &[(u64, u64)], cfg: LinearMapConfig, bbml2: bool) -> Booted {
        let mut mb = Memblock::new();
        for &(off, size) in ranges {
            mb.add(PhysAddr(BASE + off), size);
        }
        let mut mc = MachineConfig {
            granule: g,
            ram_bytes: mb.end_of_dram().0,
            ncpus: 1,
            ..Default::default()
        };
        mc.features.bbml2 = bbml2;
        let mut m = Machine::new(mc);
        m.checks = true;
        let mm = InitMm::new(&mut m, &mut mb, cfg);
        let before = m.ev.clone();
        mm.map_mem(&mut m, &mut mb);
        assert!(m.violations.is_empty(), "{:?}", m.violations);
        let ev = m.ev.since(&before);
        Booted { m, mm, ev }
    }

    fn cfg(scheme: PgtableFixmap, rodata: Rodata) -> LinearMapConfig {
        LinearMapConfig {
            pgtable_fixmap: scheme,
            rodata,
            ..Default::default()
        }
    }

    fn tables(ev: &Events) -> [u64; 4] {
        TABLE_ALLOC.map(|e| ev.get(e))
    }

    /// Walk the linear alias of `pa` and check it lands there with kernel attributes.
    fn translate(b: &Booted, pa: u64) -> Translation {
        let va = b.mm.phys_to_virt(PhysAddr(pa));
        let t = walk(&b.m.mem, &mut Events::default(), b.m.ttbr1.unwrap(), va).unwrap();
        assert_eq!(t.pa, PhysAddr(pa), "{va:?}");
        assert!(
            t.desc.has(Attr::AF | Attr::PXN | Attr::UXN | SH_INNER | Attr::DBM),
            "{:?}",
            t.desc
        );
        assert!(!t.desc.has(Attr::NG) && !t.desc.has(Attr::RDONLY) && !t.desc.has(Attr::USER));
        t
    }

    /// (level, CONT) of the leaf mapping `pa`.
    fn leaf(b: &Booted, pa: u64) -> (u8, bool) {
        let t = translate(b, pa);
        (t.level, t.is_cont())
    }

    /// 3 GiB from BASE with a 2 MiB hole that is not pmd-aligned: pte tables and the
    /// pmd table around it are shared by both memblock ranges.
    const HOLED: [(u64, u64); 2] = [(0, G + 3 * M), (G + 5 * M, 2 * G - 5 * M)];

    #[test]
    fn pte_granular_tables_and_tlbis_before_and_after_seed_003() {
        // (ram, tables per level, table visits (map_mem entering a table), ptes)
        type Case<'a> = (&'a [(u64, u64)], [u64; 4], u64, u64);
        let cases: [Case; 3] = [
            (&[(0, 16 * M)], [0, 1, 1, 8], 10, 16 * M / 4096),
            (&[(0, G)], [0, 1, 1, 512], 514, G / 4096),
            // Range 1 visits pud 1, pmd 2, pte 512 + 2; range 2 visits pud 1, pmd 2, pte 1022.
            (&HOLED, [0, 1, 3, 1536], 1542, (3 * G - 2 * M) / 4096),
        ];
        for (ram, want_tables, visits, ptes) in cases {
            let before = boot(
                Granule::K4,
                ram,
                cfg(PgtableFixmap::AllocAndPopulate, Rodata::Full),
                false,
            );
            let after = boot(Granule::K4, ram, cfg(PgtableFixmap::Once, Rodata::Full), false);
            let allocated: u64 = want_tables.iter().sum();
            for b in [&before, &after] {
                assert_eq!(tables(&b.ev), want_tables);
                assert_eq!(b.ev.get(Event::TlbiVaale1is), b.ev.get(Event::TlbiTotal));
                assert_eq!(b.ev.get(Event::FixmapMap), b.ev.get(Event::TlbiTotal));
                assert_eq!(b.ev.get(Event::FixmapUnmap), b.ev.get(Event::TlbiTotal));
                // Every fixmap map and unmap is a pte write too.
                assert_eq!(b.ev.get(Event::PteWrite), ptes + 2 * b.ev.get(Event::FixmapMap));
            }
            // Before: one TLBI per table to zero it, one per visit to populate it.
            // After: one per visit. So before = after + tables, and with one memblock
            // range (each table visited once) exactly twice.
            assert_eq!(after.ev.get(Event::TlbiTotal), visits);
            assert_eq!(before.ev.get(Event::TlbiTotal), visits + allocated);
            if ram.len() == 1 {
                assert_eq!(before.ev.get(Event::TlbiTotal), 2 * after.ev.get(Event::TlbiTotal));
            }
            for pa in [0, 4096, 2 * M - 4096, ram[0].1 - 4096] {
                assert_eq!(leaf(&after, BASE + pa), (3, false));
            }
        }
    }

    #[test]
    fn every_step_of_the_series_on_16m() {
        // 10 tables (A), each visited once (V), 4096 ptes (P), 258 contiguous runs
        // (1 pud call + 1 pmd run + 8 x 32 pte runs) before the series.
        let (a, v, p, runs) = (10, 10, 4096, 258);
        // (scheme, TLBI, DSB ISHST, DSB ISH, ISB)
        let want = [
            // map+unmap per run and to zero each table; set_pte barriers; populate barriers.
            (
                PgtableFixmap::PerContBlock,
                a + runs,
                2 * a + 2 * runs + p + a,
                a + runs,
                2 * a + 2 * runs + p + a,
            ),
            (
                PgtableFixmap::PerTable,
                a + v,
                2 * a + 2 * v + p + a,
                a + v,
                2 * a + 2 * v + p + a,
            ),
            (
                PgtableFixmap::AllocAndPopulate,
                a + v,
                2 * a + 2 * v + a,
                a + v,
                2 * a + 2 * v + a,
            ),
            // map, clear_page's DSB, populate, unmap.
            (PgtableFixmap::Once, v, v + a + a + v, v, v + a + v),
        ];
        for (scheme, tlbi, ishst, ish, isb) in want {
            let b = boot(Granule::K4, &[(0, 16 * M)], cfg(scheme, Rodata::Full), false);
            let got = [Event::TlbiTotal, Event::DsbIshst, Event::DsbIsh, Event::Isb].map(|e| b.ev.get(e));
            assert_eq!(got, [tlbi, ishst, ish, isb], "{}", scheme.name());
            assert_eq!(b.ev.get(Event::PageZero), a);
            assert_eq!(
                [Event::PgdWrite, Event::PudWrite, Event::PmdWrite].map(|e| b.ev.get(e)),
                [1, 1, 8]
            );
            assert_eq!(leaf(&b, BASE + 5 * M + 12 * K), (3, false));
        }
    }

    #[test]
    fn before_the_series_a_full_pte_table_costs_33_tlbis() {
        let b = boot(
            Granule::K4,
            &[(0, G)],
            cfg(PgtableFixmap::PerContBlock, Rodata::Full),
            false,
        );
        // 514 tables zeroed; pud mapped once, pmd per 32M run (32), pte per 64K run (512 x 32).
        assert_eq!(b.ev.get(Event::TlbiTotal), 514 + 1 + 32 + 512 * 32);
    }

    #[test]
    fn block_and_contiguous_mappings_where_aligned() {
        let off = |scheme| cfg(scheme, Rodata::Off);
        // 1 GiB at a 1 GiB-aligned base: one pud block, no table below the pud.
        let b = boot(Granule::K4, &[(0, G)], off(PgtableFixmap::Once), false);
        assert_eq!(tables(&b.ev), [0, 1, 0, 0]);
        assert_eq!(leaf(&b, BASE + 0x1234_5678), (1, false));
        // 64 MiB: two contiguous runs of 16 sections.
        let b = boot(Granule::K4, &[(0, 64 * M)], off(PgtableFixmap::Once), false);
        assert_eq!(tables(&b.ev), [0, 1, 1, 0]);
        assert_eq!(leaf(&b, BASE + 63 * M), (2, true));
        assert_eq!(b.ev.get(Event::PmdWrite), 32);
        // 6 MiB: sections, but no aligned 32 MiB run.
        let b = boot(Granule::K4, &[(0, 6 * M)], off(PgtableFixmap::Once), false);
        assert_eq!(leaf(&b, BASE + 5 * M), (2, false));
        // 1 MiB + 68 KiB: 17 contiguous runs of ptes, then one plain pte.
        let b = boot(Granule::K4, &[(0, M + 68 * K)], off(PgtableFixmap::Once), false);
        assert_eq!(leaf(&b, BASE), (3, true));
        assert_eq!(leaf(&b, BASE + M + 60 * K), (3, true));
        assert_eq!(leaf(&b, BASE + M + 64 * K), (3, false));
        assert_eq!(tables(&b.ev), [0, 1, 1, 1]);
    }

    #[test]
    fn a_holed_map_uses_every_size_and_both_schemes_agree_on_it() {
        let mut seen = Vec::new();
        for scheme in PgtableFixmap::ALL {
            let b = boot(Granule::K4, &HOLED, cfg(scheme, Rodata::Off), false);
            let samples = [
                (0, (1, false)),                // [0, 1G): a pud block
                (G + M, (2, false)),            // [1G, 1G+2M): a section; its 32M run is cut by the hole
                (G + 2 * M + 4 * K, (3, true)), // [1G+2M, 1G+3M): contiguous ptes
                (G + 5 * M + 8 * K, (3, true)), // [1G+5M, 1G+6M): contiguous ptes
                (G + 7 * M, (2, false)),        // [1G+6M, 1G+32M): sections
                (G + 40 * M, (2, true)),        // [1G+32M, 2G): contiguous sections
                (2 * G + 5, (1, false)),        // [2G, 3G): a pud block
            ];
            for (off, want) in samples {
                assert_eq!(leaf(&b, BASE + off), want, "{} at +{off:#x}", scheme.name());
            }
            // The hole is not mapped.
            let hole = b.mm.phys_to_virt(PhysAddr(BASE + G + 4 * M));
            assert!(walk(&b.m.mem, &mut Events::default(), b.mm.pgd, hole).is_err());
            seen.push(tables(&b.ev));
        }
        assert!(seen.iter().all(|t| *t == [0, 1, 1, 2]), "{seen:?}");
    }

    #[test]
    fn rodata_full_keeps_blocks_only_with_bbml2() {
        let full = cfg(PgtableFixmap::Once, Rodata::Full);
        assert_eq!(leaf(&boot(Granule::K4, &[(0, G)], full, false), BASE), (3, false));
        assert_eq!(leaf(&boot(Granule::K4, &[(0, G)], full, true), BASE), (1, false));
        let dpa = LinearMapConfig {
            debug_pagealloc: true,
            ..full
        };
        assert_eq!(leaf(&boot(Granule::K4, &[(0, G)], dpa, true), BASE), (3, false));
        let kfence = LinearMapConfig {
            kfence: true,
            ..cfg(PgtableFixmap::Once, Rodata::Off)
        };
        assert_eq!(leaf(&boot(Granule::K4, &[(0, G)], kfence, false), BASE), (3, false));
        assert_eq!(leaf(&boot(Granule::K4, &[(0, G)], kfence, true), BASE), (1, false));
        assert_eq!(
            leaf(
                &boot(Granule::K4, &[(0, G)], cfg(PgtableFixmap::Once, Rodata::On), false),
                BASE
            ),
            (1, false)
        );
    }

    #[test]
    fn other_granules() {
        // 16K: 4 levels, a 64G pud entry, 32M pmd entries.
        let b = boot(Granule::K16, &[(0, G)], cfg(PgtableFixmap::Once, Rodata::Full), false);
        assert_eq!(tables(&b.ev), [0, 1, 1, 32]);
        assert_eq!(b.ev.get(Event::TlbiTotal), 34);
        assert_eq!(leaf(&b, BASE + G - 16 * K), (3, false));
        // 16K blocks: 32 sections of 32M form one contiguous 1G run.
        let b = boot(Granule::K16, &[(0, G)], cfg(PgtableFixmap::Once, Rodata::Off), false);
        assert_eq!(leaf(&b, BASE + 100 * M), (2, true));
        // 64K: 3 levels, the root is the (folded) pud: no pud table, no FIX_PUD.
        let b = boot(
            Granule::K64,
            &[(0, G)],
            cfg(PgtableFixmap::AllocAndPopulate, Rodata::Full),
            false,
        );
        assert_eq!(tables(&b.ev), [0, 0, 1, 2]);
        assert_eq!(b.ev.get(Event::TlbiTotal), 3 + 3);
        assert_eq!(leaf(&b, BASE + 600 * M + 64 * K), (3, false));
        // 64K blocks: 512M sections; a contiguous run would need 16G.
        let b = boot(Granule::K64, &[(0, G)], cfg(PgtableFixmap::Once, Rodata::Off), false);
        assert_eq!(leaf(&b, BASE + 600 * M), (2, false));
    }

    #[test]
    fn tables_come_from_the_top_of_ram_and_are_never_executable() {
        let b = boot(
            Granule::K4,
            &[(0, 16 * M)],
            cfg(PgtableFixmap::Once, Rodata::Full),
            false,
        );
        let root = b.m.mem.table_id_of(b.mm.pgd).unwrap();
        let pgd = b.m.mem.read(root, 0);
        // The first allocation is the pud table, from the last page of RAM.
        assert_eq!(
            pgd.kind(0, Granule::K4),
            DescKind::Table(PhysAddr(BASE + 16 * M - 4096))
        );
        assert_eq!(pgd.table_attrs(), TableAttr::PXN_TABLE | TableAttr::UXN_TABLE);
        // Every fixmap slot was given back, so the fixmap VAs fault at the pte level.
        for slot in [FixSlot::Pte, FixSlot::Pmd, FixSlot::Pud] {
            assert_eq!(b.mm.fixmap.mapped(&b.m, slot), None);
            let va = super::super::fixmap::fix_to_virt(&b.m, slot);
            assert_eq!(
                walk(&b.m.mem, &mut Events::default(), b.mm.pgd, va).unwrap_err().level,
                3
            );
        }
    }

    #[test]
    fn kpti_makes_kernel_mappings_non_global() {
        let mut m = Machine::new(MachineConfig {
            ram_bytes: 2 * G,
            ..Default::default()
        });
        assert!(!page_kernel(&m).contains(Attr::NG));
        m.cfg.features.kpti = true;
        assert!(page_kernel(&m).contains(Attr::NG));
    }

    #[test]
    fn pgattr_change_is_safe_allows_only_permission_changes() {
        let pa = PhysAddr(0x8000_0000);
        let live = Desc::page(pa, Attr::AF | SH_INNER | Attr::PXN);
        assert!(pgattr_change_is_safe(Desc::ZERO, live));
        assert!(pgattr_change_is_safe(live, Desc::ZERO));
        assert!(pgattr_change_is_safe(live, live.with(Attr::RDONLY).without(Attr::PXN)));
        assert!(pgattr_change_is_safe(live, live.with(Attr::NG)));
        assert!(!pgattr_change_is_safe(live.with(Attr::NG), live));
        assert!(!pgattr_change_is_safe(live, live.with_oa(PhysAddr(0x8000_1000))));
        assert!(!pgattr_change_is_safe(live, live.with(Attr::CONT)));
        assert!(!pgattr_change_is_safe(live.with(Attr::CONT), live));
        assert!(pgattr_change_is_safe(live.with(Attr::CONT), live.with(Attr::CONT)));
        assert!(!pgattr_change_is_safe(live, live.with(Attr::UXN)));
    }

    #[test]
    fn addr_end_wraps_at_the_top_of_the_va_space() {
        assert_eq!(addr_end(0xffff_ff80_0000_0000, 0, 1 << 39), 0);
        assert_eq!(addr_end(PAGE_OFFSET, PAGE_OFFSET + 3 * G, G), PAGE_OFFSET + G);
        assert_eq!(addr_end(PAGE_OFFSET, PAGE_OFFSET + M, G), PAGE_OFFSET + M);
    }
}
