//! What tracks p99 over the run.

use crate::finding::{Finding, FindingKind, Severity};
use crate::run_report::RunReport;

/// Intervals needed before p99's movement over the run means anything.
pub const P99_MIN_INTERVALS: usize = 5;
/// p99 moved enough when its mean absolute deviation is at least this share of its mean.
pub const P99_MIN_SPREAD: f64 = 0.2;
/// A kernel series tracks p99 from this |Pearson r| on.
pub const P99_MIN_CORRELATION: f64 = 0.7;

/// The kernel series most correlated with p99 per interval, when p99 moved and |r| is high.
pub fn p99_tracks(r: &RunReport) -> Option<Finding> {
    let p99s: Vec<f64> = r.timeline.iter().map(|t| t.p99_us as f64).collect();
    let mean = p99s.iter().sum::<f64>() / p99s.len().max(1) as f64;
    let spread = p99s.iter().map(|v| (v - mean).abs()).sum::<f64>() / p99s.len().max(1) as f64;
    let p99_varies =
        p99s.len() >= P99_MIN_INTERVALS && mean > 0.0 && spread / mean >= P99_MIN_SPREAD;
    let c = r
        .correlations
        .first()
        .filter(|c| p99_varies && c.coefficient.abs() >= P99_MIN_CORRELATION)?;
    Some(Finding::new(
        FindingKind::P99Tracks,
        Severity::Info,
        format!(
            "p99 per interval tracks {} (r = {:.2} over {} intervals)",
            c.series, c.coefficient, c.intervals
        ),
        &[("coefficient", c.coefficient)],
    ))
}
