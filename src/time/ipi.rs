//! This host's cost of x86's TLB shootdown, for the `tlb-flush=x86` flavour's events.
//!
//! A thread pinned to CPU 0 writes N pages of a private mapping and drops them with
//! MADV_DONTNEED, over and over. Alone, each drop flushes only CPU 0's TLB. With a
//! second thread of the same mm spinning on CPU 1 (running, so not lazy), each drop
//! also sends CPU 1 an IPI and waits for its flush_tlb_func: the difference per drop
//! is that round. Done for 1 and 32 pages (32 INVLPGs on CPU 1, under the 33-page
//! ceiling) and for 64 (a full flush there), it separates the IPI from the remote
//! INVLPG and the remote full flush. CPU 1's "TLB shootdowns" in /proc/interrupts
//! count the drops that did send an IPI (a hypervisor may flush a preempted vCPU
//! without one: KVM's PV TLB flush); the extra time is divided among those.

use std::sync::atomic::{AtomicBool, Ordering};
use std::sync::Arc;
use std::time::Instant;

/// Drops timed per configuration and round.
const DROPS: u64 = 4000;
/// Rounds per configuration; the fastest counts (the least disturbed by the rest of
/// the host).
const ROUNDS: usize = 7;

/// What the measurement found, in nanoseconds.
#[derive(Clone, Debug, serde::Serialize)]
pub struct IpiCosts {
    /// One IPI round to one CPU: send, the remote's entry and exit, the wait.
    pub ipi_ns: f64,
    /// One INVLPG on the remote CPU.
    pub invlpg_ns: f64,
    /// One full flush of the loaded mm on the remote CPU.
    pub flush_all_ns: f64,
    /// Shootdowns CPU 1 received per timed drop (1.0 when every drop sent one; above
    /// when other processes sent it some too).
    pub received_per_drop: f64,
    pub drops: u64,
}

/// Pin the calling thread to `cpu`.
fn pin(cpu: usize) -> Result<(), String> {
    // SAFETY: a zeroed cpu_set_t is a valid empty set; CPU_SET writes inside it, and
    // sched_setaffinity(0) reads it for the calling thread only.
    unsafe {
        let mut set: libc::cpu_set_t = std::mem::zeroed();
        libc::CPU_SET(cpu, &mut set);
        if libc::sched_setaffinity(0, std::mem::size_of::<libc::cpu_set_t>(), &set) != 0 {
            return Err(format!(
                "sched_setaffinity to CPU {cpu}: {}",
                std::io::Error::last_os_error()
            ));
        }
    }
    Ok(())
}

/// CPU `cpu`'s count of TLB shootdowns received.
fn shootdowns(cpu: usize) -> Result<u64, String> {
    let t = std::fs::read_to_string("/proc/interrupts").map_err(|e| format!("/proc/interrupts: {e}"))?;
    t.lines()
        .find(|l| l.trim_start().starts_with("TLB:"))
        .and_then(|l| l.split_whitespace().nth(1 + cpu))
        .and_then(|n| n.parse().ok())
        .ok_or_else(|| "/proc/interrupts has no TLB shootdown line".into())
}

/// A private anonymous mapping of `pages` pages.
struct Mapping {
    addr: *mut u8,
    len: usize,
}

impl Mapping {
    fn new(pages: usize) -> Result<Mapping, String> {
        let len = pages * 4096;
        // SAFETY: a fresh anonymous private mapping; no existing memory is touched.
        let addr = unsafe {
            libc::mmap(
                std::ptr::null_mut(),
                len,
                libc::PROT_READ | libc::PROT_WRITE,
                libc::MAP_PRIVATE | libc::MAP_ANONYMOUS,
                -1,
                0,
            )
        };
        if addr == libc::MAP_FAILED {
            return Err(format!("mmap: {}", std::io::Error::last_os_error()));
        }
        let m = Mapping { addr: addr.cast(), len };
        // SAFETY: the range is this mapping's own; no huge pages, so each drop is
        // `pages` base-page faults and a flush of `pages` ptes.
        unsafe { libc::madvise(addr, len, libc::MADV_NOHUGEPAGE) };
        Ok(m)
    }

    /// Nanoseconds per drop of `DROPS` write-then-drop cycles.
    fn time_drops(&self) -> f64 {
        let t = Instant::now();
        for _ in 0..DROPS {
            for off in (0..self.len).step_by(4096) {
                // SAFETY: `off` is inside the mapping, which is read-write.
                unsafe { self.addr.add(off).write_volatile(1) };
            }
            // SAFETY: the range is this mapping's own.
            unsafe { libc::madvise(self.addr.cast(), self.len, libc::MADV_DONTNEED) };
        }
        t.elapsed().as_nanos() as f64 / DROPS as f64
    }
}

impl Drop for Mapping {
    fn drop(&mut self) {
        // SAFETY: unmaps exactly the mapping made in `new`.
        unsafe { libc::munmap(self.addr.cast(), self.len) };
    }
}

/// Measures this host's shootdown costs (see the module comment). Runs in a thread
/// of its own, so the caller's affinity is left as it was.
pub fn measure() -> Result<IpiCosts, String> {
    if std::thread::available_parallelism().map_or(1, |n| n.get()) < 2 {
        return Err("measuring an IPI needs two CPUs".into());
    }
    std::thread::spawn(measure_pinned)
        .join()
        .map_err(|_| "the IPI measurement panicked".to_string())?
}

fn measure_pinned() -> Result<IpiCosts, String> {
    pin(0)?;
    let maps = [Mapping::new(1)?, Mapping::new(32)?, Mapping::new(64)?];
    let fastest = |m: &Mapping| (0..ROUNDS).map(|_| m.time_drops()).fold(f64::INFINITY, f64::min);
    let alone: Vec<f64> = maps.iter().map(fastest).collect();
    let stop = Arc::new(AtomicBool::new(false));
    let spinning = Arc::new(AtomicBool::new(false));
    let (s, r) = (stop.clone(), spinning.clone());
    let spinner = std::thread::spawn(move || -> Result<(), String> {
        pin(1)?;
        r.store(true, Ordering::Release);
        while !s.load(Ordering::Relaxed) {
            std::hint::spin_loop();
        }
        Ok(())
    });
    while !spinning.load(Ordering::Acquire) {
        std::hint::spin_loop();
    }
    let before = shootdowns(1);
    let shared: Vec<f64> = maps.iter().map(fastest).collect();
    let after = shootdowns(1);
    stop.store(true, Ordering::Relaxed);
    spinner
        .join()
        .map_err(|_| "the spinning thread panicked".to_string())??;
    let drops = DROPS * ROUNDS as u64 * maps.len() as u64;
    let received = after? - before?;
    let per_drop = received as f64 / drops as f64;
    // A drop sends no IPI while CPU 1 runs another task or its vCPU is preempted (a
    // hypervisor's paravirtual flush marks it instead): the extra time is spread over
    // the drops that did, as /proc/interrupts counted them.
    if per_drop < 0.5 {
        return Err(format!(
            "CPU 1 received {received} TLB shootdowns for {drops} drops: most flushed it without an IPI (the host is busy, or a hypervisor's paravirtual flush), so an IPI's cost cannot be measured now"
        ));
    }
    let share = per_drop.min(1.0);
    let d: Vec<f64> = shared.iter().zip(&alone).map(|(s, a)| (s - a) / share).collect();
    let invlpg_ns = ((d[1] - d[0]) / 31.0).max(0.0);
    let ipi_ns = d[0] - invlpg_ns;
    Ok(IpiCosts {
        ipi_ns,
        invlpg_ns,
        flush_all_ns: d[2] - ipi_ns,
        received_per_drop: per_drop,
        drops,
    })
}

/// The profile entries of x86's shootdown events, from `m` (on `what`, the host).
pub fn costs(m: &IpiCosts, what: &str) -> Vec<crate::time::profile::Cost> {
    use crate::time::profile::Cost;
    use crate::time::Quality;
    let how = format!(
        "MADV_DONTNEED of 1, 32 and 64 pages with and without a thread of the mm spinning on CPU 1, fastest of {ROUNDS} rounds of {DROPS} drops each, the extra time divided among the drops that sent an IPI: CPU 1 received {:.4} shootdowns per drop (/proc/interrupts)",
        m.received_per_drop
    );
    let cost = |event: &str, ns: f64, means: &str| Cost {
        events: vec![event.to_string()],
        ns: Some((ns.max(0.0) * 1000.0).round() / 1000.0),
        quality: Quality::Host,
        source: format!("foliolab calibrate on {what}"),
        rows: Vec::new(),
        note: Some(format!("{means}; {how}")),
        derived_from_seed: None,
        seed_relation: None,
    };
    vec![
        cost("arch.ipi", m.ipi_ns, "a TLB shootdown IPI round to one CPU: the send, the remote entry and exit, the wait (the 1-page drop's extra time less one INVLPG)"),
        cost("arch.tlbi.vale1", m.invlpg_ns, "one INVLPG on the CPU an IPI reached (the 32-page drop's extra time over the 1-page one, per page)"),
        cost("arch.tlbi.aside1", m.flush_all_ns, "a full flush of the loaded mm on the CPU an IPI reached (the 64-page drop, past the 33-page ceiling, less the IPI)"),
        Cost {
            events: vec!["arch.dsb.nsh".into()],
            ns: Some(0.0),
            quality: Quality::Est,
            source: "Intel SDM vol. 3, INVLPG and MOV to CR3".into(),
            rows: Vec::new(),
            note: Some("x86 invalidates synchronously: the local completion the arm64 hardware's DSB NSH stands for is inside the INVLPG and full-flush costs".into()),
            derived_from_seed: None,
            seed_relation: None,
        },
    ]
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn the_measured_costs_make_a_valid_profile_entry_per_event() {
        let m = IpiCosts {
            ipi_ns: 2500.0,
            invlpg_ns: 90.0,
            flush_all_ns: 400.0,
            received_per_drop: 1.002,
            drops: 84000,
        };
        let mut p = crate::time::Profile::load("calibrated").unwrap();
        p.cost.retain(|c| !c.events.iter().any(|e| e.starts_with("arch.")));
        p.cost.extend(costs(&m, "a host"));
        p.check().unwrap();
        let ns = |e: &str| match p.lookup(e) {
            crate::time::Lookup::Costed(ps, _) => ps as f64 / 1e3,
            _ => panic!("{e} not costed"),
        };
        assert_eq!(
            (
                ns("arch.ipi"),
                ns("arch.tlbi.vale1"),
                ns("arch.tlbi.aside1"),
                ns("arch.dsb.nsh")
            ),
            (2500.0, 90.0, 400.0, 0.0)
        );
    }
}
