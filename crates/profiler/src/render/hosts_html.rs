//! report.html's hosts of a split run (`srvprof merge`): each client host's share of the load and
//! each server host's work, side by side, so a slow client or an uneven replica shows.

use std::fmt::Write;

use srvprof_analysis::run_report::RunReport;

use super::escape::esc;

pub fn section(o: &mut String, run: &RunReport) {
    if run.load.hosts.is_empty() && run.servers.is_empty() {
        return;
    }
    o.push_str("<h2 id=\"hosts\">Hosts</h2>");
    if !run.load.hosts.is_empty() {
        o.push_str(
            "<table><tr><th class=\"l\">client host</th><th class=\"l\">segment</th><th>connections</th>\
<th>req/s</th><th>errors</th><th>p50 (ms)</th><th>p99 (ms)</th><th>busiest load thread</th><th>clock error (ms)</th></tr>",
        );
        for h in &run.load.hosts {
            let _ = write!(
                o,
                "<tr><td class=\"l\">{}</td><td class=\"l\">{}</td><td>{}</td><td>{:.0}</td><td>{}</td>\
<td>{:.2}</td><td>{:.2}</td><td>{:.0}%</td><td>{}</td></tr>",
                esc(&h.host),
                esc(&h.segment),
                h.connections,
                h.throughput_rps,
                h.errors,
                h.p50_us as f64 / 1e3,
                h.p99_us as f64 / 1e3,
                h.max_thread_utilization * 100.0,
                h.clock_max_error_us
                    .map_or("?".into(), |us| format!("{:.3}", us as f64 / 1e3))
            );
        }
        o.push_str("</table>");
    }
    if !run.servers.is_empty() {
        o.push_str(
            "<table><tr><th class=\"l\">server host</th><th>CPU (s)</th><th>of the mean host's</th>\
<th>CPU per request (us)</th><th>context switches</th><th>syscalls</th><th>listen overflows</th><th>retransmits</th></tr>",
        );
        for h in &run.servers {
            let _ = write!(
                o,
                "<tr><td class=\"l\">{}</td><td>{:.2}</td><td>{:.2}x</td><td>{:.1}</td><td>{}</td><td>{}</td><td>{}</td><td>{}</td></tr>",
                esc(&h.host),
                h.cpu_s,
                h.cpu_vs_mean,
                h.cpu_us_per_request,
                h.context_switches,
                h.syscalls.map_or("not recorded".into(), |n| n.to_string()),
                h.listen_overflows,
                h.retransmits
            );
        }
        o.push_str("</table>");
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use srvprof_analysis::run_report::ServerHost;

    #[test]
    fn a_split_runs_hosts_are_one_row_each_and_a_one_host_run_has_none() {
        let mut run = RunReport::default();
        let mut o = String::new();
        section(&mut o, &run);
        assert!(o.is_empty());
        run.load.hosts = (1..=2)
            .map(|i| srvprof_loadgen::HostShare {
                host: format!("client-{i}"),
                segment: format!("{i}/2"),
                ..Default::default()
            })
            .collect();
        run.servers = vec![ServerHost {
            host: "<web-1>".into(),
            cpu_s: 1.5,
            cpu_vs_mean: 1.25,
            ..Default::default()
        }];
        section(&mut o, &run);
        assert!(
            o.contains("<td class=\"l\">client-2</td><td class=\"l\">2/2</td>"),
            "{o}"
        );
        assert!(
            o.contains("<td class=\"l\">&lt;web-1&gt;</td><td>1.50</td><td>1.25x</td>"),
            "{o}"
        );
    }
}
