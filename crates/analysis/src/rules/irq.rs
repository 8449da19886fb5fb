//! Network interrupts concentrated on one CPU.

use std::collections::BTreeMap;

use crate::finding::{Finding, FindingKind, Severity};
use crate::run_report::RunReport;

/// NET_RX softirqs on one CPU from this share of all of them: concentrated...
pub const IRQ_CONCENTRATED_SHARE: f64 = 0.80;
/// ...when there are at least this many per second (system-wide).
pub const IRQ_MIN_PER_S: f64 = 1000.0;

/// One CPU of several ran at least IRQ_CONCENTRATED_SHARE of NET_RX softirqs, at IRQ_MIN_PER_S or
/// more; says whether the server shares that CPU.
pub fn net_irq_concentrated(r: &RunReport) -> Option<Finding> {
    let secs = r.server.duration_s.max(1e-9);
    let mut net_rx_per_cpu: BTreeMap<u32, u64> = BTreeMap::new();
    for s in r.server.softirqs.iter().filter(|s| s.vector == "NET_RX") {
        *net_rx_per_cpu.entry(s.cpu).or_default() += s.count;
    }
    let total: u64 = net_rx_per_cpu.values().sum();
    let (cpu, n) = net_rx_per_cpu.iter().max_by_key(|(_, n)| **n)?;
    let share = *n as f64 / total.max(1) as f64;
    // The machine's CPUs (the timeline has a rate per CPU), not only those that ran NET_RX: all of
    // them on one CPU of several is the most concentrated case, not a single-CPU machine.
    let cpus = r
        .timeline
        .iter()
        .map(|t| t.server.net_rx_per_s.len())
        .max()
        .unwrap_or(0)
        .max(net_rx_per_cpu.len());
    if total as f64 / secs < IRQ_MIN_PER_S || share < IRQ_CONCENTRATED_SHARE || cpus <= 1 {
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

#[cfg(test)]
pub(super) mod tests {
    use srvprof_common::{GROUP_SERVER, SOFTIRQ_NAMES};

    use super::*;
    use crate::record::CountNs;
    use crate::rules::test_support::*;

    tables!(net_irq_concentrated_table);

    /// A recorded window (exact mode) on as many CPUs as `per_cpu` has counts, in which CPU i ran
    /// per_cpu[i] `vector` softirqs, while the server's thread ran on `server_cpu`.
    fn softirqs(vector: &str, per_cpu: &[u64], server_cpu: u32) -> RunReport {
        let v = SOFTIRQ_NAMES.iter().position(|n| *n == vector).unwrap();
        Recording::new(1, WINDOW_S, per_cpu.len())
            .each(|s, k| {
                for (cpu, &n) in per_cpu.iter().enumerate() {
                    let count = grown(n, k);
                    s.kernel.softirqs[cpu][v] = CountNs {
                        count,
                        total_ns: count * 2_000,
                    };
                }
                s.kernel
                    .threads
                    .push(thread(GROUP_SERVER, 7, "server", server_cpu, k));
            })
            .build()
    }

    /// NET_RX softirqs over two CPUs, `share` of `total` of them on CPU 0; the server on CPU 0.
    fn net_rx(share: f64, total: u64) -> RunReport {
        let on_0 = (share * total as f64).round() as u64;
        softirqs("NET_RX", &[on_0, total - on_0], 0)
    }

    /// On `cpu`, `n` of the window's NET_RX softirqs, `share` of them all.
    fn concentrated(cpu: u32, share: f64, n: u64, server_shares_cpu: bool) -> Vec<Expected> {
        finds(
            FindingKind::NetIrqConcentrated,
            Severity::Info,
            &[
                ("cpu", cpu as f64),
                ("share", share),
                ("net_rx_per_s", n as f64 / WINDOW_S as f64),
                ("server_shares_cpu", server_shares_cpu as u8 as f64),
            ],
        )
    }

    fn net_irq_concentrated_table() -> Table {
        // Well above IRQ_MIN_PER_S.
        let total = 100 * IRQ_MIN_PER_S as u64 * WINDOW_S;
        let on_0 = |share: f64| (share * total as f64).round() as u64;
        let (below, at, above) = (
            IRQ_CONCENTRATED_SHARE - 0.01,
            IRQ_CONCENTRATED_SHARE,
            IRQ_CONCENTRATED_SHARE + 0.01,
        );
        // `per_s` NET_RX softirqs a second, 90% of them on CPU 0.
        let rate = |per_s: f64| net_rx(0.9, (per_s * WINDOW_S as f64).round() as u64);
        let at_rate = |per_s: f64| {
            let total = (per_s * WINDOW_S as f64).round() as u64;
            concentrated(0, 0.9, total * 9 / 10, true)
        };
        let (slow, min, fast) = (IRQ_MIN_PER_S - 1.0, IRQ_MIN_PER_S, IRQ_MIN_PER_S + 1.0);
        #[rustfmt::skip]
        let cases = [
            ("recorded: CPU 0's share just below IRQ_CONCENTRATED_SHARE", net_rx(below, total), nothing()),
            ("recorded: CPU 0's share at IRQ_CONCENTRATED_SHARE", net_rx(at, total), concentrated(0, at, on_0(at), true)),
            ("recorded: CPU 0's share just above", net_rx(above, total), concentrated(0, above, on_0(above), true)),
            ("recorded: just below IRQ_MIN_PER_S", rate(slow), nothing()),
            ("recorded: at IRQ_MIN_PER_S", rate(min), at_rate(min)),
            ("recorded: just above IRQ_MIN_PER_S", rate(fast), at_rate(fast)),
            ("recorded: on CPU 1, the server on CPU 0", softirqs("NET_RX", &[1_000, 9_000, 0], 0), concentrated(1, 0.9, 9_000, false)),
            ("recorded: a single CPU", softirqs("NET_RX", &[total], 0), nothing()),
            // The other CPU ran none: the most concentrated case, not a single CPU.
            ("recorded: all on CPU 0 of two", softirqs("NET_RX", &[total, 0], 0), concentrated(0, 1.0, total, true)),
            ("recorded: all but one on CPU 0 of two", softirqs("NET_RX", &[total - 1, 1], 0), concentrated(0, (total - 1) as f64 / total as f64, total - 1, true)),
            ("recorded: NET_TX is not NET_RX", softirqs("NET_TX", &[on_0(above), total - on_0(above)], 0), nothing()),
        ];
        Table::new(net_irq_concentrated, cases)
    }
}
