//! Model vs host: faulting in 1 GiB (order-0 and 64 KiB folios) and munmap of it, on a fresh
//! model per iteration (cold) and on one long-lived model (warm).
//! The host runs the same work through real mmap/touch/munmap in the same process.

use criterion::{criterion_group, criterion_main, Criterion, Throughput};
use foliolab::hw::MachineConfig;
use foliolab::mm::mm_types::{MmId, VmFlags};
use foliolab::mm::Kernel;
use foliolab::sim::user_access;
use std::time::{Duration, Instant};

const BASE: u64 = 0x1000_0000_0000;
const GIB: u64 = 1 << 30;
const PAGES: u64 = GIB / 4096;

fn model_populated(knob: Option<&str>) -> (Kernel, MmId) {
    let mut k = Kernel::boot(MachineConfig::default());
    if let Some(kn) = knob {
        k.knobs.set(kn, "always").unwrap();
    }
    let mm = k.mm_alloc().unwrap();
    k.switch_mm(0, mm);
    k.do_mmap(mm, BASE, GIB, VmFlags::READ | VmFlags::WRITE).unwrap();
    (k, mm)
}

fn model_touch(k: &mut Kernel, mm: MmId) {
    model_touch_pages(k, mm, 0..PAGES);
}

fn model_touch_pages(k: &mut Kernel, mm: MmId, pages: std::ops::Range<u64>) {
    for i in pages {
        user_access(k, mm, 0, BASE + i * 4096, true).unwrap();
    }
}

/// The parts a warm round's fault-in is timed in, for the steal-filtered figure.
const SEGMENTS: usize = 16;

/// The host kernel: mmap, write one byte per page, munmap. Returns (touch, munmap) time.
fn host_round(mthp_64k: bool) -> (Duration, Duration) {
    // SAFETY: a fresh private anonymous mapping owned by this function; every access
    // is inside it and it is unmapped before returning.
    unsafe {
        let p = libc::mmap(
            std::ptr::null_mut(),
            GIB as usize,
            libc::PROT_READ | libc::PROT_WRITE,
            libc::MAP_PRIVATE | libc::MAP_ANONYMOUS,
            -1,
            0,
        );
        assert_ne!(p, libc::MAP_FAILED);
        if !mthp_64k {
            libc::madvise(p, GIB as usize, libc::MADV_NOHUGEPAGE);
        }
        let t0 = Instant::now();
        for i in 0..PAGES {
            std::ptr::write_volatile((p as *mut u8).add((i * 4096) as usize), 1);
        }
        let t1 = Instant::now();
        libc::munmap(p, GIB as usize);
        (t1 - t0, t1.elapsed())
    }
}

/// Time `measured` on a fresh model with a 1 GiB mapping, after `setup`.
fn model_time(
    knob: Option<&str>,
    iters: u64,
    setup: fn(&mut Kernel, MmId),
    measured: fn(&mut Kernel, MmId),
) -> Duration {
    let mut t = Duration::ZERO;
    for _ in 0..iters {
        let (mut k, mm) = model_populated(knob);
        setup(&mut k, mm);
        let t0 = Instant::now();
        measured(&mut k, mm);
        t += t0.elapsed();
    }
    t
}

/// Time `measured` on one long-lived model that maps, touches and unmaps 1 GiB per
/// iteration: its memmap and table storage are already backed by the host, so this
/// is the model's own cost without first-touch host page faults (which dominate a
/// fresh model on a VM whose memory the hypervisor backs lazily).
fn model_warm(iters: u64, fault: bool) -> Duration {
    let (mut k, mm) = warm_model();
    let mut t = Duration::ZERO;
    for _ in 0..iters {
        let r = warm_round(&mut k, mm);
        t += if fault { r.fault } else { r.munmap };
    }
    t
}

/// A model that has faulted in and unmapped 1 GiB once, so its host memory is backed.
fn warm_model() -> (Kernel, MmId) {
    let (mut k, mm) = model_populated(None);
    model_touch(&mut k, mm);
    k.do_munmap(mm, BASE, BASE + GIB);
    (k, mm)
}

/// One warm round's times: the fault-in, each of its `SEGMENTS` parts, the munmap.
struct WarmRound {
    fault: Duration,
    segments: [Duration; SEGMENTS],
    munmap: Duration,
}

/// Map, fault in (timing each segment) and unmap 1 GiB on a warm model.
fn warm_round(k: &mut Kernel, mm: MmId) -> WarmRound {
    k.do_mmap(mm, BASE, GIB, VmFlags::READ | VmFlags::WRITE).unwrap();
    let per = PAGES / SEGMENTS as u64;
    let mut segments = [Duration::ZERO; SEGMENTS];
    let t0 = Instant::now();
    let mut t = t0;
    for (s, d) in segments.iter_mut().enumerate() {
        model_touch_pages(k, mm, s as u64 * per..(s as u64 + 1) * per);
        let now = Instant::now();
        *d = now - t;
        t = now;
    }
    k.do_munmap(mm, BASE, BASE + GIB);
    WarmRound {
        fault: t - t0,
        segments,
        munmap: t.elapsed(),
    }
}

fn faults(c: &mut Criterion) {
    let knobs = [("order0", None), ("64k", Some("hugepages-64kB/enabled"))];
    let mut g = c.benchmark_group("fault-1GiB");
    g.sample_size(10).throughput(Throughput::Elements(PAGES));
    for (name, knob) in knobs {
        g.bench_function(format!("model/{name}"), |b| {
            b.iter_custom(|i| model_time(knob, i, |_, _| {}, model_touch))
        });
    }
    g.bench_function("model-warm/order0", |b| b.iter_custom(|i| model_warm(i, true)));
    // The host's 64 KiB case depends on its sysfs knobs; order-0 is forced by NOHUGEPAGE.
    g.bench_function("host/order0", |b| {
        b.iter_custom(|iters| (0..iters).map(|_| host_round(false).0).sum())
    });
    g.finish();

    let mut g = c.benchmark_group("munmap-1GiB");
    g.sample_size(10).throughput(Throughput::Elements(PAGES));
    for (name, knob) in knobs {
        g.bench_function(format!("model/{name}"), |b| {
            b.iter_custom(|i| model_time(knob, i, model_touch, |k, mm| k.do_munmap(mm, BASE, BASE + GIB)))
        });
    }
    g.bench_function("model-warm/order0", |b| b.iter_custom(|i| model_warm(i, false)));
    g.bench_function("host/order0", |b| {
        b.iter_custom(|iters| (0..iters).map(|_| host_round(false).1).sum())
    });
    g.finish();
}

/// Best-of-N figures for order-0 pages, model (warm) against host, printed after the
/// criterion groups: the numbers the targets and ratios are read from.
///
/// On a shared VM a whole round's minimum still carries the neighbours' noise: a
/// 1 GiB fault-in runs long enough that the hypervisor takes the CPU away somewhere
/// in nearly every round. So the fault-in is also given steal-filtered: each 64 MiB
/// segment's fastest time over the rounds, summed. Every segment does the same work
/// in every round (the model is deterministic), so the sum is the round the model
/// would run undisturbed. The shared core is also slower for seconds at a time while a
/// neighbour is busy (rounds up to about half again as long), so the model gets 60
/// rounds, about two seconds, to meet a quiet spell.
fn best_figures(_: &mut Criterion) {
    let (mut k, mm) = warm_model();
    // A host round faults in fresh memory for seconds on a VM: fewer of them.
    let (model_rounds, host_rounds) = (60, 5);
    let (mut fault, mut munmap) = (Duration::MAX, Duration::MAX);
    let mut segments = [Duration::MAX; SEGMENTS];
    for _ in 0..model_rounds {
        let r = warm_round(&mut k, mm);
        fault = fault.min(r.fault);
        munmap = munmap.min(r.munmap);
        for (best, d) in segments.iter_mut().zip(r.segments) {
            *best = (*best).min(d);
        }
    }
    let filtered: Duration = segments.iter().sum();
    let (mut host_fault, mut host_munmap) = (Duration::MAX, Duration::MAX);
    for _ in 0..host_rounds {
        let (f, m) = host_round(false);
        host_fault = host_fault.min(f);
        host_munmap = host_munmap.min(m);
    }
    println!("build: {}", foliolab::cmd::bench::build_kind());
    let ms = |d: Duration| d.as_secs_f64() * 1e3;
    let rate = |d: Duration| PAGES as f64 / d.as_secs_f64() / 1e6;
    let ratio = |m: Duration, h: Duration| m.as_secs_f64() / h.as_secs_f64();
    println!(
        "best of {model_rounds} (model) / {host_rounds} (host), 1 GiB order-0: fault model {:.1} ms ({:.2} M faults/s), host {:.1} ms ({:.2} M/s), ratio {:.3}; munmap model {:.2} ms, host {:.2} ms, ratio {:.3}",
        ms(fault),
        rate(fault),
        ms(host_fault),
        rate(host_fault),
        ratio(fault, host_fault),
        ms(munmap),
        ms(host_munmap),
        ratio(munmap, host_munmap),
    );
    println!(
        "steal-filtered (fastest of each {} MiB segment, summed): fault model {:.1} ms ({:.2} M faults/s), ratio {:.3} to the unfiltered host",
        (GIB / SEGMENTS as u64) >> 20,
        ms(filtered),
        rate(filtered),
        ratio(filtered, host_fault),
    );
}

criterion_group!(benches, faults, best_figures);
criterion_main!(benches);
