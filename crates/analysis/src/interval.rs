//! One timeline row per interval, derived from the same report as the whole window.

use serde::{Deserialize, Serialize};

use crate::kernel_report::sampling::{
    Basis, WindowUnit, group_io_calls, group_oncpu, group_switches, traced_share_by,
};
use crate::kernel_report::{KernelReport, kernel_report};
use crate::record::Sample;

#[derive(Clone, Debug, Default, PartialEq, Serialize, Deserialize)]
pub struct IntervalRow {
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
/// switches or responses, not read as zero.
pub fn interval_row(
    first: &Sample,
    prev: &Sample,
    cur: &Sample,
    group: u32,
    run_start_ns: u64,
) -> IntervalRow {
    let r = kernel_report(prev, cur, group, &[]);
    let mut row = row_from_report(
        &r,
        prev.monotonic_ns.saturating_sub(run_start_ns) as f64 / 1e9,
        cur.kernel.softirqs.len(),
    );
    if !r.syscalls_off
        && r.scaled_by.as_deref() == Some(Basis::Time.name())
        && let Some(estimate) = pooled_syscalls(first, prev, cur, group)
    {
        // The sleeps were counted, not estimated.
        let estimate = estimate + r.syscalls_blocked.unwrap_or(0) as f64;
        row.syscalls_per_s = Some(estimate / r.duration_s.max(1e-9));
    }
    row
}

/// The syscalls of the interval from `prev` to `cur`, at the ratio of syscalls to the basis seen
/// in the windows since `first`, times the interval's own basis. None when the windows since
/// `first` saw too little of any basis but time.
fn pooled_syscalls(first: &Sample, prev: &Sample, cur: &Sample, group: u32) -> Option<f64> {
    let (_, basis) = traced_share_by(first, cur, group)?;
    let seen = WindowUnit::between(first, cur, group);
    let (traced, interval) = match basis {
        Basis::Responses => (
            seen.responses,
            cur.responses?.saturating_sub(prev.responses.unwrap_or(0)) as f64,
        ),
        Basis::Switches => (seen.switches, group_switches(prev, cur, group) as f64),
        Basis::IoCalls => (seen.io_calls, group_io_calls(prev, cur, group)?.0 as f64),
        Basis::OnCpu => (seen.oncpu_ns, group_oncpu(prev, cur, group)?.0 as f64),
        Basis::Time => return None,
    };
    (traced > 0.0).then(|| seen.syscalls / traced * interval)
}

pub fn row_from_report(r: &KernelReport, t_s: f64, ncpus: usize) -> IntervalRow {
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
    IntervalRow {
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
