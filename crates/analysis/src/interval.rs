//! One timeline row per interval, derived from the same report as the whole window.

use serde::{Deserialize, Serialize};

use crate::kernel_report::sampling::{
    Basis, WindowUnit, group_io_calls, group_oncpu, group_switches, traced_share_by,
};
use crate::kernel_report::{KernelReport, kernel_report};
use crate::record::Reading;

#[derive(Clone, Debug, Default, PartialEq, Serialize, Deserialize)]
pub struct KernelRow {
    /// Start of the interval, seconds since the run started.
    pub t_s: f64,
    pub duration_s: f64,
    pub voluntary_switches_per_s: f64,
    pub involuntary_switches_per_s: f64,
    pub runq_p99_us: f64,
    /// Percent of one CPU.
    pub user_pct: f64,
    pub sys_pct: f64,
    /// None when syscalls were not recorded (--syscalls off).
    pub syscalls_per_s: Option<f64>,
    pub migrations_per_s: f64,
    /// Per CPU, system-wide.
    pub net_rx_per_s: Vec<f64>,
    pub net_tx_per_s: Vec<f64>,
    pub hardirqs_per_s: Vec<f64>,
    pub listen_overflows: u64,
    pub retransmits: u64,
    pub syn_retransmits: u64,
    /// CPU quota: periods that ran out of it, and the time the group's tasks were held back, ms
    /// (summed over the control groups limiting the group).
    #[serde(default)]
    pub throttled_periods: u64,
    #[serde(default)]
    pub throttled_ms: f64,
}

/// The row of the interval from `prev` to `cur`. In sampled mode, an interval whose window saw too
/// little to scale by (a burst outside it) takes the ratio of syscalls to switches or responses
/// measured in every window since `first`: its syscalls are estimated from its own, exact,
/// switches or responses, not read as zero. When no window has seen any yet (a burst in the first
/// interval, missed by its window), the row is returned with its work, to be estimated once a
/// later window has (Pool::fill).
pub fn interval_row(
    first: &Reading,
    prev: &Reading,
    cur: &Reading,
    group: u32,
    run_start_ns: u64,
) -> (KernelRow, Option<IntervalWork>) {
    let r = kernel_report(prev, cur, group, &[]);
    let mut row = row_from_report(
        &r,
        prev.monotonic_ns.saturating_sub(run_start_ns) as f64 / 1e9,
        cur.kernel.softirqs.len(),
    );
    if r.syscalls_off || r.scaled_by.as_deref() != Some(Basis::Time.name()) {
        return (row, None);
    }
    let work = IntervalWork {
        // The sleeps were counted, not estimated.
        blocked: r.syscalls_blocked.unwrap_or(0) as f64,
        ..IntervalWork::between(prev, cur, group)
    };
    let filled = Pool::between(first, cur, group).is_some_and(|pool| pool.fill(&mut row, &work));
    if filled || work.is_idle() {
        (row, None)
    } else {
        (row, Some(work))
    }
}

/// The work of one interval by each basis the windows' ratio can be taken to, for an estimate
/// made from windows outside it.
#[derive(Clone, Debug, Default, PartialEq)]
pub struct IntervalWork {
    responses: Option<f64>,
    io_calls: Option<f64>,
    switches: f64,
    oncpu_ns: Option<f64>,
    /// Syscalls that blocked, counted in full in every mode.
    blocked: f64,
    duration_s: f64,
}

impl IntervalWork {
    pub fn between(prev: &Reading, cur: &Reading, group: u32) -> Self {
        Self {
            responses: cur
                .responses
                .map(|r| r.saturating_sub(prev.responses.unwrap_or(0)) as f64),
            io_calls: group_io_calls(prev, cur, group).map(|(all, _)| all as f64),
            switches: group_switches(prev, cur, group) as f64,
            oncpu_ns: group_oncpu(prev, cur, group).map(|(all, _)| all as f64),
            blocked: 0.0,
            duration_s: cur.monotonic_ns.saturating_sub(prev.monotonic_ns) as f64 / 1e9,
        }
    }

    /// Nothing done by any basis: no syscalls to estimate (an idle server, an empty group), so
    /// the row need not wait.
    fn is_idle(&self) -> bool {
        [
            self.responses,
            self.io_calls,
            Some(self.switches),
            self.oncpu_ns,
        ]
        .iter()
        .all(|w| w.unwrap_or(0.0) == 0.0)
    }

    fn of(&self, basis: Basis) -> Option<f64> {
        match basis {
            Basis::Responses => self.responses,
            Basis::IoCalls => self.io_calls,
            Basis::Switches => Some(self.switches),
            Basis::OnCpu => self.oncpu_ns,
            Basis::Time => None,
        }
    }
}

/// The ratio of syscalls to a basis of work, as the windows between two samples saw it.
pub struct Pool {
    basis: Basis,
    syscalls_per_unit: f64,
}

impl Pool {
    /// The windows between `from` and `to`; None when they saw too little of any basis but time.
    pub fn between(from: &Reading, to: &Reading, group: u32) -> Option<Pool> {
        let (_, basis) = traced_share_by(from, to, group)?;
        if basis == Basis::Time {
            return None;
        }
        let seen = WindowUnit::between(from, to, group);
        let traced = seen.basis(basis);
        (traced > 0.0).then(|| Pool {
            basis,
            syscalls_per_unit: seen.syscalls / traced,
        })
    }

    /// Sets `row`'s syscalls to those of an interval doing `work` at this ratio; false (and
    /// `row` unchanged) when the interval's work by this basis is unknown.
    pub fn fill(&self, row: &mut KernelRow, work: &IntervalWork) -> bool {
        let Some(units) = work.of(self.basis) else {
            return false;
        };
        let estimate = self.syscalls_per_unit * units + work.blocked;
        row.syscalls_per_s = Some(estimate / work.duration_s.max(1e-9));
        true
    }
}

pub fn row_from_report(r: &KernelReport, t_s: f64, ncpus: usize) -> KernelRow {
    let secs = r.duration_s.max(1e-9);
    let per_s = |n: u64| n as f64 / secs;
    let mut net_rx = vec![0.0; ncpus];
    let mut net_tx = vec![0.0; ncpus];
    for s in &r.softirqs {
        let cpu = s.cpu as usize;
        if cpu < ncpus {
            match s.vector.as_str() {
                "NET_RX" => net_rx[cpu] = per_s(s.count),
                "NET_TX" => net_tx[cpu] = per_s(s.count),
                _ => {}
            }
        }
    }
    let mut hard = vec![0.0; ncpus];
    for h in &r.hardirqs {
        if (h.cpu as usize) < ncpus {
            hard[h.cpu as usize] += per_s(h.count);
        }
    }
    KernelRow {
        t_s,
        duration_s: r.duration_s,
        voluntary_switches_per_s: per_s(r.totals.voluntary_switches),
        involuntary_switches_per_s: per_s(r.totals.involuntary_switches),
        runq_p99_us: r.runq_latency_us.p99,
        user_pct: r.totals.user_ns as f64 / (secs * 1e9) * 100.0,
        sys_pct: r.totals.sys_ns as f64 / (secs * 1e9) * 100.0,
        syscalls_per_s: r.syscalls_recorded().then(|| per_s(r.totals.syscalls)),
        migrations_per_s: per_s(r.totals.migrations),
        net_rx_per_s: net_rx,
        net_tx_per_s: net_tx,
        hardirqs_per_s: hard,
        listen_overflows: r.tcp.listen_overflows,
        retransmits: r.tcp.retransmits,
        syn_retransmits: r.tcp.syn_retransmits,
        throttled_periods: r.cpu_limits.iter().map(|c| c.throttled_periods).sum(),
        throttled_ms: r.cpu_limits.iter().map(|c| c.throttled_s * 1e3).sum(),
    }
}
