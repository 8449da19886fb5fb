//! Server threads queued on a lock another of its threads held: a futex word several of them
//! waited on (kernel_report/locks.rs), the thread the waits were charged to, and where they
//! waited.

use crate::finding::{Finding, FindingKind, Severity};
use crate::run_report::RunReport;

/// The server's threads waited on its locks at least this share of the window (summed over
/// threads, as a share of one thread's time).
pub const LOCK_WAIT_SHARE: f64 = 0.05;

/// Server threads waited on a lock of their own process LOCK_WAIT_SHARE of the time: names the
/// lock, the thread that held it, the waiters, where they waited and the wait per request.
pub fn lock_contention(r: &RunReport) -> Option<Finding> {
    let secs = r.server.duration_s.max(1e-9);
    let total_ns: u64 = r.server.locks.iter().map(|l| l.wait_ns).sum();
    let share = total_ns as f64 / (secs * 1e9);
    if share < LOCK_WAIT_SHARE || r.load.completed == 0 {
        return None;
    }
    let lock = r.server.locks.first()?;
    let holder = lock.holders.first()?;
    let per_request_us = total_ns as f64 / 1e3 / r.load.completed as f64;
    let mean_wait_ms = lock.wait_ns as f64 / 1e6 / lock.waits.max(1) as f64;
    let doing = (holder.doing.as_deref()).map_or(String::new(), |d| format!(", {d}"));
    let fix = match &holder.slept_in {
        Some(syscall) if holder.slept_share() >= crate::lock_stacks::ASLEEP_SHARE => format!(
            "do not hold that lock across {syscall}: take what the call needs under the lock, let it go, make the call, then take it again to publish the result"
        ),
        _ => "hold that lock for less time (do the slow work outside it), split it, or make the readers lock-free".to_string(),
    };
    let waited_in = if lock.stack.is_empty() {
        String::new()
    } else {
        // The innermost frames say which lock call it is.
        let frames: Vec<&str> = lock
            .stack
            .iter()
            .rev()
            .take(4)
            .map(String::as_str)
            .collect();
        format!(", waiting in {}", frames.join(" < "))
    };
    Some(Finding::new(
        FindingKind::LockContention,
        Severity::Warning,
        format!(
            "server threads queued on a lock: {} threads (most {} tid {}) waited {:.1} ms on the futex at {} of pid {} ({} waits, {mean_wait_ms:.2} ms each, {per_request_us:.0} us per request){waited_in}; {:.0}% of the wait was behind {} (tid {}), which held it{doing}. Fix: {fix}",
            lock.waiters,
            lock.waiter_comm,
            lock.waiter_tid,
            lock.wait_ns as f64 / 1e6,
            lock.address,
            lock.pid,
            lock.waits,
            holder.share * 100.0,
            holder.comm,
            holder.tid,
        ),
        &[
            ("wait_share", share),
            ("wait_us_per_request", per_request_us),
            ("waiters", lock.waiters as f64),
            ("waits", lock.waits as f64),
            ("wait_ms", lock.wait_ns as f64 / 1e6),
            ("holder_tid", holder.tid as f64),
            ("holder_share", holder.share),
            ("holder_slept_share", holder.slept_share()),
            ("pid", lock.pid as f64),
        ],
    )
    // A request that meets the lock held waits about one wait.
    .explaining(mean_wait_ms, r.load.latency_us.p99 as f64 / 1e3))
}

#[cfg(test)]
pub(super) mod tests {
    use super::*;
    use crate::record::{LockWaitRecord, ThreadCounters};
    use crate::rules::test_support::*;
    use srvprof_common::GROUP_SERVER;

    tables!(lock_contention_table);

    /// A recorded window in which two connection threads of pid 7 waited `ms` in all on the
    /// futex at 0x5000, 90 % of it behind the refresher (tid 10), in 100 waits.
    fn contended(ms: u64) -> RunReport {
        Recording::window()
            .each(|s, k| {
                for (tid, comm) in [(10, "cache-refresh"), (11, "conn"), (12, "conn")] {
                    s.kernel.threads.push(ThreadCounters {
                        pid: 7,
                        ..thread(GROUP_SERVER, tid, comm, 0, k)
                    });
                }
                let wait = |waiter, holder, n, ns| LockWaitRecord {
                    pid: 7,
                    group: GROUP_SERVER,
                    uaddr: 0x5000,
                    waiter_tid: waiter,
                    holder_tid: holder,
                    holder_pid: 7,
                    lock_protocol: true,
                    waits: grown(n, k),
                    wait_ns: grown(ns, k),
                    ..Default::default()
                };
                let ns = ms * 1_000_000;
                s.kernel.lock_waits.push(wait(11, 10, 50, ns * 9 / 20));
                s.kernel.lock_waits.push(wait(12, 10, 40, ns * 9 / 20));
                s.kernel.lock_waits.push(wait(12, 11, 10, ns / 10));
            })
            .build()
    }

    fn lock_contention_table() -> Table {
        let at_ms = (LOCK_WAIT_SHARE * WINDOW_S as f64 * 1e3) as u64;
        let waits = |ms: u64| {
            finds(
                FindingKind::LockContention,
                Severity::Warning,
                &[
                    ("wait_ms", ms as f64),
                    ("waits", 100.0),
                    ("waiters", 2.0),
                    ("holder_tid", 10.0),
                    ("holder_share", 0.9),
                    ("pid", 7.0),
                ],
            )
        };
        #[rustfmt::skip]
        let cases = [
            ("no lock wait", quiet_run(), nothing()),
            ("just under LOCK_WAIT_SHARE", contended(at_ms - 10), nothing()),
            ("at LOCK_WAIT_SHARE", contended(at_ms), waits(at_ms)),
            ("most of the time", contended(8_000), waits(8_000)),
        ];
        Table::new(lock_contention, cases)
    }

    #[test]
    fn the_finding_names_the_holder_the_waiters_and_the_lock() {
        let f = lock_contention(&contended(2_000)).unwrap();
        for part in [
            "2 threads (most conn",
            "futex at 0x5000 of pid 7",
            "90% of the wait was behind cache-refresh (tid 10)",
        ] {
            assert!(f.summary.contains(part), "{part}: {}", f.summary);
        }
        // 100 waits of 20 ms each, against the recording's 1 ms p99.
        assert_eq!(f.tail_share, Some(1.0));
    }
}
