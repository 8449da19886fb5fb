//! Server threads waiting for the disk: uninterruptible sleeps in file syscalls (those in page
//! faults are memory.rs's). A thread that serves many connections (an event loop: nginx's worker,
//! Node's main thread) holds every one of them while it waits.

use crate::finding::{Finding, FindingKind, Severity};
use crate::kernel_report::{DiskWaitReport, PAGE_FAULT};
use crate::run_report::RunReport;

/// Server threads in uninterruptible sleep at least this share of the window (summed over
/// threads, as a share of one thread's time) explain a tail.
pub const BLOCKING_IO_SHARE: f64 = 0.05;

/// Server threads waited on the disk: names the syscall and file they waited in most, the wait
/// per request, and the fix.
pub fn blocking_io(r: &RunReport) -> Option<Finding> {
    let secs = r.server.duration_s.max(1e-9);
    // In syscalls: a page fault's wait is memory_pressure's.
    let in_calls: Vec<&DiskWaitReport> = (r.server.disk_waits.iter())
        .filter(|d| d.syscall != PAGE_FAULT)
        .collect();
    let total_ns: u64 = in_calls.iter().map(|d| d.wait_ns).sum();
    let share = total_ns as f64 / (secs * 1e9);
    if share < BLOCKING_IO_SHARE || r.load.completed == 0 {
        return None;
    }
    let top = in_calls.first()?;
    let per_request_us = total_ns as f64 / 1e3 / r.load.completed as f64;
    let waits: u64 = in_calls.iter().map(|d| d.waits).sum();
    let mean_wait_ms = total_ns as f64 / 1e6 / waits.max(1) as f64;
    let thread_of = |pid: u32| {
        r.server
            .threads
            .iter()
            .filter(|t| t.pid == pid)
            .max_by_key(|t| t.offcpu_ns)
            .map(|t| format!("{} (pid {pid})", t.comm))
            .unwrap_or_else(|| format!("pid {pid}"))
    };
    let place = if top.file.is_empty() {
        top.syscall.clone()
    } else {
        format!("{} on {}", top.syscall, top.file)
    };
    Some(Finding::new(
        FindingKind::BlockingIo,
        Severity::Warning,
        format!(
            "server threads waited on the disk {:.0}% of the time ({per_request_us:.0} us per request): most in {place} by {} ({} waits, {:.1} ms of {:.1} ms); a thread serving many connections holds them all while it waits. Fix: keep the data in memory (a warm page cache, enough RAM), or move the reads off the event loop (nginx: aio threads; a thread pool)",
            share * 100.0,
            thread_of(top.pid),
            top.waits,
            top.wait_ns as f64 / 1e6,
            total_ns as f64 / 1e6,
        ),
        &[
            ("wait_share", share),
            ("wait_us_per_request", per_request_us),
            ("top_waits", top.waits as f64),
            ("top_wait_ms", top.wait_ns as f64 / 1e6),
            ("wait_ms", total_ns as f64 / 1e6),
            ("pid", top.pid as f64),
        ],
    )
    // A request that meets a wait waits it whole (with all the others its thread serves).
    .explaining(mean_wait_ms, r.load.latency_us.p99 as f64 / 1e3))
}

#[cfg(test)]
pub(super) mod tests {
    use super::*;
    use crate::record::DiskWait;
    use crate::rules::test_support::*;
    use srvprof_common::GROUP_SERVER;

    tables!(blocking_io_table);

    const SENDFILE: u32 = 40;

    /// A recorded window in which nginx (pid 7) slept uninterruptibly `ms` in sendfile on
    /// /srv/big, in 100 waits.
    fn disk_bound(ms: u64) -> RunReport {
        Recording::window()
            .each(|s, k| {
                s.kernel
                    .threads
                    .push(thread(GROUP_SERVER, 7, "nginx", 1, k));
                s.kernel.disk_waits.push(DiskWait {
                    pid: 7,
                    group: GROUP_SERVER,
                    nr_slot: SENDFILE + 1,
                    fd: 9,
                    path: "/srv/big".into(),
                    count: grown(100, k),
                    total_ns: grown(ms * 1_000_000, k),
                });
            })
            .build()
    }

    fn blocking_io_table() -> Table {
        // BLOCKING_IO_SHARE of the 10 s window.
        let at_ms = (BLOCKING_IO_SHARE * WINDOW_S as f64 * 1e3) as u64;
        let waits = |ms: u64| {
            finds(
                FindingKind::BlockingIo,
                Severity::Warning,
                &[
                    ("wait_ms", ms as f64),
                    ("top_waits", 100.0),
                    (
                        "wait_us_per_request",
                        ms as f64 * 1e3 / (RPS * WINDOW_S) as f64,
                    ),
                    ("pid", 7.0),
                ],
            )
        };
        #[rustfmt::skip]
        let cases = [
            ("no disk wait", quiet_run(), nothing()),
            ("just under BLOCKING_IO_SHARE", disk_bound(at_ms - 1), nothing()),
            ("at BLOCKING_IO_SHARE", disk_bound(at_ms), waits(at_ms)),
            ("most of the time", disk_bound(8_000), waits(8_000)),
        ];
        Table::new(blocking_io, cases)
    }

    #[test]
    fn the_finding_names_the_syscall_the_file_and_the_thread() {
        let f = blocking_io(&disk_bound(2_000)).unwrap();
        for part in [
            "20% of the time",
            "sendfile on /srv/big",
            "nginx (pid 7)",
            "aio threads",
        ] {
            assert!(f.summary.contains(part), "{part}: {}", f.summary);
        }
    }
}
