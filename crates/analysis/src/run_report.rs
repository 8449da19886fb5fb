//! run.json: the load figures, the server's and the client's kernel figures, one timeline on one
//! clock, per-request costs, correlations with p99, and the findings.

use serde::{Deserialize, Serialize};
use srvprof_common::{GROUP_CLIENT, GROUP_SERVER, tcp};
use srvprof_loadgen::LoadReport;

use crate::correlation::{Correlation, correlations};
use crate::finding::Finding;
use crate::kernel_report::{HostTcpReport, KernelReport, kernel_report};
use crate::observer::ObserverCost;
use crate::record::{ExitRecord, NsHistogram, Reading};
use crate::series::ReadingSeries;
use crate::stacks::FoldedStacks;
pub use crate::timeline::TimelineRow;

#[derive(Clone, Debug, Default, PartialEq, Serialize, Deserialize)]
pub struct TargetInfo {
    pub pids: Vec<u32>,
    pub url: String,
    pub cmd: Option<String>,
}

#[derive(Clone, Debug, Default, PartialEq, Serialize, Deserialize)]
pub struct SyscallPerRequest {
    pub name: String,
    pub per_request: f64,
}

#[derive(Clone, Debug, Default, PartialEq, Serialize, Deserialize)]
pub struct PerRequest {
    pub context_switches: f64,
    pub voluntary_switches: f64,
    pub involuntary_switches: f64,
    /// None when syscalls were not recorded (--syscalls off).
    pub syscalls: Option<f64>,
    pub cpu_us: f64,
    pub user_us: f64,
    pub sys_us: f64,
    /// NET_RX + NET_TX softirqs system-wide.
    pub net_softirqs: f64,
    pub top_syscalls: Vec<SyscallPerRequest>,
}

#[derive(Clone, Debug, Default, PartialEq, Serialize, Deserialize)]
pub struct PerRequestReport {
    #[serde(flatten)]
    pub server: PerRequest,
    pub client: PerRequest,
    /// https: TLS handshakes per completed request (1 with a new connection per request).
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub tls_handshakes: Option<f64>,
    /// HTTP/2: streams in flight at once per connection (`--streams`), and completed requests
    /// per connection opened.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub streams_per_connection: Option<usize>,
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub requests_per_connection: Option<f64>,
}

#[derive(Clone, Debug, Default, Serialize, Deserialize)]
pub struct RunReport {
    pub tool: String,
    pub version: String,
    pub target: TargetInfo,
    pub load: LoadReport,
    pub server: KernelReport,
    pub client: KernelReport,
    /// The host's TCP figures (server.host_tcp, repeated here: they belong to neither side).
    #[serde(default)]
    pub host_tcp: HostTcpReport,
    pub timeline: Vec<TimelineRow>,
    pub per_request: PerRequestReport,
    pub correlations: Vec<Correlation>,
    pub findings: Vec<Finding>,
    pub notes: Vec<String>,
    /// Off-CPU and run-queue histograms of the measured window, per group (for the report's plots).
    #[serde(default)]
    pub histograms: Vec<GroupHistograms>,
    /// How well the stacks were unwound, per group and kind; empty without stacks.
    #[serde(default)]
    pub stacks: Vec<crate::unwind_quality::UnwindQuality>,
    /// https: the on-CPU samples of each group that ran TLS code; empty without stacks or TLS.
    #[serde(default, skip_serializing_if = "Vec::is_empty")]
    pub tls_cpu: Vec<crate::tls_code::TlsCpu>,
    /// What watching cost: the probes' run time and srvprof's stalls. None when no interval
    /// was timed (a run shorter than two intervals).
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub observer: Option<crate::observer::ObserverCost>,
    /// Where p99's time went (crate::tail_account); None without the server's stacks.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub tail_account: Option<crate::tail_account::TailAccount>,
    /// A run split over several server hosts (`srvprof merge`): each host's figures side by side.
    #[serde(default, skip_serializing_if = "Vec::is_empty")]
    pub servers: Vec<ServerHost>,
}

#[derive(Clone, Debug, Default, PartialEq, Serialize, Deserialize)]
pub struct GroupHistograms {
    /// "server" or "client".
    pub group: String,
    /// Off-CPU durations, ns, in srvprof_common::hist slots.
    pub offcpu: NsHistogram,
    /// Run-queue waits, ns, in srvprof_common::hist slots.
    pub runq: NsHistogram,
    /// On-CPU runs (a thread's CPU time from a wakeup to its next sleep), ns, in
    /// srvprof_common::hist slots.
    #[serde(default)]
    pub oncpu_runs: NsHistogram,
    /// The same runs by the wall clock, their waits for a CPU after each preemption added, ns,
    /// in srvprof_common::hist slots.
    #[serde(default)]
    pub run_walls: NsHistogram,
    /// The run-queue waits that began with a preemption (the rest of `runq` began with a
    /// wakeup), ns, in srvprof_common::hist slots.
    #[serde(default)]
    pub runq_preempted: NsHistogram,
    /// The server's connections' accept-queue waits, ns, in srvprof_common::hist slots; None for
    /// the client, or when not timed.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub accept_queue: Option<NsHistogram>,
    /// The group's stop-the-world pauses' lengths, ns, in srvprof_common::hist slots; None when
    /// it had none.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub pauses: Option<NsHistogram>,
    /// The server's answers' waits held unsent in its sockets (every kind's), ns, in
    /// srvprof_common::hist slots; None for the client, or when none was held.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub send_holds: Option<NsHistogram>,
    /// Those of send_holds that were answers' transfers (whole segments, until acknowledged:
    /// the full_segments and zero_window kinds), ns; None when none was.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub transfers: Option<NsHistogram>,
}

/// A server host's figures over the measured window, beside the others' (run.json `servers`, from `srvprof merge`: crate::split_run).
#[derive(Clone, Debug, Default, PartialEq, Serialize, Deserialize)]
pub struct ServerHost {
    pub host: String,
    pub pids: Vec<u32>,
    /// Its CPU time (user + sys) in the window, and that over the mean of every server host's:
    /// above 1, it worked more than its share.
    pub cpu_s: f64,
    pub cpu_vs_mean: f64,
    pub context_switches: u64,
    /// None with --syscalls off.
    pub syscalls: Option<u64>,
    pub listen_overflows: u64,
    pub retransmits: u64,
    /// Its CPU per request of the whole run (every server host's add up to the fleet's).
    pub cpu_us_per_request: f64,
}

/// The server's holds' lengths between two readings, of the tcp::HOLD_* kinds `of` keeps.
fn send_hold_lengths(first: &Reading, last: &Reading, of: impl Fn(u32) -> bool) -> NsHistogram {
    let mut sum = NsHistogram::default();
    for (i, e) in last.kernel.send_hold_hist.iter().enumerate() {
        if of(i as u32) {
            sum.add(&match first.kernel.send_hold_hist.get(i) {
                Some(s) => e.minus(s),
                None => e.clone(),
            });
        }
    }
    sum
}

pub fn per_request(r: &KernelReport, requests: u64) -> PerRequest {
    let n = requests.max(1) as f64;
    let t = &r.totals;
    let net: u64 = r
        .softirqs
        .iter()
        .filter(|s| s.vector.starts_with("NET_"))
        .map(|s| s.count)
        .sum();
    PerRequest {
        context_switches: (t.voluntary_switches + t.involuntary_switches) as f64 / n,
        voluntary_switches: t.voluntary_switches as f64 / n,
        involuntary_switches: t.involuntary_switches as f64 / n,
        syscalls: r.syscalls_recorded().then(|| t.syscalls as f64 / n),
        cpu_us: (t.user_ns + t.sys_ns) as f64 / 1e3 / n,
        user_us: t.user_ns as f64 / 1e3 / n,
        sys_us: t.sys_ns as f64 / 1e3 / n,
        net_softirqs: net as f64 / n,
        top_syscalls: r
            .syscalls
            .iter()
            .take(5)
            .map(|s| SyscallPerRequest {
                name: s.name.clone(),
                per_request: s.count as f64 / n,
            })
            .collect(),
    }
}

/// Builds the run report from the series of samples taken at the load's interval boundaries,
/// without its findings (crate::with_findings adds them: the rules read the report).
pub fn build(
    target: TargetInfo,
    load: LoadReport,
    series: &ReadingSeries,
    exits: &[ExitRecord],
    notes: Vec<String>,
    observed: Observed,
) -> RunReport {
    // Kernel intervals join the load's by the grid point each sample was due at. A last partial
    // interval after the load's end (teardown) is left out.
    let load_rows = load.timeline.len();
    let intervals = series
        .spans
        .iter()
        .take_while(|span| span.first < load_rows.max(1))
        .count();
    let first = series.first().cloned().unwrap_or_default();
    let mut last = series.end_of(intervals).cloned().unwrap_or_default();
    // TIME_WAIT is read only at the ends: the reading after the load's last interval has it.
    if last.time_wait.is_none() {
        last.time_wait = series.last().and_then(|r| r.time_wait);
    }
    let mut server = kernel_report(&first, &last, GROUP_SERVER, exits);
    let mut client = kernel_report(&first, &last, GROUP_CLIENT, exits);
    series.state_errors(&mut server, GROUP_SERVER, intervals);
    series.state_errors(&mut client, GROUP_CLIENT, intervals);
    let mut notes = notes;
    notes.extend(server.sampling_note());
    let missed: usize = series.spans[..intervals].iter().map(|s| s.count - 1).sum();
    if missed > 0 {
        notes.push(format!(
            "the sampler missed {missed} interval boundaries: those kernel rows span several load intervals (load_intervals)"
        ));
    }
    let mut timeline = Vec::new();
    for ((server_row, client_row), span) in series
        .server_rows
        .iter()
        .zip(&series.client_rows)
        .zip(&series.spans)
        .take(intervals)
    {
        let end = (span.first + span.count).min(load_rows);
        let joined = load.timeline.get(span.first..end).unwrap_or_default();
        let n = joined.len().max(1) as f64;
        timeline.push(TimelineRow {
            t_s: server_row.t_s,
            duration_s: server_row.duration_s,
            load_t_s: joined.first().map_or(server_row.t_s, |l| l.t_s),
            load_intervals: joined.len(),
            throughput_rps: joined.iter().map(|l| l.throughput_rps).sum::<f64>() / n,
            completed: joined.iter().map(|l| l.completed).sum(),
            errors: joined.iter().map(|l| l.errors).sum(),
            p50_us: joined.iter().map(|l| l.p50_us).max().unwrap_or(0),
            p99_us: joined.iter().map(|l| l.p99_us).max().unwrap_or(0),
            client_user_pct: client_row.user_pct,
            client_sys_pct: client_row.sys_pct,
            server: server_row.clone(),
        });
    }
    let per_completed = |n: u64| n as f64 / load.completed.max(1) as f64;
    let per_request = PerRequestReport {
        server: per_request(&server, load.completed),
        client: per_request(&client, load.completed),
        tls_handshakes: load.tls.as_ref().map(|t| per_completed(t.handshakes)),
        streams_per_connection: load.config.streams,
        requests_per_connection: load
            .config
            .streams
            .map(|_| load.completed as f64 / load.connections_opened.max(1) as f64),
    };
    let accepts_timed = server.tcp.accept_queue.is_some();
    let mut report = RunReport {
        tool: "srvprof".into(),
        version: env!("CARGO_PKG_VERSION").into(),
        target,
        load,
        host_tcp: server.host_tcp.clone(),
        server,
        client,
        correlations: correlations(&timeline),
        timeline,
        per_request,
        findings: Vec::new(),
        notes,
        histograms: [(GROUP_SERVER, "server"), (GROUP_CLIENT, "client")]
            .iter()
            .map(|&(g, name)| {
                let delta = |end: &[NsHistogram], start: &[NsHistogram]| match (
                    end.get(g as usize),
                    start.get(g as usize),
                ) {
                    (Some(e), Some(s)) => e.minus(s),
                    _ => NsHistogram::default(),
                };
                GroupHistograms {
                    group: name.into(),
                    offcpu: delta(&last.kernel.offcpu_hist, &first.kernel.offcpu_hist),
                    runq: delta(&last.kernel.runq_hist, &first.kernel.runq_hist),
                    oncpu_runs: delta(&last.kernel.oncpu_run_hist, &first.kernel.oncpu_run_hist),
                    run_walls: delta(&last.kernel.run_wall_hist, &first.kernel.run_wall_hist),
                    runq_preempted: delta(
                        &last.kernel.runq_preempted_hist,
                        &first.kernel.runq_preempted_hist,
                    ),
                    accept_queue: (g == GROUP_SERVER && accepts_timed)
                        .then(|| last.kernel.accept_hist.minus(&first.kernel.accept_hist)),
                    pauses: (last.kernel.families.pauses.pause_hist.get(g as usize))
                        .map(
                            |h| match first.kernel.families.pauses.pause_hist.get(g as usize) {
                                Some(before) => h.minus(before),
                                None => h.clone(),
                            },
                        )
                        .filter(|h| h.total() > 0),
                    send_holds: (g == GROUP_SERVER)
                        .then(|| send_hold_lengths(&first, &last, |_| true))
                        .filter(|h| h.total() > 0),
                    transfers: (g == GROUP_SERVER)
                        .then(|| send_hold_lengths(&first, &last, |kind| kind != tcp::HOLD_PARTIAL))
                        .filter(|h| h.total() > 0),
                }
            })
            .collect(),
        stacks: Vec::new(),
        tls_cpu: Vec::new(),
        observer: observed.observer,
        tail_account: None,
        servers: Vec::new(),
    };
    if let Some(s) = observed.stacks {
        report.stacks = s.quality.clone();
        let span_ms = (report.server.duration_s * 1000.0).round() as i64;
        // The time the threads ran: the scheduler's charge before their switch-ins is the idle
        // task's, where no timer lands for them.
        let cpu = |k: &crate::kernel_report::KernelReport| crate::sample_count::GroupCpu {
            ran_s: k.totals.oncpu_ns.saturating_sub(k.totals.precharged_ns) as f64 / 1e9,
            precharged_s: k.totals.precharged_ns as f64 / 1e9,
            untimed_samples: k.oncpu_untimed_samples,
        };
        let (server, client) = (cpu(&report.server), cpu(&report.client));
        crate::sample_count::count_measured_samples(&mut report.stacks, s, span_ms, |g| {
            Some(if g == "server" { server } else { client })
        });
        if report.load.tls.is_some() {
            report.tls_cpu = s.tls_cpu();
        }
        crate::lock_stacks::attach(&mut report.server.locks, s, GROUP_SERVER);
        report.tail_account = crate::tail_account::account(crate::tail_account::Inputs {
            load: &report.load,
            server: &report.server,
            client: &report.client,
            runq_lengths: (report.histograms.iter())
                .find(|h| h.group == "server")
                .map(|h| &h.runq),
            oncpu_run_lengths: (report.histograms.iter())
                .find(|h| h.group == "server")
                .map(|h| &h.oncpu_runs),
            run_wall_lengths: (report.histograms.iter())
                .find(|h| h.group == "server")
                .map(|h| &h.run_walls),
            runq_preempted_lengths: (report.histograms.iter())
                .find(|h| h.group == "server")
                .map(|h| &h.runq_preempted),
            accept_lengths: (report.histograms.iter())
                .find(|h| h.group == "server")
                .and_then(|h| h.accept_queue.as_ref()),
            pause_lengths: (report.histograms.iter())
                .find(|h| h.group == "server")
                .and_then(|h| h.pauses.as_ref()),
            send_hold_lengths: (report.histograms.iter())
                .find(|h| h.group == "server")
                .and_then(|h| h.send_holds.as_ref()),
            transfer_lengths: (report.histograms.iter())
                .find(|h| h.group == "server")
                .and_then(|h| h.transfers.as_ref()),
            server_cpu_us: report.per_request.server.cpu_us,
            client_cpu_us: report.per_request.client.cpu_us,
            stacks: s,
        });
    }
    report
}

/// What the run saw besides the readings: its stacks (None: `--stacks off`) and what watching
/// cost.
#[derive(Clone, Debug, Default)]
pub struct Observed<'a> {
    pub stacks: Option<&'a FoldedStacks>,
    pub observer: Option<ObserverCost>,
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn the_timeline_joins_load_intervals_by_grid_point_not_by_position() {
        use crate::record::Reading;
        use srvprof_loadgen::LoadRow;
        let sec = 1_000_000_000;
        let start = 50 * sec;
        let at = |due_s: u64, late_ns: u64| Reading {
            monotonic_ns: start + due_s * sec + late_ns,
            due_ns: Some(start + due_s * sec),
            ..Default::default()
        };
        let mut series = ReadingSeries::on_grid(start, std::time::Duration::from_secs(1));
        // Grid point 1 was missed; 2 was read 20 ms late; 4 is the teardown after the load.
        for s in [at(0, 0), at(2, 20_000_000), at(3, 0), at(4, 0)] {
            series.push(s);
        }
        let load_row = |i: u64, completed: u64, p99_us: u64| LoadRow {
            t_s: i as f64,
            completed,
            errors: i,
            p50_us: 100,
            p99_us,
            max_us: p99_us,
            throughput_rps: completed as f64,
        };
        let load = LoadReport {
            timeline: vec![
                load_row(0, 1000, 900),
                load_row(1, 3000, 5000),
                load_row(2, 2000, 700),
            ],
            ..Default::default()
        };
        let r = build(
            TargetInfo::default(),
            load,
            &series,
            &[],
            Vec::new(),
            Observed::default(),
        );
        let rows: Vec<_> = r
            .timeline
            .iter()
            .map(|t| {
                (
                    t.load_t_s,
                    t.load_intervals,
                    t.completed,
                    t.errors,
                    t.p99_us,
                )
            })
            .collect();
        assert_eq!(rows, [(0.0, 2, 4000, 1, 5000), (2.0, 1, 2000, 2, 700)]);
        assert!((r.timeline[0].throughput_rps - 2000.0).abs() < 1e-9);
        assert!((r.timeline[1].t_s - 2.02).abs() < 1e-9);
        assert!((r.timeline[1].duration_s - 0.98).abs() < 1e-9);
        assert!(r.notes.iter().any(|n| n.contains("missed 1 interval")));
    }
}
