//! Fuzzing the trace reader and `replay` (issue 33): records generated at random,
//! bytes of a real recording flipped, and flipped records resealed under a valid
//! checksum (so the reader passes them and the model sees them) must each give a
//! replay or an error, never a panic. Bounded so that `cargo test` runs it in CI; a
//! case that fails is kept by proptest in `trace_fuzz.proptest-regressions` beside this
//! file (committed), and the crashes found so far are the named tests at the end.
//!
//! The corpus is `tests/fuzz/forks.trc`: `tests/programs/mmops.c` (fork, posix_spawn,
//! mremap, brk, madvise, a thread) recorded on x86_64 with `foliolab record --no-aslr`.

use foliolab::sim::Variants;
use foliolab::trace::format::{Event, Header, MapCause, MapKind, Reader, Trailer, Writer};
use foliolab::trace::replay::replay;
use proptest::prelude::*;
use std::io::{Cursor, Read, Write};

const CORPUS: &[u8] = include_bytes!("fuzz/forks.trc");
const A: u64 = 0x7f00_0000_0000;
const PAGE: u64 = 4096;

fn header() -> Header {
    Header {
        command: vec!["fuzz".into()],
        host_kernel: "fuzz".into(),
        arch: "x86_64".into(),
        page_size: 4096,
        thp: vec![("enabled".into(), "never".into())],
        no_aslr: true,
    }
}

fn encode(events: &[Event]) -> Vec<u8> {
    let mut w = Writer::new(Vec::new(), &header()).unwrap();
    for e in events {
        w.write(e).unwrap();
    }
    let t = Trailer {
        events: w.events(),
        ..Trailer::default()
    };
    w.finish(&t).unwrap()
}

/// Replays `bytes` under order-0 folios and under 64K: Ok or Err, the test is that
/// neither panics.
fn replay_both(bytes: &[u8]) -> Result<(), String> {
    // A small machine: booting it is most of a case's time.
    let v = Variants::from_sets(&["ram=256M".to_string()]).unwrap();
    for knobs in [
        vec![],
        vec![("hugepages-64kB/enabled".to_string(), "always".to_string())],
    ] {
        replay("fuzz", Cursor::new(bytes), &v, &knobs).map_err(|e| e.to_string())?;
    }
    Ok(())
}

/// The header's length and the zlib body of a trace.
fn split(trace: &[u8]) -> (usize, Vec<u8>) {
    let head = 16 + u32::from_le_bytes(trace[12..16].try_into().unwrap()) as usize;
    let mut body = Vec::new();
    flate2::read::ZlibDecoder::new(&trace[head..])
        .read_to_end(&mut body)
        .unwrap();
    (head, body)
}

/// `trace` with its decompressed records changed by `f`, compressed again: a valid
/// checksum over corrupt records.
fn reseal(trace: &[u8], f: impl FnOnce(&mut Vec<u8>)) -> Vec<u8> {
    let (head, mut body) = split(trace);
    f(&mut body);
    let mut z = flate2::write::ZlibEncoder::new(trace[..head].to_vec(), flate2::Compression::new(1));
    z.write_all(&body).unwrap();
    z.finish().unwrap()
}

fn addr() -> impl Strategy<Value = u64> {
    prop_oneof![
        8 => (0u64..96).prop_map(|p| A + p * PAGE),
        1 => (0u64..96).prop_map(|p| A + p * PAGE + 1),
        1 => any::<u64>(),
    ]
}

fn len() -> impl Strategy<Value = u64> {
    prop_oneof![
        8 => (0u64..48).prop_map(|p| p * PAGE),
        1 => (30u64..40).prop_map(|p| p * PAGE + 0x800),
        1 => any::<u64>(),
    ]
}

fn proc() -> impl Strategy<Value = u32> {
    prop_oneof![8 => 0u32..4, 1 => any::<u32>()]
}

fn kind() -> impl Strategy<Value = MapKind> {
    prop_oneof![
        4 => Just(MapKind::Anon),
        2 => Just(MapKind::Stack),
        1 => Just(MapKind::File),
        1 => Just(MapKind::Shared),
        1 => Just(MapKind::Special),
    ]
}

fn event() -> impl Strategy<Value = Event> {
    prop_oneof![
        6 => (proc(), addr(), any::<bool>(), any::<bool>())
            .prop_map(|(proc, addr, write, kernel)| Event::Fault { proc, addr, write, kernel }),
        3 => (proc(), addr(), len(), 0u8..8, kind(), any::<bool>(), any::<bool>()).prop_map(
            |(proc, start, len, prot, kind, brk, nohuge)| Event::Map {
                proc,
                start,
                len,
                prot,
                kind,
                cause: if brk { MapCause::Brk } else { MapCause::Mmap },
                nohuge,
            }
        ),
        1 => (proc(), addr(), len()).prop_map(|(proc, start, len)| Event::Munmap { proc, start, len }),
        1 => (proc(), addr(), len(), 0u8..8).prop_map(|(proc, start, len, prot)| Event::Mprotect {
            proc,
            start,
            len,
            prot
        }),
        1 => (proc(), addr(), len(), prop_oneof![Just(4u32), Just(8), Just(14), Just(15), Just(20), Just(21), Just(25), any::<u32>()])
            .prop_map(|(proc, start, len, advice)| Event::Madvise { proc, start, len, advice }),
        1 => (proc(), addr(), len(), addr(), len()).prop_map(|(proc, old, old_len, new, new_len)| Event::Mremap {
            proc,
            old,
            old_len,
            new,
            new_len
        }),
        1 => (proc(), addr()).prop_map(|(proc, brk)| Event::Brk { proc, brk }),
        1 => (proc(), proc(), any::<bool>()).prop_map(|(parent, child, share_mm)| Event::Fork {
            parent,
            child,
            share_mm
        }),
        1 => proc().prop_map(|proc| Event::Exec { proc, comm: "p".into() }),
        1 => proc().prop_map(|proc| Event::Exit { proc }),
    ]
}

/// The trace a generated case replays: process 0 exec'd first, so most records act.
fn program() -> impl Strategy<Value = Vec<Event>> {
    prop::collection::vec(event(), 0..48).prop_map(|mut v| {
        v.insert(
            0,
            Event::Exec {
                proc: 0,
                comm: "p0".into(),
            },
        );
        v
    })
}

proptest! {
    // 256 cases in CI; PROPTEST_CASES=N for a longer hunt.
    #![proptest_config(ProptestConfig {
        cases: std::env::var("PROPTEST_CASES").ok().and_then(|n| n.parse().ok()).unwrap_or(256),
        ..ProptestConfig::default()
    })]

    #[test]
    fn generated_records_replay_or_fail_cleanly(events in program()) {
        let _ = replay_both(&encode(&events));
    }

    #[test]
    fn a_flipped_byte_is_refused_or_replays(pos in 0usize..CORPUS.len(), xor in 1u8..=255) {
        let mut t = CORPUS.to_vec();
        t[pos] ^= xor;
        let _ = replay_both(&t);
    }

    #[test]
    fn a_flipped_record_byte_under_a_valid_checksum_replays_or_fails_cleanly(
        pos in any::<prop::sample::Index>(),
        xor in 1u8..=255,
    ) {
        let t = reseal(CORPUS, |b| {
            let i = pos.index(b.len());
            b[i] ^= xor;
        });
        let _ = replay_both(&t);
    }
}

#[test]
fn the_corpus_replays_whole() {
    let mut r = Reader::new("corpus", CORPUS).unwrap();
    let mut forks = 0;
    while let Some(e) = r.next_event().unwrap() {
        forks += matches!(e, Event::Fork { .. }) as u32;
    }
    assert!(forks >= 2, "the corpus must fork: {forks}");
    replay_both(CORPUS).unwrap();
}

/// Issue 33's experiment, kept: 460 single-byte flips spread over the corpus file, and
/// 460 over its records resealed under a valid checksum. Every one replays or is an
/// error; none panics (7 of the 460 panicked at 4 sites, resealed or not).
#[test]
fn four_hundred_sixty_flips_raw_and_resealed_never_panic() {
    let quiet = std::panic::take_hook();
    std::panic::set_hook(Box::new(|_| {}));
    let mut tally = [[0u32; 3]; 2];
    let (_, body) = split(CORPUS);
    for (i, resealed) in [false, true].into_iter().enumerate() {
        for n in 0..460usize {
            let t = if resealed {
                reseal(CORPUS, |b| b[n * body.len() / 460] ^= 0x5a)
            } else {
                let mut t = CORPUS.to_vec();
                t[n * CORPUS.len() / 460] ^= 0x5a;
                t
            };
            let outcome = match std::panic::catch_unwind(|| replay_both(&t)) {
                Ok(Ok(())) => 0,
                Ok(Err(_)) => 1,
                Err(_) => 2,
            };
            tally[i][outcome] += 1;
        }
    }
    std::panic::set_hook(quiet);
    println!(
        "flips [replayed, refused, panicked]: raw {:?}, resealed {:?}",
        tally[0], tally[1]
    );
    assert_eq!((tally[0][2], tally[1][2]), (0, 0), "{tally:?}");
}
