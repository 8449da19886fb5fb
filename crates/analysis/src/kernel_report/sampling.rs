//! Sampled mode: the syscall and interrupt programs ran only in a window of each interval, so
//! their counts are scaled up from the windows (by the responses served in them when a load
//! generator says how many, else by time), and interrupt times are the kernel's own counts at the
//! windows' mean time per event.

use crate::record::{CountNs, Sample};

/// Sampled mode: the share of the window between two samples the syscall and interrupt programs
/// were attached. None in exact mode (attached all along).
pub fn traced_fraction(start: &Sample, end: &Sample) -> Option<f64> {
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

/// Fewer responses than this in the windows: too few to scale by, so time is the measure.
const MIN_TRACED_RESPONSES: u64 = 100;

/// Sampled mode: the share of the window's work the syscall programs saw, which their counts are
/// divided by. With a load generator (`run`), the share of its responses that arrived while they
/// were attached: the server runs slower while traced, so a share of time would undercount a
/// CPU-bound server by the tracing cost. Otherwise the share of time. None in exact mode.
pub fn traced_share(start: &Sample, end: &Sample) -> Option<f64> {
    let time = traced_fraction(start, end)?;
    let delta = |e: Option<u64>, s: Option<u64>| Some(e?.saturating_sub(s.unwrap_or(0)));
    match (
        delta(end.traced_responses, start.traced_responses),
        delta(end.responses, start.responses),
    ) {
        (Some(traced), Some(all)) if traced >= MIN_TRACED_RESPONSES && all >= traced => {
            Some(traced as f64 / all as f64)
        }
        _ => Some(time),
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
