//! Replay speed: the reference build's trace (data/sqlite3-cc-O2.trc) replayed on a
//! fresh model per iteration, with order-0 folios and with 64K mTHP, in events per
//! second (criterion's throughput). The real thing is the recorded program's own wall
//! time, printed beside it: how much faster the model answers than the host ran.

use criterion::{criterion_group, criterion_main, Criterion, Throughput};
use foliolab::sim::Variants;
use foliolab::trace::format::Reader;
use foliolab::trace::replay::replay;

const TRACE: &[u8] = include_bytes!("../data/sqlite3-cc-O2.trc");

fn bench(c: &mut Criterion) {
    let v = Variants::from_sets(&[]).unwrap();
    let events = replay("trace", std::io::Cursor::new(TRACE), &v, &[]).unwrap().events;
    let mut r = Reader::new("trace", TRACE).unwrap();
    while r.next_event().unwrap().is_some() {}
    let wall = r.trailer().unwrap().wall_ns as f64 / 1e9;
    eprintln!(
        "the recorded program ran {wall:.2} s on the host ({} events; `{}`)",
        events,
        r.header.command.join(" ")
    );
    let mut g = c.benchmark_group("replay sqlite3 cc -O2");
    g.throughput(Throughput::Elements(events));
    g.sample_size(30);
    for (name, knobs) in [
        ("order-0", vec![]),
        (
            "64K",
            vec![("hugepages-64kB/enabled".to_string(), "always".to_string())],
        ),
    ] {
        g.bench_function(name, |b| {
            b.iter(|| replay("trace", std::io::Cursor::new(TRACE), &v, &knobs).unwrap())
        });
    }
    g.finish();
}

criterion_group!(benches, bench);
criterion_main!(benches);
