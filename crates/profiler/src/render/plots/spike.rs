//! The interval with the highest p99, which every timeline panel marks.

use srvprof_analysis::run_report::{RunReport, TimelineRow};

use super::numbers::si;

/// The interval with the highest p99, the first of equals; None if no request completed.
pub fn p99_spike(run: &RunReport) -> Option<usize> {
    let (i, row) = run
        .timeline
        .iter()
        .enumerate()
        .rev()
        .max_by_key(|(_, r)| r.p99_us)?;
    (row.p99_us > 0).then_some(i)
}

/// Where an interval starts and ends on the time axis, as the timeline table prints it.
pub fn interval_label(row: &TimelineRow) -> String {
    format!("{:.1}–{:.1}", row.t_s, row.t_s + row.duration_s)
}

/// The lines of the box that marks the highest-p99 interval: its p99 and the top finding.
pub(super) fn spike_label(run: &RunReport) -> Option<Vec<String>> {
    let row = &run.timeline[p99_spike(run)?];
    let mut lines = vec![format!(
        "highest p99: {} ({} s)",
        si(row.p99_us as f64 / 1e6, "s"),
        interval_label(row)
    )];
    if let Some(f) = run.findings.first() {
        lines.push(format!("top finding: {}", f.kind.name()));
    }
    Some(lines)
}
