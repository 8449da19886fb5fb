//! Sampled mode: the syscall and softirq programs ran only in a window of each interval, so
//! their counts are scaled up from the windows (by the responses served in them when a load
//! generator says how many, else by the read/write calls the kernel counted in them, else by
//! time), and softirq times are the kernel's own counts at the windows' mean time per event
//! (NET_RX: per packet). The hardirq programs stay attached all along.

use super::deltas::sum;
use serde::{Deserialize, Serialize};
use std::collections::BTreeMap;

use crate::record::{CountNs, Reading};

/// Sampled mode: the share of the window between two samples the syscall and softirq programs
/// were attached. None in exact mode (attached all along).
pub fn traced_fraction(start: &Reading, end: &Reading) -> Option<f64> {
    let traced = end
        .kernel
        .traced_ns?
        .saturating_sub(start.kernel.traced_ns.unwrap_or(0));
    let wall = end.monotonic_ns.saturating_sub(start.monotonic_ns);
    Some(if wall == 0 {
        0.0
    } else {
        (traced as f64 / wall as f64).min(1.0)
    })
}

/// Fewer responses than this in the windows: too few to scale by.
const MIN_TRACED_RESPONSES: u64 = 100;
/// Fewer context switches than this in the windows: too few to scale by.
pub const MIN_TRACED_SWITCHES: u64 = 50;
/// Fewer read/write calls than this in the windows: too few to scale by.
pub const MIN_TRACED_IO_CALLS: u64 = 100;
/// Less time on a CPU than this in the windows (ns): too little to scale by.
pub const MIN_TRACED_ONCPU_NS: u64 = 1_000_000;

/// What the syscall counts seen in the windows are scaled by (sampled mode).
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum Basis {
    /// The share of the load generator's responses that arrived while the programs were attached
    /// (`run`): the server runs slower while traced, so a share of time would undercount it.
    Responses,
    /// The share of the group's read- and write-type syscalls (read, write, writev, sendfile...;
    /// the kernel's exact count in /proc/PID/io, its threads' sum) made while they were
    /// attached: the server's own work, so a burst that a window catches weighs as much as it
    /// should, one it misses is not mistaken for idle time, and a server slowed by the tracing
    /// makes as many per request as when it is not (unlike its time on a CPU or its switches).
    IoCalls,
    /// The share of the group's time on a CPU spent while they were attached: syscalls are made
    /// on a CPU, so a burst that a window catches weighs as much as it should, and one it misses
    /// is not mistaken for idle time. The scheduler's own account, summed per group by the programs
    /// at each switch-out, with the slice so far of each thread running.
    OnCpu,
    /// The share of the group's context switches made while they were attached: syscalls come
    /// with the threads' wakeups and switches, so a burst that a window catches weighs as much as
    /// it should, and one it misses is not mistaken for idle time. Exact counts, always recorded.
    Switches,
    /// The share of time they were attached, when neither was seen often enough.
    Time,
}

impl Basis {
    pub fn name(self) -> &'static str {
        match self {
            Basis::Responses => "responses",
            Basis::IoCalls => "io_calls",
            Basis::OnCpu => "oncpu",
            Basis::Switches => "switches",
            Basis::Time => "time",
        }
    }
}

fn delta(end: Option<u64>, start: Option<u64>) -> Option<u64> {
    Some(end?.saturating_sub(start.unwrap_or(0)))
}

/// The group's context switches between two samples (every watched thread, exact).
pub fn group_switches(start: &Reading, end: &Reading, group: u32) -> u64 {
    let before: BTreeMap<u32, u64> = start
        .kernel
        .threads
        .iter()
        .map(|t| (t.tid, t.voluntary_switches + t.involuntary_switches))
        .collect();
    end.kernel
        .threads
        .iter()
        .filter(|t| t.group == group)
        .map(|t| {
            (t.voluntary_switches + t.involuntary_switches)
                .saturating_sub(before.get(&t.tid).copied().unwrap_or(0))
        })
        .sum()
}

/// The group's time on a CPU between two samples, and the part inside the windows (sampled mode).
pub fn group_oncpu(start: &Reading, end: &Reading, group: u32) -> Option<(u64, u64)> {
    let at = |v: &Option<Vec<u64>>| v.as_ref()?.get(group as usize).copied();
    Some((
        delta(at(&end.oncpu_ns), at(&start.oncpu_ns))?,
        delta(at(&end.traced_oncpu_ns), at(&start.traced_oncpu_ns))?,
    ))
}

/// The group's read/write calls between two samples, and the part inside the windows.
pub fn group_io_calls(start: &Reading, end: &Reading, group: u32) -> Option<(u64, u64)> {
    let at = |v: &Option<Vec<u64>>| v.as_ref()?.get(group as usize).copied();
    Some((
        delta(at(&end.io_calls), at(&start.io_calls))?,
        delta(at(&end.traced_io_calls), at(&start.traced_io_calls))?,
    ))
}

/// The group's switches made while the windows were open, between two samples.
pub fn traced_switches(start: &Reading, end: &Reading, group: u32) -> Option<u64> {
    let at = |s: &Reading| s.traced_switches.as_ref()?.get(group as usize).copied();
    delta(at(end), at(start))
}

/// Sampled mode: the share of the window's work the syscall programs saw, which their counts are
/// divided by, and what it is a share of (Basis). None in exact mode.
pub fn traced_share_by(start: &Reading, end: &Reading, group: u32) -> Option<(f64, Basis)> {
    let time = traced_fraction(start, end)?;
    if let (Some(traced), Some(all)) = (
        delta(end.traced_responses, start.traced_responses),
        delta(end.responses, start.responses),
    ) && traced >= MIN_TRACED_RESPONSES
        && all >= traced
    {
        return Some((traced as f64 / all as f64, Basis::Responses));
    }
    // A server busy with read/write calls is scaled by them even when its windows saw only a
    // few: the sampler places its windows where those calls rise (the profiler's
    // sampler/placement.rs), so the windows' share of the time no longer stands for their share
    // of the work. Only a window that saw none falls back to time (and reads as missed when the
    // server switched).
    if let Some((all, traced)) = group_io_calls(start, end, group)
        && traced > 0
        && (traced >= MIN_TRACED_IO_CALLS || all >= MIN_TRACED_IO_CALLS)
        && all >= traced
    {
        return Some((traced as f64 / all as f64, Basis::IoCalls));
    }
    // Without either, time. Scaling by the CPU time or the switches the windows caught was
    // measured and rejected: the tracing inflates a syscall-heavy server's CPU time
    // inside the windows (a paced getppid loop read 0.81 of its rate) and changes how nginx
    // batches its switches (1.12 and 1.55 of syscount's count under steady load). Both are still
    // recorded in each window (WindowUnit) for the estimator work that follows.
    Some((time, Basis::Time))
}

/// The share alone (see traced_share_by).
pub fn traced_share(start: &Reading, end: &Reading, group: u32) -> Option<f64> {
    traced_share_by(start, end, group).map(|(share, _)| share)
}

/// The group's syscalls the probes counted between two samples (in sampled mode, the ones made
/// while the windows were open).
pub fn traced_syscalls(start: &Reading, end: &Reading, group: u32) -> u64 {
    let sum = |s: &Reading| -> u64 {
        s.kernel
            .syscalls
            .iter()
            .filter(|(g, _, _)| *g == group)
            .map(|(_, _, c)| c.count)
            .sum()
    };
    sum(end).saturating_sub(sum(start))
}

/// One interval's window, as the estimator sees it: what the programs counted in it and how much
/// of each basis it covered.
#[derive(Clone, Debug, Default, PartialEq, Serialize, Deserialize)]
pub struct WindowUnit {
    /// What the windows saw that the estimate scales: every call and its time, or, with the
    /// sleeps counted apart (KernelCounters::blocked_syscalls), the calls that did not block and
    /// the time awake.
    pub syscalls: f64,
    pub syscall_ns: f64,
    /// Per syscall number: the same.
    pub by_name: BTreeMap<u32, (f64, f64)>,
    /// The interrupt programs' deltas in the window: per CPU, per softirq vector
    /// (srvprof_common::SOFTIRQ_NAMES order).
    pub softirqs: Vec<Vec<CountNs>>,
    /// Per CPU: the packets NET_RX processed in the window (/proc/net/softnet_stat).
    pub rx_packets: Vec<f64>,
    pub responses: f64,
    pub io_calls: f64,
    pub switches: f64,
    pub oncpu_ns: f64,
    pub traced_ns: f64,
}

impl WindowUnit {
    /// Adds another window's counts to this one's: every field is a sum over the window.
    pub fn merge(&mut self, other: &WindowUnit) {
        self.syscalls += other.syscalls;
        self.syscall_ns += other.syscall_ns;
        for (nr, (count, ns)) in &other.by_name {
            let e = self.by_name.entry(*nr).or_default();
            *e = (e.0 + count, e.1 + ns);
        }
        if self.softirqs.len() < other.softirqs.len() {
            self.softirqs.resize(other.softirqs.len(), Vec::new());
        }
        for (mine, theirs) in self.softirqs.iter_mut().zip(&other.softirqs) {
            if mine.len() < theirs.len() {
                mine.resize(theirs.len(), CountNs::default());
            }
            for (m, t) in mine.iter_mut().zip(theirs) {
                m.count += t.count;
                m.total_ns += t.total_ns;
            }
        }
        if self.rx_packets.len() < other.rx_packets.len() {
            self.rx_packets.resize(other.rx_packets.len(), 0.0);
        }
        for (m, t) in self.rx_packets.iter_mut().zip(&other.rx_packets) {
            *m += t;
        }
        self.responses += other.responses;
        self.io_calls += other.io_calls;
        self.switches += other.switches;
        self.oncpu_ns += other.oncpu_ns;
        self.traced_ns += other.traced_ns;
    }

    /// The window(s) between two samples, for `group`.
    pub fn between(start: &Reading, end: &Reading, group: u32) -> WindowUnit {
        let by_name: BTreeMap<u32, (f64, f64)> =
            super::deltas::syscall_deltas(start, end, group, |k| Some(k.scaled_syscalls()))
                .into_iter()
                .map(|(nr, d)| (nr, (d.count as f64, d.total_ns as f64)))
                .collect();
        let softirqs = end
            .kernel
            .softirqs
            .iter()
            .enumerate()
            .map(|(cpu, row)| {
                row.iter()
                    .enumerate()
                    .map(|(v, c)| {
                        c.minus(
                            start
                                .kernel
                                .softirqs
                                .get(cpu)
                                .and_then(|r| r.get(v))
                                .copied()
                                .unwrap_or_default(),
                        )
                    })
                    .collect()
            })
            .collect();
        WindowUnit {
            syscalls: by_name.values().map(|(c, _)| c).sum(),
            syscall_ns: by_name.values().map(|(_, ns)| ns).sum(),
            by_name,
            softirqs,
            rx_packets: (0..end.traced_rx_packets.as_ref().map_or(0, Vec::len))
                .map(|cpu| {
                    super::irq::rx_packets(start, end, cpu).map_or(0, |(_, traced)| traced) as f64
                })
                .collect(),
            responses: delta(end.traced_responses, start.traced_responses).unwrap_or(0) as f64,
            io_calls: group_io_calls(start, end, group).map_or(0, |(_, traced)| traced) as f64,
            switches: traced_switches(start, end, group).unwrap_or(0) as f64,
            oncpu_ns: group_oncpu(start, end, group).map_or(0, |(_, traced)| traced) as f64,
            traced_ns: delta(end.kernel.traced_ns, start.kernel.traced_ns).unwrap_or(0) as f64,
        }
    }

    pub(crate) fn basis(&self, basis: Basis) -> f64 {
        match basis {
            Basis::Responses => self.responses,
            Basis::IoCalls => self.io_calls,
            Basis::Switches => self.switches,
            Basis::OnCpu => self.oncpu_ns,
            Basis::Time => self.traced_ns,
        }
    }

    /// The probes' softirqs of `vector` in the window: on `cpu`, or on every CPU (None).
    pub(super) fn softirq(&self, cpu: Option<usize>, vector: usize) -> CountNs {
        let at = |row: &Vec<CountNs>| row.get(vector).copied().unwrap_or_default();
        match cpu {
            Some(cpu) => self.softirqs.get(cpu).map(at).unwrap_or_default(),
            None => self.softirqs.iter().map(at).fold(CountNs::default(), sum),
        }
    }
}

/// Windows kept at most, per group: beyond, neighbours are merged in pairs, so a long run keeps
/// a bounded number of units (the jackknife then leaves out a group of windows at a time, which
/// states the uncertainty as well from this many groups) and its memory does not grow with time.
pub const MAX_WINDOW_UNITS: usize = 512;

/// A group's windows in time order, each unit holding `per` windows (the last up to `per`).
#[derive(Clone, Debug, PartialEq, Serialize, Deserialize)]
pub struct WindowSet {
    units: Vec<(WindowUnit, usize)>,
    per: usize,
}

impl Default for WindowSet {
    fn default() -> Self {
        WindowSet {
            units: Vec::new(),
            per: 1,
        }
    }
}

impl WindowSet {
    pub fn push(&mut self, unit: WindowUnit) {
        match self.units.last_mut() {
            Some((last, n)) if *n < self.per => {
                last.merge(&unit);
                *n += 1;
            }
            _ => self.units.push((unit, 1)),
        }
        if self.units.len() > MAX_WINDOW_UNITS {
            let units = std::mem::take(&mut self.units);
            let mut merged: Vec<(WindowUnit, usize)> = Vec::with_capacity(units.len() / 2 + 1);
            for pair in units.chunks(2) {
                let (mut unit, mut n) = pair[0].clone();
                if let Some((other, m)) = pair.get(1) {
                    unit.merge(other);
                    n += m;
                }
                merged.push((unit, n));
            }
            self.units = merged;
            self.per *= 2;
        }
    }

    /// The units of the first `windows` windows (those wholly among them).
    pub fn first(&self, windows: usize) -> Vec<&WindowUnit> {
        let mut covered = 0;
        (self.units.iter())
            .take_while(|(_, n)| {
                covered += n;
                covered <= windows
            })
            .map(|(u, _)| u)
            .collect()
    }

    /// How many windows it holds.
    pub fn windows(&self) -> usize {
        self.units.iter().map(|(_, n)| n).sum()
    }
}
#[cfg(test)]
mod tests {
    use super::*;

    fn unit(i: usize) -> WindowUnit {
        WindowUnit {
            syscalls: i as f64,
            syscall_ns: 10.0 * i as f64,
            by_name: [(0, (i as f64, 1.0)), (i as u32 % 3, (1.0, 2.0))]
                .into_iter()
                .collect(),
            softirqs: vec![
                vec![
                    CountNs {
                        count: 1,
                        total_ns: i as u64
                    };
                    2
                ];
                1 + i % 2
            ],
            rx_packets: vec![1.0; 1 + i % 2],
            responses: 2.0,
            io_calls: 3.0,
            switches: 4.0,
            oncpu_ns: 5.0,
            traced_ns: 6.0,
        }
    }

    #[test]
    fn a_long_runs_windows_are_merged_into_a_bounded_set_that_keeps_every_count() {
        let n = 5 * MAX_WINDOW_UNITS + 3;
        let mut set = WindowSet::default();
        let mut whole = WindowUnit::default();
        for i in 0..n {
            whole.merge(&unit(i));
            set.push(unit(i));
        }
        assert!(set.units.len() <= MAX_WINDOW_UNITS, "{}", set.units.len());
        assert_eq!(set.windows(), n);
        let mut summed = WindowUnit::default();
        for u in set.first(n) {
            summed.merge(u);
        }
        assert_eq!(summed, whole);
        // The first k windows: the units wholly among them, never a window past k.
        let per = set.per;
        assert_eq!(set.first(per * 3 + per / 2).len(), 3);
        let few: f64 = set.first(per * 3).iter().map(|u| u.responses).sum();
        assert_eq!(few, 2.0 * (per * 3) as f64);
        // A short run's windows stay one a unit, as before.
        let mut short = WindowSet::default();
        for i in 0..10 {
            short.push(unit(i));
        }
        assert_eq!(short.first(7).len(), 7);
        assert_eq!(short.first(7)[6], &unit(6));
    }

    /// A sampled-mode sample at `t_ns` with the group's read/write calls so far and inside the
    /// windows, its syscall programs attached for `traced_ns` so far.
    fn sample(t_ns: u64, traced_ns: u64, io: Option<(u64, u64)>) -> Reading {
        let mut s = Reading {
            monotonic_ns: t_ns,
            ..Default::default()
        };
        s.kernel.traced_ns = Some(traced_ns);
        s.io_calls = io.map(|(all, _)| vec![all, 0]);
        s.traced_io_calls = io.map(|(_, traced)| vec![traced, 0]);
        s
    }

    #[test]
    fn without_a_load_generator_counts_scale_by_read_write_calls_when_the_windows_saw_enough() {
        let start = sample(0, 0, Some((0, 0)));
        // 1 s, traced 50 ms (5 %), but the windows caught 400 of 1,000 read/write calls: a burst.
        let burst = sample(1_000_000_000, 50_000_000, Some((1_000, 400)));
        assert_eq!(
            traced_share_by(&start, &burst, 0),
            Some((0.4, Basis::IoCalls))
        );
        // Few in the windows, of many: still the calls (the windows were placed by them).
        let few = sample(1_000_000_000, 50_000_000, Some((1_000, 10)));
        assert_eq!(
            traced_share_by(&start, &few, 0),
            Some((0.01, Basis::IoCalls))
        );
        // Few of few: too few to scale by, time.
        let idle = sample(
            1_000_000_000,
            50_000_000,
            Some((MIN_TRACED_IO_CALLS - 1, 5)),
        );
        assert_eq!(traced_share_by(&start, &idle, 0), Some((0.05, Basis::Time)));
        // None in the windows: time (a burst they all missed reads as missed, not scaled).
        let missed = sample(1_000_000_000, 50_000_000, Some((1_000, 0)));
        assert_eq!(
            traced_share_by(&start, &missed, 0),
            Some((0.05, Basis::Time))
        );
        // Not read (exact mode readings, or an older recording): time.
        let none = sample(1_000_000_000, 50_000_000, None);
        assert_eq!(
            traced_share_by(&sample(0, 0, None), &none, 0),
            Some((0.05, Basis::Time))
        );
        // Another group's calls are not this one's.
        assert_eq!(
            traced_share_by(&start, &burst, 1),
            Some((0.05, Basis::Time))
        );
    }
}
