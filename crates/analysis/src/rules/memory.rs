//! Server threads waiting for memory: page faults that read a page back in (major faults), and
//! memory they had to reclaim themselves before they could allocate (direct or memcg reclaim).

use crate::finding::{Finding, FindingKind, Severity};
use crate::run_report::RunReport;

/// Server threads in major faults' waits and reclaim at least this share of the window (summed
/// over threads, as a share of one thread's time).
pub const MEMORY_WAIT_SHARE: f64 = 0.05;

/// Server threads waited MEMORY_WAIT_SHARE of the time in page faults and reclaim: the faults
/// and the wait per request, the reclaim if any, and the fix.
pub fn memory_pressure(r: &RunReport) -> Option<Finding> {
    let m = &r.server.memory;
    let secs = r.server.duration_s.max(1e-9);
    let wait_ns = m.fault_wait_ns + m.reclaim_ns;
    let share = wait_ns as f64 / (secs * 1e9);
    if share < MEMORY_WAIT_SHARE || r.load.completed == 0 {
        return None;
    }
    let requests = r.load.completed as f64;
    let mean_ms = |ns: u64, n: u64| ns as f64 / 1e6 / n.max(1) as f64;
    let fault_ms = mean_ms(m.fault_wait_ns, m.fault_waits);
    let reclaim_ms = mean_ms(m.reclaim_ns, m.reclaims);
    let reclaim = if m.reclaims > 0 {
        format!(
            "; they reclaimed memory themselves {} times ({:.1} ms, {reclaim_ms:.2} ms each): the memory they run in was full",
            m.reclaims,
            m.reclaim_ns as f64 / 1e6
        )
    } else {
        "; none reclaimed in its threads: its pages had been evicted before (by other memory use or a cgroup limit)".to_string()
    };
    Some(Finding::new(
        FindingKind::MemoryPressure,
        Severity::Warning,
        format!(
            "server threads waited for memory {:.0}% of the time ({:.0} us per request): {} major page faults ({:.2} per request) read pages back in, {} waits of {fault_ms:.2} ms on average{reclaim}. Fix: give the server the memory its working set needs (raise its cgroup's memory limit, add RAM, stop what evicts its pages), or shrink the working set",
            share * 100.0,
            wait_ns as f64 / 1e3 / requests,
            m.major_faults,
            m.major_faults as f64 / requests,
            m.fault_waits,
        ),
        &[
            ("wait_share", share),
            ("wait_us_per_request", wait_ns as f64 / 1e3 / requests),
            ("major_faults", m.major_faults as f64),
            ("major_faults_per_request", m.major_faults as f64 / requests),
            ("fault_waits", m.fault_waits as f64),
            ("fault_wait_ms", m.fault_wait_ns as f64 / 1e6),
            ("reclaims", m.reclaims as f64),
            ("reclaim_ms", m.reclaim_ns as f64 / 1e6),
        ],
    )
    // A request waits for its own faults (and reclaims), and at least for one of each when it
    // meets any; one at p99 for as many as the slowest 1 % meet, arriving independently.
    .explaining(
        (fault_ms * at_p99(m.fault_waits as f64 / requests)
            + reclaim_ms * at_p99(m.reclaims as f64 / requests))
        .max(fault_ms + reclaim_ms),
        r.load.latency_us.p99 as f64 / 1e3,
    ))
}

/// How many of a thing met `mean` times a request a request at p99 meets: the 0.99 quantile of
/// a Poisson count of that mean (by the normal's from a mean of 100).
fn at_p99(mean: f64) -> f64 {
    if mean <= 0.0 {
        return 0.0;
    }
    if mean >= 100.0 {
        return mean + 2.326 * mean.sqrt();
    }
    let (mut k, mut pmf) = (0.0, (-mean).exp());
    let mut cdf = pmf;
    while cdf < 0.99 {
        k += 1.0;
        pmf *= mean / k;
        cdf += pmf;
    }
    k
}

#[cfg(test)]
pub(super) mod tests {
    use super::*;
    use crate::record::DiskWait;
    use crate::rules::test_support::*;
    use srvprof_common::GROUP_SERVER;

    tables!(memory_pressure_table);

    #[test]
    fn a_request_at_p99_meets_the_poisson_counts_99th_percentile() {
        assert_eq!(at_p99(0.0), 0.0);
        // Poisson(1): P(X <= 3) = 0.981, P(X <= 4) = 0.996.
        assert_eq!(at_p99(1.0), 4.0);
        // Poisson(8.36): its 0.99 quantile is 16.
        assert_eq!(at_p99(8.36), 16.0);
        assert!((at_p99(400.0) - 446.5).abs() < 0.1);
    }

    /// A recorded window in which pid 7 took 1,000 major faults, waited `fault_ms` in 800 of
    /// them, and reclaimed `reclaim_ms` in 200 reclaims.
    fn paging(fault_ms: u64, reclaim_ms: u64) -> RunReport {
        Recording::window()
            .each(|s, k| {
                let mut t = thread(GROUP_SERVER, 7, "conn", 0, k);
                t.reclaims = grown(200, k);
                t.reclaim_ns = grown(reclaim_ms * 1_000_000, k);
                s.kernel.threads.push(t);
                s.process_cpu.push(crate::record::CpuUse {
                    pid: 7,
                    group: GROUP_SERVER,
                    ..Default::default()
                });
                s.major_faults.insert(7, grown(1_000, k));
                s.kernel.disk_waits.push(DiskWait {
                    pid: 7,
                    group: GROUP_SERVER,
                    nr_slot: 0,
                    fd: -1,
                    count: grown(800, k),
                    total_ns: grown(fault_ms * 1_000_000, k),
                    ..Default::default()
                });
            })
            .build()
    }

    fn memory_pressure_table() -> Table {
        let at_ms = (MEMORY_WAIT_SHARE * WINDOW_S as f64 * 1e3) as u64;
        let waits = |fault_ms: u64, reclaim_ms: u64| {
            finds(
                FindingKind::MemoryPressure,
                Severity::Warning,
                &[
                    ("major_faults", 1_000.0),
                    ("fault_waits", 800.0),
                    ("fault_wait_ms", fault_ms as f64),
                    ("reclaims", 200.0),
                    ("reclaim_ms", reclaim_ms as f64),
                ],
            )
        };
        #[rustfmt::skip]
        let cases = [
            ("no fault, no reclaim", quiet_run(), nothing()),
            ("faults and reclaim just under MEMORY_WAIT_SHARE", paging(at_ms - 101, 100), nothing()),
            ("faults and reclaim at MEMORY_WAIT_SHARE", paging(at_ms - 100, 100), waits(at_ms - 100, 100)),
            ("most of the time", paging(6_000, 1_000), waits(6_000, 1_000)),
        ];
        Table::new(memory_pressure, cases)
    }

    /// 800 fault waits of 2.5 ms and 200 reclaims of 2.5 ms over 1,000 requests: one at p99
    /// meets 3 faults (Poisson of mean 0.8) and 2 reclaims (of mean 0.2), not the mean 2.5 ms.
    #[test]
    fn a_request_at_p99_waits_for_the_faults_and_reclaims_it_meets() {
        let f = memory_pressure(&paging(2_000, 500)).unwrap();
        let tail_ms = f.evidence["tail_ms"];
        assert!(
            (tail_ms - (3.0 * 2.5 + 2.0 * 2.5)).abs() < 1e-9,
            "{tail_ms}"
        );
    }

    #[test]
    fn the_finding_says_faults_per_request_and_whether_the_threads_reclaimed() {
        let f = memory_pressure(&paging(2_000, 500)).unwrap();
        for part in [
            "1000 major page faults (1.00 per request)",
            "reclaimed memory themselves 200 times",
        ] {
            assert!(f.summary.contains(part), "{part}: {}", f.summary);
        }
        let f = memory_pressure(&paging(2_000, 0)).unwrap();
        assert!(
            f.summary
                .contains("reclaimed memory themselves 200 times (0.0 ms"),
            "{}",
            f.summary
        );
    }
}
