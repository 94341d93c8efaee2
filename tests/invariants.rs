//! Property test: random sequences of mmap / touch / madvise / munmap / migrate (between
//! two NUMA nodes) over random THP
//! settings and model variants keep every kernel and architectural invariant.
//! 200 cases x 500 ops = 100,000 ops per run.

use foliolab::hw::MachineConfig;
use foliolab::mm::madvise::Madv;
use foliolab::mm::mm_types::VmFlags;
use foliolab::mm::{Kernel, ZapVariant};
use foliolab::sim::user_access;
use proptest::prelude::*;
use proptest::test_runner::{Config, FileFailurePersistence};

const BASE: u64 = 0x1000_0000_0000;
const SLOT: u64 = 0x10_0000_0000;
const PAGE: u64 = 4096;
const MODES: [&str; 4] = ["always", "inherit", "madvise", "never"];

#[derive(Clone, Debug)]
enum Op {
    Knob {
        size_kb: u64,
        mode: usize,
    },
    Top {
        mode: usize,
    },
    Mmap {
        slot: u64,
        pages: u64,
        skew: u64,
        huge: u8,
    },
    Touch {
        slot: u64,
        first: u64,
        pages: u64,
        write: bool,
        stride: u64,
    },
    Madvise {
        slot: u64,
        first: u64,
        pages: u64,
        advice: u8,
    },
    Munmap {
        slot: u64,
        first: u64,
        pages: u64,
    },
    Migrate {
        slot: u64,
        first: u64,
        pages: u64,
        node: usize,
    },
}

fn op() -> impl Strategy<Value = Op> {
    let slot = 0..4u64;
    prop_oneof![
        1 => (prop::sample::select(vec![16u64, 32, 64, 128, 256, 512, 1024, 2048]), 0..4usize).prop_map(|(size_kb, mode)| Op::Knob { size_kb, mode }),
        1 => (0..4usize).prop_map(|mode| Op::Top { mode }),
        2 => (slot.clone(), 1..2048u64, 0..32u64, 0..3u8).prop_map(|(slot, pages, skew, huge)| Op::Mmap { slot, pages, skew, huge }),
        6 => (slot.clone(), 0..2048u64, 1..1024u64, any::<bool>(), prop::sample::select(vec![1u64, 1, 1, 3, 16])).prop_map(|(slot, first, pages, write, stride)| Op::Touch { slot, first, pages, write, stride }),
        3 => (slot.clone(), 0..2048u64, 1..600u64, 0..3u8).prop_map(|(slot, first, pages, advice)| Op::Madvise { slot, first, pages, advice }),
        2 => (slot.clone(), 0..2048u64, 1..2048u64).prop_map(|(slot, first, pages)| Op::Munmap { slot, first, pages }),
        1 => (slot, 0..2048u64, 1..2048u64, 0..2usize).prop_map(|(slot, first, pages, node)| Op::Migrate { slot, first, pages, node }),
    ]
}

/// The live region in each slot: (start, pages).
type Regions = [Option<(u64, u64)>; 4];

/// Clip [first, first+pages) to the region in `slot`, if any.
fn clip(regions: &Regions, slot: u64, first: u64, pages: u64) -> Option<(u64, u64)> {
    let (start, n) = regions[slot as usize]?;
    let first = first % n;
    let pages = pages.min(n - first);
    Some((start + first * PAGE, start + (first + pages) * PAGE))
}

fn apply(k: &mut Kernel, mm: usize, regions: &mut Regions, op: &Op) {
    match *op {
        Op::Knob { size_kb, mode } => k
            .knobs
            .set(&format!("hugepages-{size_kb}kB/enabled"), MODES[mode])
            .unwrap(),
        Op::Top { mode } => k
            .knobs
            .set("enabled", ["always", "madvise", "never", "madvise"][mode])
            .unwrap(),
        Op::Mmap {
            slot,
            pages,
            skew,
            huge,
        } => {
            if regions[slot as usize].is_none() {
                let start = BASE + slot * SLOT + skew * PAGE;
                let mut flags = VmFlags::READ | VmFlags::WRITE;
                flags |= [VmFlags::empty(), VmFlags::HUGEPAGE, VmFlags::NOHUGEPAGE][huge as usize];
                k.do_mmap(mm, start, pages * PAGE, flags).unwrap();
                regions[slot as usize] = Some((start, pages));
            }
        }
        Op::Touch {
            slot,
            first,
            pages,
            write,
            stride,
        } => {
            if let Some((s, e)) = clip(regions, slot, first, pages) {
                let mut a = s;
                while a < e {
                    // Holes left by partial munmap fault with SIGSEGV: skip them.
                    if k.mm(mm).find_vma(a).is_some() {
                        user_access(k, mm, 0, a, write).unwrap();
                    }
                    a += stride * PAGE;
                }
            }
        }
        Op::Madvise {
            slot,
            first,
            pages,
            advice,
        } => {
            if let Some((s, e)) = clip(regions, slot, first, pages) {
                let adv = [Madv::DontNeed, Madv::HugePage, Madv::NoHugePage][advice as usize];
                let _ = k.do_madvise(mm, s, e, adv);
            }
        }
        Op::Munmap { slot, first, pages } => {
            if let Some((s, e)) = clip(regions, slot, first, pages) {
                k.do_munmap(mm, s, e);
                let (start, n) = regions[slot as usize].unwrap();
                if s == start && e == start + n * PAGE {
                    regions[slot as usize] = None;
                }
            }
        }
        Op::Migrate {
            slot,
            first,
            pages,
            node,
        } => {
            if let Some((s, e)) = clip(regions, slot, first, pages) {
                let (_, rc) = k.do_pages_move(mm, s, e, node);
                assert!(rc >= 0, "move_pages failed: {rc}");
            }
        }
    }
}

proptest! {
    #![proptest_config(Config { cases: 200, failure_persistence: Some(Box::new(FileFailurePersistence::Off)), ..Config::default() })]

    #[test]
    fn random_ops_keep_every_invariant(ops in prop::collection::vec(op(), 500), per_pte in any::<bool>(), contpte in any::<bool>(), bbml2 in any::<bool>(), sync_flush in any::<bool>()) {
        let mut cfg = MachineConfig { ram_bytes: 1 << 30, nodes: 2, ..MachineConfig::default() };
        cfg.features.bbml2 = bbml2;
        let mut k = Kernel::boot(cfg);
        k.zap = if per_pte { ZapVariant::PerPte } else { ZapVariant::Batched };
        k.arch.contpte = contpte;
        if sync_flush {
            k.tlb_batch = foliolab::mm::rmap::TlbBatchVariant::Sync;
        }
        k.arch.hw.checks = true;
        let mm = k.mm_alloc().unwrap();
        k.switch_mm(0, mm);
        let mut regions: Regions = [None; 4];
        for (i, op) in ops.iter().enumerate() {
            apply(&mut k, mm, &mut regions, op);
            if let Err(e) = k.check_invariants() {
                prop_assert!(false, "after op {i} {op:?}: {e}");
            }
            prop_assert!(k.arch.hw.violations.is_empty(), "after op {i} {op:?}: {:?}", k.arch.hw.violations);
        }
    }
}
