//! The run failed or the record is incomplete: no success, a watched process died, bursts of
//! errors, kernel records lost.

use crate::finding::{Finding, FindingKind, Severity};
use crate::names::signal_name;
use crate::run_report::{RunReport, TimelineRow};

/// Errors of at least this share of an interval's requests make a burst...
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
            match load.errors {
                0 => "no request succeeded: none got an answer before the run ended".to_string(),
                n => format!("no request succeeded: {n} errors ({})", load.error_kinds()),
            },
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

/// Errors in the interval that contains t_s, the one before it and the one after it ("around").
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

#[cfg(test)]
pub(super) mod tests {
    use srvprof_common::{GROUP_CLIENT, GROUP_SERVER, lost};

    use super::*;
    use crate::record::ExitRecord;
    use crate::rules::test_support::*;

    tables!(
        no_success_table,
        target_died_table,
        errors_near_table,
        error_bursts_table,
        lost_events_table
    );

    /// A recorded run of one 10 s interval per (completed, errors) in `rows`.
    fn intervals(rows: &[(u64, u64)]) -> Recording {
        Recording::new(rows.len() as u64, 10, 2)
            .rows(|row, k| (row.completed, row.errors) = rows[k])
    }

    fn no_success_table() -> Table {
        let failed = |errors: u64| {
            finds(
                FindingKind::NoSuccess,
                Severity::Critical,
                &[("errors", errors as f64)],
            )
        };
        #[rustfmt::skip]
        let cases = [
            ("recorded: not one request succeeded", intervals(&[(0, 500)]).build(), failed(500)),
            ("recorded: nothing succeeded, nothing failed", intervals(&[(0, 0)]).build(), failed(0)),
            ("recorded: one request succeeded", intervals(&[(1, 500)]).build(), nothing()),
        ];
        Table::new(no_success, cases)
    }

    #[test]
    fn no_success_names_the_kinds_of_error_that_happened() {
        let mut r = intervals(&[(0, 3)]).build();
        r.load.errors_by_kind = [("connect_refused", 3), ("reset", 0)]
            .into_iter()
            .map(|(k, n)| (k.to_string(), n))
            .collect();
        let f = no_success(&r).unwrap();
        assert_eq!(
            f.summary,
            "no request succeeded: 3 errors (connect_refused 3)"
        );
        r.load.errors = 0;
        r.load.errors_by_kind.clear();
        let none = no_success(&r).unwrap();
        assert!(
            none.summary
                .ends_with("none got an answer before the run ended"),
            "{}",
            none.summary
        );
    }

    /// Errors per 1 s interval of died()'s run: each interval's own digit.
    const ERRORS: [u64; 5] = [1, 10, 100, 1_000, 10_000];

    /// A recorded run of five 1 s intervals (ERRORS errors) in which thread 8 of process 7 of
    /// `group` exited at `t_s` with `code` or was killed by `signal`.
    fn died(t_s: f64, code: Option<i32>, signal: Option<i32>, group: u32) -> RunReport {
        let mut rec = Recording::new(5, 1, 2).rows(|row, k| row.errors = ERRORS[k]);
        rec.exits.push(ExitRecord {
            pid: 7,
            tid: 8,
            group,
            comm: "server".into(),
            exit_code: code,
            signal,
            t_s,
            monotonic_ns: 0,
        });
        rec.build()
    }

    /// Dead of `signal` (0: none) at `t_s`, with `errors_near` client errors around it.
    fn dead(signal: i32, t_s: f64, errors_near: u64) -> Vec<Expected> {
        finds(
            FindingKind::TargetDied,
            Severity::Critical,
            &[
                ("pid", 7.0),
                ("tid", 8.0),
                ("signal", signal as f64),
                ("t_s", t_s),
                ("client_errors_near", errors_near as f64),
            ],
        )
    }

    fn target_died_table() -> Table {
        let server = |code, signal| died(2.5, code, signal, GROUP_SERVER);
        let near = ERRORS[1] + ERRORS[2] + ERRORS[3];
        #[rustfmt::skip]
        let cases = [
            ("recorded: exit code 0", server(Some(0), None), nothing()),
            ("recorded: neither code nor signal", server(None, None), nothing()),
            ("recorded: exit code 1", server(Some(1), None), dead(0, 2.5, near)),
            ("recorded: exit code -1", server(Some(-1), None), dead(0, 2.5, near)),
            ("recorded: killed by signal 9", server(None, Some(9)), dead(9, 2.5, near)),
            ("recorded: signal 11, code 139", server(Some(139), Some(11)), dead(11, 2.5, near)),
            ("recorded: a client thread killed", died(2.5, None, Some(9), GROUP_CLIENT), nothing()),
        ];
        Table::new(target_died, cases)
    }

    /// The client errors counted around an exit: the intervals counted for each time.
    fn errors_near_table() -> Table {
        let at = |t_s: f64| died(t_s, None, Some(9), GROUP_SERVER);
        let sum = |rows: std::ops::Range<usize>| ERRORS[rows].iter().sum::<u64>();
        #[rustfmt::skip]
        let cases = [
            ("in the first interval: it and the next", at(0.5), dead(9, 0.5, sum(0..2))),
            ("at 2.0 s, the start of the third: the one before, it and the next", at(2.0), dead(9, 2.0, sum(1..4))),
            ("in the third: the one before, it and the next", at(2.5), dead(9, 2.5, sum(1..4))),
            ("in the last interval: the one before and it", at(4.5), dead(9, 4.5, sum(3..5))),
            ("after the run: the last interval", at(5.5), dead(9, 5.5, sum(4..5))),
        ];
        Table::new(target_died, cases)
    }

    fn error_bursts_table() -> Table {
        // (t_s, errors, requests) of each burst.
        let bursts = |each: &[(f64, u64, u64)]| {
            each.iter()
                .flat_map(|&(t_s, errors, requests)| {
                    finds(
                        FindingKind::ErrorBurst,
                        Severity::Warning,
                        &[
                            ("t_s", t_s),
                            ("errors", errors as f64),
                            ("requests", requests as f64),
                        ],
                    )
                })
                .collect()
        };
        // All requests failed: as many as `errors`.
        let failed = |errors: u64| intervals(&[(0, errors)]).build();
        // `share` of 10,000 requests failed.
        let errors_at = |share: f64| (share * 10_000.0).round() as u64;
        let share_of =
            |share: f64| intervals(&[(10_000 - errors_at(share), errors_at(share))]).build();
        let (min, share) = (ERROR_BURST_MIN, ERROR_BURST_SHARE);
        // ERROR_BURST_MIN errors that are ERROR_BURST_SHARE of the interval's requests.
        let both = (min as f64 / share).round() as u64;
        #[rustfmt::skip]
        let cases = [
            ("recorded: errors just below ERROR_BURST_MIN", failed(min - 1), nothing()),
            ("recorded: errors at ERROR_BURST_MIN", failed(min), bursts(&[(0.0, min, min)])),
            ("recorded: errors just above ERROR_BURST_MIN", failed(min + 1), bursts(&[(0.0, min + 1, min + 1)])),
            ("recorded: share just below ERROR_BURST_SHARE", share_of(share - 0.01), nothing()),
            ("recorded: share at ERROR_BURST_SHARE", share_of(share), bursts(&[(0.0, errors_at(share), 10_000)])),
            ("recorded: share just above", share_of(share + 0.01), bursts(&[(0.0, errors_at(share + 0.01), 10_000)])),
            ("recorded: at both thresholds", intervals(&[(both - min, min)]).build(), bursts(&[(0.0, min, both)])),
            (
                "recorded: one finding per bursty interval",
                intervals(&[(0, 50), (1_000, 1), (900, 100)]).build(),
                bursts(&[(0.0, 50, 50), (20.0, 100, 1_000)]),
            ),
        ];
        Table::new(error_bursts, cases)
    }

    /// A recorded window in which the kernel counted `before` (at its start) and then `in_window`
    /// more of lost::`counter`.
    fn lost(counter: u32, before: u64, in_window: u64) -> RunReport {
        Recording::window()
            .each(|s, k| s.kernel.lost[counter as usize] = before + in_window * k)
            .build()
    }

    fn lost_events_table() -> Table {
        let lost_n = |n: f64| finds(FindingKind::LostEvents, Severity::Warning, &[("lost", n)]);
        #[rustfmt::skip]
        let cases = [
            ("recorded: nothing lost", lost(lost::EXIT_RING_FULL, 0, 0), nothing()),
            ("recorded: one exit lost", lost(lost::EXIT_RING_FULL, 0, 1), lost_n(1.0)),
            ("recorded: threads lost before the window count too", lost(lost::THREADS_MAP_FULL, 3, 0), lost_n(3.0)),
            ("recorded: resets left out of the breakdown", lost(lost::TCP_RESETS_MAP_FULL, 0, 2), lost_n(2.0)),
            ("recorded: stack ids collided, not a loss", lost(lost::STACK_TRACES_FULL, 0, 5), nothing()),
            ("recorded: switch-ins unseen, not a loss", lost(lost::SWITCH_INS_UNSEEN, 0, 5), nothing()),
            ("recorded: a new connection's wait the maps had no room for", lost(lost::ACCEPT_MAP_FULL, 0, 1), lost_n(1.0)),
        ];
        Table::new(lost_events, cases)
    }

    #[test]
    fn every_loss_the_kernel_counts_is_reported_by_its_name() {
        for (index, name) in lost::losses() {
            let report = lost(index, 0, 1);
            let named = report.server.lost_events.get(&name.to_ascii_lowercase());
            assert_eq!(named, Some(&1), "{name} in lost_events");
            assert!(lost_events(&report).is_some(), "{name} makes the finding");
        }
    }
}
