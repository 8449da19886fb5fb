//! Stop-the-world pauses: a runtime stopped every thread of the server (Go's garbage collector
//! and other stop-the-world operations, a JVM safepoint) long and often enough to reach p99.

use crate::finding::{Finding, FindingKind, Severity};
use crate::run_report::RunReport;

/// The world stopped at least this share of the window: at least as large a share of the
/// requests met a pause, so p99's did...
pub const STW_TIME_SHARE: f64 = 0.01;
/// ...and the mean pause was at least this share of p99.
pub const STW_P99_SHARE: f64 = 0.1;

/// The server process whose runtime paused longest in all, when its pauses reach p99: their
/// number, rate, time, mean and longest, and the fix for that runtime.
pub fn stop_the_world(r: &RunReport) -> Option<Finding> {
    let p = r.server.families.pauses.pauses.first()?;
    let secs = r.server.duration_s.max(1e-9);
    let p99_ms = r.load.latency_us.p99 as f64 / 1e3;
    let share = p.total_ns as f64 / (secs * 1e9);
    let mean_ms = p.total_ns as f64 / 1e6 / p.pauses.max(1) as f64;
    let max_ms = p.max_ns as f64 / 1e6;
    if share < STW_TIME_SHARE || mean_ms < STW_P99_SHARE * p99_ms || r.load.completed == 0 {
        return None;
    }
    let (what, fix) = match p.runtime.as_str() {
        "hotspot" => (
            "the JVM stopped every thread at a safepoint",
            "a collector with shorter pauses (G1's MaxGCPauseMillis, ZGC), a heap that fits the live set, and no safepoint-heavy operations (biased-lock revocation, thread dumps) under load",
        ),
        _ => (
            "the Go runtime stopped the world",
            "allocate less (reuse buffers, sync.Pool) or raise GOGC / set GOMEMLIMIT so the collector runs less often, and break up long loops without function calls: the world cannot stop until they reach one",
        ),
    };
    Some(Finding::new(
        FindingKind::StopTheWorld,
        Severity::Warning,
        format!(
            "{what} of pid {} {} times ({:.1}/s), {:.1} ms in all ({:.1}% of the time), {mean_ms:.2} ms on average, the longest {max_ms:.1} ms; a request that arrives in a pause waits it out (p99 {p99_ms:.1} ms). Fix: {fix}",
            p.pid,
            p.pauses,
            p.pauses as f64 / secs,
            p.total_ns as f64 / 1e6,
            share * 100.0,
        ),
        &[
            ("pid", p.pid as f64),
            ("pauses", p.pauses as f64),
            ("pause_ms", p.total_ns as f64 / 1e6),
            ("pause_share", share),
            ("mean_pause_ms", mean_ms),
            ("max_pause_ms", max_ms),
        ],
    )
    // A request that meets a pause waits out what is left of it: on average, a pause.
    .explaining(mean_ms, p99_ms))
}

#[cfg(test)]
pub(super) mod tests {
    use super::*;
    use crate::kernel_report::pauses::PauseRecord;
    use crate::rules::test_support::*;
    use srvprof_common::GROUP_SERVER;

    tables!(stop_the_world_table);

    /// A recorded window (p99 1 ms) in which Go process 7 paused 100 times for `ms` in all.
    fn paused(ms: u64) -> RunReport {
        Recording::window()
            .each(|s, k| {
                s.kernel.families.pauses.pauses.push(PauseRecord {
                    pid: 7,
                    group: GROUP_SERVER,
                    runtime: "go".into(),
                    pauses: grown(100, k),
                    total_ns: grown(ms * 1_000_000, k),
                    max_ns: 5_000_000,
                });
            })
            .build()
    }

    fn stop_the_world_table() -> Table {
        // STW_TIME_SHARE of the 10 s window; 100 pauses of 1 ms are p99.
        let at_ms = (STW_TIME_SHARE * WINDOW_S as f64 * 1e3) as u64;
        let short_ms = (STW_P99_SHARE * 100.0) as u64;
        let pauses = |ms: u64| {
            finds(
                FindingKind::StopTheWorld,
                Severity::Warning,
                &[
                    ("pid", 7.0),
                    ("pauses", 100.0),
                    ("pause_ms", ms as f64),
                    ("max_pause_ms", 5.0),
                ],
            )
        };
        #[rustfmt::skip]
        let cases = [
            ("no pause", quiet_run(), nothing()),
            ("just under STW_TIME_SHARE", paused(at_ms - 1), nothing()),
            ("at STW_TIME_SHARE", paused(at_ms), pauses(at_ms)),
            ("mean pause under STW_P99_SHARE of p99, however often", {
                let mut r = paused(at_ms);
                r.load.latency_us.p99 = 1_000 * at_ms / short_ms + 1_000;
                r
            }, nothing()),
        ];
        Table::new(stop_the_world, cases)
    }

    #[test]
    fn the_finding_names_the_runtime_and_its_fix() {
        let f = stop_the_world(&paused(500)).unwrap();
        for part in [
            "Go runtime stopped the world of pid 7 100 times",
            "5.00 ms on average",
            "GOGC",
        ] {
            assert!(f.summary.contains(part), "{part}: {}", f.summary);
        }
    }
}
