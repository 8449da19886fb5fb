//! TCP: the tail from SYN retransmits after accept-queue overflows, a server closing idle
//! keep-alive connections, and who reset connections and why.

use crate::finding::{Finding, FindingKind, Severity};
use crate::run_report::RunReport;

/// The SYN cookies the host sent in the window, as a clause ("" when none).
fn cookies(r: &RunReport) -> String {
    match r.host_tcp.syn_cookies_sent {
        0 => String::new(),
        n => format!(
            "; the host sent {n} SYN cookies (SYN queues full: such a connection skips the queue, and loses the TCP options a cookie cannot carry)"
        ),
    }
}

/// A p99 (µs) from which a tail is worth explaining by SYN retransmits.
pub const SYN_TAIL_P99_US: f64 = 900_000.0;
/// Keep-alive connections the server closed while idle, from this many on: it is shedding
/// connections, and each one is a reconnect the run did not ask for.
pub const IDLE_CLOSED_MIN: u64 = 10;
/// Resets one side sent in the run: from this many on, a finding says why (or that the causes were
/// not recorded).
pub const RESETS_MIN: u64 = 10;
/// Resets that go with at least this share of the run's errors make the finding critical.
pub const RESETS_ERROR_SHARE: f64 = 0.5;

/// A p99 of at least SYN_TAIL_P99_US with overflows or SYN retransmits on the server's port: the
/// tail is SYN retransmits (1 s initial RTO, then 3 s, 7 s). Overflows without that tail: a
/// warning that the server accepts too slowly.
pub fn syn_tail_or_overflows(r: &RunReport) -> Option<Finding> {
    let p99_us = r.load.latency_us.p99 as f64;
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
        Some(Finding::new(
            FindingKind::SynRetransmitTail,
            Severity::Critical,
            format!(
                "p99 of {:.2} s = SYN retransmit{}: a dropped SYN is resent after 1 s, then 2 s more, so {waited_s:.0} s is {resends} retransmit{}; {} SYNs were retransmitted to this server, {} connections dropped by its listening socket{}",
                p99_us / 1e6,
                if tcp.listen_overflows > 0 {
                    format!(" after {} accept-queue overflows", tcp.listen_overflows)
                } else {
                    String::new()
                },
                if resends == 1 { "" } else { "s" },
                syn,
                tcp.listen_drops,
                cookies(r),
            ),
            &[
                ("p99_us", p99_us),
                ("listen_overflows", tcp.listen_overflows as f64),
                ("listen_drops", tcp.listen_drops as f64),
                ("syn_retransmits", syn as f64),
                ("wait_s", waited_s),
                ("retransmits_per_wait", resends as f64),
                ("syn_cookies_sent", r.host_tcp.syn_cookies_sent as f64),
            ],
        )
        .explaining(waited_s * 1e3, p99_us / 1e3))
    } else if tcp.listen_overflows > 0 {
        Some(Finding::new(
            FindingKind::ListenOverflows,
            Severity::Warning,
            format!(
                "{} accept-queue overflows ({} listen drops): the server accepts connections slower than they arrive; raise its listen backlog or accept faster{}",
                tcp.listen_overflows,
                tcp.listen_drops,
                cookies(r),
            ),
            &[("listen_overflows", tcp.listen_overflows as f64)],
        ))
    } else {
        None
    }
}

/// The server closed keep-alive connections while they waited for their next request: a server
/// shedding connections (nginx does so whenever fewer than 1/16 of worker_connections are free)
/// or one whose keep-alive timeout or connection limit is below what the run holds.
pub fn server_closed_idle(r: &RunReport) -> Option<Finding> {
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
    Some(Finding::new(
        FindingKind::ServerClosedIdle,
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
pub fn resets(r: &RunReport) -> Vec<Finding> {
    let errors = r.load.errors;
    let errors_of = |kind: &str| r.load.errors_by_kind.get(kind).copied().unwrap_or(0);
    let mut out = Vec::new();
    for (kind, name, report, other, related) in [
        (
            FindingKind::ServerResets,
            "server",
            &r.server,
            &r.client,
            errors_of("reset"),
        ),
        (
            FindingKind::ClientResets,
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
        // The main cause; none when the kernel-side map of causes was full (lost_events says so).
        let top = tcp.resets.iter().find(|x| x.direction == "sent");
        let top_count = top.map_or(0, |t| t.count);
        let top_share = top_count as f64 / tcp.resets_sent as f64;
        let (cause, fix) = match top {
            Some(top) => {
                let (what, fix) = reset_cause(top.reason.as_deref(), &top.state);
                (
                    format!(
                        "{} of them ({:.0}%) because it {what} (kernel reason {}, socket in {})",
                        top.count,
                        top_share * 100.0,
                        top.reason.as_deref().unwrap_or("NOT_SPECIFIED"),
                        top.state,
                    ),
                    fix,
                )
            }
            None => (
                "their causes were not recorded (the probes' table of reset causes was full)"
                    .into(),
                "rerun to see the causes; see lost_events",
            ),
        };
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
        out.push(Finding::new(
            kind,
            severity,
            format!(
                "the {name} sent {} TCP resets; {cause}; the {} received {}; {errors_part}. Fix: {fix}",
                tcp.resets_sent,
                if name == "server" { "client" } else { "server" },
                other.tcp.resets_received,
            ),
            &[
                ("resets_sent", tcp.resets_sent as f64),
                ("top_cause_resets", top_count as f64),
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

#[cfg(test)]
pub(super) mod tests {
    use srvprof_common::tcp;

    use super::*;
    use crate::record::TcpResetCount;
    use crate::rules::test_support::*;

    tables!(
        syn_tail_or_overflows_table,
        syn_waits_table,
        server_closed_idle_table,
        resets_table
    );

    /// A recorded window with a request p99 of `p99_us`, in which the server's network namespace
    /// counted `overflows` accept-queue overflows (and as many listen drops) and the client
    /// retransmitted `syns` SYNs to the server's port.
    fn syn_recording(p99_us: u64, overflows: u64, syns: u64) -> Recording {
        let mut rec = Recording::window().each(|s, k| {
            s.net_mib
                .insert("TcpExt:ListenOverflows".into(), grown(overflows, k));
            s.net_mib
                .insert("TcpExt:ListenDrops".into(), grown(overflows, k));
            s.kernel.tcp[tcp::index(tcp::SIDE_CLIENT, tcp::SYN_RETRANSMITS) as usize] =
                grown(syns, k);
        });
        rec.load.latency_us.p99 = p99_us;
        rec
    }

    fn syn_run(p99_us: u64, overflows: u64, syns: u64) -> RunReport {
        syn_recording(p99_us, overflows, syns).build()
    }

    /// A p99 of `p99_us` explained as `wait_s` of `retransmits` SYN retransmits.
    fn syn_tail(
        p99_us: u64,
        overflows: u64,
        syns: u64,
        wait_s: f64,
        retransmits: f64,
    ) -> Vec<Expected> {
        finds(
            FindingKind::SynRetransmitTail,
            Severity::Critical,
            &[
                ("p99_us", p99_us as f64),
                ("listen_overflows", overflows as f64),
                ("listen_drops", overflows as f64),
                ("syn_retransmits", syns as f64),
                ("wait_s", wait_s),
                ("retransmits_per_wait", retransmits),
            ],
        )
    }

    fn overflowed(overflows: u64) -> Vec<Expected> {
        finds(
            FindingKind::ListenOverflows,
            Severity::Warning,
            &[("listen_overflows", overflows as f64)],
        )
    }

    fn syn_tail_or_overflows_table() -> Table {
        let (below, at, above) = (
            SYN_TAIL_P99_US as u64 - 1,
            SYN_TAIL_P99_US as u64,
            SYN_TAIL_P99_US as u64 + 1,
        );
        // The namespace overflowed 50 times, but the server's own listening sockets dropped `drops`.
        let own_drops = |drops: u64| {
            syn_recording(1_000, 50, 0)
                .each(|s, k| s.listen_socket_drops = Some(grown(drops, k)))
                .build()
        };
        #[rustfmt::skip]
        let cases = [
            ("recorded: p99 just below SYN_TAIL_P99_US, overflows", syn_run(below, 5, 0), overflowed(5)),
            ("recorded: p99 at SYN_TAIL_P99_US, overflows", syn_run(at, 5, 0), syn_tail(at, 5, 0, 1.0, 1.0)),
            ("recorded: p99 just above, overflows", syn_run(above, 5, 0), syn_tail(above, 5, 0, 1.0, 1.0)),
            ("recorded: p99 just below, SYN retransmits only", syn_run(below, 0, 3), nothing()),
            ("recorded: p99 at, SYN retransmits only", syn_run(at, 0, 3), syn_tail(at, 0, 3, 1.0, 1.0)),
            ("recorded: p99 at, neither", syn_run(at, 0, 0), nothing()),
            ("recorded: no overflow", syn_run(1_000, 0, 0), nothing()),
            ("recorded: one overflow", syn_run(1_000, 1, 0), overflowed(1)),
            ("recorded: overflows, none on the server's sockets", own_drops(0), nothing()),
            ("recorded: overflows, 5 on the server's sockets", own_drops(5), finds(FindingKind::ListenOverflows, Severity::Warning, &[("listen_overflows", 5.0)])),
        ];
        Table::new(syn_tail_or_overflows, cases)
    }

    /// The wait a p99 is read as: the nearest of 1, 3, 7 and 15 s (the shorter one halfway).
    fn syn_waits_table() -> Table {
        let cases = [
            (1.0, 1.0, 1.0),
            (2.0, 1.0, 1.0),
            (2.000_001, 3.0, 2.0),
            (3.0, 3.0, 2.0),
            (5.0, 3.0, 2.0),
            (5.000_001, 7.0, 3.0),
            (7.0, 7.0, 3.0),
            (11.0, 7.0, 3.0),
            (11.000_001, 15.0, 4.0),
            (15.0, 15.0, 4.0),
            (60.0, 15.0, 4.0),
        ]
        .map(|(p99_s, wait_s, retransmits): (f64, f64, f64)| {
            let p99_us = (p99_s * 1e6).round() as u64;
            (
                format!("recorded: a p99 of {p99_s} s is {retransmits} retransmits"),
                syn_run(p99_us, 5, 2),
                syn_tail(p99_us, 5, 2, wait_s, retransmits),
            )
        });
        Table::new(syn_tail_or_overflows, cases)
    }

    /// A run in which the server closed `closed` idle keep-alive connections, after `warmup_s`.
    fn closed_idle(closed: u64, warmup_s: f64) -> RunReport {
        let mut run = quiet_run();
        run.load.idle_closed_by_server = closed;
        run.load.config.warmup_s = warmup_s;
        run
    }

    fn server_closed_idle_table() -> Table {
        let secs = quiet_run().load.duration_s;
        let closed = |n: u64, secs: f64| {
            finds(
                FindingKind::ServerClosedIdle,
                Severity::Warning,
                &[
                    ("idle_closed_by_server", n as f64),
                    ("idle_closed_per_s", n as f64 / secs),
                    ("connections", 100.0),
                ],
            )
        };
        let (below, at, above) = (IDLE_CLOSED_MIN - 1, IDLE_CLOSED_MIN, IDLE_CLOSED_MIN + 1);
        #[rustfmt::skip]
        let cases = [
            ("just below IDLE_CLOSED_MIN", closed_idle(below, 0.0), nothing()),
            ("at IDLE_CLOSED_MIN", closed_idle(at, 0.0), closed(at, secs)),
            ("just above", closed_idle(above, 0.0), closed(above, secs)),
            ("per second over the warmup too", closed_idle(300, 5.0), closed(300, secs + 5.0)),
        ];
        Table::new(server_closed_idle, cases)
    }

    /// `side`'s resets: `sent` of them, all for one cause the other side received, with
    /// `explained` of the run's `errors` going with them.
    fn reset(
        kind: FindingKind,
        severity: Severity,
        sent: u64,
        errors: u64,
        explained: u64,
    ) -> Vec<Expected> {
        let share = if errors == 0 {
            0.0
        } else {
            explained as f64 / errors as f64
        };
        finds(
            kind,
            severity,
            &[
                ("resets_sent", sent as f64),
                ("top_cause_resets", sent as f64),
                ("top_cause_share", 1.0),
                ("peer_resets_received", sent as f64),
                ("errors", errors as f64),
                ("errors_explained", explained as f64),
                ("error_share", share),
            ],
        )
    }

    fn resets_table() -> Table {
        use FindingKind::{ClientResets, ServerResets};
        use Severity::{Critical, Warning};
        let (server, client) = (tcp::SIDE_SERVER, tcp::SIDE_CLIENT);
        let sent = |side: u32, n: u64| reset_recording(&[(side, n)], &[]).build();
        // 100 resets from `side`, and 100 errors, `share` of them of the kind that goes with them.
        let errors = |side: u32, kind: &str, share: f64| {
            let related = (share * 100.0).round() as u64;
            reset_recording(
                &[(side, 100)],
                &[(kind, related), ("non_2xx", 100 - related)],
            )
            .build()
        };
        let (below, at, above) = (RESETS_MIN - 1, RESETS_MIN, RESETS_MIN + 1);
        let share = RESETS_ERROR_SHARE;
        let (share_below, share_above) = (share - 0.01, share + 0.01);
        let related = |share: f64| (share * 100.0).round() as u64;
        let timeouts = reset_recording(
            &[(client, 100)],
            &[("read_timeout", 30), ("connect_timeout", 20), ("reset", 50)],
        )
        .build();
        let capped = reset_recording(&[(server, at)], &[("reset", 100)]).build();
        let both = reset_recording(&[(server, at), (client, at)], &[]).build();
        let unexplained = reset_recording(&[(server, at)], &[])
            .each(|s, _| s.kernel.tcp_resets.clear())
            .build();
        #[rustfmt::skip]
        let cases = [
            ("recorded: server resets just below RESETS_MIN", sent(server, below), nothing()),
            ("recorded: server resets at RESETS_MIN", sent(server, at), reset(ServerResets, Warning, at, 0, 0)),
            ("recorded: server resets just above", sent(server, above), reset(ServerResets, Warning, above, 0, 0)),
            ("recorded: client resets just below RESETS_MIN", sent(client, below), nothing()),
            ("recorded: client resets at RESETS_MIN", sent(client, at), reset(ClientResets, Warning, at, 0, 0)),
            ("recorded: client resets just above", sent(client, above), reset(ClientResets, Warning, above, 0, 0)),
            ("recorded: server, reset errors just below RESETS_ERROR_SHARE", errors(server, "reset", share_below), reset(ServerResets, Warning, 100, 100, related(share_below))),
            ("recorded: server, reset errors at RESETS_ERROR_SHARE", errors(server, "reset", share), reset(ServerResets, Critical, 100, 100, related(share))),
            ("recorded: server, reset errors just above", errors(server, "reset", share_above), reset(ServerResets, Critical, 100, 100, related(share_above))),
            ("recorded: client, timeouts just below RESETS_ERROR_SHARE", errors(client, "read_timeout", share_below), reset(ClientResets, Warning, 100, 100, related(share_below))),
            ("recorded: client, timeouts at RESETS_ERROR_SHARE", errors(client, "read_timeout", share), reset(ClientResets, Critical, 100, 100, related(share))),
            ("recorded: client, timeouts just above", errors(client, "read_timeout", share_above), reset(ClientResets, Critical, 100, 100, related(share_above))),
            ("recorded: client, read and connect timeouts add up", timeouts, reset(ClientResets, Critical, 100, 100, 50)),
            ("recorded: no more errors explained than resets sent", capped, reset(ServerResets, Warning, at, 100, at)),
            ("recorded: both sides, the server first", both, [reset(ServerResets, Warning, at, 0, 0), reset(ClientResets, Warning, at, 0, 0)].concat()),
            ("recorded: resets counted, none in the breakdown (map full)", unexplained, finds(ServerResets, Warning, &[("resets_sent", at as f64), ("top_cause_resets", 0.0), ("top_cause_share", 0.0)])),
        ];
        Table::new(resets, cases)
    }

    fn idle_closed(run: &mut RunReport, closed: u64) -> Option<Finding> {
        run.load.idle_closed_by_server = closed;
        run.load.config.connections = 10_000;
        run.load.duration_s = 10.0;
        server_closed_idle(run)
    }

    #[test]
    fn idle_connections_closed_by_the_server_from_the_threshold_on_with_nginx_s_fix() {
        let mut run = busy_server(0.98, false).build();
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

    /// A recorded window in which each (side, n) of `sent` sent n resets, closing with SO_LINGER 0
    /// (kernel reason TCP_STATE, socket in CLOSE), all received by the other side; the load
    /// generator saw the (kind, count) `errors`.
    pub(crate) fn reset_recording(sent: &[(u32, u64)], errors: &[(&str, u64)]) -> Recording {
        let mut rec = Recording::window()
            .each(|s, k| {
                for &(side, n) in sent {
                    let other = tcp::SIDE_SERVER + tcp::SIDE_CLIENT - side;
                    s.kernel.tcp[tcp::index(side, tcp::RESETS_SENT) as usize] += grown(n, k);
                    s.kernel.tcp[tcp::index(other, tcp::RESETS_RECEIVED) as usize] += grown(n, k);
                    s.kernel.tcp_resets.extend([
                        TcpResetCount {
                            side,
                            sent: true,
                            state: "CLOSE".into(),
                            reason: Some("TCP_STATE".into()),
                            count: grown(n, k),
                        },
                        TcpResetCount {
                            side: other,
                            sent: false,
                            state: "ESTABLISHED".into(),
                            reason: None,
                            count: grown(n, k),
                        },
                    ]);
                }
            })
            .rows(|row, _| row.errors = errors.iter().map(|(_, n)| n).sum());
        rec.load.errors_by_kind = errors.iter().map(|&(kind, n)| (kind.into(), n)).collect();
        rec
    }

    /// A run where the server sent `resets` resets (SO_LINGER 0 closes) and the client saw
    /// `reset_errors` of the run's `errors`.
    pub(crate) fn resets_run(resets: u64, reset_errors: u64, errors: u64) -> RunReport {
        reset_recording(
            &[(tcp::SIDE_SERVER, resets)],
            &[
                ("reset", reset_errors),
                ("read_timeout", errors - reset_errors),
            ],
        )
        .build()
    }

    fn reset_finding(run: &RunReport) -> Option<Finding> {
        resets(run)
            .into_iter()
            .find(|f| f.kind == FindingKind::ServerResets)
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
    fn resets_behind_half_the_errors_are_critical() {
        // 100 resets; the client saw 49, 50 or 51 of them among 100 errors.
        let severity = |reset_errors| {
            let f = reset_finding(&resets_run(100, reset_errors, 100)).unwrap();
            assert_eq!(f.evidence["error_share"], reset_errors as f64 / 100.0);
            f.severity
        };
        assert_eq!(severity(49), Severity::Warning);
        assert_eq!(severity(50), Severity::Critical);
        assert_eq!(severity(51), Severity::Critical);
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
