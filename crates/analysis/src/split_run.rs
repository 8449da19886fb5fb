//! A run split over hosts, made one: the merged load joined with each server host's kernel
//! series as `srvprof run` joins them on one host (run_report::build), and the server hosts'
//! figures side by side.

use srvprof_loadgen::LoadReport;

use crate::probe_output::ProbeSeries;
use crate::run_report::{
    Observed, PerRequest, RunReport, ServerHost, SyscallPerRequest, TargetInfo, build, per_request,
};
use crate::stacks::FoldedStacks;

/// One server host's kernel series, as `srvprof probe --out` left it.
pub struct ServerSeries {
    pub host: String,
    pub probe: ProbeSeries,
}

/// The run report of a split run: the first server host's timeline, kernel figures, stacks and
/// findings' evidence; per-request costs over every server host; each host's figures in
/// `servers`.
pub fn build_split(
    load: LoadReport,
    servers: &[ServerSeries],
    first_stacks: Option<&FoldedStacks>,
    notes: Vec<String>,
) -> RunReport {
    let reports: Vec<RunReport> = (servers.iter().enumerate())
        .map(|(i, s)| {
            let target = TargetInfo {
                pids: s.probe.pids.clone(),
                url: load.config.url.clone(),
                cmd: None,
            };
            let observed = Observed {
                stacks: first_stacks.filter(|_| i == 0),
                observer: s.probe.observer.clone(),
            };
            build(
                target,
                load.clone(),
                &s.probe.series,
                &s.probe.exits,
                Vec::new(),
                observed,
            )
        })
        .collect();
    let Some(first) = reports.first() else {
        return RunReport {
            load,
            notes,
            ..Default::default()
        };
    };
    let mut report = first.clone();
    // The client side is the agents' own figures (their hosts ran no probes): their CPU and
    // context switches, not the server host's system-wide interrupts.
    let cpu = &report.load.client_cpu;
    report.client = crate::kernel_report::KernelReport {
        duration_s: report.load.duration_s,
        totals: crate::kernel_report::Totals {
            voluntary_switches: cpu.voluntary_switches,
            involuntary_switches: cpu.involuntary_switches,
            user_ns: cpu.user_ns,
            sys_ns: cpu.sys_ns,
            threads: cpu.threads,
            ..Default::default()
        },
        syscalls_off: true,
        ..Default::default()
    };
    report.per_request.client = per_request(&report.client, report.load.completed);
    // The probes' cost per request, from their run time a second and the run's throughput.
    if let Some(o) = report.observer.as_mut()
        && report.load.throughput_rps > 0.0
    {
        o.bpf_us_per_request = Some(o.bpf_ms_per_s * 1e3 / report.load.throughput_rps);
    }
    let mut all_notes = notes;
    all_notes.append(&mut report.notes);
    report.notes = all_notes;
    if reports.len() > 1 {
        let cpu_s = |r: &RunReport| (r.server.totals.user_ns + r.server.totals.sys_ns) as f64 / 1e9;
        let mean = reports.iter().map(cpu_s).sum::<f64>() / reports.len() as f64;
        report.servers = (servers.iter().zip(&reports))
            .map(|(s, r)| ServerHost {
                host: s.host.clone(),
                pids: r.server.pids.clone(),
                cpu_s: cpu_s(r),
                cpu_vs_mean: if mean > 0.0 { cpu_s(r) / mean } else { 0.0 },
                context_switches: r.server.totals.voluntary_switches
                    + r.server.totals.involuntary_switches,
                syscalls: r
                    .server
                    .syscalls_recorded()
                    .then_some(r.server.totals.syscalls),
                listen_overflows: r.server.tcp.listen_overflows,
                retransmits: r.server.tcp.retransmits,
                cpu_us_per_request: r.per_request.server.cpu_us,
            })
            .collect();
        report.per_request.server = fleet(reports.iter().map(|r| &r.per_request.server));
        report.notes.push(format!(
            "{} server hosts: per_request adds up every one's costs; the timeline, the kernel figures and the findings' evidence are {}'s, and each host's figures are in servers",
            reports.len(),
            servers[0].host
        ));
    }
    crate::with_findings(report)
}

/// Per-request costs of every server host added: each is its figures over all of the run's
/// requests, so their sum is the fleet's cost of one request.
fn fleet<'a>(hosts: impl Iterator<Item = &'a PerRequest>) -> PerRequest {
    let mut sum = PerRequest::default();
    let mut syscalls: Vec<SyscallPerRequest> = Vec::new();
    for (i, h) in hosts.enumerate() {
        sum.context_switches += h.context_switches;
        sum.voluntary_switches += h.voluntary_switches;
        sum.involuntary_switches += h.involuntary_switches;
        // One host without syscalls leaves the fleet's unknown.
        sum.syscalls = match (i, sum.syscalls, h.syscalls) {
            (0, _, b) => b,
            (_, Some(a), Some(b)) => Some(a + b),
            _ => None,
        };
        sum.cpu_us += h.cpu_us;
        sum.user_us += h.user_us;
        sum.sys_us += h.sys_us;
        sum.net_softirqs += h.net_softirqs;
        for s in &h.top_syscalls {
            match syscalls.iter_mut().find(|t| t.name == s.name) {
                Some(t) => t.per_request += s.per_request,
                None => syscalls.push(s.clone()),
            }
        }
    }
    syscalls.sort_by(|a, b| b.per_request.total_cmp(&a.per_request));
    syscalls.truncate(5);
    sum.top_syscalls = syscalls;
    sum
}

#[cfg(test)]
mod tests {
    use super::*;

    fn host(cpu_us: f64, syscalls: Option<f64>, top: &[(&str, f64)]) -> PerRequest {
        PerRequest {
            context_switches: 3.0,
            voluntary_switches: 2.0,
            involuntary_switches: 1.0,
            syscalls,
            cpu_us,
            user_us: cpu_us / 2.0,
            sys_us: cpu_us / 2.0,
            net_softirqs: 0.5,
            top_syscalls: (top.iter())
                .map(|(n, p)| SyscallPerRequest {
                    name: n.to_string(),
                    per_request: *p,
                })
                .collect(),
        }
    }

    #[test]
    fn the_fleets_cost_of_a_request_is_its_hosts_costs_added() {
        let a = host(40.0, Some(6.0), &[("read", 2.0), ("write", 1.0)]);
        let b = host(20.0, Some(3.0), &[("write", 1.5), ("epoll_wait", 0.5)]);
        let f = fleet([&a, &b].into_iter());
        assert_eq!(f.cpu_us, 60.0);
        assert_eq!(f.context_switches, 6.0);
        assert_eq!(f.syscalls, Some(9.0));
        assert_eq!(f.net_softirqs, 1.0);
        let names: Vec<(&str, f64)> = (f.top_syscalls.iter())
            .map(|s| (s.name.as_str(), s.per_request))
            .collect();
        assert_eq!(names, [("write", 2.5), ("read", 2.0), ("epoll_wait", 0.5)]);
    }

    #[test]
    fn a_host_without_syscalls_leaves_the_fleets_unknown() {
        let a = host(40.0, Some(6.0), &[]);
        let b = host(20.0, None, &[]);
        assert_eq!(fleet([&a, &b].into_iter()).syscalls, None);
        assert_eq!(fleet([&b, &a].into_iter()).syscalls, None);
    }
}
