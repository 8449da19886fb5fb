//! Plain-language findings, each a rule with thresholds and the numbers behind it.

use std::collections::BTreeMap;

use serde::{Deserialize, Serialize};

use super::run_report::{RunReport, TimelineRow};
use crate::render::text::signal_name;

#[derive(Clone, Copy, Debug, PartialEq, Eq, PartialOrd, Ord, Serialize, Deserialize)]
#[serde(rename_all = "lowercase")]
pub enum Severity {
    Critical,
    Warning,
    Info,
}

#[derive(Clone, Debug, PartialEq, Serialize, Deserialize)]
pub struct Finding {
    pub kind: String,
    pub severity: Severity,
    pub summary: String,
    pub evidence: BTreeMap<String, f64>,
}

fn finding(kind: &str, severity: Severity, summary: String, evidence: &[(&str, f64)]) -> Finding {
    Finding {
        kind: kind.into(),
        severity,
        summary,
        evidence: evidence.iter().map(|(k, v)| (k.to_string(), *v)).collect(),
    }
}

/// Thresholds of the rules, named so the report can cite them.
pub mod thresholds {
    /// A thread this busy (user+sys over wall time) has saturated a CPU.
    pub const CPU_SATURATED: f64 = 0.90;
    /// NET_RX softirqs on one CPU above this share of all of them: concentrated.
    pub const IRQ_CONCENTRATED_SHARE: f64 = 0.80;
    pub const IRQ_MIN_PER_S: f64 = 1000.0;
    /// A p99 above this is a tail worth explaining by SYN retransmits.
    pub const SYN_TAIL_P99_US: f64 = 900_000.0;
    /// Run-queue p99 above this explains a tail.
    pub const RUNQ_P99_US: f64 = 1000.0;
    /// Errors above this share of an interval's requests: a burst.
    pub const ERROR_BURST_SHARE: f64 = 0.05;
    pub const ERROR_BURST_MIN: u64 = 10;
    /// The client kept fewer than this share of -c connections busy.
    pub const CLIENT_CONCURRENCY_SHARE: f64 = 0.5;
    /// Keep-alive connections the server closed while idle, from this many on: it is shedding
    /// connections, and each one is a reconnect the run did not ask for.
    pub const IDLE_CLOSED_MIN: u64 = 10;
    /// Resets one side sent in the run: from this many on, a finding says why.
    pub const RESETS_MIN: u64 = 10;
    /// Resets that go with at least this share of the run's errors make the finding critical.
    pub const RESETS_ERROR_SHARE: f64 = 0.5;
}

use thresholds::*;

/// Every rule, in order of weight: critical first, then by how much they explain.
pub fn findings(r: &RunReport) -> Vec<Finding> {
    let mut out = Vec::new();
    let load = &r.load;
    let secs = r.server.duration_s.max(1e-9);

    if load.completed == 0 {
        out.push(finding(
            "no_success",
            Severity::Critical,
            format!(
                "no request succeeded: {} errors ({:?})",
                load.errors, load.errors_by_kind
            ),
            &[("errors", load.errors as f64)],
        ));
    }

    // Target processes or threads that died, and what the clients saw then.
    for e in r
        .server
        .exits
        .iter()
        .filter(|e| e.signal.is_some() || e.exit_code.unwrap_or(0) != 0)
    {
        let errors_after = errors_near(&r.timeline, e.t_s);
        let how = match (e.signal, e.exit_code) {
            (Some(sig), _) => format!("died of signal {sig} ({})", signal_name(sig)),
            (None, Some(code)) => format!("exited with code {code}"),
            _ => "exited".into(),
        };
        out.push(finding(
            "target_died",
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
        ));
    }

    // Who reset connections, in which state and why: ranked above the error bursts they cause.
    out.extend(reset_findings(r));

    // The load generator was the bottleneck: a client thread that was always on a CPU or waiting
    // for one never waited for the server (kernel-measured on-CPU + run-queue time over wall time).
    let client_starved = r
        .client
        .threads
        .iter()
        .map(|t| ((t.oncpu_ns + t.runq_ns) as f64 / (secs * 1e9), t))
        .max_by(|a, b| a.0.total_cmp(&b.0));
    let client_busiest = load.client_cpu.max_thread_utilization;
    let starved_share = client_starved.map(|(share, _)| share).unwrap_or(0.0);
    if load.client_cpu.saturated
        || client_busiest >= CPU_SATURATED
        || starved_share >= CPU_SATURATED
    {
        let waited = client_starved
            .map(|(_, t)| t.runq_ns as f64 / (secs * 1e9))
            .unwrap_or(0.0);
        out.push(finding(
            "client_bound",
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
        ));
    }

    // A server thread saturated a CPU.
    if let Some(t) = r
        .server
        .threads
        .iter()
        .max_by_key(|t| t.user_ns + t.sys_ns)
        .filter(|t| (t.user_ns + t.sys_ns) as f64 / (secs * 1e9) >= CPU_SATURATED)
    {
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
                    s.count as f64 / load.completed.max(1) as f64
                )
            })
            .collect();
        let sys_goes_to = if r.server.syscalls_off {
            "syscalls not recorded (--syscalls off)".to_string()
        } else {
            format!("sys goes to {}", top.join(", "))
        };
        out.push(finding(
            "server_cpu_saturated",
            Severity::Warning,
            format!(
                "server thread {} ({}) was {:.0}% busy: user {:.0}%, sys {:.0}% of its time; {sys_goes_to}",
                t.tid,
                t.comm,
                busy * 100.0,
                (1.0 - sys_share) * 100.0,
                sys_share * 100.0,
            ),
            &[("busy_share", busy), ("sys_share", sys_share), ("tid", t.tid as f64)],
        ));
    }

    // Latency tail from accept-queue overflows and SYN retransmits (1 s initial RTO, then 3 s, 7 s).
    let p99_us = load.latency_us.p99 as f64;
    let tcp = &r.server.tcp;
    // Only SYNs retransmitted on the server's own port: the namespace-wide counter includes others.
    let syn = tcp.syn_retransmits;
    if p99_us >= SYN_TAIL_P99_US && (tcp.listen_overflows > 0 || syn > 0) {
        // A dropped SYN is resent after the initial 1 s timeout, then after 2 s and 4 s more:
        // a client waits 1, 3, 7 or 15 s for 1, 2, 3 or 4 retransmits.
        let (waited_s, resends) = [(1.0, 1), (3.0, 2), (7.0, 3), (15.0, 4)]
            .into_iter()
            .min_by(|a, b| {
                (p99_us / 1e6 - a.0)
                    .abs()
                    .total_cmp(&(p99_us / 1e6 - b.0).abs())
            })
            .unwrap_or((1.0, 1));
        out.push(finding(
            "syn_retransmit_tail",
            Severity::Critical,
            format!(
                "p99 of {:.2} s = SYN retransmit after {} accept-queue overflows: a dropped SYN is resent after 1 s, then 2 s more, so {waited_s:.0} s is {resends} retransmit{}; {} SYNs were retransmitted to this server, {} connections dropped by its listening socket",
                p99_us / 1e6,
                tcp.listen_overflows,
                if resends == 1 { "" } else { "s" },
                syn,
                tcp.listen_drops
            ),
            &[
                ("p99_us", p99_us),
                ("listen_overflows", tcp.listen_overflows as f64),
                ("listen_drops", tcp.listen_drops as f64),
                ("syn_retransmits", syn as f64),
                ("wait_s", waited_s),
                ("retransmits_per_wait", resends as f64),
            ],
        ));
    } else if tcp.listen_overflows > 0 {
        out.push(finding(
            "listen_overflows",
            Severity::Warning,
            format!(
                "{} accept-queue overflows ({} listen drops): the server accepts connections slower than they arrive; raise its listen backlog or accept faster",
                tcp.listen_overflows, tcp.listen_drops
            ),
            &[("listen_overflows", tcp.listen_overflows as f64)],
        ));
    }

    // Latency tail from waiting for a CPU.
    let runq = &r.server.runq_latency_us;
    let invol_per_req = r.per_request.server.involuntary_switches;
    if runq.p99 >= RUNQ_P99_US && load.completed > 0 {
        out.push(finding(
            "runq_tail",
            Severity::Warning,
            format!(
                "server threads waited for a CPU: run-queue p99 {:.1} ms (max {:.1} ms), {:.2} involuntary switches per request; request p99 {:.1} ms",
                runq.p99 / 1000.0,
                runq.max / 1000.0,
                invol_per_req,
                p99_us / 1000.0
            ),
            &[("runq_p99_us", runq.p99), ("involuntary_switches_per_request", invol_per_req), ("p99_us", p99_us)],
        ));
    }

    // Network interrupts concentrated on one CPU.
    let mut net_rx_per_cpu: BTreeMap<u32, u64> = BTreeMap::new();
    for s in r.server.softirqs.iter().filter(|s| s.vector == "NET_RX") {
        *net_rx_per_cpu.entry(s.cpu).or_default() += s.count;
    }
    let total: u64 = net_rx_per_cpu.values().sum();
    if let Some((cpu, n)) = net_rx_per_cpu.iter().max_by_key(|(_, n)| **n) {
        let share = *n as f64 / total.max(1) as f64;
        if total as f64 / secs >= IRQ_MIN_PER_S
            && share >= IRQ_CONCENTRATED_SHARE
            && net_rx_per_cpu.len() > 1
        {
            let shares_cpu = r.server.threads.iter().any(|t| t.cpus.contains(cpu));
            out.push(finding(
                "net_irq_concentrated",
                Severity::Info,
                format!(
                    "{:.0}% of NET_RX softirqs ran on CPU {cpu} ({:.0}/s); the server {} that CPU",
                    share * 100.0,
                    *n as f64 / secs,
                    if shares_cpu {
                        "shares"
                    } else {
                        "does not run on"
                    }
                ),
                &[
                    ("cpu", *cpu as f64),
                    ("share", share),
                    ("net_rx_per_s", *n as f64 / secs),
                    ("server_shares_cpu", shares_cpu as u8 as f64),
                ],
            ));
        }
    }

    // The client could not keep -c connections busy (closed loop only).
    if load.config.rate.is_none() && load.completed > 0 {
        let mean_latency_s = load.latency_us.mean / 1e6;
        let achieved = load.throughput_rps * mean_latency_s;
        let wanted = load.config.connections as f64;
        if wanted > 0.0
            && achieved / wanted < CLIENT_CONCURRENCY_SHARE
            && load.client_cpu.max_thread_utilization >= 0.7
        {
            out.push(finding(
                "client_concurrency_short",
                Severity::Warning,
                format!(
                    "the load generator kept only {achieved:.0} of {wanted:.0} connections busy on average (throughput x mean latency): it could not drive the requested concurrency"
                ),
                &[("busy_connections", achieved), ("requested_connections", wanted)],
            ));
        }
    }

    if let Some(f) = server_closed_idle_connections(r) {
        out.push(f);
    }

    // Error bursts.
    for row in &r.timeline {
        let total = row.completed + row.errors;
        if row.errors >= ERROR_BURST_MIN && row.errors as f64 >= ERROR_BURST_SHARE * total as f64 {
            out.push(finding(
                "error_burst",
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
            ));
        }
    }

    // What tracks p99 over the run.
    // Only when p99 moved enough over the run for tracking it to mean something.
    let p99s: Vec<f64> = r.timeline.iter().map(|t| t.p99_us as f64).collect();
    let mean = p99s.iter().sum::<f64>() / p99s.len().max(1) as f64;
    let spread = p99s.iter().map(|v| (v - mean).abs()).sum::<f64>() / p99s.len().max(1) as f64;
    let p99_varies = p99s.len() >= 5 && mean > 0.0 && spread / mean >= 0.2;
    if let Some(c) = r
        .correlations
        .first()
        .filter(|c| p99_varies && c.coefficient.abs() >= 0.7)
    {
        out.push(finding(
            "p99_tracks",
            Severity::Info,
            format!(
                "p99 per interval tracks {} (r = {:.2} over {} intervals)",
                c.series, c.coefficient, c.intervals
            ),
            &[("coefficient", c.coefficient)],
        ));
    }

    let lost: u64 = r.server.lost_events.values().sum();
    if lost > 0 {
        out.push(finding(
            "lost_events",
            Severity::Warning,
            format!("{lost} kernel records were lost (maps or ring buffer full); the counts are lower bounds"),
            &[("lost", lost as f64)],
        ));
    }
    out.sort_by_key(|f| f.severity);
    out
}

/// The server closed keep-alive connections while they waited for their next request: a server
/// shedding connections (nginx does so whenever fewer than 1/16 of worker_connections are free)
/// or one whose keep-alive timeout or connection limit is below what the run holds.
fn server_closed_idle_connections(r: &RunReport) -> Option<Finding> {
    let load = &r.load;
    let closed = load.idle_closed_by_server;
    if closed < IDLE_CLOSED_MIN {
        return None;
    }
    // Counted over the whole run, warmup included.
    let secs = (load.config.warmup_s + load.duration_s).max(1e-9);
    let connections = load.config.connections as f64;
    let nginx = r.server.threads.iter().any(|t| t.comm == "nginx");
    let hint = if nginx {
        format!(
            "nginx closes idle keep-alive connections whenever fewer than 1/16 of worker_connections are free (its error log says \"worker_connections are not enough, reusing connections\"): raise worker_connections to at least {:.0} for -c {connections:.0}, or run fewer connections",
            (connections * 16.0 / 15.0).ceil() + 64.0
        )
    } else {
        "raise the server's connection limit or keep-alive timeout above what the run holds, or run fewer connections".to_string()
    };
    Some(finding(
        "server_closed_idle",
        Severity::Warning,
        format!(
            "the server closed {closed} keep-alive connections while they were idle ({:.0}/s over the run, warmup included, for -c {connections:.0}); the load generator opened {} connections in the measured window to replace them, each after a backoff, and their requests waited for it. {hint}",
            closed as f64 / secs,
            load.connections_opened,
        ),
        &[
            ("idle_closed_by_server", closed as f64),
            ("idle_closed_per_s", closed as f64 / secs),
            ("connections", connections),
            ("connections_opened", load.connections_opened as f64),
        ],
    ))
}

/// What a reset sent for the kernel's `reason` from a socket in `state` means, and what to do.
/// (what happened, the fix). The kernel sends an active reset after the socket moved to CLOSE.
pub fn reset_cause(reason: Option<&str>, state: &str) -> (String, &'static str) {
    let reason = reason.unwrap_or("NOT_SPECIFIED");
    match reason {
        "TCP_STATE" if state == "CLOSE" => (
            "closed with SO_LINGER 0 (or disconnected): the kernel aborts the connection with an RST instead of a FIN".into(),
            "close normally (no SO_LINGER 0) unless aborting is intended",
        ),
        "TCP_ABORT_ON_CLOSE" => (
            "closed a connection with data it had not read: the closer had not read what the peer sent, so the kernel answers with an RST instead of a FIN".into(),
            "read what the peer sent (the whole request or response) before closing, or half-close with shutdown first",
        ),
        "TCP_ABORT_ON_LINGER" => (
            "aborted a closed connection lingering in FIN_WAIT2 (TCP_LINGER2 negative or its time ran out)".into(),
            "leave TCP_LINGER2 and tcp_fin_timeout at their defaults",
        ),
        "TCP_ABORT_ON_DATA" => (
            "got data after it had closed the connection: the peer wrote on a connection this side had closed".into(),
            "close only after the peer is done writing (wait for the response or raise the timeout), or make the peer answer sooner",
        ),
        "TCP_TIMEWAIT_SOCKET" => (
            format!(
                "got data on a connection it had already closed ({}, kept by the kernel after close): the peer wrote after this side closed",
                if state == "TIME_WAIT" { "a TIME_WAIT or orphaned FIN_WAIT2 socket" } else { "a closed socket" }
            ),
            "close only after the peer is done writing (wait for the response or raise the timeout), or make the peer answer sooner",
        ),
        "TCP_ABORT_ON_MEMORY" => (
            "killed connections for lack of memory or too many orphaned sockets (net.ipv4.tcp_mem, tcp_max_orphans)".into(),
            "raise net.ipv4.tcp_max_orphans / tcp_mem, or close fewer connections at once",
        ),
        "NO_SOCKET" => (
            "answered segments for which it had no socket (a closed port, or a connection it had forgotten)".into(),
            "check that the peer does not reuse connections the other side has closed, and that the port is listening",
        ),
        "TCP_RFC7323_PAWS" | "TCP_TOO_OLD_ACK" | "TCP_OLD_ACK" | "TCP_INVALID_ACK_SEQUENCE"
        | "TCP_ACK_UNSENT_DATA" => (
            format!("rejected segments that failed the kernel's checks ({reason}: old timestamps or an ACK outside the window, typical of a reused port or a stale connection)"),
            "avoid reusing ports in TIME_WAIT (fewer new connections, keep-alive)",
        ),
        "TCP_KEEPALIVE_TIMEOUT" => (
            "gave up on connections whose keepalive probes went unanswered".into(),
            "check the path to the peer and the peer's liveness",
        ),
        _ => (
            format!("sent resets for kernel reason {reason} (socket in {state})"),
            "see the kernel's enum sk_rst_reason for this reason",
        ),
    }
}

/// One finding per side that sent at least RESETS_MIN resets: its main cause in the kernel's
/// terms and plain words, and the share of the run's errors that goes with its resets (the
/// client's `reset` errors for the server's, its own timeouts for the client's).
fn reset_findings(r: &RunReport) -> Vec<Finding> {
    let errors = r.load.errors;
    let errors_of = |kind: &str| r.load.errors_by_kind.get(kind).copied().unwrap_or(0);
    let mut out = Vec::new();
    for (name, report, other, related) in [
        ("server", &r.server, &r.client, errors_of("reset")),
        (
            "client",
            &r.client,
            &r.server,
            errors_of("read_timeout") + errors_of("connect_timeout"),
        ),
    ] {
        let tcp = &report.tcp;
        if tcp.resets_sent < RESETS_MIN {
            continue;
        }
        let Some(top) = tcp.resets.iter().find(|x| x.direction == "sent") else {
            continue;
        };
        let (what, fix) = reset_cause(top.reason.as_deref(), &top.state);
        let top_share = top.count as f64 / tcp.resets_sent as f64;
        let explained = tcp.resets_sent.min(related);
        let error_share = if errors == 0 {
            0.0
        } else {
            explained as f64 / errors as f64
        };
        let severity = if errors > 0 && error_share >= RESETS_ERROR_SHARE {
            Severity::Critical
        } else {
            Severity::Warning
        };
        let errors_part = if errors == 0 {
            "no request failed".to_string()
        } else if name == "server" {
            format!(
                "the load generator saw {related} connection resets: {explained} of the run's {errors} errors ({:.0}%)",
                error_share * 100.0
            )
        } else {
            format!(
                "they follow the load generator giving up ({related} timeouts after {:.0} ms): {explained} of the run's {errors} errors ({:.0}%)",
                r.load.config.timeout_s * 1000.0,
                error_share * 100.0
            )
        };
        out.push(finding(
            &format!("{name}_resets"),
            severity,
            format!(
                "the {name} sent {} TCP resets; {} of them ({:.0}%) because it {what} (kernel reason {}, socket in {}); the {} received {}; {errors_part}. Fix: {fix}",
                tcp.resets_sent,
                top.count,
                top_share * 100.0,
                top.reason.as_deref().unwrap_or("NOT_SPECIFIED"),
                top.state,
                if name == "server" { "client" } else { "server" },
                other.tcp.resets_received,
            ),
            &[
                ("resets_sent", tcp.resets_sent as f64),
                ("top_cause_resets", top.count as f64),
                ("top_cause_share", top_share),
                ("peer_resets_received", other.tcp.resets_received as f64),
                ("errors", errors as f64),
                ("errors_explained", explained as f64),
                ("error_share", error_share),
            ],
        ));
    }
    out
}

/// Errors in the intervals that contain t_s and the one after it.
fn errors_near(timeline: &[TimelineRow], t_s: f64) -> u64 {
    timeline
        .iter()
        .filter(|row| row.t_s <= t_s + row.duration_s && row.t_s + 2.0 * row.duration_s > t_s)
        .map(|row| row.errors)
        .sum()
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::analysis::kernel_report::{KernelReport, SyscallReport, ThreadReport};

    fn busy_server(syscalls_off: bool) -> RunReport {
        let mut server = KernelReport {
            duration_s: 10.0,
            syscalls_off,
            ..Default::default()
        };
        server.threads.push(ThreadReport {
            tid: 7,
            pid: 7,
            comm: "nginx".into(),
            user_ns: 4_000_000_000,
            sys_ns: 5_800_000_000,
            ..Default::default()
        });
        if !syscalls_off {
            server.syscalls.push(SyscallReport {
                name: "writev".into(),
                nr: 20,
                count: 1000,
                total_ns: 1,
            });
        }
        let load = srvprof_loadgen::LoadReport {
            completed: 1000,
            ..Default::default()
        };
        RunReport {
            tool: "srvprof".into(),
            version: String::new(),
            target: Default::default(),
            load,
            server,
            client: KernelReport::default(),
            host_tcp: Default::default(),
            timeline: Vec::new(),
            per_request: Default::default(),
            correlations: Vec::new(),
            findings: Vec::new(),
            notes: Vec::new(),
            histograms: Vec::new(),
        }
    }

    fn saturated(run: &RunReport) -> String {
        findings(run)
            .into_iter()
            .find(|f| f.kind == "server_cpu_saturated")
            .expect("a 98% busy thread is saturated")
            .summary
    }

    fn idle_closed(run: &mut RunReport, closed: u64) -> Option<Finding> {
        run.load.idle_closed_by_server = closed;
        run.load.config.connections = 10_000;
        run.load.duration_s = 10.0;
        findings(run)
            .into_iter()
            .find(|f| f.kind == "server_closed_idle")
    }

    #[test]
    fn idle_connections_closed_by_the_server_from_the_threshold_on_with_nginx_s_fix() {
        let mut run = busy_server(false);
        assert!(idle_closed(&mut run, IDLE_CLOSED_MIN - 1).is_none());
        let at = idle_closed(&mut run, IDLE_CLOSED_MIN).expect("at the threshold");
        assert_eq!(at.evidence["idle_closed_by_server"], IDLE_CLOSED_MIN as f64);
        let f = idle_closed(&mut run, 4_000).expect("above it");
        assert_eq!(f.evidence["idle_closed_per_s"], 400.0);
        // nginx (the thread's comm): worker_connections for 10,000 connections and 64 more.
        assert!(
            f.summary.contains("worker_connections to at least 10731"),
            "{}",
            f.summary
        );
        run.server.threads[0].comm = "hello-server".into();
        let other = idle_closed(&mut run, 4_000).unwrap();
        assert!(!other.summary.contains("nginx"), "{}", other.summary);
    }

    #[test]
    fn a_saturated_server_names_its_syscalls_or_says_they_were_not_recorded() {
        assert!(saturated(&busy_server(false)).contains("sys goes to writev 1.0/req"));
        let off = saturated(&busy_server(true));
        assert!(
            off.contains("syscalls not recorded (--syscalls off)"),
            "{off}"
        );
        assert!(!off.contains("sys goes to"), "{off}");
    }

    /// A run where the server sent `resets` resets (SO_LINGER 0 closes) and the client saw
    /// `reset_errors` of the run's `errors`.
    fn resets_run(resets: u64, reset_errors: u64, errors: u64) -> RunReport {
        use crate::analysis::kernel_report::ResetReport;
        let mut run = busy_server(false);
        run.server.threads.clear();
        run.server.tcp.resets_sent = resets;
        run.server.tcp.resets.push(ResetReport {
            direction: "sent".into(),
            state: "CLOSE".into(),
            reason: Some("TCP_STATE".into()),
            count: resets,
        });
        run.client.tcp.resets_received = resets;
        run.load.errors = errors;
        run.load.errors_by_kind.insert("reset".into(), reset_errors);
        run.load
            .errors_by_kind
            .insert("read_timeout".into(), errors - reset_errors);
        run
    }

    fn reset_finding(run: &RunReport) -> Option<Finding> {
        findings(run)
            .into_iter()
            .find(|f| f.kind == "server_resets")
    }

    #[test]
    fn resets_make_a_finding_from_resets_min_on() {
        assert!(reset_finding(&resets_run(RESETS_MIN - 1, RESETS_MIN - 1, 20)).is_none());
        for n in [RESETS_MIN, RESETS_MIN + 1] {
            let f = reset_finding(&resets_run(n, n, n)).expect("a finding at RESETS_MIN");
            assert_eq!(f.evidence["resets_sent"], n as f64);
            assert!(
                f.summary
                    .starts_with(&format!("the server sent {n} TCP resets")),
                "{}",
                f.summary
            );
            assert!(f.summary.contains("SO_LINGER 0"), "{}", f.summary);
            assert!(
                f.summary
                    .contains("kernel reason TCP_STATE, socket in CLOSE"),
                "{}",
                f.summary
            );
        }
    }

    #[test]
    fn resets_behind_half_the_errors_are_critical_and_rank_above_the_bursts() {
        // 100 resets; the client saw 49, 50 or 51 of them among 100 errors.
        let severity = |reset_errors| {
            let f = reset_finding(&resets_run(100, reset_errors, 100)).unwrap();
            assert_eq!(f.evidence["error_share"], reset_errors as f64 / 100.0);
            f.severity
        };
        assert_eq!(severity(49), Severity::Warning);
        assert_eq!(severity(50), Severity::Critical);
        assert_eq!(severity(51), Severity::Critical);

        // The ranks of the reset finding and of the error burst in a run with one bursty interval.
        let ranks = |reset_errors| {
            let mut run = resets_run(100, reset_errors, 100);
            run.timeline = vec![TimelineRow {
                t_s: 0.0,
                duration_s: 1.0,
                completed: 200,
                errors: 100,
                ..Default::default()
            }];
            let all = findings(&run);
            let rank = |kind: &str| all.iter().position(|f| f.kind == kind).unwrap();
            (rank("server_resets"), rank("error_burst"))
        };
        let (resets, burst) = ranks(100);
        assert_eq!(resets, 0);
        assert!(resets < burst);
        // At Warning too, it comes before the bursts it causes.
        let (resets, burst) = ranks(40);
        assert!(resets < burst);
    }

    #[test]
    fn each_reason_is_told_in_plain_words() {
        let (what, _) = reset_cause(Some("TCP_ABORT_ON_CLOSE"), "CLOSE");
        assert!(what.contains("had not read what the peer sent"), "{what}");
        let (what, _) = reset_cause(Some("TCP_TIMEWAIT_SOCKET"), "TIME_WAIT");
        assert!(
            what.contains("the peer wrote after this side closed"),
            "{what}"
        );
        let (what, _) = reset_cause(Some("TCP_ABORT_ON_DATA"), "CLOSE");
        assert!(what.contains("data after it had closed"), "{what}");
        let (what, _) = reset_cause(Some("TCP_ABORT_ON_LINGER"), "CLOSE");
        assert!(what.contains("FIN_WAIT2"), "{what}");
        let (what, _) = reset_cause(Some("SOMETHING_NEW"), "ESTABLISHED");
        assert!(what.contains("SOMETHING_NEW"), "{what}");
    }
}
