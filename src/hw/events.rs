//! Architectural event counters with stable dotted names.
//!
//! Counting is an array increment on the hot path; names are only produced when a
//! snapshot is reported. Add an event by adding one line to `events!`.

/// `counters!(Enum, Set { Var => "name", ... })`: an enum of counters with stable
/// dotted names and a set of their counts (a `u64` array). Used for the architectural
/// events here and for the kernel's work counters (`crate::kcount`).
macro_rules! counters {
    ($(#[$m:meta])* $en:ident, $set:ident { $($var:ident => $name:literal,)* }) => {
        $(#[$m])*
        #[derive(Clone, Copy, Debug, PartialEq, Eq, Hash)]
        #[repr(u16)]
        pub enum $en { $($var,)* }

        impl $en {
            pub const ALL: &'static [$en] = &[$($en::$var,)*];
            pub const COUNT: usize = $en::ALL.len();
            /// The stable dotted name used in reports.
            pub const fn name(self) -> &'static str {
                match self { $($en::$var => $name,)* }
            }
        }

        /// A set of counts. Cheap to copy for snapshots.
        #[derive(Clone, PartialEq, Eq)]
        pub struct $set {
            counts: [u64; $en::COUNT],
        }

        impl Default for $set {
            fn default() -> Self {
                $set { counts: [0; $en::COUNT] }
            }
        }

        impl std::fmt::Debug for $set {
            fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
                f.debug_map().entries(self.iter_nonzero()).finish()
            }
        }

        impl $set {
            #[inline(always)]
            pub fn inc(&mut self, e: $en) {
                self.counts[e as usize] += 1;
            }
            #[inline(always)]
            pub fn add(&mut self, e: $en, n: u64) {
                self.counts[e as usize] += n;
            }
            #[inline]
            pub fn get(&self, e: $en) -> u64 {
                self.counts[e as usize]
            }
            /// Counts accumulated since `earlier` (a snapshot taken with `clone`).
            pub fn since(&self, earlier: &$set) -> $set {
                let mut d = $set::default();
                for i in 0..$en::COUNT {
                    d.counts[i] = self.counts[i] - earlier.counts[i];
                }
                d
            }
            /// Non-zero counts with their names, in declaration order.
            pub fn iter_nonzero(&self) -> impl Iterator<Item = (&'static str, u64)> + '_ {
                $en::ALL
                    .iter()
                    .filter(|e| self.get(**e) != 0)
                    .map(|e| (e.name(), self.get(*e)))
            }
        }
    };
}
pub(crate) use counters;

counters! {
    /// One architectural event.
    Event, Events {
    TlbiVae1is => "arch.tlbi.vae1is",
    TlbiVale1is => "arch.tlbi.vale1is",
    TlbiVaae1is => "arch.tlbi.vaae1is",
    TlbiVaale1is => "arch.tlbi.vaale1is",
    TlbiAside1is => "arch.tlbi.aside1is",
    TlbiVmalle1is => "arch.tlbi.vmalle1is",
    TlbiRvae1is => "arch.tlbi.rvae1is",
    TlbiRvale1is => "arch.tlbi.rvale1is",
    TlbiRvaae1is => "arch.tlbi.rvaae1is",
    TlbiRvaale1is => "arch.tlbi.rvaale1is",
    TlbiVale1 => "arch.tlbi.vale1",
    TlbiRvale1 => "arch.tlbi.rvale1",
    TlbiAside1 => "arch.tlbi.aside1",
    TlbiTotal => "arch.tlbi.total",
    DsbIsh => "arch.dsb.ish",
    DsbIshst => "arch.dsb.ishst",
    DsbNsh => "arch.dsb.nsh",
    DsbNshst => "arch.dsb.nshst",
    Ipi => "arch.ipi",
    Isb => "arch.isb",
    PteRead => "arch.pte.read",
    PteWrite => "arch.pte.write",
    PmdRead => "arch.pmd.read",
    PmdWrite => "arch.pmd.write",
    PudRead => "arch.pud.read",
    PudWrite => "arch.pud.write",
    PgdRead => "arch.pgd.read",
    PgdWrite => "arch.pgd.write",
    TlbHit => "arch.tlb.hit",
    TlbHitL1 => "arch.tlb.hit.l1",
    TlbHitL2 => "arch.tlb.hit.l2",
    TlbMiss => "arch.tlb.miss",
    TlbFill => "arch.tlb.fill",
    TlbFillCont => "arch.tlb.fill.cont",
    TlbEvict => "arch.tlb.evict",
    TlbInvalidated => "arch.tlb.invalidated",
    Walk => "arch.walk",
    WalkSteps => "arch.walk.steps",
    WalkFault => "arch.walk.fault",
    ContpteFold => "arch.contpte.fold",
    ContpteUnfold => "arch.contpte.unfold",
    ContpteConvert => "arch.contpte.convert",
    ContptePtepGet => "arch.contpte.ptep_get",
    ContptePtepGetReads => "arch.contpte.ptep_get.reads",
    FixmapMap => "arch.fixmap.map",
    FixmapUnmap => "arch.fixmap.unmap",
    TableAllocL0 => "arch.pgtable.alloc.l0",
    TableAllocL1 => "arch.pgtable.alloc.l1",
    TableAllocL2 => "arch.pgtable.alloc.l2",
    TableAllocL3 => "arch.pgtable.alloc.l3",
    TableFree => "arch.pgtable.free",
    PageZero => "arch.page.zero",
    PageCopy => "arch.page.copy",
    }
}

/// Test helper: every name starts with `prefix` and none repeats.
#[cfg(test)]
pub(crate) fn assert_names_unique(names: impl Iterator<Item = &'static str>, prefix: &str) {
    let mut names: Vec<_> = names.collect();
    let n = names.len();
    assert!(names.iter().all(|x| x.starts_with(prefix)));
    names.sort();
    names.dedup();
    assert_eq!(names.len(), n);
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn names_are_unique_and_dotted() {
        assert_names_unique(Event::ALL.iter().map(|e| e.name()), "arch.");
    }

    #[test]
    fn snapshot_diff() {
        let mut ev = Events::default();
        ev.add(Event::PteWrite, 5);
        let snap = ev.clone();
        ev.inc(Event::PteWrite);
        ev.inc(Event::DsbIsh);
        let d = ev.since(&snap);
        assert_eq!(d.get(Event::PteWrite), 1);
        assert_eq!(d.get(Event::DsbIsh), 1);
        assert_eq!(d.iter_nonzero().count(), 2);
    }
}
