//! CPU quotas over the watched processes: how often their control groups ran out of quota in a
//! window, from the kernel's own counters (cpu.stat) read at each end.

use super::ThreadReport;
use crate::record::Reading;
use serde::{Deserialize, Serialize};

/// A CPU quota over some of the group's processes, and its throttling in the span.
#[derive(Clone, Debug, Default, PartialEq, Serialize, Deserialize)]
pub struct CpuLimitReport {
    /// The control group's path in its hierarchy, and the hierarchy (1 or 2).
    pub cgroup: String,
    pub version: u8,
    pub quota_us: u64,
    pub period_us: u64,
    /// The watched processes under it.
    pub pids: Vec<u32>,
    /// Periods in which its tasks were runnable, and those in which the quota ran out.
    pub periods: u64,
    pub throttled_periods: u64,
    /// Time its tasks were held back waiting for the next period, s.
    pub throttled_s: f64,
}

impl CpuLimitReport {
    /// CPUs' worth of time the quota allows.
    pub fn cpus(&self) -> f64 {
        self.quota_us as f64 / self.period_us.max(1) as f64
    }

    /// How long a task that meets the quota's end waits at most: the rest of the period, ms.
    pub fn max_wait_ms(&self) -> f64 {
        self.period_us.saturating_sub(self.quota_us) as f64 / 1e3
    }

    /// Share of the periods that ran out of quota.
    pub fn throttled_share(&self) -> f64 {
        self.throttled_periods as f64 / self.periods.max(1) as f64
    }

    /// The share of its threads' waits for a CPU that its throttling holds: a throttled group's
    /// runnable threads all wait out the throttle, so it is the throttled time over the longest
    /// run-queue time of one of its threads (at most 1; 0 when none waited).
    pub fn share_of_wait(&self, threads: &[ThreadReport]) -> f64 {
        self.share_of(threads, |t| t.runq_ns)
    }

    /// The same share of its threads' waits after a preemption: the quota runs out under a
    /// running thread, so its throttles are among those (on kernel 6.18, 1.09 s of such waits
    /// against cpu.stat's 1.07 s throttled, with a neighbour's wakeups beside them).
    pub fn share_of_preempted_wait(&self, threads: &[ThreadReport]) -> f64 {
        self.share_of(threads, |t| t.runq_preempted_ns)
    }

    fn share_of(&self, threads: &[ThreadReport], waited: fn(&ThreadReport) -> u64) -> f64 {
        let longest = (threads.iter())
            .filter(|t| self.pids.contains(&t.pid))
            .map(waited)
            .max()
            .unwrap_or(0);
        match longest {
            0 => 0.0,
            ns => (self.throttled_s * 1e9 / ns as f64).min(1.0),
        }
    }
}

/// Each control group limiting `group`'s processes at `end`, with its throttling since `start`
/// (all of its counters when `start` did not see it: it was found, or limited, in between).
pub fn cpu_limit_deltas(start: &Reading, end: &Reading, group: u32) -> Vec<CpuLimitReport> {
    end.cgroups
        .iter()
        .filter(|c| c.group == group)
        .map(|c| {
            let before = start
                .cgroups
                .iter()
                .find(|s| s.path == c.path && s.version == c.version && s.group == group);
            let was = |f: fn(&crate::record::CgroupCpu) -> u64| before.map(f).unwrap_or(0);
            CpuLimitReport {
                cgroup: c.path.clone(),
                version: c.version,
                quota_us: c.quota_us,
                period_us: c.period_us,
                pids: c.pids.clone(),
                periods: c.nr_periods.saturating_sub(was(|s| s.nr_periods)),
                throttled_periods: c.nr_throttled.saturating_sub(was(|s| s.nr_throttled)),
                throttled_s: c.throttled_ns.saturating_sub(was(|s| s.throttled_ns)) as f64 / 1e9,
            }
        })
        .collect()
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::record::CgroupCpu;

    fn at(nr_periods: u64, nr_throttled: u64, throttled_ns: u64) -> Reading {
        Reading {
            cgroups: vec![CgroupCpu {
                path: "/web".into(),
                version: 1,
                quota_us: 30_000,
                period_us: 100_000,
                pids: vec![7],
                group: 0,
                nr_periods,
                nr_throttled,
                throttled_ns,
            }],
            ..Reading::default()
        }
    }

    #[test]
    fn throttling_is_the_counters_growth_over_the_window() {
        let r = cpu_limit_deltas(&at(100, 40, 2_000_000_000), &at(160, 97, 6_200_000_000), 0);
        assert_eq!(r.len(), 1);
        assert_eq!((r[0].periods, r[0].throttled_periods), (60, 57));
        assert!((r[0].throttled_s - 4.2).abs() < 1e-9);
        assert!((r[0].cpus() - 0.3).abs() < 1e-12);
        assert!((r[0].max_wait_ms() - 70.0).abs() < 1e-12);
        assert!((r[0].throttled_share() - 0.95).abs() < 1e-12);
        // The client's group has no limit.
        assert!(cpu_limit_deltas(&at(100, 40, 0), &at(160, 97, 0), 1).is_empty());
        // Found between the two samples: all of its counters are the window's.
        let r = cpu_limit_deltas(&Reading::default(), &at(10, 5, 1_000), 0);
        assert_eq!((r[0].periods, r[0].throttled_periods), (10, 5));
    }
}
