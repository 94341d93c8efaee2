//! The frame of each of the runner's own pages, read once its warm-up has faulted them
//! in: so that a fault the runner takes on its own memory during an op can be told
//! apart. A page another process's compaction migrated has a new frame, and touching it
//! while its migration entry was in place was one fault (the kernel's doing, outside the
//! workload's regions and out of its counts). A fault on a page whose frame did not
//! change is this runner's own defect.

use super::layout::{pagemap_entries, present_pfn};

const PAGE: u64 = 4096;

/// What became of the page of a runner fault since the warm-up.
#[derive(Debug, PartialEq, Eq)]
pub enum Fate {
    /// Present at the warm-up and now, in another frame: migrated.
    Moved { from: u64, to: u64 },
    /// Why the fault is not explained by a migration.
    Unexplained(String),
}

/// `(first page address, pagemap entry per page)` of each mapping the warm-up faulted in.
#[derive(Default)]
pub struct RunnerPages(Vec<(u64, Vec<u64>)>);

impl RunnerPages {
    /// Reads the frames of `spans` (`[start, end)` address ranges) now. A span pagemap
    /// cannot be read for (a special mapping) is left out.
    pub fn read(spans: impl Iterator<Item = (u64, u64)>) -> RunnerPages {
        RunnerPages(
            spans
                .filter_map(|(s, e)| Some((s, pagemap_entries(s, e - s).ok()?)))
                .collect(),
        )
    }

    /// What happened to the page at `addr` since the warm-up; a moved page's frame is
    /// remembered, so a later fault on it is judged afresh.
    pub fn fate(&mut self, addr: u64) -> Fate {
        let page = addr & !(PAGE - 1);
        let Some((start, entries)) = self
            .0
            .iter_mut()
            .find(|(s, e)| (*s..*s + e.len() as u64 * PAGE).contains(&page))
        else {
            return Fate::Unexplained("not a page the warm-up faulted in".into());
        };
        let slot = &mut entries[((page - *start) / PAGE) as usize];
        let now = match pagemap_entries(page, PAGE) {
            Ok(e) => e[0],
            Err(e) => return Fate::Unexplained(format!("its pagemap entry cannot be read: {e}")),
        };
        match (present_pfn(*slot), present_pfn(now)) {
            (Some(0), _) | (_, Some(0)) => {
                Fate::Unexplained("pagemap hides frames (reading them needs CAP_SYS_ADMIN)".into())
            }
            (Some(from), Some(to)) if from != to => {
                *slot = now;
                Fate::Moved { from, to }
            }
            (Some(pfn), Some(_)) => Fate::Unexplained(format!("its frame {pfn:#x} is the warm-up's: not migrated")),
            (None, _) => Fate::Unexplained("it was not present after the warm-up".into()),
            (Some(_), None) => Fate::Unexplained("it is not present now".into()),
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    /// Two private pages, faulted in.
    fn two_pages() -> u64 {
        // SAFETY: a fresh private anonymous mapping of two pages, written below.
        let p = unsafe {
            libc::mmap(
                std::ptr::null_mut(),
                2 * PAGE as usize,
                libc::PROT_READ | libc::PROT_WRITE,
                libc::MAP_PRIVATE | libc::MAP_ANONYMOUS,
                -1,
                0,
            )
        } as u64;
        for a in [p, p + PAGE] {
            // SAFETY: a is inside the mapping.
            unsafe { std::ptr::write_volatile(a as *mut u8, 1) };
        }
        p
    }

    #[test]
    fn a_page_given_another_frame_is_told_apart_from_one_that_kept_its_frame() {
        let p = two_pages();
        let mut own = RunnerPages::read([(p, p + 2 * PAGE)].into_iter());
        if present_pfn(own.0[0].1[0]) == Some(0) {
            println!("SKIP a_page_given_another_frame_is_told_apart_from_one_that_kept_its_frame: pagemap hides frames (not root)");
            // SAFETY: the mapping made above.
            unsafe { libc::munmap(p as *mut _, 2 * PAGE as usize) };
            return;
        }
        // The first page gets another frame: its old one moves to another address with
        // MREMAP_DONTUNMAP (so it cannot be handed back), and the first page faults anew.
        // SAFETY: moving the first page of our mapping to a new address of the kernel's
        // choosing; the range left behind stays mapped, empty.
        let held = unsafe {
            libc::mremap(
                p as *mut _,
                PAGE as usize,
                PAGE as usize,
                libc::MREMAP_MAYMOVE | libc::MREMAP_DONTUNMAP,
                std::ptr::null_mut::<libc::c_void>(),
            )
        };
        assert_ne!(held, libc::MAP_FAILED, "{}", std::io::Error::last_os_error());
        // SAFETY: p is still mapped (DONTUNMAP).
        unsafe { std::ptr::write_volatile(p as *mut u8, 2) };
        assert!(matches!(own.fate(p + 8), Fate::Moved { from, to } if from != to));
        // Remembered: the same page again is judged against its new frame.
        assert!(matches!(own.fate(p), Fate::Unexplained(why) if why.contains("not migrated")));
        assert!(matches!(own.fate(p + PAGE), Fate::Unexplained(why) if why.contains("not migrated")));
        assert!(matches!(own.fate(p + 2 * PAGE), Fate::Unexplained(why) if why.contains("warm-up")));
        // SAFETY: the mappings made above.
        unsafe {
            libc::munmap(p as *mut _, 2 * PAGE as usize);
            libc::munmap(held, PAGE as usize);
        }
    }
}
