//! One timeline row per interval, derived from the same report as the whole window.

use serde::{Deserialize, Serialize};

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
}

pub fn interval_row(prev: &Sample, cur: &Sample, group: u32, run_start_ns: u64) -> IntervalRow {
    let r = kernel_report(prev, cur, group, &[]);
    row_from_report(
        &r,
        prev.monotonic_ns.saturating_sub(run_start_ns) as f64 / 1e9,
        cur.kernel.softirqs.len(),
    )
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
    }
}
