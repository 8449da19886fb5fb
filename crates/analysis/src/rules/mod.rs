//! The rules that read a run report and write its findings: one small function per rule, its
//! thresholds named beside it, in files by subject. `findings` runs them all, most weighty first.

pub mod cpu;
pub mod failures;
pub mod interrupts;
pub mod p99;
pub mod tcp;

use crate::finding::Finding;
use crate::run_report::RunReport;

/// Every rule, in order of weight: critical first, then by how much they explain.
pub fn findings(r: &RunReport) -> Vec<Finding> {
    let mut out = Vec::new();
    out.extend(failures::no_success(r));
    out.extend(failures::target_died(r));
    // Who reset connections, in which state and why: ranked above the error bursts they cause.
    out.extend(tcp::resets(r));
    out.extend(cpu::client_bound(r));
    out.extend(cpu::server_cpu_saturated(r));
    out.extend(tcp::syn_tail_or_overflows(r));
    out.extend(cpu::runq_tail(r));
    out.extend(interrupts::net_irq_concentrated(r));
    out.extend(cpu::client_concurrency_short(r));
    out.extend(tcp::server_closed_idle(r));
    out.extend(failures::error_bursts(r));
    out.extend(p99::p99_tracks(r));
    out.extend(failures::lost_events(r));
    // Stable: within a severity, the order above.
    out.sort_by_key(|f| f.severity);
    out
}

#[cfg(test)]
mod tests {
    use super::tcp::{IDLE_CLOSED_MIN, RESETS_MIN, reset_cause};
    use super::*;
    use crate::finding::{FindingKind, Severity};
    use crate::kernel_report::{KernelReport, ResetReport, SyscallReport, ThreadReport};
    use crate::run_report::TimelineRow;

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
            .find(|f| f.kind == FindingKind::ServerCpuSaturated)
            .expect("a 98% busy thread is saturated")
            .summary
    }

    fn idle_closed(run: &mut RunReport, closed: u64) -> Option<Finding> {
        run.load.idle_closed_by_server = closed;
        run.load.config.connections = 10_000;
        run.load.duration_s = 10.0;
        findings(run)
            .into_iter()
            .find(|f| f.kind == FindingKind::ServerClosedIdle)
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
            let rank = |kind: FindingKind| all.iter().position(|f| f.kind == kind).unwrap();
            (
                rank(FindingKind::ServerResets),
                rank(FindingKind::ErrorBurst),
            )
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
