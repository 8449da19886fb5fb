//! The latency histogram every part records into.

use hdrhistogram::Histogram;

/// Latencies are recorded in microseconds, 3 significant digits, up to one hour.
pub(crate) const HIST_MAX_US: u64 = 3_600_000_000;
const HIST_SIGFIG: u8 = 3;

pub fn new_histogram() -> Histogram<u64> {
    Histogram::new_with_bounds(1, HIST_MAX_US, HIST_SIGFIG).expect("valid histogram bounds")
}

/// A target's latency histogram: 2 significant digits, 32-bit counts (12 KB, not 190).
pub fn target_histogram() -> Histogram<u32> {
    Histogram::new_with_bounds(1, HIST_MAX_US, 2).expect("valid histogram bounds")
}
