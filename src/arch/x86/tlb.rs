//! arch/x86/mm/tlb.c (6.18, without INVLPGB and without PCID): mm_cpumask, IPIs to
//! the CPUs that run an mm, and local invalidation on each.
//!
//! ```text
//!   initiating CPU                        each other CPU in the mask
//!   flush_tlb_mm_range / arch_tlbbatch_flush
//!     native_flush_tlb_multi(mask)  --IPI-->  flush_tlb_func
//!       should_flush_tlb(cpu)?                 mm loaded?  no: leave the mask
//!       flush_tlb_func (itself, if set)                    yes: INVLPG per page,
//!     waits for every target                                    or all (> 33 pages)
//! ```
//!
//! The hardware is arm64's, so INVLPG is a local TLBI VALE1 and a full flush a local
//! TLBI ASIDE1, each completed by a DSB NSH. The model's CPUs are never lazy: a
//! thread keeps running where it was put, and a CPU left with nothing to run leaves
//! the mm (leave_mm) instead of keeping it lazily. Without PCID, switching a CPU to
//! another mm drops the old mm's entries (a CR3 write), so a CPU holds entries only
//! of the mm it has loaded; the x86 kernel's per-CPU TLB generations then never
//! skip a flush, and are left out.

use crate::cpumask::CpuMask;
use crate::hw::{Asid, LocalTlbi, Machine, VirtAddr};
use crate::kcount::{KernelEvent, KernelEvents};
use std::collections::{BTreeMap, BTreeSet};

/// tlb_single_page_flush_ceiling: a flush of more pages flushes everything.
pub const TLB_SINGLE_PAGE_FLUSH_CEILING: u64 = 33;

/// The x86 kernel's shootdown state.
#[derive(Clone, Debug, Default)]
pub struct X86Tlb {
    /// cpu_tlbstate.loaded_mm, by CPU (the mm's ASID; None for init_mm).
    loaded: Vec<Option<Asid>>,
    /// mm_cpumask, by mm: the CPUs that loaded it and have not left the mask since.
    mm_cpumask: BTreeMap<Asid, CpuMask>,
    /// The mms whose cpumask was trimmed. should_trim_cpumask asks for a trim once a
    /// second (jiffies past next_trim_cpumask, which starts at 0), so the first
    /// remote flush of an mm trims it; a model run lasts less than a second of
    /// jiffies, so no other does.
    trimmed: BTreeSet<Asid>,
    /// arch_tlbflush_unmap_batch.cpumask: the CPUs reclaim owes a flush.
    batch: CpuMask,
}

/// struct flush_tlb_info, as far as the model needs it.
#[derive(Clone, Copy, Debug)]
struct FlushInfo {
    /// None: whatever mm each CPU has loaded (the batched flush).
    mm: Option<Asid>,
    /// None: TLB_FLUSH_ALL.
    range: Option<(u64, u64)>,
    stride: u64,
    freed_tables: bool,
    trim_cpumask: bool,
}

impl X86Tlb {
    pub fn new(ncpus: usize) -> X86Tlb {
        X86Tlb {
            loaded: vec![None; ncpus],
            ..X86Tlb::default()
        }
    }

    /// mm_cpumask(mm).
    pub fn mm_cpumask(&self, mm: Asid) -> CpuMask {
        self.mm_cpumask.get(&mm).copied().unwrap_or_default()
    }

    /// switch_mm_irqs_off: `cpu` loads `next`. The old mm's bit stays set (6.18 trims
    /// the mask lazily, in flush_tlb_func); its entries go with the CR3 write.
    pub fn switch_mm_irqs_off(&mut self, hw: &mut Machine, kc: &mut KernelEvents, cpu: usize, next: Asid) {
        let prev = self.loaded[cpu];
        if prev == Some(next) {
            return;
        }
        if let Some(asid) = prev {
            kc.inc(KernelEvent::SwitchMmFlush);
            hw.tlbi_local(cpu, LocalTlbi::Aside1 { asid });
        }
        self.mm_cpumask.entry(next).or_default().set(cpu);
        self.loaded[cpu] = Some(next);
    }

    /// leave_mm: an idle `cpu` switches to init_mm, dropping its mm's entries; the
    /// mask keeps its bit until a flush trims it.
    pub fn leave_mm(&mut self, hw: &mut Machine, kc: &mut KernelEvents, cpu: usize) {
        if let Some(asid) = self.loaded[cpu].take() {
            kc.inc(KernelEvent::SwitchMmFlush);
            hw.tlbi_local(cpu, LocalTlbi::Aside1 { asid });
        }
    }

    /// flush_tlb_mm_range, run on `cpu`: IPIs to the other CPUs of the mm's mask,
    /// or only a local flush when no other CPU is in it.
    #[allow(clippy::too_many_arguments)]
    pub fn flush_tlb_mm_range(
        &mut self,
        hw: &mut Machine,
        kc: &mut KernelEvents,
        cpu: usize,
        mm: Asid,
        range: Option<(u64, u64)>,
        stride: u64,
        freed_tables: bool,
    ) {
        let range = range.filter(|&(s, e)| (e - s) / stride <= TLB_SINGLE_PAGE_FLUSH_CEILING);
        let mut info = FlushInfo {
            mm: Some(mm),
            range,
            stride,
            freed_tables,
            trim_cpumask: false,
        };
        let mask = self.mm_cpumask(mm);
        if mask.any_but(cpu) {
            info.trim_cpumask = self.trimmed.insert(mm);
            self.native_flush_tlb_multi(hw, kc, cpu, mask, info);
        } else if self.loaded[cpu] == Some(mm) {
            self.flush_tlb_func(hw, kc, cpu, info);
        }
    }

    /// arch_tlbbatch_add_pending: no TLBI yet; the mm's CPUs join the batch.
    pub fn arch_tlbbatch_add_pending(&mut self, mm: Asid) {
        let m = self.mm_cpumask(mm);
        self.batch.or(&m);
    }

    /// arch_tlbbatch_flush, run on `cpu`: one round of IPIs to every CPU of the
    /// batch, each flushing all of its loaded mm.
    pub fn arch_tlbbatch_flush(&mut self, hw: &mut Machine, kc: &mut KernelEvents, cpu: usize) {
        let info = FlushInfo {
            mm: None,
            range: None,
            stride: hw.granule().page_size(),
            freed_tables: false,
            trim_cpumask: false,
        };
        let batch = std::mem::take(&mut self.batch);
        if batch.any_but(cpu) {
            self.native_flush_tlb_multi(hw, kc, cpu, batch, info);
        } else if batch.test(cpu) {
            self.flush_tlb_func(hw, kc, cpu, info);
        }
    }

    /// native_flush_tlb_multi: flush_tlb_func on every CPU of `mask` that
    /// should_flush_tlb picks (all of them when tables were freed), by IPI on the
    /// others; the caller waits for them all.
    fn native_flush_tlb_multi(
        &mut self,
        hw: &mut Machine,
        kc: &mut KernelEvents,
        cpu: usize,
        mask: CpuMask,
        info: FlushInfo,
    ) {
        kc.inc(KernelEvent::FlushTlbMulti);
        for target in mask.iter() {
            if !(info.freed_tables || self.should_flush_tlb(target, &info)) {
                continue;
            }
            if target != cpu {
                hw.send_ipi(cpu, target);
            }
            self.flush_tlb_func(hw, kc, target, info);
        }
    }

    /// should_flush_tlb: no CPU is lazy here, so a CPU is flushed when it runs the mm,
    /// for a batched flush (any mm), or to trim the mask.
    fn should_flush_tlb(&self, cpu: usize, info: &FlushInfo) -> bool {
        match info.mm {
            None => true,
            Some(mm) => self.loaded[cpu] == Some(mm) || info.trim_cpumask,
        }
    }

    /// flush_tlb_func on `cpu`: a CPU that has moved on to another mm leaves the mask;
    /// otherwise one INVLPG per page of the range, or a flush of the whole loaded mm.
    fn flush_tlb_func(&mut self, hw: &mut Machine, kc: &mut KernelEvents, cpu: usize, info: FlushInfo) {
        let Some(loaded) = self.loaded[cpu] else {
            return;
        };
        if let Some(mm) = info.mm.filter(|&mm| mm != loaded) {
            if let Some(m) = self.mm_cpumask.get_mut(&mm) {
                m.clear_cpu(cpu);
            }
            return;
        }
        kc.inc(KernelEvent::FlushTlbFunc);
        match info.range {
            None => hw.tlbi_local(cpu, LocalTlbi::Aside1 { asid: loaded }),
            Some((start, end)) => {
                for va in (start..end).step_by(info.stride as usize) {
                    hw.tlbi_local(
                        cpu,
                        LocalTlbi::Vale1 {
                            asid: loaded,
                            va: VirtAddr(va),
                        },
                    );
                }
            }
        }
    }
}
