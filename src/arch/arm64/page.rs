//! arch/arm64/lib's clear_page and copy_page: the page contents work of faults, CoW and
//! collapse. The model keeps no page contents, so these only count.

use super::pgtable::Arch;
use crate::hw::Event;

impl Arch {
    /// clear_page over `nr` pages (folio_zero_user, clear_user_highpage, __GFP_ZERO).
    #[inline]
    pub fn clear_pages(&mut self, nr: u64) {
        self.hw.ev.add(Event::PageZero, nr);
    }

    /// copy_page of `nr` pages (copy_user_highpage, one call per page).
    #[inline]
    pub fn copy_pages(&mut self, nr: u64) {
        self.hw.ev.add(Event::PageCopy, nr);
    }
}
