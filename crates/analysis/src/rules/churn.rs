//! A new connection per request: the sockets each one leaves in TIME_WAIT for 60 s, the port
//! search they cost connect(), and why two such runs back to back differ.

use crate::finding::{Finding, FindingKind, Severity};
use crate::run_report::RunReport;

/// From this many connections opened in the window, a run without keep-alive is about churn.
pub const MIN_CHURN_CONNECTIONS: u64 = 1_000;
/// TIME_WAIT sockets holding at least this share of the ephemeral ports: connect() is close to
/// finding none free (critical).
pub const PORTS_HELD_CRITICAL: f64 = 0.5;
/// A run that starts with at least this many sockets in TIME_WAIT inherited a previous run's.
pub const INHERITED_TIME_WAIT: u64 = 1_000;

/// A run with a new connection per request: the connections it opened, the TIME_WAIT sockets
/// at its start and end (and the ephemeral ports they hold), the client's sys time per request
/// and connect's p99, and what that means for comparing runs. Only with TIME_WAIT read at both
/// ends (not in recordings made before it was).
pub fn connection_churn(r: &RunReport) -> Option<Finding> {
    let load = &r.load;
    if load.config.keepalive || load.connections_opened < MIN_CHURN_CONNECTIONS {
        return None;
    }
    let secs = load.duration_s.max(1e-9);
    let (start, end) = (r.host_tcp.time_wait_at_start?, r.host_tcp.time_wait_at_end?);
    let (tw_start, tw_end) = (start.sockets, end.sockets);
    let ports = end.ephemeral_ports;
    let held = end.holding_ports;
    let held_share = held as f64 / ports.max(1) as f64;
    // Whether connect() may take a TIME_WAIT socket's port for this server (after finding it).
    let authority = r.target.url.split("://").nth(1).unwrap_or("");
    // After any userinfo (`<redacted>@`): the host itself.
    let authority = authority.split(['/', '?']).next().unwrap_or("");
    let host = authority.rsplit('@').next().unwrap_or("");
    let loopback = ["127.", "localhost", "[::1]"]
        .iter()
        .any(|h| host.starts_with(h));
    let reused = end.tw_reuse == 1 || (end.tw_reuse == 2 && loopback);
    let ports_phrase = if reused {
        format!(
            "{held} of them on ephemeral ports, which connect() must find and may then reuse (net.ipv4.tcp_tw_reuse={})",
            end.tw_reuse
        )
    } else {
        format!("{held} of them holding one of the {ports} ephemeral ports connect() may pick")
    };
    let client_sys_us = r.per_request.client.sys_us;
    let connect_p99_ms = load
        .connect_latency_us
        .as_ref()
        .map(|l| l.p99 as f64 / 1e3)
        .unwrap_or(0.0);
    let inherited = if tw_start >= INHERITED_TIME_WAIT {
        format!(
            "; it began with {tw_start} already there, left by earlier runs: back-to-back runs do not start alike"
        )
    } else {
        String::new()
    };
    let cookies = match r.host_tcp.syn_cookies_sent {
        0 => String::new(),
        n => format!("; the host sent {n} SYN cookies: listen queues overflowed"),
    };
    let time_wait =
        format!("; {tw_end} sockets in TIME_WAIT at the end, {ports_phrase}{inherited}{cookies}");
    let severity = if held_share >= PORTS_HELD_CRITICAL && !reused {
        Severity::Critical
    } else {
        Severity::Warning
    };
    Some(Finding::new(
        FindingKind::ConnectionChurn,
        severity,
        format!(
            "a new connection per request: {} connections in {secs:.1} s ({:.0}/s){time_wait}; the client spent {client_sys_us:.1} us of sys time per request, connect p99 {connect_p99_ms:.2} ms. Fix: measure with keep-alive, as most real clients connect; else wait 60 s between runs for TIME_WAIT to clear, and on the client widen net.ipv4.ip_local_port_range or set net.ipv4.tcp_tw_reuse=1",
            load.connections_opened,
            load.connections_opened as f64 / secs,
        ),
        &[
            ("connections_opened", load.connections_opened as f64),
            ("time_wait_at_start", tw_start as f64),
            ("time_wait_at_end", tw_end as f64),
            ("ports_held", held as f64),
            ("ephemeral_ports", ports as f64),
            ("client_sys_us_per_request", client_sys_us),
            ("connect_p99_ms", connect_p99_ms),
            ("syn_cookies_sent", r.host_tcp.syn_cookies_sent as f64),
        ],
    )
    .explaining(connect_p99_ms, load.latency_us.p99 as f64 / 1e3))
}

#[cfg(test)]
pub(super) mod tests {
    use super::*;
    use crate::record::TimeWait;
    use crate::rules::test_support::*;

    tables!(connection_churn_table);

    /// A window without keep-alive that opened `opened` connections, TIME_WAIT growing from
    /// `start` to `end` sockets, `held` of them on the 28,232 ephemeral ports.
    fn churn(keepalive: bool, opened: u64, start: u64, end: u64, held: u64) -> RunReport {
        let mut rec = Recording::window().each(|s, k| {
            s.time_wait = Some(TimeWait {
                sockets: if k == 0 { start } else { end },
                holding_ports: if k == 0 { 0 } else { held },
                ephemeral_ports: 28_232,
                tw_reuse: 0,
            })
        });
        rec.load.config.keepalive = keepalive;
        rec.load.connections_opened = opened;
        rec.build()
    }

    /// The same run against 127.0.0.1 with net.ipv4.tcp_tw_reuse=2 (loopback only).
    fn reusing(mut r: RunReport) -> RunReport {
        r.target.url = "http://127.0.0.1:8080/".into();
        let ends = [
            &mut r.host_tcp.time_wait_at_start,
            &mut r.host_tcp.time_wait_at_end,
        ];
        for t in ends.into_iter().flatten() {
            t.tw_reuse = 2;
        }
        r
    }

    fn churned(severity: Severity, start: u64, end: u64, held: u64) -> Vec<Expected> {
        finds(
            FindingKind::ConnectionChurn,
            severity,
            &[
                ("time_wait_at_start", start as f64),
                ("time_wait_at_end", end as f64),
                ("ports_held", held as f64),
                ("ephemeral_ports", 28_232.0),
            ],
        )
    }

    fn connection_churn_table() -> Table {
        let n = MIN_CHURN_CONNECTIONS;
        let half = 14_116;
        #[rustfmt::skip]
        let cases = [
            ("keep-alive", churn(true, 50_000, 0, 0, 0), nothing()),
            ("TIME_WAIT not read", {
                let mut r = churn(false, 50_000, 0, 0, 0);
                r.host_tcp.time_wait_at_end = None;
                r
            }, nothing()),
            ("just under MIN_CHURN_CONNECTIONS", churn(false, n - 1, 0, n - 1, 0), nothing()),
            ("at MIN_CHURN_CONNECTIONS", churn(false, n, 0, n, 0), churned(Severity::Warning, 0, n, 0)),
            ("ports just under PORTS_HELD_CRITICAL", churn(false, 40_000, 0, 40_000, half - 1), churned(Severity::Warning, 0, 40_000, half - 1)),
            ("ports at PORTS_HELD_CRITICAL", churn(false, 40_000, 0, 40_000, half), churned(Severity::Critical, 0, 40_000, half)),
            ("ports at PORTS_HELD_CRITICAL, reused on loopback", reusing(churn(false, 40_000, 0, 40_000, half)), churned(Severity::Warning, 0, 40_000, half)),
        ];
        Table::new(connection_churn, cases)
    }

    #[test]
    fn an_inherited_time_wait_is_said_to_make_runs_differ() {
        let f = connection_churn(&churn(false, 20_000, 15_000, 35_000, 0)).unwrap();
        assert!(
            f.summary.contains("began with 15000 already there"),
            "{}",
            f.summary
        );
        let f = connection_churn(&churn(false, 20_000, 999, 20_999, 0)).unwrap();
        assert!(!f.summary.contains("began with"), "{}", f.summary);
        assert!(
            f.summary.contains("holding one of the 28232"),
            "{}",
            f.summary
        );
        let f = connection_churn(&reusing(churn(false, 20_000, 999, 20_999, 0))).unwrap();
        assert!(f.summary.contains("tcp_tw_reuse=2"), "{}", f.summary);
        // A URL whose userinfo run.json redacts is still on loopback.
        let mut redacted = reusing(churn(false, 20_000, 999, 20_999, 0));
        redacted.target.url = "http://<redacted>@127.0.0.1:8080/".into();
        let f = connection_churn(&redacted).unwrap();
        assert!(f.summary.contains("tcp_tw_reuse=2"), "{}", f.summary);
    }
}
