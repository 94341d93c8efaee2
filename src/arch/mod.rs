//! The architecture layer. `arm64` is the architecture the model runs; `x86` holds
//! x86's TLB shootdown, a second backend of the generic flush hooks below.

pub mod arm64;
pub mod x86;

use crate::hw::{Asid, PhysAddr};
use arm64::pgtable::Arch;
use arm64::tlbflush;

/// Whose shootdown the generic TLB flush hooks of reclaim and migration use: the
/// page flush of ptep_clear_flush, the batched flush's three hooks, and the
/// context switch.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum TlbFlavour {
    /// Broadcast TLBIs that every CPU's TLB receives, completed by a DSB ISH.
    Arm64,
    /// IPIs to the CPUs in mm_cpumask, each invalidating its own TLB
    /// (`x86::tlb`); the batched flush keeps a pending cpumask and sends one round.
    X86,
}

impl Arch {
    /// switch_mm on the current CPU's behalf: TTBR0 (and, under x86's flavour,
    /// switch_mm_irqs_off's mm_cpumask and CR3 flush); the kernel runs on `cpu` now.
    pub fn switch_mm(&mut self, cpu: usize, root: PhysAddr, asid: Asid) {
        self.cpu = cpu;
        if self.tlb_flush == TlbFlavour::X86 {
            self.x86.switch_mm_irqs_off(&mut self.hw, &mut self.kc, cpu, asid);
        }
        self.hw.switch_mm(cpu, root, asid);
    }

    /// `cpu` has nothing left to run. x86's flavour leaves the mm (the model has no
    /// lazy TLB mode: see `x86::tlb`); arm64's CPU keeps its TTBR0, which no broadcast
    /// misses.
    pub fn cpu_idle(&mut self, cpu: usize) {
        if self.tlb_flush == TlbFlavour::X86 {
            self.x86.leave_mm(&mut self.hw, &mut self.kc, cpu);
        }
    }

    /// flush_tlb_page.
    pub fn flush_tlb_page(&mut self, asid: Asid, addr: u64) {
        match self.tlb_flush {
            TlbFlavour::Arm64 => tlbflush::flush_tlb_page(&mut self.hw, asid, addr),
            TlbFlavour::X86 => {
                let ps = self.granule().page_size();
                self.x86.flush_tlb_mm_range(
                    &mut self.hw,
                    &mut self.kc,
                    self.cpu,
                    asid,
                    Some((addr, addr + ps)),
                    ps,
                    false,
                )
            }
        }
    }

    /// arch_tlbbatch_add_pending: arm64 issues the range's TLBIs now, unwaited; x86
    /// adds the mm's CPUs to the batch's cpumask.
    pub fn arch_tlbbatch_add_pending(&mut self, asid: Asid, start: u64, end: u64) {
        match self.tlb_flush {
            TlbFlavour::Arm64 => tlbflush::arch_tlbbatch_add_pending(&mut self.hw, asid, start, end),
            TlbFlavour::X86 => self.x86.arch_tlbbatch_add_pending(asid),
        }
    }

    /// arch_tlbbatch_flush: arm64 waits with one DSB ISH; x86 sends one IPI round.
    pub fn arch_tlbbatch_flush(&mut self) {
        match self.tlb_flush {
            TlbFlavour::Arm64 => tlbflush::arch_tlbbatch_flush(&mut self.hw),
            TlbFlavour::X86 => self.x86.arch_tlbbatch_flush(&mut self.hw, &mut self.kc, self.cpu),
        }
    }

    /// arch_flush_tlb_batched_pending: flush_tlb_mm on both.
    pub fn arch_flush_tlb_batched_pending(&mut self, asid: Asid) {
        match self.tlb_flush {
            TlbFlavour::Arm64 => tlbflush::arch_flush_tlb_batched_pending(&mut self.hw, asid),
            TlbFlavour::X86 => {
                let ps = self.granule().page_size();
                self.x86
                    .flush_tlb_mm_range(&mut self.hw, &mut self.kc, self.cpu, asid, None, ps, true)
            }
        }
    }
}
