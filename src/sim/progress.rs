//! Progress of a long model run on stderr: a bar over the workload's ops, drawn only
//! when stderr is a terminal and the run has gone on for a second. The executor counts
//! ops in two integers; only every `step`-th op reaches indicatif, with `step` adapted
//! so that happens a few times a second.

use crate::workload::{Op, Stmt};
use indicatif::{ProgressBar, ProgressDrawTarget, ProgressStyle};
use std::io::IsTerminal;
use std::time::{Duration, Instant};

/// How long a run goes on before its bar appears.
const QUIET: Duration = Duration::from_secs(1);
/// How often the bar is updated, roughly.
const EVERY: Duration = Duration::from_millis(100);

/// The ops `stmts` executes, repeats multiplied out (saturating).
pub fn total_ops(stmts: &[Stmt]) -> u64 {
    count_ops(stmts, |_| true)
}

/// The ops `pick` selects that `stmts` executes, repeats multiplied out (saturating).
pub fn count_ops(stmts: &[Stmt], pick: impl Fn(&Op) -> bool) -> u64 {
    crate::workload::executed(stmts, &pick, u64::MAX).unwrap_or(u64::MAX)
}

pub struct Progress {
    /// Ops executed so far.
    done: u64,
    /// The op count at which `tick` runs next; u64::MAX when no bar can show.
    next: u64,
    step: u64,
    total: u64,
    /// What is counted, for the bar's text.
    unit: &'static str,
    /// Whether `step` adapts to the rate (ops); a few slow units (workloads, seeds)
    /// are each shown.
    adaptive: bool,
    start: Instant,
    last: Instant,
    bar: Option<ProgressBar>,
}

impl Progress {
    /// Progress over `total` ops, shown only if stderr is a terminal.
    pub fn new(total: u64) -> Progress {
        let mut p = Progress::counting(total, "ops");
        p.adaptive = true;
        p
    }

    /// Progress over `total` things called `unit` (e.g. workloads of a suite).
    pub fn counting(total: u64, unit: &'static str) -> Progress {
        let now = Instant::now();
        Progress {
            done: 0,
            next: if std::io::stderr().is_terminal() { 1 } else { u64::MAX },
            step: 1,
            total,
            unit,
            adaptive: false,
            start: now,
            last: now,
            bar: None,
        }
    }

    /// One more op (or `unit`) done.
    #[inline]
    pub fn op(&mut self) {
        self.done += 1;
        if self.done >= self.next {
            self.tick();
        }
    }

    #[cold]
    fn tick(&mut self) {
        let now = Instant::now();
        let since = now - self.last;
        self.last = now;
        self.step = if !self.adaptive {
            1
        } else if since < EVERY / 2 {
            self.step.saturating_mul(2)
        } else if since > EVERY * 2 {
            (self.step / 2).max(1)
        } else {
            self.step
        };
        self.next = self.done.saturating_add(self.step);
        if now - self.start < QUIET {
            return;
        }
        let bar = self.bar.get_or_insert_with(|| {
            let bar = ProgressBar::with_draw_target(Some(self.total), ProgressDrawTarget::stderr());
            bar.set_style(
                ProgressStyle::with_template(&format!(
                    "{{elapsed_precise}} [{{wide_bar}}] {{human_pos}}/{{human_len}} {}, eta {{eta}}",
                    self.unit
                ))
                .expect("a valid template"),
            );
            bar
        });
        bar.set_position(self.done);
        // A bar made just now draws only on its next update: draw it at once.
        bar.tick();
    }
}

impl Drop for Progress {
    fn drop(&mut self) {
        if let Some(bar) = &self.bar {
            bar.finish_and_clear();
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::workload::parse_str;

    #[test]
    fn total_ops_multiply_repeats() {
        let w = parse_str(
            "t.wl",
            "mmap a 4K\nrepeat 3\n  touch a\n  repeat 2\n    touch a\n  end\nend\n",
        )
        .unwrap();
        assert_eq!(total_ops(&w.stmts), 1 + 3 * (1 + 2));
        assert_eq!(count_ops(&w.stmts, |op| matches!(op, Op::Mmap { .. })), 1);
    }
}
