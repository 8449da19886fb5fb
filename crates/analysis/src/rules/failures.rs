//! The run failed or the record is incomplete: no success, a watched process died, bursts of
//! errors, kernel records lost.

use crate::finding::{Finding, FindingKind, Severity};
use crate::names::signal_name;
use crate::run_report::{RunReport, TimelineRow};

/// Errors above this share of an interval's requests make a burst...
pub const ERROR_BURST_SHARE: f64 = 0.05;
/// ...if there are at least this many.
pub const ERROR_BURST_MIN: u64 = 10;

/// Not one request succeeded.
pub fn no_success(r: &RunReport) -> Option<Finding> {
    let load = &r.load;
    (load.completed == 0).then(|| {
        Finding::new(
            FindingKind::NoSuccess,
            Severity::Critical,
            format!(
                "no request succeeded: {} errors ({:?})",
                load.errors, load.errors_by_kind
            ),
            &[("errors", load.errors as f64)],
        )
    })
}

/// Server processes or threads that died (a signal or a non-zero exit code), and what the clients
/// saw then.
pub fn target_died(r: &RunReport) -> Vec<Finding> {
    r.server
        .exits
        .iter()
        .filter(|e| e.signal.is_some() || e.exit_code.unwrap_or(0) != 0)
        .map(|e| {
            let errors_after = errors_near(&r.timeline, e.t_s);
            let how = match (e.signal, e.exit_code) {
                (Some(sig), _) => format!("died of signal {sig} ({})", signal_name(sig)),
                (None, Some(code)) => format!("exited with code {code}"),
                _ => "exited".into(),
            };
            Finding::new(
                FindingKind::TargetDied,
                Severity::Critical,
                format!(
                    "server {} pid {} tid {} {how} at {:.1} s; clients saw {errors_after} errors in the intervals around it",
                    e.comm, e.pid, e.tid, e.t_s
                ),
                &[
                    ("pid", e.pid as f64),
                    ("tid", e.tid as f64),
                    ("signal", e.signal.unwrap_or(0) as f64),
                    ("t_s", e.t_s),
                    ("client_errors_near", errors_after as f64),
                ],
            )
        })
        .collect()
}

/// Errors in the intervals that contain t_s and the one after it.
fn errors_near(timeline: &[TimelineRow], t_s: f64) -> u64 {
    timeline
        .iter()
        .filter(|row| row.t_s <= t_s + row.duration_s && row.t_s + 2.0 * row.duration_s > t_s)
        .map(|row| row.errors)
        .sum()
}

/// One finding per interval whose errors were at least ERROR_BURST_MIN and ERROR_BURST_SHARE of
/// its requests.
pub fn error_bursts(r: &RunReport) -> Vec<Finding> {
    r.timeline
        .iter()
        .filter(|row| {
            let total = row.completed + row.errors;
            row.errors >= ERROR_BURST_MIN && row.errors as f64 >= ERROR_BURST_SHARE * total as f64
        })
        .map(|row| {
            let total = row.completed + row.errors;
            Finding::new(
                FindingKind::ErrorBurst,
                Severity::Warning,
                format!(
                    "{} errors of {} requests in the interval at {:.0} s",
                    row.errors, total, row.t_s
                ),
                &[
                    ("t_s", row.t_s),
                    ("errors", row.errors as f64),
                    ("requests", total as f64),
                ],
            )
        })
        .collect()
}

/// Records the kernel side could not keep: every count is then a lower bound.
pub fn lost_events(r: &RunReport) -> Option<Finding> {
    let lost: u64 = r.server.lost_events.values().sum();
    (lost > 0).then(|| {
        Finding::new(
            FindingKind::LostEvents,
            Severity::Warning,
            format!(
                "{lost} kernel records were lost (maps or ring buffer full); the counts are lower bounds"
            ),
            &[("lost", lost as f64)],
        )
    })
}
