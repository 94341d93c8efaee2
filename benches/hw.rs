//! Throughput of the simulated hardware's hot paths: descriptor writes into
//! materialized tables, the TLB-miss path (walk + fill), and TLB hits.

use std::time::Duration;

use criterion::{black_box, criterion_group, criterion_main, BenchmarkId, Criterion, Throughput};
use foliolab::hw::{Attr, Desc, Granule, Machine, MachineConfig, Pfn, PhysAddr, PhysMem, TableId, VirtAddr};

/// 1 GiB of 4K pages.
const PTES: usize = 262_144;

/// Pte tables for 1 GiB, materialized up front.
fn pte_tables(mem: &mut PhysMem, first_pfn: u64) -> Vec<TableId> {
    let per = mem.granule().ptrs_per_table();
    (0..(PTES / per) as u64)
        .map(|i| mem.materialize_table(Pfn(first_pfn + i)))
        .collect()
}

fn pte(i: usize) -> Desc {
    Desc::page(
        PhysAddr((1 << 32) + ((i as u64) << 12)),
        Attr::USER | Attr::AF | Attr::NG,
    )
}

fn pte_writes(c: &mut Criterion) {
    let mut mem = PhysMem::new(Granule::K4, 64 << 30);
    let tables = pte_tables(&mut mem, 16);
    let per = Granule::K4.ptrs_per_table();
    let mut g = c.benchmark_group("pte_write_1GiB");
    g.throughput(Throughput::Elements(PTES as u64));
    g.bench_function("PhysMem::write", |b| {
        b.iter(|| {
            for (t, &id) in tables.iter().enumerate() {
                for i in 0..per {
                    mem.write(id, i, pte(t * per + i));
                }
            }
        })
    });
    g.bench_function("table_mut", |b| {
        b.iter(|| {
            for (t, &id) in tables.iter().enumerate() {
                for (i, slot) in mem.table_mut(id).iter_mut().enumerate() {
                    *slot = pte(t * per + i).0;
                }
            }
        })
    });
    g.finish();
    black_box(mem.read(tables[0], 0));
}

/// A one-CPU machine with 1 GiB of user pages mapped from VA 1 GiB.
fn mapped_machine(checks: bool) -> Machine {
    let g = Granule::K4;
    let mut m = Machine::new(MachineConfig {
        ncpus: 1,
        ..MachineConfig::default()
    });
    let va = 1u64 << 30;
    let upper: Vec<TableId> = (1..=3).map(|p| m.mem.materialize_table(Pfn(p))).collect();
    m.mem.write(upper[0], g.index(va, 0), Desc::table(Pfn(2).to_phys(g)));
    m.mem.write(upper[1], g.index(va, 1), Desc::table(Pfn(3).to_phys(g)));
    for (k, id) in pte_tables(&mut m.mem, 16).into_iter().enumerate() {
        m.mem.write(upper[2], k, Desc::table(Pfn(16 + k as u64).to_phys(g)));
        for i in 0..g.ptrs_per_table() {
            m.mem.write(id, i, pte(k * g.ptrs_per_table() + i));
        }
    }
    m.switch_mm(0, Pfn(1).to_phys(g), 1);
    m.set_checks(checks);
    m
}

fn walks(c: &mut Criterion) {
    let mut g = c.benchmark_group("tlb_miss_walk_fill");
    g.throughput(Throughput::Elements(PTES as u64));
    for checks in [false, true] {
        let mut m = mapped_machine(checks);
        g.bench_with_input(BenchmarkId::new("checks", checks), &checks, |b, _| {
            b.iter(|| {
                // Every page once: 1 GiB of pages is far beyond the TLB's reach.
                for p in 0..PTES as u64 {
                    black_box(m.access(0, VirtAddr((1 << 30) + (p << 12)), false).unwrap());
                }
            })
        });
    }
    g.finish();
}

fn hits(c: &mut Criterion) {
    let mut g = c.benchmark_group("tlb_hit");
    const ROUNDS: u64 = 1000;
    // 32 pages fit L1; 1024 pages overflow L1 but fit L2 (4 per set of 5 ways).
    for (name, pages) in [("l1", 32u64), ("l2", 1024)] {
        let mut m = mapped_machine(false);
        g.throughput(Throughput::Elements(pages * ROUNDS));
        g.bench_function(name, |b| {
            b.iter(|| {
                for _ in 0..ROUNDS {
                    for p in 0..pages {
                        black_box(m.access(0, VirtAddr((1 << 30) + (p << 12) + 8), false).unwrap());
                    }
                }
            })
        });
        assert_eq!(
            m.ev.get(foliolab::hw::Event::Walk),
            pages,
            "{name}: only the first round walks"
        );
    }
    g.finish();
}

criterion_group! {
    name = benches;
    config = Criterion::default().sample_size(10).warm_up_time(Duration::from_secs(1)).measurement_time(Duration::from_secs(3));
    targets = pte_writes, walks, hits
}
criterion_main!(benches);
