//! Network interrupts concentrated on one CPU.

use std::collections::BTreeMap;

use crate::finding::{Finding, FindingKind, Severity};
use crate::run_report::RunReport;

/// NET_RX softirqs on one CPU from this share of all of them: concentrated...
pub const IRQ_CONCENTRATED_SHARE: f64 = 0.80;
/// ...when there are at least this many per second (system-wide).
pub const IRQ_MIN_PER_S: f64 = 1000.0;

/// One CPU ran at least IRQ_CONCENTRATED_SHARE of NET_RX softirqs, at IRQ_MIN_PER_S or more, while
/// others ran some; says whether the server shares that CPU.
pub fn net_irq_concentrated(r: &RunReport) -> Option<Finding> {
    let secs = r.server.duration_s.max(1e-9);
    let mut net_rx_per_cpu: BTreeMap<u32, u64> = BTreeMap::new();
    for s in r.server.softirqs.iter().filter(|s| s.vector == "NET_RX") {
        *net_rx_per_cpu.entry(s.cpu).or_default() += s.count;
    }
    let total: u64 = net_rx_per_cpu.values().sum();
    let (cpu, n) = net_rx_per_cpu.iter().max_by_key(|(_, n)| **n)?;
    let share = *n as f64 / total.max(1) as f64;
    if total as f64 / secs < IRQ_MIN_PER_S
        || share < IRQ_CONCENTRATED_SHARE
        || net_rx_per_cpu.len() <= 1
    {
        return None;
    }
    let shares_cpu = r.server.threads.iter().any(|t| t.cpus.contains(cpu));
    Some(Finding::new(
        FindingKind::NetIrqConcentrated,
        Severity::Info,
        format!(
            "{:.0}% of NET_RX softirqs ran on CPU {cpu} ({:.0}/s); the server {} that CPU",
            share * 100.0,
            *n as f64 / secs,
            if shares_cpu {
                "shares"
            } else {
                "does not run on"
            }
        ),
        &[
            ("cpu", *cpu as f64),
            ("share", share),
            ("net_rx_per_s", *n as f64 / secs),
            ("server_shares_cpu", shares_cpu as u8 as f64),
        ],
    ))
}
