//! The final layout of a region of the calling process, from /proc/self/pagemap and
//! /proc/kpageflags: each present page's folio order (found from the compound head and
//! tail flags of neighbouring pfns), the zero page, or a swap entry.

use crate::report::{PageKind, Run, RunBuilder};
use std::fs::File;
use std::os::unix::fs::FileExt;

const PM_PRESENT: u64 = 1 << 63;
const PM_SWAP: u64 = 1 << 62;
const PM_PFN: u64 = (1 << 55) - 1;
const KPF_COMPOUND_HEAD: u64 = 1 << 15;
const KPF_COMPOUND_TAIL: u64 = 1 << 16;
/// Set for the zero page and for every page of the huge zero page.
const KPF_ZERO_PAGE: u64 = 1 << 24;
/// Bound on a folio's size when looking for its head (a PUD folio has 2^18 pages).
const MAX_FOLIO_PAGES: u64 = 1 << 18;
const PAGE: u64 = 4096;

#[derive(Debug, thiserror::Error)]
pub enum LayoutError {
    #[error("reading {what}: {err}")]
    Io { what: &'static str, err: std::io::Error },
    #[error("pagemap shows no page frame numbers (reading them needs CAP_SYS_ADMIN)")]
    NoPfn,
    #[error("pfn {0:#x} is a compound tail without a head within {MAX_FOLIO_PAGES} pages")]
    NoHead(u64),
}

/// Per-pfn flags, read in batches.
pub trait PageFlags {
    /// Fills `out` with the flags of pfns `first ..`; returns how many it read.
    fn read(&mut self, first: u64, out: &mut [u64]) -> std::io::Result<usize>;
}

impl PageFlags for File {
    fn read(&mut self, first: u64, out: &mut [u64]) -> std::io::Result<usize> {
        let mut bytes = vec![0u8; out.len() * 8];
        let n = self.read_at(&mut bytes, first * 8)? / 8;
        for (o, c) in out.iter_mut().zip(bytes.chunks_exact(8)).take(n) {
            *o = u64::from_le_bytes(c.try_into().expect("8 bytes"));
        }
        Ok(n)
    }
}

/// Classifies pfns, remembering the last folio so its other pages need no reads.
struct Classifier<'f, F: PageFlags> {
    flags: &'f mut F,
    /// `(head pfn, pages, kind)` of the last folio seen.
    last: Option<(u64, u64, PageKind)>,
}

impl<F: PageFlags> Classifier<'_, F> {
    fn one(&mut self, pfn: u64) -> Result<u64, LayoutError> {
        let mut f = [0];
        match self.flags.read(pfn, &mut f) {
            Ok(1) => Ok(f[0]),
            Ok(_) => Ok(0),
            Err(err) => Err(LayoutError::Io {
                what: "kpageflags",
                err,
            }),
        }
    }

    fn kind(&mut self, pfn: u64) -> Result<PageKind, LayoutError> {
        if let Some((head, n, kind)) = self.last {
            if pfn >= head && pfn < head + n {
                return Ok(kind);
            }
        }
        let f = self.one(pfn)?;
        if f & KPF_ZERO_PAGE != 0 {
            return Ok(PageKind::Zero);
        }
        if f & (KPF_COMPOUND_HEAD | KPF_COMPOUND_TAIL) == 0 {
            return Ok(PageKind::Order(0));
        }
        let mut head = pfn;
        while self.one(head)? & KPF_COMPOUND_HEAD == 0 {
            if head == 0 || pfn - head >= MAX_FOLIO_PAGES {
                return Err(LayoutError::NoHead(pfn));
            }
            head -= 1;
        }
        let mut n = 1;
        let mut buf = vec![0u64; 512];
        'count: loop {
            let got = self.flags.read(head + n, &mut buf).map_err(|err| LayoutError::Io {
                what: "kpageflags",
                err,
            })?;
            for f in &buf[..got] {
                if f & KPF_COMPOUND_TAIL == 0 || n >= MAX_FOLIO_PAGES {
                    break 'count;
                }
                n += 1;
            }
            if got == 0 {
                break;
            }
        }
        let kind = PageKind::Order(n.ilog2());
        self.last = Some((head, n, kind));
        Ok(kind)
    }
}

/// Runs for pages `0 .. entries.len()` of a region, given their pagemap entries.
pub fn runs_of(entries: &[u64], flags: &mut impl PageFlags) -> Result<Vec<Run>, LayoutError> {
    let mut c = Classifier { flags, last: None };
    let mut b = RunBuilder::default();
    for (page, &e) in entries.iter().enumerate() {
        let kind = if e & PM_SWAP != 0 {
            PageKind::Swap
        } else if e & PM_PRESENT != 0 {
            let pfn = e & PM_PFN;
            if pfn == 0 {
                return Err(LayoutError::NoPfn);
            }
            c.kind(pfn)?
        } else {
            continue;
        };
        b.push(page as u64, kind);
    }
    Ok(b.finish())
}

/// The pagemap entries of the pages of `[addr, addr + size)` in this process.
pub fn pagemap_entries(addr: u64, size: u64) -> std::io::Result<Vec<u64>> {
    let pagemap = File::open("/proc/self/pagemap")?;
    let mut bytes = vec![0u8; (size / PAGE * 8) as usize];
    pagemap.read_exact_at(&mut bytes, addr / PAGE * 8)?;
    Ok(bytes
        .chunks_exact(8)
        .map(|c| u64::from_le_bytes(c.try_into().expect("8 bytes")))
        .collect())
}

/// The frame of a pagemap entry's page, if it is present.
pub fn present_pfn(entry: u64) -> Option<u64> {
    (entry & PM_PRESENT != 0).then_some(entry & PM_PFN)
}

/// The layout of `[addr, addr + size)` in this process.
pub fn region_layout(addr: u64, size: u64) -> Result<Vec<Run>, LayoutError> {
    let io = |what| move |err| LayoutError::Io { what, err };
    let entries = pagemap_entries(addr, size).map_err(io("/proc/self/pagemap"))?;
    let mut kpf = File::open("/proc/kpageflags").map_err(io("/proc/kpageflags"))?;
    runs_of(&entries, &mut kpf)
}

#[cfg(test)]
mod tests {
    use super::*;

    /// Flags of a fake memory: pfn -> flags.
    struct Fake(std::collections::BTreeMap<u64, u64>);

    impl PageFlags for Fake {
        fn read(&mut self, first: u64, out: &mut [u64]) -> std::io::Result<usize> {
            for (i, o) in out.iter_mut().enumerate() {
                *o = self.0.get(&(first + i as u64)).copied().unwrap_or(0);
            }
            Ok(out.len())
        }
    }

    fn folio(m: &mut Fake, head: u64, order: u32) {
        m.0.insert(head, KPF_COMPOUND_HEAD);
        for p in head + 1..head + (1 << order) {
            m.0.insert(p, KPF_COMPOUND_TAIL);
        }
    }

    #[test]
    fn orders_zero_and_swap() {
        let mut m = Fake(Default::default());
        folio(&mut m, 0x1000, 4);
        folio(&mut m, 0x1010, 4);
        folio(&mut m, 0x2000, 9);
        m.0.insert(0x50, KPF_ZERO_PAGE);
        let present = |pfn: u64| PM_PRESENT | pfn;
        // Pages 0..32: two 64K folios; 32: hole; 33..35: the tail end of a 2M folio,
        // mapped from its middle (head found by scanning back); 35: zero page; 36: swap;
        // 37: an order-0 page.
        let mut e: Vec<u64> = (0..32).map(|i| present(0x1000 + i)).collect();
        e.push(0);
        e.extend([
            present(0x2100),
            present(0x2101),
            present(0x50),
            PM_SWAP | 0x1234,
            present(0x3000),
        ]);
        let runs = runs_of(&e, &mut m).unwrap();
        let kinds: Vec<(u64, u64, PageKind)> = runs.iter().map(|r| (r.first, r.n, r.kind)).collect();
        assert_eq!(
            kinds,
            [
                (0, 32, PageKind::Order(4)),
                (33, 2, PageKind::Order(9)),
                (35, 1, PageKind::Zero),
                (36, 1, PageKind::Swap),
                (37, 1, PageKind::Order(0))
            ]
        );
    }

    #[test]
    fn hidden_pfns_are_an_error_not_a_guess() {
        let mut m = Fake(Default::default());
        assert!(matches!(runs_of(&[PM_PRESENT], &mut m), Err(LayoutError::NoPfn)));
        m.0.insert(5, KPF_COMPOUND_TAIL);
        assert!(matches!(
            runs_of(&[PM_PRESENT | 5], &mut m),
            Err(LayoutError::NoHead(5))
        ));
    }
}
