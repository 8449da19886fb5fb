//! Differences of the counters between two samples, and the arithmetic on counts and times every
//! part of the kernel report shares.

use std::collections::BTreeMap;

use crate::record::{CountNs, KernelCounters, Reading};

/// (group, syscall number, count and time): a syscall table as KernelCounters holds it.
type SyscallRows = Vec<(u32, u32, CountNs)>;

/// One group's rows of a syscall table from `start` to `end` (the table `pick` names), per
/// syscall number, the numbers with something counted.
pub(super) fn syscall_deltas(
    start: &Reading,
    end: &Reading,
    group: u32,
    pick: fn(&KernelCounters) -> Option<&SyscallRows>,
) -> BTreeMap<u32, CountNs> {
    let table = |s: &Reading| -> BTreeMap<u32, CountNs> {
        pick(&s.kernel)
            .into_iter()
            .flatten()
            .filter(|(g, _, _)| *g == group)
            .map(|(_, nr, c)| (*nr, *c))
            .collect()
    };
    let before = table(start);
    table(end)
        .into_iter()
        .map(|(nr, c)| (nr, c.minus(before.get(&nr).copied().unwrap_or_default())))
        .filter(|(_, d)| d.count > 0 || d.total_ns > 0)
        .collect()
}

pub(super) fn sum(a: CountNs, b: CountNs) -> CountNs {
    CountNs {
        count: a.count + b.count,
        total_ns: a.total_ns + b.total_ns,
    }
}

/// Scales a count seen while the programs were attached up to the whole window.
pub(super) fn scaled(n: u64, fraction: Option<f64>) -> u64 {
    match fraction {
        None => n,
        Some(f) if f > 0.0 => (n as f64 / f).round() as u64,
        Some(_) => 0,
    }
}

/// Sampled mode: `count` events (the kernel's own count) at the mean time per event the probes
/// measured in their windows.
pub(super) fn at_probe_mean(probe: CountNs, count: u64) -> CountNs {
    let total_ns = if probe.count == 0 {
        0
    } else {
        (u128::from(probe.total_ns) * u128::from(count) / u128::from(probe.count)) as u64
    };
    CountNs { count, total_ns }
}
