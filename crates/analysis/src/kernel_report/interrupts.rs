//! Softirqs and hardirqs per CPU between two samples (system-wide): the probes' counts in exact
//! mode; in sampled mode the kernel's own counts (/proc/softirqs, /proc/interrupts) timed at the
//! windows' mean.

use srvprof_common::SOFTIRQ_NAMES;

use super::sampling::at_probe_mean;
use super::{HardirqReport, SoftirqReport};
use crate::record::{CountNs, Sample};

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

/// Softirqs per CPU and vector in the window (system-wide), vectors with no events left out.
/// Exact mode: as the probes counted them. Sampled mode: the kernel's counts (/proc/softirqs).
pub fn softirq_deltas(start: &Sample, end: &Sample) -> Vec<SoftirqReport> {
    let sampled = end.kernel.traced_ns.is_some();
    let ncpus = end.kernel.softirqs.len().max(end.softirq_counts.len());
    let mut out = Vec::new();
    for cpu in 0..ncpus {
        for (v, vector) in SOFTIRQ_NAMES.iter().enumerate() {
            let probe = probe_delta(
                end.kernel.softirqs.get(cpu).and_then(|x| x.get(v)),
                start.kernel.softirqs.get(cpu).and_then(|x| x.get(v)),
            );
            let d = if sampled {
                let count = kernel_delta(
                    end.softirq_counts.get(cpu),
                    start.softirq_counts.get(cpu),
                    v,
                );
                at_probe_mean(probe, count)
            } else {
                probe
            };
            if d.count > 0 {
                out.push(SoftirqReport {
                    cpu: cpu as u32,
                    vector: (*vector).into(),
                    count: d.count,
                    total_ns: d.total_ns,
                });
            }
        }
    }
    out
}

/// Hardirqs per CPU and line in the window (system-wide). Exact mode: as the probes counted them.
/// Sampled mode: the kernel's counts (/proc/interrupts).
/// Lines are named as /proc/interrupts named them when `end` was read.
pub fn hardirq_deltas(start: &Sample, end: &Sample) -> Vec<HardirqReport> {
    let sampled = end.kernel.traced_ns.is_some();
    let probe_of = |s: &Sample, irq: u32| {
        s.kernel
            .hardirqs
            .iter()
            .find(|(i, _)| *i == irq)
            .map(|(_, v)| v.clone())
    };
    let mut irqs: Vec<u32> = if sampled {
        end.irq_counts.iter().map(|(irq, _)| *irq).collect()
    } else {
        end.kernel.hardirqs.iter().map(|(irq, _)| *irq).collect()
    };
    irqs.sort_unstable();
    irqs.dedup();
    let mut out = Vec::new();
    for irq in irqs {
        let (probe_end, probe_start) = (probe_of(end, irq), probe_of(start, irq));
        let kernel_of = |s: &Sample| {
            s.irq_counts
                .iter()
                .find(|(i, _)| *i == irq)
                .map(|(_, v)| v.clone())
        };
        let (kernel_end, kernel_start) = (kernel_of(end), kernel_of(start));
        let ncpus = probe_end
            .as_ref()
            .map_or(0, Vec::len)
            .max(kernel_end.as_ref().map_or(0, Vec::len));
        for cpu in 0..ncpus {
            let probe = probe_delta(
                probe_end.as_ref().and_then(|v| v.get(cpu)),
                probe_start.as_ref().and_then(|v| v.get(cpu)),
            );
            let d = if sampled {
                at_probe_mean(
                    probe,
                    kernel_delta(kernel_end.as_ref(), kernel_start.as_ref(), cpu),
                )
            } else {
                probe
            };
            if d.count > 0 {
                out.push(HardirqReport {
                    cpu: cpu as u32,
                    irq,
                    name: end.irq_names.get(&irq).cloned().unwrap_or_default(),
                    count: d.count,
                    total_ns: d.total_ns,
                });
            }
        }
    }
    out
}
