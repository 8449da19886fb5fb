//! A server that waits on something else: its threads mostly idle while each request takes far
//! longer than the CPU it costs. Named by the connections the server holds to other addresses.

use crate::finding::{Finding, FindingKind, Severity};
use crate::rules::io::BLOCKING_IO_SHARE;
use crate::run_report::RunReport;

/// The busiest server thread under this share of its time on a CPU or waiting for one: the
/// server was not busy, nor starved of CPU (a neighbour, a quota)...
pub const IDLE_BUSY: f64 = 0.5;
/// ...while the median request took at least this many times the server CPU it cost...
pub const WAIT_FACTOR: f64 = 10.0;
/// ...and at least this long (µs).
pub const MIN_P50_US: f64 = 1000.0;

/// The server's threads were mostly idle while requests took WAIT_FACTOR times the CPU they
/// cost: it waits on a dependency. Names the remote addresses it held connections to.
pub fn slow_dependency(r: &RunReport) -> Option<Finding> {
    let load = &r.load;
    let secs = r.server.duration_s.max(1e-9);
    // On a CPU (the scheduler's account, or /proc's) or in a run queue.
    let busiest = r
        .server
        .threads
        .iter()
        .map(|t| (t.oncpu_ns.max(t.user_ns + t.sys_ns) + t.runq_ns) as f64 / (secs * 1e9))
        .fold(0.0, f64::max);
    let cpu_us = r.per_request.server.cpu_us;
    let p50_us = load.latency_us.p50 as f64;
    let disk_share =
        r.server.disk_waits.iter().map(|d| d.wait_ns).sum::<u64>() as f64 / (secs * 1e9);
    let waits = load.completed > 0
        && busiest < IDLE_BUSY
        && p50_us >= MIN_P50_US
        && p50_us >= WAIT_FACTOR * cpu_us
        && disk_share < BLOCKING_IO_SHARE
        && load.client_cpu.max_thread_utilization < crate::rules::cpu::CPU_SATURATED;
    if !waits {
        return None;
    }
    let on = match r.server.outbound.first() {
        Some(top) => {
            let others = r.server.outbound.len() - 1;
            let more = if others > 0 {
                format!(" and {others} other addresses")
            } else {
                String::new()
            };
            // A datagram service (a DNS server) holds no connection: its answers were waited on.
            let held = match top.max_connections {
                0 => format!("it waited {} times on answers from {}", top.waits, top.remote),
                n => format!("it held connections to {} (up to {n} at once)", top.remote),
            };
            format!(
                "{held}{more}, a dependency whose answers the requests wait for. Fix: look at that service's latency, cache its answers, or call it with a timeout and in parallel"
            )
        }
        None => "it held no connection to anything but its clients, so it waits on a timer, a lock or a pipe: its off-CPU stacks say which".to_string(),
    };
    Some(Finding::new(
        FindingKind::SlowDependency,
        Severity::Warning,
        format!(
            "the server waits on something else: its busiest thread was on a CPU or waiting for one {:.0}% of the time while the median request took {:.1} ms against {cpu_us:.0} us of server CPU each; {on}",
            busiest * 100.0,
            p50_us / 1e3,
        ),
        &[
            ("busiest_thread_busy_share", busiest),
            ("p50_us", p50_us),
            ("server_cpu_us_per_request", cpu_us),
            ("remotes", r.server.outbound.len() as f64),
            (
                "top_remote_connections",
                r.server
                    .outbound
                    .first()
                    .map(|o| o.max_connections as f64)
                    .unwrap_or(0.0),
            ),
        ],
    )
    // Each request waits what it took beyond the CPU it cost.
    .explaining((p50_us - cpu_us) / 1e3, load.latency_us.p99 as f64 / 1e3))
}

#[cfg(test)]
pub(super) mod tests {
    use super::*;
    use crate::record::{CpuUse, Outbound};
    use crate::rules::test_support::*;
    use srvprof_common::GROUP_SERVER;

    tables!(slow_dependency_table);

    /// A window in which nginx's thread 7 was on a CPU `busy` of the time, the median request
    /// took `p50_ms`, and nginx held `conns` connections to 127.0.0.1:9000 (0: none).
    fn waiting(busy: f64, p50_ms: u64, conns: u64) -> RunReport {
        let ns = ns_of(busy);
        let mut rec = Recording::window().each(|s, k| {
            s.kernel
                .threads
                .push(thread(GROUP_SERVER, 7, "nginx", 1, k));
            s.thread_cpu.push(CpuUse {
                pid: 7,
                tid: 7,
                group: GROUP_SERVER,
                comm: "nginx".into(),
                user_ns: grown(ns, k),
                sys_ns: grown(0, k),
            });
            s.process_cpu.push(CpuUse {
                pid: 7,
                tid: 0,
                group: GROUP_SERVER,
                comm: "nginx".into(),
                user_ns: grown(ns, k),
                sys_ns: grown(0, k),
            });
            s.outbound = Some(
                (conns > 0)
                    .then(|| Outbound {
                        remote: "127.0.0.1:9000".into(),
                        max_connections: conns,
                        samples_seen: k + 1,
                        opened: conns,
                        ..Default::default()
                    })
                    .into_iter()
                    .collect(),
            );
        });
        rec.load.latency_us.p50 = p50_ms * 1000;
        rec.build()
    }

    /// The same 50 ms requests with nginx on a CPU `busy` and in a run queue `runq` of the time.
    fn starved(busy: f64, runq: f64) -> RunReport {
        let mut r = waiting(busy, 50, 20);
        for t in &mut r.server.threads {
            t.runq_ns = ns_of(runq);
        }
        r
    }

    fn waits(busy: f64, p50_ms: u64, conns: u64) -> Vec<Expected> {
        finds(
            FindingKind::SlowDependency,
            Severity::Warning,
            &[
                ("busiest_thread_busy_share", busy),
                ("p50_us", p50_ms as f64 * 1e3),
                ("top_remote_connections", conns as f64),
            ],
        )
    }

    fn slow_dependency_table() -> Table {
        // 1,000 requests in the window: a 2 % busy thread costs 200 us of CPU a request, so the
        // median must be 2 ms or more to be WAIT_FACTOR times that.
        #[rustfmt::skip]
        let cases = [
            ("idle, 50 ms a request, a backend", waiting(0.02, 50, 20), waits(0.02, 50, 20)),
            ("idle, no connection out", waiting(0.02, 50, 0), waits(0.02, 50, 0)),
            ("at WAIT_FACTOR", waiting(0.02, 2, 3), waits(0.02, 2, 3)),
            ("under WAIT_FACTOR", waiting(0.03, 2, 3), nothing()),
            ("busy: at IDLE_BUSY", waiting(IDLE_BUSY, 500, 3), nothing()),
            ("starved: 2 % on a CPU, 60 % waiting for one", starved(0.02, 0.6), nothing()),
            ("fast requests: under MIN_P50_US", waiting(0.0001, 0, 3), nothing()),
        ];
        Table::new(slow_dependency, cases)
    }

    #[test]
    fn the_finding_names_the_remote_or_says_none_was_seen() {
        let f = slow_dependency(&waiting(0.02, 50, 20)).unwrap();
        assert!(
            f.summary.contains("127.0.0.1:9000 (up to 20 at once)"),
            "{}",
            f.summary
        );
        let f = slow_dependency(&waiting(0.02, 50, 0)).unwrap();
        assert!(f.summary.contains("no connection"), "{}", f.summary);
        // A datagram service: no connection held, its answers waited on.
        let mut udp = waiting(0.02, 50, 0);
        udp.server.outbound = vec![Outbound {
            remote: "127.0.0.53:53".into(),
            waits: 1_000,
            ..Default::default()
        }];
        let f = slow_dependency(&udp).unwrap();
        assert!(
            f.summary
                .contains("it waited 1000 times on answers from 127.0.0.53:53,"),
            "{}",
            f.summary
        );
    }
}
