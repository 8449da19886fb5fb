//! Softirqs and hardirqs per CPU between two samples (system-wide). Hardirqs: the probes' counts
//! and times, attached all along in both modes. Softirqs: the probes' in exact mode; in sampled
//! mode the kernel's own counts (/proc/softirqs) timed at the windows' mean per event on that CPU
//! (NET_RX: per packet), or on every CPU when that CPU's windows saw none; when no window saw one
//! anywhere, the time is unknown (time_unknown), not zero.

use serde::{Deserialize, Serialize};
use srvprof_common::SOFTIRQ_NAMES;

use super::deltas::at_probe_mean;
use crate::record::{CountNs, Reading};

#[derive(Clone, Debug, Default, PartialEq, Serialize, Deserialize)]
pub struct SoftirqReport {
    pub cpu: u32,
    pub vector: String,
    pub count: u64,
    pub total_ns: u64,
    /// Sampled mode: the 95 % uncertainty of total_ns (count is the kernel's own), as a share of it (sampling::state_errors).
    /// Absent in exact mode, or when the trace windows were too few to tell.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub time_error: Option<f64>,
    /// Sampled mode: no window saw one of these on any CPU, so total_ns (0) is unknown, not
    /// zero: the kernel counted them, the probes timed none.
    #[serde(default, skip_serializing_if = "std::ops::Not::not")]
    pub time_unknown: bool,
    /// Sampled mode, NET_RX: total_ns is the windows' time per packet times the packets this
    /// CPU processed (the kernel's count, /proc/net/softnet_stat), not their mean per softirq
    /// times the softirqs; time_error is then that estimate's.
    #[serde(default, skip_serializing_if = "std::ops::Not::not")]
    pub timed_per_packet: bool,
}

#[derive(Clone, Debug, Default, PartialEq, Serialize, Deserialize)]
pub struct HardirqReport {
    pub cpu: u32,
    pub irq: u32,
    pub name: String,
    pub count: u64,
    pub total_ns: u64,
    /// Sampled mode: the 95 % uncertainty of total_ns (count is the kernel's own), as a share of it (sampling::state_errors).
    /// Absent in exact mode, or when the trace windows were too few to tell.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub time_error: Option<f64>,
    /// Sampled mode: no window saw one of these on any CPU, so total_ns (0) is unknown, not
    /// zero: the kernel counted them, the probes timed none.
    #[serde(default, skip_serializing_if = "std::ops::Not::not")]
    pub time_unknown: bool,
}

/// The probes' delta of one counter between two samples.
fn probe_delta(end: Option<&CountNs>, start: Option<&CountNs>) -> CountNs {
    end.copied()
        .unwrap_or_default()
        .minus(start.copied().unwrap_or_default())
}

/// Delta of one of the kernel's own counters (entry `index` of a row) between two samples.
fn kernel_delta(end: Option<&Vec<u64>>, start: Option<&Vec<u64>>, index: usize) -> u64 {
    let at = |v: Option<&Vec<u64>>| v.and_then(|c| c.get(index)).copied().unwrap_or(0);
    at(end).saturating_sub(at(start))
}

/// NET_RX's place in SOFTIRQ_NAMES.
pub(super) const NET_RX: usize = 3;
/// Fewer packets than this in a CPU's windows: too few to time NET_RX per packet.
pub(super) const MIN_TRACED_PACKETS: u64 = 100;

/// The packets a CPU's NET_RX processed between two samples, and inside the windows.
pub(super) fn rx_packets(start: &Reading, end: &Reading, cpu: usize) -> Option<(u64, u64)> {
    let at = |v: &Option<Vec<u64>>| v.as_ref()?.get(cpu).copied();
    Some((
        at(&end.rx_packets)?.saturating_sub(at(&start.rx_packets).unwrap_or(0)),
        at(&end.traced_rx_packets)?.saturating_sub(at(&start.traced_rx_packets).unwrap_or(0)),
    ))
}

/// Sampled mode, NET_RX on `cpu`: the windows' time per packet times the packets the CPU
/// processed (/proc/net/softnet_stat), when its windows saw enough packets and timed some.
/// A softirq's time goes with the packets it carries, and one softirq may carry one packet or a
/// burst's hundred, so the mean per softirq a window sees depends on where in a burst it fell.
fn per_packet(
    start: &Reading,
    end: &Reading,
    cpu: usize,
    vector: usize,
    probe: CountNs,
) -> Option<u64> {
    if vector != NET_RX || probe.total_ns == 0 {
        return None;
    }
    let (all, traced) = rx_packets(start, end, cpu)?;
    (traced >= MIN_TRACED_PACKETS && all >= traced)
        .then(|| (u128::from(probe.total_ns) * u128::from(all) / u128::from(traced)) as u64)
}

/// Softirqs per CPU and vector in the window (system-wide), vectors with no events left out.
/// Exact mode: as the probes counted them. Sampled mode: the kernel's counts (/proc/softirqs).
pub fn softirq_deltas(start: &Reading, end: &Reading) -> Vec<SoftirqReport> {
    let sampled = end.kernel.traced_ns.is_some();
    let ncpus = end.kernel.softirqs.len().max(end.softirq_counts.len());
    let probe_at = |cpu: usize, v: usize| {
        probe_delta(
            end.kernel.softirqs.get(cpu).and_then(|x| x.get(v)),
            start.kernel.softirqs.get(cpu).and_then(|x| x.get(v)),
        )
    };
    // Sampled mode: a CPU whose windows saw none of a vector it ran is timed at the vector's
    // mean on every CPU, not at zero.
    let vector_mean: Vec<CountNs> = (0..SOFTIRQ_NAMES.len())
        .map(|v| {
            (0..ncpus)
                .map(|cpu| probe_at(cpu, v))
                .fold(CountNs::default(), |a, b| CountNs {
                    count: a.count + b.count,
                    total_ns: a.total_ns + b.total_ns,
                })
        })
        .collect();
    let mut out = Vec::new();
    for cpu in 0..ncpus {
        for (v, vector) in SOFTIRQ_NAMES.iter().enumerate() {
            let probe = probe_at(cpu, v);
            let by_packet = if sampled {
                per_packet(start, end, cpu, v, probe)
            } else {
                None
            };
            let d = if sampled {
                let count = kernel_delta(
                    end.softirq_counts.get(cpu),
                    start.softirq_counts.get(cpu),
                    v,
                );
                match by_packet {
                    Some(total_ns) => CountNs { count, total_ns },
                    None => {
                        let timed = if probe.count > 0 {
                            probe
                        } else {
                            vector_mean[v]
                        };
                        at_probe_mean(timed, count)
                    }
                }
            } else {
                probe
            };
            if d.count > 0 {
                out.push(SoftirqReport {
                    cpu: cpu as u32,
                    vector: (*vector).into(),
                    count: d.count,
                    total_ns: d.total_ns,
                    time_error: None,
                    time_unknown: sampled && vector_mean[v].count == 0,
                    timed_per_packet: by_packet.is_some(),
                });
            }
        }
    }
    out
}

/// Hardirqs per CPU and line in the window (system-wide), as the probes counted and timed them:
/// they stay attached all along in both modes. Lines are named as /proc/interrupts named them
/// when `end` was read.
pub fn hardirq_deltas(start: &Reading, end: &Reading) -> Vec<HardirqReport> {
    let mut out = Vec::new();
    for (irq, per_cpu) in &end.kernel.hardirqs {
        let earlier = start
            .kernel
            .hardirqs
            .iter()
            .find(|(i, _)| i == irq)
            .map(|(_, v)| v);
        for (cpu, at_end) in per_cpu.iter().enumerate() {
            let d = probe_delta(Some(at_end), earlier.and_then(|v| v.get(cpu)));
            if d.count > 0 {
                out.push(HardirqReport {
                    cpu: cpu as u32,
                    irq: *irq,
                    name: end.irq_names.get(irq).cloned().unwrap_or_default(),
                    count: d.count,
                    total_ns: d.total_ns,
                    time_error: None,
                    time_unknown: false,
                });
            }
        }
    }
    out.sort_by_key(|r| (r.irq, r.cpu));
    out
}
