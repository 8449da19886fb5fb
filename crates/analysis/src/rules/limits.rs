//! Limits set on the processes rather than by the machine: a control group's CPU quota that runs
//! out holds every task under it back until the next period, however idle the CPUs are.

use crate::finding::{Finding, FindingKind, Severity};
use crate::kernel_report::CpuLimitReport;
use crate::run_report::RunReport;
use crate::tail_account::Place;

/// A quota that ran out in at least this share of its periods explains a tail...
pub const MIN_THROTTLED_SHARE: f64 = 0.10;
/// ...once it ran out at least this many times.
pub const MIN_THROTTLED_PERIODS: u64 = 3;
/// From this share of periods throttled, the quota is the run's answer (critical).
pub const CRITICAL_THROTTLED_SHARE: f64 = 0.50;
/// p99 at least this share of (period - quota) is the wait for the next period.
pub const P99_IS_THE_WAIT: f64 = 0.8;
/// Throttled at least this share of the time, the requests in the tail (1 %) met the throttle.
pub const TAIL_MEETS_THROTTLE: f64 = 0.01;

/// A CPU quota over the server's (or the load generator's) processes ran out: names the control
/// group, its quota, how often and how long it held them back, and what that does to p99.
pub fn cpu_throttled(r: &RunReport) -> Vec<Finding> {
    let sides = [("server", &r.server), ("load generator", &r.client)];
    sides
        .into_iter()
        .flat_map(|(who, k)| k.cpu_limits.iter().map(move |c| (who, k.duration_s, c)))
        .filter(|(_, _, c)| {
            c.throttled_periods >= MIN_THROTTLED_PERIODS
                && c.throttled_share() >= MIN_THROTTLED_SHARE
        })
        .map(|(who, secs, c)| throttled(r, who, secs, c))
        .collect()
}

fn throttled(r: &RunReport, who: &str, secs: f64, c: &CpuLimitReport) -> Finding {
    let p99_ms = r.load.latency_us.p99 as f64 / 1e3;
    let wait_ms = c.max_wait_ms();
    let time_share = c.throttled_s / secs.max(1e-9);
    let tail = if who != "server" {
        "the load it sent was held back with it".to_string()
    } else if p99_ms >= P99_IS_THE_WAIT * wait_ms {
        format!(
            "p99 {p99_ms:.1} ms is the wait for the next period: a request that arrives as the quota runs out waits up to {wait_ms:.0} ms (period - quota)"
        )
    } else {
        format!(
            "p99 {p99_ms:.1} ms; a request that arrives as the quota runs out waits up to {wait_ms:.0} ms (period - quota)"
        )
    };
    let file = if c.version == 2 {
        "cpu.max"
    } else {
        "cpu.cfs_quota_us"
    };
    let severity = if c.throttled_share() >= CRITICAL_THROTTLED_SHARE {
        Severity::Critical
    } else {
        Severity::Warning
    };
    let finding = Finding::new(
        FindingKind::CpuThrottled,
        severity,
        format!(
            "{who} CPU-throttled by its cgroup's quota: {} (cgroup v{}, pids {}) may use {:.2} CPUs ({:.0} ms per {:.0} ms) and ran out in {} of {} periods ({:.0}%), holding its tasks back {:.2} s of {:.1} s ({:.0}% of the time); {tail}. Fix: raise {file} (the container's CPU limit) or send less load",
            c.cgroup,
            c.version,
            c.pids
                .iter()
                .map(u32::to_string)
                .collect::<Vec<_>>()
                .join(","),
            c.cpus(),
            c.quota_us as f64 / 1e3,
            c.period_us as f64 / 1e3,
            c.throttled_periods,
            c.periods,
            c.throttled_share() * 100.0,
            c.throttled_s,
            secs,
            time_share * 100.0,
        ),
        &[
            ("throttled_periods", c.throttled_periods as f64),
            ("periods", c.periods as f64),
            ("throttled_share", c.throttled_share()),
            ("throttled_s", c.throttled_s),
            ("throttled_time_share", time_share),
            ("quota_cpus", c.cpus()),
            ("period_ms", c.period_us as f64 / 1e3),
            ("max_wait_ms", wait_ms),
            ("p99_ms", p99_ms),
        ],
    );
    // The server's share of the waits for a CPU that the throttling holds, and of the run-queue
    // part's time at p99: the waits after a preemption there hold the throttles, those after a
    // wakeup only their share of all. The account's run-queue part times the latter is this
    // quota's share of p99 (rules/mod.rs).
    let mut finding = finding;
    if who == "server" {
        let share = c.share_of_wait(&r.server.threads);
        finding.evidence.insert("share_of_wait".into(), share);
        let tail = (r.tail_account.iter().flat_map(|a| &a.parts))
            .find(|p| p.place == Place::RunQueue && p.tail_ms > 0.0)
            .map_or(share, |p| {
                let preempted = p.preempted_tail_ms.unwrap_or(0.0).min(p.tail_ms);
                let of_preempted = c.share_of_preempted_wait(&r.server.threads);
                (preempted * of_preempted + (p.tail_ms - preempted) * share) / p.tail_ms
            });
        finding.evidence.insert("share_of_tail_wait".into(), tail);
    }
    // A request that meets the quota's end waits for the next period; one in the tail does
    // when the quota ran out at least 1 % of the time. The load generator's quota delays the
    // sending, not the server's answer.
    if who == "server" && time_share >= TAIL_MEETS_THROTTLE {
        finding.explaining(wait_ms, p99_ms)
    } else {
        finding
    }
}

#[cfg(test)]
pub(super) mod tests {
    use super::*;
    use crate::record::CgroupCpu;
    use crate::rules::test_support::*;
    use srvprof_common::{GROUP_CLIENT, GROUP_SERVER};

    tables!(cpu_throttled_table);

    /// A window in which `group`'s process 4242, under a 30 % quota (30 ms per 100 ms), ran out of
    /// quota in `throttled` of `periods` periods, each holding it back 70 ms; p99 `p99_ms`.
    fn quota(group: u32, periods: u64, throttled: u64, p99_ms: u64) -> RunReport {
        let mut rec = Recording::window().each(|s, k| {
            s.cgroups.push(CgroupCpu {
                path: "/srvprof-web".into(),
                version: 1,
                quota_us: 30_000,
                period_us: 100_000,
                pids: vec![4242],
                group,
                nr_periods: grown(periods, k),
                nr_throttled: grown(throttled, k),
                throttled_ns: grown(throttled * 70_000_000, k),
            })
        });
        rec.load.latency_us.p99 = p99_ms * 1000;
        rec.build()
    }

    fn throttled(severity: Severity, periods: u64, throttled: u64) -> Vec<Expected> {
        finds(
            FindingKind::CpuThrottled,
            severity,
            &[
                ("throttled_periods", throttled as f64),
                ("periods", periods as f64),
                ("throttled_s", throttled as f64 * 0.07),
                ("quota_cpus", 0.3),
                ("max_wait_ms", 70.0),
            ],
        )
    }

    fn cpu_throttled_table() -> Table {
        let s = GROUP_SERVER;
        #[rustfmt::skip]
        let cases = [
            ("no quota", quiet_run(), nothing()),
            ("a quota never reached", quota(s, 100, 0, 2), nothing()),
            ("just under MIN_THROTTLED_SHARE: 9 of 100", quota(s, 100, 9, 2), nothing()),
            ("at MIN_THROTTLED_SHARE: 10 of 100", quota(s, 100, 10, 2), throttled(Severity::Warning, 100, 10)),
            ("under MIN_THROTTLED_PERIODS: 2 of 4", quota(s, 4, 2, 2), nothing()),
            ("at MIN_THROTTLED_PERIODS: 3 of 6", quota(s, 6, 3, 2), throttled(Severity::Critical, 6, 3)),
            ("just under CRITICAL_THROTTLED_SHARE: 49 of 100", quota(s, 100, 49, 2), throttled(Severity::Warning, 100, 49)),
            ("at CRITICAL_THROTTLED_SHARE: 50 of 100", quota(s, 100, 50, 80), throttled(Severity::Critical, 100, 50)),
            ("the load generator's quota", quota(GROUP_CLIENT, 100, 60, 2), throttled(Severity::Critical, 100, 60)),
        ];
        Table::new(cpu_throttled, cases)
    }

    #[test]
    fn the_finding_names_the_cgroup_the_quota_and_the_wait() {
        let f = &cpu_throttled(&quota(GROUP_SERVER, 85, 81, 84))[0];
        for part in [
            "server CPU-throttled",
            "/srvprof-web",
            "pids 4242",
            "0.30 CPUs",
            "81 of 85 periods",
            "waits up to 70 ms",
            "is the wait for the next period",
            "cpu.cfs_quota_us",
        ] {
            assert!(f.summary.contains(part), "{part}: {}", f.summary);
        }
        // p99 well under period - quota: not blamed on the wait.
        let f = &cpu_throttled(&quota(GROUP_SERVER, 100, 10, 2))[0];
        assert!(!f.summary.contains("is the wait"), "{}", f.summary);
        let f = &cpu_throttled(&quota(GROUP_CLIENT, 100, 60, 2))[0];
        assert!(f.summary.starts_with("load generator"), "{}", f.summary);
    }
}
