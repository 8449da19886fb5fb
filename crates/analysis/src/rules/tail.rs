//! The tail's largest part, from the account of p99's time (crate::tail_account), when no rule
//! of its own was written for it: a wait, named by what the server's threads waited on and where
//! in their code, or the server's own code on a CPU, named by its hottest function.

use crate::finding::{Finding, FindingKind, Severity};
use crate::rules::{RANKED_TAIL_SHARE, balance, cpu, dependency, io, locks, memory, pauses, tls};
use crate::run_report::RunReport;
use crate::tail_account::{Place, Resource, TailAccount, TailPart};

/// p99 at least this far above the median (ms): below, a tail is too short to have a cause worth
/// naming.
pub const MIN_TAIL_MS: f64 = 1.0;

/// p99 SKEWED_TAIL times the median and MIN_TAIL_MS above it: a tail with a cause to name.
fn long_tail(a: &TailAccount) -> bool {
    a.skewed() && a.p99_ms - a.p50_ms >= MIN_TAIL_MS
}

/// Waits a rule of their own names, with more evidence (the holder, the file, the faults), when
/// it fires: the account leaves them to it.
fn named_by_a_rule(resource: Resource, r: &RunReport) -> bool {
    match resource {
        Resource::Lock => locks::lock_contention(r).is_some(),
        Resource::Disk => io::blocking_io(r).is_some(),
        Resource::PageFault => memory::memory_pressure(r).is_some(),
        Resource::Service => dependency::slow_dependency(r).is_some(),
        Resource::Pause => pauses::stop_the_world(r).is_some(),
        _ => false,
    }
}

/// A wait that holds at least this share of p99 is named even when p99 is not SKEWED_TAIL times
/// the median: every request meets it, so the median is slow too.
pub const MEDIAN_WAIT_SHARE: f64 = 0.5;

/// The account's largest blocked part: when p99 is SKEWED_TAIL times the median (and MIN_TAIL_MS
/// above it) and the part explains RANKED_TAIL_SHARE of p99, or when the part is MIN_TAIL_MS or
/// more of p99 and MEDIAN_WAIT_SHARE of it, or RANKED_TAIL_SHARE of it when the server is known
/// to wait on something with no dependency to name (slow_dependency's generic case, which then
/// gives way to this). What waited, on what, where in the code, and the fix.
pub fn tail_wait(r: &RunReport) -> Option<Finding> {
    let a = r.tail_account.as_ref()?;
    let waits_unnamed =
        || dependency::slow_dependency(r).is_some_and(|f| f.evidence.get("remotes") == Some(&0.0));
    let share = match long_tail(a) {
        true => RANKED_TAIL_SHARE,
        false if waits_unnamed() => RANKED_TAIL_SHARE,
        false => MEDIAN_WAIT_SHARE,
    };
    let named = |p: &&TailPart| p.share >= share && (long_tail(a) || p.tail_ms >= MIN_TAIL_MS);
    // A thread's wait, connections' in an accept queue while the thread that takes them waits,
    // or answers held in the server's sockets.
    let in_queue = |p: &TailPart| {
        matches!(
            p.resource,
            Some(Resource::AcceptQueue | Resource::HeldSend | Resource::Transfer)
        )
    };
    // An accept queue whose connections all waited an ordinary start (no acceptor held them) is
    // no cause, though a busy host's start takes a share of a short p99.
    let held = |p: &&TailPart| p.resource != Some(Resource::AcceptQueue) || p.held_by.is_some();
    let part = (a.parts.iter())
        .filter(|p| p.place == Place::Blocked || in_queue(p))
        .filter(held)
        .filter(named)
        .filter(|p| !matches!(p.resource, None | Some(Resource::Unknown)))
        .find(|p| !p.resource.is_some_and(|res| named_by_a_rule(res, r)))?;
    let resource = part.resource?;
    Some(
        Finding::new(
            FindingKind::TailWait,
            Severity::Warning,
            summary(a, part, resource),
            &[
                ("p50_ms", a.p50_ms),
                ("p99_ms", a.p99_ms),
                ("per_request_ms", part.per_request_ms),
                ("unaccounted_share", a.unaccounted_share),
                ("requests_per_thread", a.requests_per_thread),
                ("waits", part.waits.unwrap_or(0.0)),
                ("mean_wait_ms", part.mean_wait_ms.unwrap_or(0.0)),
            ],
        )
        .explaining(part.tail_ms, a.p99_ms),
    )
}

/// The account's largest part is the server's own code on a CPU, when p99 is SKEWED_TAIL times
/// the median and it explains RANKED_TAIL_SHARE of p99: the request threads spent more CPU on a
/// request on average than the median request took, so some requests run far longer than
/// others. Left to server_cpu_saturated, worker_imbalance and tls_cost when they fire.
pub fn tail_cpu(r: &RunReport) -> Option<Finding> {
    let a = r.tail_account.as_ref()?;
    if !long_tail(a) {
        return None;
    }
    let top = a.parts.first()?;
    if top.place != Place::OnCpu || top.share < RANKED_TAIL_SHARE {
        return None;
    }
    let named = cpu::server_cpu_saturated(r).is_some()
        || balance::worker_imbalance(r).is_some()
        || tls::tls_cost(r).is_some();
    if named {
        return None;
    }
    let in_function = match &top.function {
        Some(f) => format!(" (hottest: {f})"),
        None => String::new(),
    };
    Some(
        Finding::new(
            FindingKind::TailCpu,
            Severity::Warning,
            format!(
                "the server's own code on a CPU{in_function}: that is {:.0}% of p99 ({:.1} ms, {:.0}x the median of {:.2} ms); its request threads spent {:.2} ms of CPU a request on average, more than the median request took, so some requests run far longer than others; {:.0}% of p99 is not accounted for. Fix: find what the slow requests do differently there (report.html's flamegraph, srvprof report --from --to on the slowest intervals)",
                top.share * 100.0,
                a.p99_ms,
                a.p99_ms / a.p50_ms,
                a.p50_ms,
                top.per_request_ms,
                a.unaccounted_share * 100.0,
            ),
            &[
                ("p50_ms", a.p50_ms),
                ("p99_ms", a.p99_ms),
                ("cpu_per_request_ms", top.per_request_ms),
                ("unaccounted_share", a.unaccounted_share),
            ],
        )
        .explaining(top.tail_ms, a.p99_ms),
    )
}

/// The account's largest part is data segments lost and resent, when p99 is SKEWED_TAIL times the
/// median (and MIN_TAIL_MS above it) and they explain RANKED_TAIL_SHARE of p99: each lost segment
/// held its request for the connection's retransmission timeout.
pub fn retransmit_tail(r: &RunReport) -> Option<Finding> {
    let a = r.tail_account.as_ref()?;
    if !long_tail(a) {
        return None;
    }
    let part = (a.parts.iter())
        .filter(|p| p.resource == Some(Resource::Retransmit))
        .find(|p| p.share >= RANKED_TAIL_SHARE)?;
    let resent = part.waits.unwrap_or(0.0);
    let rto_ms = part.mean_wait_ms.unwrap_or(0.0);
    let often = match part.how_often(a.requests) {
        Some(o) => format!(": {o}"),
        None => String::new(),
    };
    Some(
        Finding::new(
            FindingKind::RetransmitTail,
            Severity::Warning,
            format!(
                "p99 of {:.1} ms = lost segments resent: {}, each after the connections' retransmission timeout of {rto_ms:.0} ms{often}; that is {:.0}% of p99 ({:.0}x the median of {:.2} ms); {:.0}% of p99 is not accounted for. Fix: {}",
                a.p99_ms,
                part.kernel.as_deref().unwrap_or("segments retransmitted"),
                part.share * 100.0,
                a.p99_ms / a.p50_ms,
                a.p50_ms,
                a.unaccounted_share * 100.0,
                Resource::Retransmit.fix(),
            ),
            &[
                ("p50_ms", a.p50_ms),
                ("p99_ms", a.p99_ms),
                ("retransmits", resent),
                ("rto_ms", rto_ms),
                ("per_request_ms", part.per_request_ms),
                ("unaccounted_share", a.unaccounted_share),
            ],
        )
        .explaining(part.tail_ms, a.p99_ms),
    )
}

fn summary(a: &TailAccount, part: &TailPart, resource: Resource) -> String {
    let often = match part.how_often(a.requests) {
        Some(o) => format!(" ({o})"),
        None => String::new(),
    };
    let threads = match part.threads.as_slice() {
        // No thread slept in it: an event loop's asks to a service.
        [] if resource == Resource::Service => "its requests".to_string(),
        [] => "the server's threads".to_string(),
        names => format!("the server's threads ({})", names.join(", ")),
    };
    let place = match (&part.function, &part.kernel) {
        (Some(f), Some(k)) => format!(" in {f} ({k})"),
        (Some(f), None) => format!(" in {f}"),
        (None, Some(k)) => format!(" ({k})"),
        (None, None) => String::new(),
    };
    let median = match a.skewed() {
        true => format!(
            "{:.0}x the median of {:.2} ms",
            a.p99_ms / a.p50_ms,
            a.p50_ms
        ),
        false => format!("the median {:.2} ms", a.p50_ms),
    };
    if resource == Resource::AcceptQueue {
        let port = part
            .kernel
            .as_deref()
            .map_or(String::new(), |k| format!(" of {k}"));
        let held = part
            .held_by
            .as_deref()
            .map_or(String::new(), |h| format!(" ({h})"));
        let mean = part.mean_wait_ms.unwrap_or(0.0);
        return format!(
            "connections waited in the accept queue{port} while the thread that takes them was busy elsewhere{held}: that wait is {:.0}% of p99 ({:.1} ms, {median}); {:.0} connections waited {mean:.2} ms on average, {:.2} ms a request; {:.0}% of p99 is not accounted for. Fix: {}",
            part.share * 100.0,
            a.p99_ms,
            part.waits.unwrap_or(0.0),
            part.per_request_ms,
            a.unaccounted_share * 100.0,
            resource.fix()
        );
    }
    if matches!(resource, Resource::HeldSend | Resource::Transfer) {
        let why = part
            .kernel
            .as_deref()
            .map_or(String::new(), |k| format!(": {k}"));
        let what = match resource {
            Resource::Transfer => {
                "the server's answers took long to reach the client after it wrote them"
            }
            _ => "the server's answers waited in its sockets, written but not sent",
        };
        return format!(
            "{what}{why}: that wait is {:.0}% of p99 ({:.1} ms, {median}); {:.0} answers waited {:.2} ms on average{often}, {:.2} ms a request; {:.0}% of p99 is not accounted for. Fix: {}",
            part.share * 100.0,
            a.p99_ms,
            part.waits.unwrap_or(0.0),
            part.mean_wait_ms.unwrap_or(0.0),
            part.per_request_ms,
            a.unaccounted_share * 100.0,
            resource.fix()
        );
    }
    let what = match (resource, &part.held_by) {
        (Resource::Service, Some(at)) => format!("{}, at {at}", resource.label()),
        (Resource::Pipe | Resource::UnixSocket, Some(end)) => {
            format!("{} (its other end {end})", resource.label())
        }
        (Resource::FileLock, Some(holder)) => format!("{} (held by {holder})", resource.label()),
        (Resource::Child, Some(child)) => format!("{} ({child})", resource.label()),
        (Resource::PoolQueue, Some(pool)) => format!("{}: {pool}", resource.label()),
        _ => resource.label().to_string(),
    };
    format!(
        "the server waited on {what}{place}: that wait is {:.0}% of p99 ({:.1} ms, {median}); {threads} waited there {:.2} ms a request on average{often}; {:.0}% of p99 is not accounted for. Fix: {}",
        part.share * 100.0,
        a.p99_ms,
        part.per_request_ms,
        a.unaccounted_share * 100.0,
        resource.fix()
    )
}

#[cfg(test)]
pub(super) mod tests {
    use super::*;
    use crate::rules::test_support::*;

    tables!(tail_wait_table, tail_cpu_table, retransmit_tail_table);

    fn blocked(resource: Resource, share: f64, p99_ms: f64) -> TailPart {
        TailPart {
            place: Place::Blocked,
            resource: Some(resource),
            kernel: Some("pipe_read".into()),
            function: Some("wait_for_ticket".into()),
            threads: vec!["conn".into()],
            per_request_ms: share * p99_ms / 50.0,
            tail_ms: share * p99_ms,
            share,
            ..Default::default()
        }
    }

    /// A quiet run (p50 0.5 ms) whose p99 is `p99_ms`, with its account's one part.
    fn run(p99_ms: f64, part: TailPart) -> RunReport {
        run_at(0.5, p99_ms, part)
    }

    /// The same with a median of `p50_ms`.
    fn run_at(p50_ms: f64, p99_ms: f64, part: TailPart) -> RunReport {
        let mut r = quiet_run();
        r.load.latency_us.p50 = (p50_ms * 1e3) as u64;
        r.load.latency_us.p99 = (p99_ms * 1e3) as u64;
        let unaccounted = p99_ms - part.tail_ms;
        r.tail_account = Some(TailAccount {
            requests: r.load.completed,
            p50_ms: r.load.latency_us.p50 as f64 / 1e3,
            p99_ms,
            request_threads: vec!["conn".into()],
            requests_per_thread: 1.0,
            parts: vec![part],
            unaccounted_ms: unaccounted,
            unaccounted_share: unaccounted / p99_ms,
            ..Default::default()
        });
        r
    }

    fn waits(share: f64, p99_ms: f64) -> Vec<Expected> {
        finds(
            FindingKind::TailWait,
            Severity::Warning,
            &[("p99_ms", p99_ms), ("tail_ms", share * p99_ms)],
        )
    }

    fn tail_wait_table() -> Table {
        let at = RANKED_TAIL_SHARE;
        #[rustfmt::skip]
        let cases = [
            ("a pipe, 90 % of a 30 ms p99", run(30.0, blocked(Resource::Pipe, 0.9, 30.0)), waits(0.9, 30.0)),
            ("a sleep at RANKED_TAIL_SHARE", run(30.0, blocked(Resource::Sleep, at, 30.0)), waits(at, 30.0)),
            ("under RANKED_TAIL_SHARE", run(30.0, blocked(Resource::Sleep, at - 0.01, 30.0)), nothing()),
            // p50 0.5 ms: 1.4 ms is under SKEWED_TAIL times it, and the wait under MIN_TAIL_MS.
            ("p99 under SKEWED_TAIL times the median", run(1.4, blocked(Resource::Pipe, 0.6, 1.4)), nothing()),
            // Every request waits: the median too.
            ("not skewed, at MEDIAN_WAIT_SHARE", run(1.4, blocked(Resource::Sleep, MEDIAN_WAIT_SHARE, 1.4)), nothing()),
            ("not skewed, the wait at MIN_TAIL_MS", run(1.4, blocked(Resource::Sleep, MIN_TAIL_MS / 1.4, 1.4)), waits(MIN_TAIL_MS / 1.4, 1.4)),
            // Every request sleeps 43 ms: p50 44, p99 46.
            ("not skewed, every request waits", run_at(44.0, 46.0, blocked(Resource::Sleep, 43.0 / 46.0, 46.0)), waits(43.0 / 46.0, 46.0)),
            // The server's CPU a fifth of the median: busy, not only waiting (no slow_dependency).
            ("not skewed, under MEDIAN_WAIT_SHARE", busy(run_at(44.0, 46.0, blocked(Resource::Sleep, MEDIAN_WAIT_SHARE - 0.01, 46.0))), nothing()),
            // The server idle while every request waits, with no dependency to name: the wait
            // is named from RANKED_TAIL_SHARE, where slow_dependency would say only "a timer, a
            // lock or a pipe".
            ("not skewed, the server waiting, under MEDIAN_WAIT_SHARE", run_at(44.0, 46.0, blocked(Resource::Sleep, MEDIAN_WAIT_SHARE - 0.01, 46.0)), waits(MEDIAN_WAIT_SHARE - 0.01, 46.0)),
            ("not skewed, the server waiting, at RANKED_TAIL_SHARE", run_at(44.0, 46.0, blocked(Resource::Sleep, at, 46.0)), waits(at, 46.0)),
            ("not skewed, the server waiting, under RANKED_TAIL_SHARE", run_at(44.0, 46.0, blocked(Resource::Sleep, at - 0.01, 46.0)), nothing()),
            ("an unknown wait", run(30.0, blocked(Resource::Unknown, 0.9, 30.0)), nothing()),
            ("on a CPU, not blocked", run(30.0, TailPart { place: Place::OnCpu, ..blocked(Resource::Pipe, 0.9, 30.0) }), nothing()),
            // Every answer held 43 ms in its socket for the client's delayed ACK.
            ("not skewed, answers held unsent", run_at(44.0, 46.0, held(43.0 / 46.0, 46.0)), waits(43.0 / 46.0, 46.0)),
            ("answers held, under RANKED_TAIL_SHARE", run(30.0, held(at - 0.01, 30.0)), nothing()),
            ("lost segments, not held ones", run(30.0, TailPart { resource: Some(Resource::Retransmit), ..held(0.9, 30.0) }), nothing()),
        ];
        Table::new(tail_wait, cases)
    }

    /// The same run with the server's CPU per request a fifth of its median.
    fn busy(mut r: RunReport) -> RunReport {
        r.per_request.server.cpu_us = r.load.latency_us.p50 as f64 / 5.0;
        r
    }

    /// Answers held in the server's sockets: the network's, no thread waiting.
    fn held(share: f64, p99_ms: f64) -> TailPart {
        TailPart {
            place: Place::Network,
            resource: Some(Resource::HeldSend),
            kernel: Some("less than a segment, held by Nagle's algorithm".into()),
            function: None,
            threads: Vec::new(),
            waits: Some(100.0),
            mean_wait_ms: Some(share * p99_ms),
            ..blocked(Resource::HeldSend, share, p99_ms)
        }
    }

    fn on_cpu(share: f64, p99_ms: f64) -> TailPart {
        TailPart {
            place: Place::OnCpu,
            function: Some("slow_path".into()),
            per_request_ms: 0.6,
            tail_ms: share * p99_ms,
            share,
            ..Default::default()
        }
    }

    fn tail_cpu_table() -> Table {
        let at = RANKED_TAIL_SHARE;
        let cpu = |share: f64, p99_ms: f64| {
            finds(
                FindingKind::TailCpu,
                Severity::Warning,
                &[("p99_ms", p99_ms), ("tail_ms", share * p99_ms)],
            )
        };
        #[rustfmt::skip]
        let cases = [
            ("on a CPU, 95 % of a 30 ms p99", run(30.0, on_cpu(0.95, 30.0)), cpu(0.95, 30.0)),
            ("at RANKED_TAIL_SHARE", run(30.0, on_cpu(at, 30.0)), cpu(at, 30.0)),
            ("under RANKED_TAIL_SHARE", run(30.0, on_cpu(at - 0.01, 30.0)), nothing()),
            ("p99 under SKEWED_TAIL times the median", run(1.4, on_cpu(0.9, 1.4)), nothing()),
            ("a wait, not the CPU", run(30.0, blocked(Resource::Pipe, 0.9, 30.0)), nothing()),
        ];
        Table::new(tail_cpu, cases)
    }

    fn lost(share: f64, p99_ms: f64) -> TailPart {
        TailPart {
            place: Place::Network,
            resource: Some(Resource::Retransmit),
            kernel: Some("segments retransmitted (40 by the server, 31 by the client)".into()),
            waits: Some(40.0),
            mean_wait_ms: Some(204.0),
            per_request_ms: 4.08,
            tail_ms: share * p99_ms,
            share,
            ..Default::default()
        }
    }

    fn retransmit_tail_table() -> Table {
        let at = RANKED_TAIL_SHARE;
        let resent = |share: f64, p99_ms: f64| {
            finds(
                FindingKind::RetransmitTail,
                Severity::Warning,
                &[
                    ("p99_ms", p99_ms),
                    ("tail_ms", share * p99_ms),
                    ("retransmits", 40.0),
                    ("rto_ms", 204.0),
                ],
            )
        };
        let syn = TailPart {
            resource: Some(Resource::SynRetransmit),
            ..lost(0.9, 1000.0)
        };
        #[rustfmt::skip]
        let cases = [
            ("lost segments, 99 % of a 205 ms p99", run(205.0, lost(0.99, 205.0)), resent(0.99, 205.0)),
            ("at RANKED_TAIL_SHARE", run(205.0, lost(at, 205.0)), resent(at, 205.0)),
            ("under RANKED_TAIL_SHARE", run(205.0, lost(at - 0.01, 205.0)), nothing()),
            ("p99 under SKEWED_TAIL times the median", run(1.4, lost(0.9, 1.4)), nothing()),
            ("SYNs, syn_retransmit_tail's", run(1000.0, syn), nothing()),
        ];
        Table::new(retransmit_tail, cases)
    }

    #[test]
    fn lost_segments_are_said_with_how_often_and_the_timeout() {
        let f = retransmit_tail(&run(205.0, lost(0.99, 205.0))).unwrap();
        for words in [
            "p99 of 205.0 ms = lost segments resent: segments retransmitted (40 by the server, 31 by the client), each after the connections' retransmission timeout of 204 ms: 1 request in",
            "that is 99% of p99",
            "tc -s qdisc",
        ] {
            assert!(f.summary.contains(words), "{words:?} in {}", f.summary);
        }
    }

    #[test]
    fn a_wait_every_request_meets_is_said_beside_the_median_not_as_a_multiple_of_it() {
        let r = run_at(44.0, 46.0, blocked(Resource::Sleep, 43.0 / 46.0, 46.0));
        let f = tail_wait(&r).unwrap();
        assert!(
            f.summary
                .contains("that wait is 93% of p99 (46.0 ms, the median 44.00 ms)"),
            "{}",
            f.summary
        );
    }

    #[test]
    fn the_cpu_finding_names_the_hottest_function() {
        let f = tail_cpu(&run(30.0, on_cpu(0.95, 30.0))).unwrap();
        assert!(
            f.summary.starts_with(
                "the server's own code on a CPU (hottest: slow_path): that is 95% of p99"
            ),
            "{}",
            f.summary
        );
    }

    #[test]
    fn the_finding_says_what_waited_on_what_where_and_the_fix() {
        let f = tail_wait(&run(30.0, blocked(Resource::Pipe, 0.9, 30.0))).unwrap();
        for words in [
            "the server waited on a pipe in wait_for_ticket (pipe_read): that wait is 90% of p99",
            "(30.0 ms, 60x the median of 0.50 ms)",
            "the server's threads (conn) waited there",
            "10% of p99 is not accounted for",
            "the process at the other end",
        ] {
            assert!(f.summary.contains(words), "{words:?} in {}", f.summary);
        }
    }
}
