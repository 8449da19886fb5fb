//! Stack values over time, kept per interval of the run's grid (the timeline's rows), one row of
//! (interval, stack id, value) per stack seen in an interval: what is kept grows with what
//! happened in each interval, not with the samples taken.
//!
//! The grid is the load generator's: interval k is [origin + k * interval, origin + (k+1) *
//! interval), k negative in the warm-up. Values come before the origin is known (the probes
//! attach before the load starts): they wait, with their times, until it is.

use std::collections::HashMap;
use std::sync::atomic::{AtomicU64, Ordering};

use srvprof_common::StackKey;

use super::ids::StackIds;
pub use super::rows::{Row, Rows};

/// The run's interval grid, set once the load generator knows when it measures from.
#[derive(Debug, Default)]
pub struct Grid {
    /// CLOCK_MONOTONIC ns of interval 0's start; 0 until known.
    origin_ns: AtomicU64,
    interval_ns: AtomicU64,
}

impl Grid {
    pub fn set(&self, origin_ns: u64, interval_ns: u64) {
        self.interval_ns
            .store(interval_ns.max(1), Ordering::Relaxed);
        self.origin_ns.store(origin_ns.max(1), Ordering::Release);
    }

    /// (origin, interval) once set.
    pub fn get(&self) -> Option<(u64, u64)> {
        let origin = self.origin_ns.load(Ordering::Acquire);
        (origin != 0).then(|| (origin, self.interval_ns.load(Ordering::Relaxed)))
    }
}

/// The interval `ns` falls in.
pub fn interval_of(ns: u64, (origin, interval): (u64, u64)) -> i64 {
    (ns as i128 - origin as i128).div_euclid(interval as i128) as i64
}

/// A stack as the unwinder counts it: the kernel's key (its kernel stack id the kernel's or
/// srvprof's) and the id of the user stack unwound in user space (-1: none).
pub type StackRef = (StackKey, i32);

/// Values per stack and interval, as the unwinder adds them.
#[derive(Debug)]
pub struct TimedCounts {
    ids: StackIds<StackRef>,
    /// The intervals still open: values may still come for them.
    open: HashMap<(i64, u32), u64>,
    /// The latest interval a value came for.
    newest: i64,
    /// Values that came before the grid was known: (time ns, stack id, value).
    early: Vec<(u64, u32, u64)>,
    /// The closed intervals' rows, out of memory as they close.
    rows: Rows,
}

impl Default for TimedCounts {
    fn default() -> Self {
        Self {
            ids: StackIds::from(0),
            open: HashMap::new(),
            newest: i64::MIN,
            early: Vec::new(),
            rows: Rows::default(),
        }
    }
}

/// What the unwinder counted over the run.
#[derive(Debug, Default)]
pub struct Timed {
    /// Each stack, by id.
    pub stacks: Vec<StackRef>,
    /// Per interval, the stacks' values in it; one (interval, stack) may have several rows.
    pub rows: Rows,
    /// Per stack id, the value that has no interval (the grid never became known).
    pub untimed: Vec<(u32, u64)>,
}

impl TimedCounts {
    pub fn add(&mut self, grid: &Grid, stack: StackRef, time_ns: u64, value: u64) {
        let id = self.ids.id(&stack).0 as u32;
        match grid.get() {
            Some(g) => {
                let k = interval_of(time_ns, g);
                self.newest = self.newest.max(k);
                *self.open.entry((k, id)).or_default() += value;
            }
            None => self.early.push((time_ns, id, value)),
        }
    }

    /// Moves what waited for the grid onto it, and closes the intervals before the one before
    /// the newest (the ring is drained in time order within a few tens of ms; a later value for
    /// a closed interval opens it again, and gives it another row).
    pub fn close(&mut self, grid: &Grid) {
        self.close_on(grid.get());
    }

    fn close_on(&mut self, grid: Option<(u64, u64)>) {
        if let (Some(g), false) = (grid, self.early.is_empty()) {
            for (ns, id, value) in std::mem::take(&mut self.early) {
                let k = interval_of(ns, g);
                self.newest = self.newest.max(k);
                *self.open.entry((k, id)).or_default() += value;
            }
        }
        let before = self.newest.saturating_sub(1);
        if self.open.keys().any(|&(k, _)| k < before) {
            let rows = &mut self.rows;
            self.open.retain(|&(interval, stack), value| {
                let closed = interval < before;
                if closed {
                    rows.push(Row {
                        interval,
                        stack,
                        value: *value,
                    });
                }
                !closed
            });
        }
    }

    /// Everything counted, on `grid` (None: the grid never became known).
    pub fn finish(mut self, grid: Option<(u64, u64)>) -> Timed {
        self.close_on(grid);
        let mut rows = self.rows;
        for ((interval, stack), value) in self.open {
            rows.push(Row {
                interval,
                stack,
                value,
            });
        }
        let mut untimed: HashMap<u32, u64> = HashMap::new();
        for (_, id, value) in self.early {
            *untimed.entry(id).or_default() += value;
        }
        let mut stacks: Vec<(i32, StackRef)> = self.ids.into_stacks().into_iter().collect();
        stacks.sort_unstable_by_key(|(id, _)| *id);
        Timed {
            stacks: stacks.into_iter().map(|(_, s)| s).collect(),
            rows,
            untimed: untimed.into_iter().collect(),
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn key(tgid: u32) -> StackRef {
        (
            StackKey {
                tgid,
                ..Default::default()
            },
            -1,
        )
    }

    #[test]
    fn values_land_in_their_interval_and_wait_for_the_grid() {
        let grid = Grid::default();
        let mut t = TimedCounts::default();
        // Before the grid: 0.5 s before interval 0 starts, so interval -1 of 1 s.
        t.add(&grid, key(1), 9_500_000_000, 3);
        t.close(&grid);
        grid.set(10_000_000_000, 1_000_000_000);
        t.add(&grid, key(1), 10_000_000_000, 1);
        t.add(&grid, key(2), 10_999_999_999, 2);
        t.add(&grid, key(1), 12_000_000_000, 4);
        t.close(&grid);
        // Intervals -1 and 0 are closed (before the one before the newest), 2 still open.
        let mut closed: Vec<Row> = t.rows.iter().collect();
        closed.sort_by_key(|r| (r.interval, r.stack));
        let at = |interval, stack, value| Row {
            interval,
            stack,
            value,
        };
        assert_eq!(closed, vec![at(-1, 0, 3), at(0, 0, 1), at(0, 1, 2)]);
        assert_eq!(t.open.len(), 1);
        let done = t.finish(grid.get());
        assert_eq!(done.stacks, vec![key(1), key(2)]);
        let mut rows: Vec<Row> = done.rows.iter().collect();
        rows.sort_by_key(|r| (r.interval, r.stack));
        assert_eq!(
            rows,
            vec![at(-1, 0, 3), at(0, 0, 1), at(0, 1, 2), at(2, 0, 4)]
        );
        assert!(done.untimed.is_empty());
    }

    #[test]
    fn without_a_grid_everything_is_untimed_and_kept() {
        let grid = Grid::default();
        let mut t = TimedCounts::default();
        t.add(&grid, key(1), 5, 3);
        t.add(&grid, key(1), 7, 2);
        let done = t.finish(grid.get());
        assert!(done.rows.is_empty());
        assert_eq!(done.untimed, vec![(0, 5)]);
    }
}
