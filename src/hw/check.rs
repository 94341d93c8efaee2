//! Architectural violations the hardware model detects. They are returned and
//! recorded as values, never panics, so tests can expect them.

use super::addr::{Asid, Pfn, VirtAddr};
use super::descriptor::Desc;

#[derive(Clone, Debug, PartialEq, Eq, thiserror::Error)]
pub enum Violation {
    /// A live descriptor changed in a way that needs break-before-make (output address,
    /// contiguous bit, block size, memory type, shareability or nG) without first being
    /// invalidated and its TLB entries removed; or an invalid descriptor was made valid
    /// with another output address or span while some TLB (pending TLBI or not) still
    /// holds the translation it had. `old` is the descriptor in memory at the write.
    #[error("break-before-make violated at {va:?} level {level}: {old:?} -> {new:?}")]
    BreakBeforeMake {
        va: VirtAddr,
        level: u8,
        old: Desc,
        new: Desc,
    },
    /// Two TLB entries of one CPU match one VA (the TLB-conflict condition). With
    /// BBML2_NOABORT, overlapping entries that agree on the output address are allowed.
    /// `va` and `asid` are those of the entry being filled.
    #[error("TLB conflict on cpu {cpu} at {va:?} (asid {asid:?})")]
    TlbConflict {
        cpu: usize,
        va: VirtAddr,
        asid: Option<Asid>,
    },
    /// A TLB entry still translates to a frame that was freed.
    #[error("stale translation: cpu {cpu} maps freed frame {pfn:?} at {va:?} (asid {asid:?})")]
    StaleTranslation {
        cpu: usize,
        va: VirtAddr,
        asid: Option<Asid>,
        pfn: Pfn,
    },
}
