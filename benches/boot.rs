//! Wall time of building the kernel linear map (map_mem and the setup before it).
//!
//! `cargo bench --bench boot` times a 16 GiB pte-granular build under each fixmap
//! scheme with criterion (10 samples; dropping the machine is not timed).
//! `BOOT_BENCH_512=1 cargo bench --bench boot` instead times three 512 GiB
//! pte-granular builds directly: each holds ~1 GiB of tables, too much for
//! criterion's warm-up and sampling.

use criterion::{criterion_group, Criterion};
use foliolab::arch::arm64::mmu::PgtableFixmap;
use foliolab::cmd::boot::{boot, Spec};
use foliolab::hw::{Event, Granule};
use std::time::Instant;

fn spec(ram: u64, scheme: PgtableFixmap) -> Spec {
    let mut s = Spec::new(Granule::K4, ram);
    s.linmap.pgtable_fixmap = scheme;
    s
}

fn pte_granular_16g(c: &mut Criterion) {
    let mut group = c.benchmark_group("boot_16G_pte");
    group.sample_size(10);
    for scheme in PgtableFixmap::ALL {
        let s = spec(16 << 30, scheme);
        group.bench_function(scheme.name(), |b| b.iter_with_large_drop(|| boot(&s).unwrap()));
    }
    group.finish();
}

criterion_group!(benches, pte_granular_16g);

fn quick_512g() {
    for scheme in [PgtableFixmap::AllocAndPopulate, PgtableFixmap::Once] {
        for _ in 0..3 {
            let t0 = Instant::now();
            let b = boot(&spec(512 << 30, scheme)).unwrap();
            let dt = t0.elapsed();
            println!(
                "boot 512G pte {:<18} {:>7.3} s  ({} TLBIs)",
                scheme.name(),
                dt.as_secs_f64(),
                b.map_mem.get(Event::TlbiTotal)
            );
        }
    }
}

fn main() {
    if std::env::var_os("BOOT_BENCH_512").is_some() {
        quick_512g();
        return;
    }
    benches();
    Criterion::default().configure_from_args().final_summary();
}
