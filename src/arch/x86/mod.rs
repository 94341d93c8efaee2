//! The x86 flavour of TLB shootdown (`tlb-flush=x86`), run on the model's arm64
//! hardware: the design seed 001's series extended to arm64, kept as a second backend
//! of the same generic hooks so one run can set arm64's broadcast TLBIs beside x86's
//! IPIs for the same reclaim.

pub mod tlb;
