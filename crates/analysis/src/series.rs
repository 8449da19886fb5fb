//! The samples of a run, folded as they arrive: the first one, the last two, and one timeline row
//! per interval and group. A long run keeps a few kilobytes per interval, not every sample.

use serde::{Deserialize, Serialize};
use srvprof_common::{GROUP_CLIENT, GROUP_SERVER};

use crate::interval::{IntervalWork, KernelRow, Pool, interval_row};
use crate::kernel_report::KernelReport;
use crate::kernel_report::sampling::{WindowSet, WindowUnit};
use crate::kernel_report::uncertainty::state_errors;
use crate::record::Reading;

/// Where a kernel interval sits on the load's interval grid: the first load interval it joins
/// and how many (more than one only when the sampler missed a grid point altogether).
#[derive(Clone, Copy, Debug, PartialEq, Eq, Serialize, Deserialize)]
pub struct GridSpan {
    pub first: usize,
    pub count: usize,
}

/// Rows kept waiting at most: a group whose windows never see its work (a server that makes no
/// read/write calls, scaled by time) leaves later rows as read, in bounded memory.
const MAX_PENDING: usize = 64;

/// Serializable, so that `srvprof probe` on a server host can leave its series for `srvprof merge`
/// to build the run from, as `srvprof run` builds it on one host.
#[derive(Serialize, Deserialize)]
pub struct ReadingSeries {
    /// The origin of every row's t_s and of the grid (CLOCK_MONOTONIC ns): in `run`, when the load
    /// generator starts measuring.
    start_ns: u64,
    interval_ns: u64,
    first: Option<Reading>,
    /// The last two samples: the end of the run, and the one before in case the last interval
    /// (teardown after the load ended) is dropped.
    recent: Vec<Reading>,
    pub server_rows: Vec<KernelRow>,
    pub client_rows: Vec<KernelRow>,
    /// Sampled mode: each interval's window, per group (server, client), for the estimate's
    /// uncertainty.
    pub windows: [WindowSet; 2],
    /// One per row: the load intervals it lines up with.
    pub spans: Vec<GridSpan>,
    /// Rows whose syscalls wait for a window to see any (interval_row): group, row, its work.
    #[serde(skip)]
    pending: Vec<(u32, usize, IntervalWork)>,
    count: usize,
}

impl ReadingSeries {
    /// Samples due at `start_ns + k * interval` (their `due_ns`); rows start at their samples'
    /// real times, counted from `start_ns`.
    pub fn on_grid(start_ns: u64, interval: std::time::Duration) -> Self {
        Self {
            start_ns,
            interval_ns: (interval.as_nanos() as u64).max(1),
            first: None,
            recent: Vec::new(),
            server_rows: Vec::new(),
            client_rows: Vec::new(),
            windows: [WindowSet::default(), WindowSet::default()],
            spans: Vec::new(),
            pending: Vec::new(),
            count: 0,
        }
    }

    pub fn push(&mut self, sample: Reading) {
        match (&self.first, self.recent.last()) {
            (Some(first), Some(prev)) => {
                for group in [GROUP_SERVER, GROUP_CLIENT] {
                    let (row, work) = interval_row(first, prev, &sample, group, self.start_ns);
                    let rows = if group == GROUP_SERVER {
                        &mut self.server_rows
                    } else {
                        &mut self.client_rows
                    };
                    rows.push(row);
                    // Rows waiting for a window to see any syscalls, estimated from every window
                    // so far once one has.
                    if self.pending.iter().any(|(g, ..)| *g == group)
                        && let Some(pool) = Pool::between(first, &sample, group)
                    {
                        self.pending.retain(|(g, index, work)| {
                            *g != group || !pool.fill(&mut rows[*index], work)
                        });
                    }
                    if let Some(work) = work
                        && self.pending.len() < MAX_PENDING
                    {
                        self.pending.push((group, rows.len() - 1, work));
                    }
                }
                if sample.kernel.traced_ns.is_some() {
                    for group in [GROUP_SERVER, GROUP_CLIENT] {
                        self.windows[group as usize]
                            .push(WindowUnit::between(prev, &sample, group));
                    }
                }
                let span = self.span(prev, &sample);
                self.spans.push(span);
            }
            _ => self.first = Some(sample.clone()),
        }
        self.recent.push(sample);
        if self.recent.len() > 2 {
            self.recent.remove(0);
        }
        self.count += 1;
    }

    /// By the grid points the two samples were due at, not by when they were taken: a late
    /// sample still ends the interval it was due for.
    fn span(&self, prev: &Reading, cur: &Reading) -> GridSpan {
        let index = |due: u64| {
            (due.saturating_sub(self.start_ns) + self.interval_ns / 2) / self.interval_ns
        };
        match (prev.due_ns, cur.due_ns) {
            (Some(a), Some(b)) => GridSpan {
                first: index(a) as usize,
                count: index(b).saturating_sub(index(a)).max(1) as usize,
            },
            _ => GridSpan {
                first: self.spans.len(),
                count: 1,
            },
        }
    }

    /// The grid's interval.
    pub fn interval(&self) -> std::time::Duration {
        std::time::Duration::from_nanos(self.interval_ns)
    }

    /// How many samples were taken.
    pub fn len(&self) -> usize {
        self.count
    }

    pub fn is_empty(&self) -> bool {
        self.count == 0
    }

    pub fn first(&self) -> Option<&Reading> {
        self.first.as_ref()
    }

    /// The newest sample.
    pub fn last(&self) -> Option<&Reading> {
        self.recent.last()
    }

    /// Sampled mode: states the 95 % uncertainty of every estimate in `report` (syscall totals,
    /// each syscall, each interrupt row's time) from the first `intervals` windows of its group,
    /// by the basis the report was scaled by (sampling::state_errors).
    pub fn state_errors(&self, report: &mut KernelReport, group: u32, intervals: usize) {
        if let Some(set) = self.windows.get(group as usize) {
            let units: Vec<WindowUnit> = set.first(intervals).into_iter().cloned().collect();
            state_errors(report, &units);
        }
    }

    /// The sample ending interval `intervals` (counted from 1): the last one, or the one before it.
    pub fn end_of(&self, intervals: usize) -> Option<&Reading> {
        let last_rows = self.server_rows.len();
        if intervals >= last_rows {
            self.recent.last()
        } else {
            self.recent.first()
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::record::{CpuUse, KernelCounters, ThreadCounters};

    const SEC: u64 = 1_000_000_000;
    /// Measurement starts here (CLOCK_MONOTONIC ns), as a real run's would.
    const START: u64 = 7_000 * SEC;

    /// A server thread switching 1,000 times a second and on CPU half of the time, read at `at_ns`
    /// (seconds since START) for the grid point `due_s`: what the sampler records when it reads at
    /// `at_ns` however late it is.
    fn sample(due_s: u64, at_ns: u64) -> Reading {
        let cpu = CpuUse {
            pid: 10,
            comm: "server".into(),
            user_ns: at_ns / 2,
            ..Default::default()
        };
        let mut kernel = KernelCounters::empty(1);
        kernel.monotonic_ns = START + at_ns;
        kernel.threads.push(ThreadCounters {
            tid: 10,
            pid: 10,
            comm: "server".into(),
            voluntary_switches: at_ns / 1_000_000,
            ..Default::default()
        });
        Reading {
            monotonic_ns: START + at_ns,
            due_ns: Some(START + due_s * SEC),
            thread_cpu: vec![CpuUse {
                tid: 10,
                ..cpu.clone()
            }],
            process_cpu: vec![cpu],
            kernel,
            ..Default::default()
        }
    }

    #[test]
    fn a_late_sample_is_measured_for_its_true_length_and_labelled_by_its_grid_point() {
        let mut series = ReadingSeries::on_grid(START, std::time::Duration::from_secs(1));
        // Due at 1 s, read 300 ms late; due at 2 s, read on time.
        for (due_s, at_ns) in [(0, 0), (1, 1_300_000_000), (2, 2 * SEC)] {
            series.push(sample(due_s, at_ns));
        }
        let rows = &series.server_rows;
        assert_eq!(rows.len(), 2);
        // The first interval really lasted 1.3 s and held 1,300 switches: 1,000/s, not 1,300/s.
        assert!((rows[0].t_s - 0.0).abs() < 1e-9);
        assert!((rows[0].duration_s - 1.3).abs() < 1e-9);
        assert!((rows[0].voluntary_switches_per_s - 1000.0).abs() < 1e-6);
        assert!((rows[0].user_pct - 50.0).abs() < 1e-6);
        // The second starts when the late reading was taken and lasts the 0.7 s left.
        assert!((rows[1].t_s - 1.3).abs() < 1e-9);
        assert!((rows[1].duration_s - 0.7).abs() < 1e-9);
        assert!((rows[1].voluntary_switches_per_s - 1000.0).abs() < 1e-6);
        assert!((rows[1].user_pct - 50.0).abs() < 1e-6);
        // Each still joins the load interval it was due for.
        assert_eq!(
            series.spans,
            [
                GridSpan { first: 0, count: 1 },
                GridSpan { first: 1, count: 1 }
            ]
        );
    }

    #[test]
    fn a_sample_that_missed_grid_points_spans_every_load_interval_it_covers() {
        let mut series = ReadingSeries::on_grid(START, std::time::Duration::from_secs(1));
        // The reading due at 1 s never happened; the one due at 3 s came 40 ms late.
        for (due_s, at_ns) in [(0, 0), (3, 3_040_000_000), (4, 4 * SEC)] {
            series.push(sample(due_s, at_ns));
        }
        assert_eq!(
            series.spans,
            [
                GridSpan { first: 0, count: 3 },
                GridSpan { first: 3, count: 1 }
            ]
        );
        assert!((series.server_rows[0].duration_s - 3.04).abs() < 1e-9);
        assert!((series.server_rows[0].voluntary_switches_per_s - 1000.0).abs() < 1e-6);
    }

    /// Sampled mode, at `t_s`: a server that has made `io` read/write calls so far, `io_seen` and
    /// `syscalls_seen` of them inside its windows, which have been open 50 ms a second.
    fn sampled(t_s: u64, io: u64, io_seen: u64, syscalls_seen: u64) -> Reading {
        let mut s = sample(t_s, t_s * SEC);
        s.kernel.traced_ns = Some(t_s * SEC / 20);
        s.kernel.syscalls = vec![(
            GROUP_SERVER,
            0,
            crate::record::CountNs {
                count: syscalls_seen,
                total_ns: syscalls_seen * 1_000,
            },
        )];
        s.kernel.threads[0].syscalls = syscalls_seen;
        s.kernel.threads[0].syscall_ns = syscalls_seen * 1_000;
        s.io_calls = Some(vec![io, 0]);
        s.traced_io_calls = Some(vec![io_seen, 0]);
        s
    }

    #[test]
    fn a_first_interval_its_window_missed_is_estimated_once_a_later_window_sees_the_work() {
        let mut series = ReadingSeries::on_grid(START, std::time::Duration::from_secs(1));
        series.push(sampled(0, 0, 0, 0));
        // A burst of 1,000 read/write calls the first window missed.
        series.push(sampled(1, 1_000, 0, 0));
        assert_eq!(series.server_rows[0].syscalls_per_s, None);
        // The next window catches 100 of the next 1,000, with 5 syscalls each.
        series.push(sampled(2, 2_000, 100, 500));
        let per_s = |row: usize| series.server_rows[row].syscalls_per_s.unwrap_or(0.0);
        assert!((per_s(1) - 5_000.0).abs() < 1.0, "{}", per_s(1));
        // The first interval made as many read/write calls, at the ratio the windows saw.
        assert!((per_s(0) - 5_000.0).abs() < 1.0, "{}", per_s(0));
    }

    #[test]
    fn rows_of_work_no_window_ever_sees_wait_in_bounded_memory() {
        let mut series = ReadingSeries::on_grid(START, std::time::Duration::from_secs(1));
        // A server that switches but makes no read/write calls: scaled by time, never pooled.
        for t in 0..200 {
            series.push(sampled(t, 0, 0, 0));
        }
        assert_eq!(series.server_rows.len(), 199);
        // The first MAX_PENDING wait; the rest are left as read.
        assert_eq!(series.pending.len(), MAX_PENDING);
    }
}
