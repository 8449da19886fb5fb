//! Who ran out of CPU: the load generator (the run measured the client), a server thread, server
//! threads waiting in the run queue, or a client that could not keep -c connections busy.

use crate::finding::{Finding, FindingKind, Severity};
use crate::run_report::RunReport;

/// A thread this busy (user+sys, or on a CPU or waiting for one, over wall time) has saturated a CPU.
pub const CPU_SATURATED: f64 = 0.90;
/// Run-queue p99 (µs) from which server threads waiting for a CPU explain a tail.
pub const RUNQ_P99_US: f64 = 1000.0;
/// The client kept fewer than this share of -c connections busy...
pub const CLIENT_CONCURRENCY_SHARE: f64 = 0.5;
/// ...while its busiest thread was at least this busy (so the client, not the server, fell short).
pub const CLIENT_CONCURRENCY_BUSY: f64 = 0.7;

/// The load generator was the bottleneck: a client thread that was always on a CPU or waiting for
/// one never waited for the server (kernel-measured on-CPU + run-queue time over wall time), or
/// the load generator's own CPU accounting says it saturated.
pub fn client_bound(r: &RunReport) -> Option<Finding> {
    let load = &r.load;
    let secs = r.server.duration_s.max(1e-9);
    let client_starved = r
        .client
        .threads
        .iter()
        .map(|t| ((t.oncpu_ns + t.runq_ns) as f64 / (secs * 1e9), t))
        .max_by(|a, b| a.0.total_cmp(&b.0));
    let client_busiest = load.client_cpu.max_thread_utilization;
    let starved_share = client_starved.map(|(share, _)| share).unwrap_or(0.0);
    if !(load.client_cpu.saturated
        || client_busiest >= CPU_SATURATED
        || starved_share >= CPU_SATURATED)
    {
        return None;
    }
    let waited = client_starved
        .map(|(_, t)| t.runq_ns as f64 / (secs * 1e9))
        .unwrap_or(0.0);
    Some(Finding::new(
        FindingKind::ClientBound,
        Severity::Critical,
        format!(
            "load generator CPU-bound: its busiest thread was on a CPU or waiting for one {:.0}% of the time ({:.0}% waiting in the run queue); this run measured the client, not the server",
            starved_share.max(client_busiest) * 100.0,
            waited * 100.0
        ),
        &[
            ("client_thread_busy_or_runnable_share", starved_share),
            ("client_thread_runq_share", waited),
            ("client_busiest_thread_utilization", client_busiest),
            ("client_cpu_utilization", load.client_cpu.cpu_utilization),
            ("throughput_rps", load.throughput_rps),
        ],
    ))
}

/// The busiest server thread was at least CPU_SATURATED busy; says where its sys time went.
pub fn server_cpu_saturated(r: &RunReport) -> Option<Finding> {
    let secs = r.server.duration_s.max(1e-9);
    let t = r
        .server
        .threads
        .iter()
        .max_by_key(|t| t.user_ns + t.sys_ns)
        .filter(|t| (t.user_ns + t.sys_ns) as f64 / (secs * 1e9) >= CPU_SATURATED)?;
    let busy = (t.user_ns + t.sys_ns) as f64 / (secs * 1e9);
    let sys_share = t.sys_ns as f64 / (t.user_ns + t.sys_ns).max(1) as f64;
    let top: Vec<String> = r
        .server
        .syscalls
        .iter()
        .take(3)
        .map(|s| {
            format!(
                "{} {:.1}/req",
                s.name,
                s.count as f64 / r.load.completed.max(1) as f64
            )
        })
        .collect();
    let sys_goes_to = if r.server.syscalls_off {
        "syscalls not recorded (--syscalls off)".to_string()
    } else {
        format!("sys goes to {}", top.join(", "))
    };
    Some(Finding::new(
        FindingKind::ServerCpuSaturated,
        Severity::Warning,
        format!(
            "server thread {} ({}) was {:.0}% busy: user {:.0}%, sys {:.0}% of its time; {sys_goes_to}",
            t.tid,
            t.comm,
            busy * 100.0,
            (1.0 - sys_share) * 100.0,
            sys_share * 100.0,
        ),
        &[
            ("busy_share", busy),
            ("sys_share", sys_share),
            ("tid", t.tid as f64),
        ],
    ))
}

/// Server threads waited for a CPU: run-queue p99 at least RUNQ_P99_US.
pub fn runq_tail(r: &RunReport) -> Option<Finding> {
    let runq = &r.server.runq_latency_us;
    let invol_per_req = r.per_request.server.involuntary_switches;
    let p99_us = r.load.latency_us.p99 as f64;
    (runq.p99 >= RUNQ_P99_US && r.load.completed > 0).then(|| {
        Finding::new(
            FindingKind::RunqTail,
            Severity::Warning,
            format!(
                "server threads waited for a CPU: run-queue p99 {:.1} ms (max {:.1} ms), {:.2} involuntary switches per request; request p99 {:.1} ms",
                runq.p99 / 1000.0,
                runq.max / 1000.0,
                invol_per_req,
                p99_us / 1000.0
            ),
            &[
                ("runq_p99_us", runq.p99),
                ("involuntary_switches_per_request", invol_per_req),
                ("p99_us", p99_us),
            ],
        )
    })
}

/// Closed loop only: the client kept fewer than CLIENT_CONCURRENCY_SHARE of -c connections busy
/// (throughput x mean latency, Little's law) while its busiest thread was CLIENT_CONCURRENCY_BUSY.
pub fn client_concurrency_short(r: &RunReport) -> Option<Finding> {
    let load = &r.load;
    if load.config.rate.is_some() || load.completed == 0 {
        return None;
    }
    let mean_latency_s = load.latency_us.mean / 1e6;
    let achieved = load.throughput_rps * mean_latency_s;
    let wanted = load.config.connections as f64;
    (wanted > 0.0
        && achieved / wanted < CLIENT_CONCURRENCY_SHARE
        && load.client_cpu.max_thread_utilization >= CLIENT_CONCURRENCY_BUSY)
        .then(|| {
            Finding::new(
                FindingKind::ClientConcurrencyShort,
                Severity::Warning,
                format!(
                    "the load generator kept only {achieved:.0} of {wanted:.0} connections busy on average (throughput x mean latency): it could not drive the requested concurrency"
                ),
                &[
                    ("busy_connections", achieved),
                    ("requested_connections", wanted),
                ],
            )
        })
}

#[cfg(test)]
pub(super) mod tests {
    use super::*;
    use crate::rules::test_support::*;

    fn saturated(run: &RunReport) -> String {
        server_cpu_saturated(run)
            .expect("a 98% busy thread is saturated")
            .summary
    }

    #[test]
    fn a_saturated_server_names_its_syscalls_or_says_they_were_not_recorded() {
        assert!(
            saturated(&busy_server(0.98, false).build()).contains("sys goes to writev 1.0/req")
        );
        let off = saturated(&busy_server(0.98, true).build());
        assert!(
            off.contains("syscalls not recorded (--syscalls off)"),
            "{off}"
        );
        assert!(!off.contains("sys goes to"), "{off}");
    }
}
