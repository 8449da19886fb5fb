//! What tracks p99 over the run.

use crate::finding::{Finding, FindingKind, Severity};
use crate::run_report::RunReport;

/// Intervals needed before p99's movement over the run means anything (and a kernel figure may
/// be said to track it).
pub const P99_MIN_INTERVALS: usize = crate::correlation::MIN_INTERVALS;
/// p99 moved enough when its mean absolute deviation is at least this share of its mean.
pub const P99_MIN_SPREAD: f64 = 0.2;
/// A kernel series tracks p99 from this |Pearson r| on.
pub const P99_MIN_CORRELATION: f64 = 0.7;

/// The kernel series most correlated with p99 per interval, when p99 moved, |r| is high and the
/// permutation test says it is not chance (crate::correlation).
pub fn p99_tracks(r: &RunReport) -> Option<Finding> {
    let p99s: Vec<f64> = r.timeline.iter().map(|t| t.p99_us as f64).collect();
    let mean = p99s.iter().sum::<f64>() / p99s.len().max(1) as f64;
    let spread = p99s.iter().map(|v| (v - mean).abs()).sum::<f64>() / p99s.len().max(1) as f64;
    let p99_varies =
        p99s.len() >= P99_MIN_INTERVALS && mean > 0.0 && spread / mean >= P99_MIN_SPREAD;
    let c = r
        .correlations
        .first()
        .filter(|c| p99_varies && c.significant() && c.coefficient.abs() >= P99_MIN_CORRELATION)?;
    // Throughput is a figure too: falling with p99, it is the closed loop's own arithmetic.
    let why = if c.series == "req/s" && c.coefficient < 0.0 {
        ": p99 rose when throughput fell, as a closed loop's latency does (a request waits behind the same connections for longer); look at what slowed those intervals"
    } else {
        ""
    };
    Some(Finding::new(
        FindingKind::P99Tracks,
        Severity::Info,
        format!(
            "p99 per interval tracks {} (r = {:.2} over {} intervals, p = {:.3}){why}",
            c.series, c.coefficient, c.intervals, c.p_value
        ),
        &[("coefficient", c.coefficient), ("p_value", c.p_value)],
    ))
}

#[cfg(test)]
pub(super) mod tests {
    use srvprof_common::GROUP_SERVER;

    use super::*;
    use crate::correlation::{Correlation, MAX_P_VALUE};
    use crate::record::ThreadCounters;
    use crate::rules::test_support::*;

    tables!(p99_tracks_table);

    /// A recorded run of 1 s intervals with these p99s (µs), the server's involuntary switches per
    /// interval moving with them, so that run_report::build finds them correlated (r = 1).
    fn tracked(p99s: &[u64]) -> RunReport {
        Recording::new(p99s.len() as u64, 1, 2)
            .rows(|row, k| row.p99_us = p99s[k])
            .each(|s, k| {
                s.kernel.threads.push(ThreadCounters {
                    // What it had before the window, and one switch per µs of each p99 since.
                    involuntary_switches: grown(0, k) + p99s[..k as usize].iter().sum::<u64>(),
                    ..thread(GROUP_SERVER, 7, "server", 0, k)
                })
            })
            .build()
    }

    /// `n` intervals whose p99 moves over four levels around 1,000 µs, their mean absolute
    /// deviation `spread` of it (levels at -1.5, 0.5, -0.5 and 1.5 times `spread`, in turn):
    /// distinct enough that a series tracking them is not chance.
    fn levels(n: usize, spread: f64) -> Vec<u64> {
        [-1.5, 0.5, -0.5, 1.5]
            .iter()
            .cycle()
            .take(n)
            .map(|z| (1_000.0 * (1.0 + spread * z)).round() as u64)
            .collect()
    }

    /// `n` intervals whose p99 moves by half its mean.
    fn alternating(n: usize) -> RunReport {
        tracked(&levels(n, 0.5))
    }

    /// Twelve intervals whose p99's mean absolute deviation is `spread` of its mean.
    fn spread(spread: f64) -> RunReport {
        tracked(&levels(12, spread))
    }

    /// Twelve moving intervals, the strongest series correlated `r` with p99 beyond chance.
    fn correlated(r: f64) -> RunReport {
        correlated_by_chance(r, 0.001)
    }

    /// As `correlated`, with this chance (permutation p-value) of being a coincidence.
    fn correlated_by_chance(r: f64, p_value: f64) -> RunReport {
        let mut run = spread(0.5);
        run.correlations = vec![Correlation {
            series: "run-queue p99".into(),
            coefficient: r,
            intervals: P99_MIN_INTERVALS,
            p_value,
        }];
        run
    }

    fn tracks(r: f64) -> Vec<Expected> {
        finds(
            FindingKind::P99Tracks,
            Severity::Info,
            &[("coefficient", r)],
        )
    }

    fn p99_tracks_table() -> Table {
        let n = P99_MIN_INTERVALS;
        let s = P99_MIN_SPREAD;
        let r = P99_MIN_CORRELATION;
        #[rustfmt::skip]
        let cases = [
            ("recorded: intervals just below P99_MIN_INTERVALS", alternating(n - 1), nothing()),
            ("recorded: P99_MIN_INTERVALS intervals", alternating(n), tracks(1.0)),
            ("recorded: intervals just above", alternating(n + 1), tracks(1.0)),
            ("recorded: spread just below P99_MIN_SPREAD", spread(s - 0.01), nothing()),
            ("recorded: spread at P99_MIN_SPREAD", spread(s), tracks(1.0)),
            ("recorded: spread just above", spread(s + 0.01), tracks(1.0)),
            ("recorded: no p99 at all", tracked(&[0; 6]), nothing()),
            ("|r| just below P99_MIN_CORRELATION", correlated(r - 0.01), nothing()),
            ("|r| at P99_MIN_CORRELATION", correlated(r), tracks(r)),
            ("|r| just above", correlated(r + 0.01), tracks(r + 0.01)),
            ("r at -P99_MIN_CORRELATION", correlated(-r), tracks(-r)),
            ("r just above -P99_MIN_CORRELATION", correlated(0.01 - r), nothing()),
            ("p-value just below MAX_P_VALUE", correlated_by_chance(0.9, MAX_P_VALUE - 0.001), tracks(0.9)),
            ("p-value at MAX_P_VALUE", correlated_by_chance(0.9, MAX_P_VALUE), nothing()),
            ("p-value just above", correlated_by_chance(0.9, MAX_P_VALUE + 0.001), nothing()),
        ];
        Table::new(p99_tracks, cases)
    }

    #[test]
    fn p99_falling_with_throughput_is_said_to_be_the_closed_loop() {
        let mut run = correlated(-0.9);
        run.correlations[0].series = "req/s".into();
        let f = p99_tracks(&run).expect("a finding");
        assert!(f.summary.contains("closed loop"), "{}", f.summary);
        // Any other figure, or throughput rising with p99, is stated as it is.
        let f = p99_tracks(&correlated(-0.9)).expect("a finding");
        assert!(!f.summary.contains("closed loop"), "{}", f.summary);
        run.correlations[0].coefficient = 0.9;
        let f = p99_tracks(&run).expect("a finding");
        assert!(!f.summary.contains("closed loop"), "{}", f.summary);
    }
}
