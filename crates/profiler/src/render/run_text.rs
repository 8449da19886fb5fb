//! `srvprof run` on the terminal (findings first, then tables) and as a CSV timeline.

use std::fmt::Write as _;
use std::io::Write;

use srvprof_analysis::finding::Severity;
use srvprof_analysis::run_report::RunReport;

/// First columns of timeline.csv; also how srvprof recognizes a file it wrote.
pub const CSV_HEADER_START: &str = "t_s,throughput_rps,";

pub fn print(out: &mut impl Write, r: &RunReport) {
    let l = &r.load;
    let _ = writeln!(
        out,
        "\n== srvprof run: {} (PIDs {:?}), {:.1} s measured",
        r.target.url, r.target.pids, l.duration_s
    );
    let _ = writeln!(out, "findings:");
    if r.findings.is_empty() {
        let _ = writeln!(out, "  none: no rule fired (see the tables below)");
    }
    for f in &r.findings {
        let tag = match f.severity {
            Severity::Critical => "CRITICAL",
            Severity::Warning => "WARNING ",
            Severity::Info => "INFO    ",
        };
        let share = f
            .tail_share
            .map(|s| format!("[{:.0}% of p99] ", s * 100.0))
            .unwrap_or_default();
        let _ = writeln!(out, "  {tag} {share}{}", f.summary);
    }
    let errors = match l.errors {
        0 => "no errors".to_string(),
        n => format!("{n} errors ({})", l.error_kinds()),
    };
    let _ = writeln!(
        out,
        "load: {:.0} req/s, {} ok, {errors}, latency us p50 {} p90 {} p99 {} p99.9 {} max {}",
        l.throughput_rps,
        l.completed,
        l.latency_us.p50,
        l.latency_us.p90,
        l.latency_us.p99,
        l.latency_us.p999,
        l.latency_us.max
    );
    let _ = writeln!(
        out,
        "per request:     {:>10} {:>10} {:>10} {:>10} {:>10} {:>12}",
        "ctx sw", "syscalls", "CPU us", "user us", "sys us", "net softirqs"
    );
    for (who, p) in [
        ("  server", &r.per_request.server),
        ("  client", &r.per_request.client),
    ] {
        let _ = writeln!(
            out,
            "{who:<16} {:>10.3} {:>10} {:>10.2} {:>10.2} {:>10.2} {:>12.2}",
            p.context_switches,
            crate::render::text::opt(p.syscalls, 2),
            p.cpu_us,
            p.user_us,
            p.sys_us,
            p.net_softirqs
        );
    }
    if !r.per_request.server.top_syscalls.is_empty() {
        let top: Vec<String> = r
            .per_request
            .server
            .top_syscalls
            .iter()
            .map(|s| format!("{} {:.2}", s.name, s.per_request))
            .collect();
        let _ = writeln!(
            out,
            "  server syscalls per request: {}{}",
            top.join(", "),
            crate::render::text::estimate_note(&r.server)
        );
    }
    let pr = &r.per_request;
    let mut protocol = Vec::new();
    if let Some(h) = pr.tls_handshakes {
        protocol.push(format!("{h:.3} TLS handshakes"));
    }
    for t in r.tls_cpu.iter().filter(|t| t.samples > 0) {
        protocol.push(format!(
            "{} on-CPU {:.1}% in TLS code",
            t.group,
            t.share * 100.0
        ));
    }
    if let (Some(streams), Some(per_conn)) = (pr.streams_per_connection, pr.requests_per_connection)
    {
        protocol.push(format!(
            "HTTP/2 {streams} streams per connection, {per_conn:.0} requests per connection"
        ));
    }
    if !protocol.is_empty() {
        let _ = writeln!(out, "  per request: {}", protocol.join("; "));
    }
    let s = &r.server;
    let secs = s.duration_s.max(1e-9);
    let _ = writeln!(
        out,
        "server: {} voluntary + {} involuntary switches ({:.0}/s), run-queue p99 {:.0} us, user {:.1}% sys {:.1}% of a CPU, {} listen overflows, {} SYN retransmits",
        s.totals.voluntary_switches,
        s.totals.involuntary_switches,
        (s.totals.voluntary_switches + s.totals.involuntary_switches) as f64 / secs,
        s.runq_latency_us.p99,
        s.totals.user_ns as f64 / secs / 1e7,
        s.totals.sys_ns as f64 / secs / 1e7,
        s.tcp.listen_overflows,
        s.tcp.syn_retransmits
    );
    let c = &r.client;
    let _ = writeln!(
        out,
        "TCP resets sent / received: server {} / {}, client {} / {}, whole host {} sent",
        s.tcp.resets_sent,
        s.tcp.resets_received,
        c.tcp.resets_sent,
        c.tcp.resets_received,
        r.host_tcp.resets_sent
    );
    for q in r.stacks.iter().filter(|q| q.with_user > 0) {
        let _ = writeln!(out, "stacks: {}", unwind_line(q));
    }
    if let Some(line) = ring_full_line(s.user_stack_ring_full) {
        let _ = writeln!(out, "stacks: {line}");
    }
    if let Some(o) = &r.observer {
        let _ = writeln!(out, "watching: {}", observer_line(o));
    }
    let _ = writeln!(out, "timeline:");
    let _ = writeln!(
        out,
        "  {:>6} {:>10} {:>8} {:>9} {:>9} {:>9} {:>9} {:>6} {:>6} {:>11} {:>8}",
        "t(s)",
        "req/s",
        "errors",
        "p50 us",
        "p99 us",
        "vol cs/s",
        "inv cs/s",
        "usr%",
        "sys%",
        "syscalls/s",
        "client%"
    );
    for row in &r.timeline {
        let _ = writeln!(
            out,
            "  {:>6.1} {:>10.0} {:>8} {:>9} {:>9} {:>9.0} {:>9.0} {:>6.1} {:>6.1} {:>11} {:>8.1}",
            row.t_s,
            row.throughput_rps,
            row.errors,
            row.p50_us,
            row.p99_us,
            row.server.voluntary_switches_per_s,
            row.server.involuntary_switches_per_s,
            row.server.user_pct,
            row.server.sys_pct,
            crate::render::text::opt(row.server.syscalls_per_s, 0),
            row.client_user_pct + row.client_sys_pct
        );
    }
    let _ = writeln!(out, "{}", tracks_line(r));
    for n in &r.notes {
        let _ = writeln!(out, "note: {n}");
    }
}

pub fn timeline_csv(r: &RunReport) -> String {
    let ncpus = r
        .timeline
        .first()
        .map(|t| t.server.net_rx_per_s.len())
        .unwrap_or(0);
    let mut csv = String::from(CSV_HEADER_START);
    csv.push_str("completed,errors,p50_us,p99_us,voluntary_switches_per_s,involuntary_switches_per_s,runq_p99_us,user_pct,sys_pct,syscalls_per_s,listen_overflows,syn_retransmits,retransmits,client_cpu_pct,throttled_periods,throttled_ms");
    for kind in ["net_rx_per_s", "net_tx_per_s", "hardirqs_per_s"] {
        for cpu in 0..ncpus {
            let _ = write!(csv, ",{kind}_cpu{cpu}");
        }
    }
    csv.push('\n');
    for t in &r.timeline {
        let s = &t.server;
        let _ = write!(
            csv,
            "{:.3},{:.1},{},{},{},{},{:.1},{:.1},{:.1},{:.2},{:.2},{},{},{},{},{:.2},{},{:.1}",
            t.t_s,
            t.throughput_rps,
            t.completed,
            t.errors,
            t.p50_us,
            t.p99_us,
            s.voluntary_switches_per_s,
            s.involuntary_switches_per_s,
            s.runq_p99_us,
            s.user_pct,
            s.sys_pct,
            // An empty cell: not recorded (--syscalls off).
            s.syscalls_per_s
                .map(|v| format!("{v:.1}"))
                .unwrap_or_default(),
            s.listen_overflows,
            s.syn_retransmits,
            s.retransmits,
            t.client_user_pct + t.client_sys_pct,
            s.throttled_periods,
            s.throttled_ms
        );
        for v in s
            .net_rx_per_s
            .iter()
            .chain(&s.net_tx_per_s)
            .chain(&s.hardirqs_per_s)
        {
            let _ = write!(csv, ",{v:.1}");
        }
        csv.push('\n');
    }
    csv
}

/// One group's unwind quality for one kind of stack, in a line.
pub fn unwind_line(q: &srvprof_analysis::unwind_quality::UnwindQuality) -> String {
    let unit = if q.kind == "oncpu" { "samples" } else { "us" };
    let methods: Vec<String> = q
        .methods
        .iter()
        .map(|(m, w)| format!("{m} {:.0}%", *w as f64 * 100.0 / q.with_user.max(1) as f64))
        .collect();
    let copied = q.mean_copy_bytes.map_or(String::new(), |b| {
        format!("; {:.1} KiB of user stack copied per stack", b / 1024.0)
    });
    format!(
        "{} {}: {:.0}% of {} {unit} with a user part reach their start, {:.0}% have an unnamed frame, {:.1} user frames on average (unwound by {}{copied})",
        q.group,
        if q.kind == "oncpu" {
            "on-CPU"
        } else {
            "off-CPU"
        },
        q.reach_start * 100.0,
        q.with_user,
        q.with_unnamed * 100.0,
        q.mean_user_depth,
        methods.join(", ")
    )
}

/// The stacks that found the user-stack ring full, if any, in a sentence.
/// What watching cost, in one line: the probes' run time, and srvprof's own stalls.
pub fn observer_line(o: &srvprof_analysis::observer::ObserverCost) -> String {
    let per_request = o
        .bpf_us_per_request
        .map_or(String::new(), |us| format!("{us:.2} us per request, "));
    let share = o.share_of_server_cpu.map_or(String::new(), |s| {
        format!(", {:.1}% of the server's CPU time", s * 100.0)
    });
    let own: Vec<String> = (o.own_threads.iter())
        .filter(|t| t.thread.starts_with("srvprof"))
        .map(|t| format!("{} {:.1} ms/s", t.thread, t.cpu_ms_per_s))
        .collect();
    let own = if own.is_empty() {
        String::new()
    } else {
        format!("; its threads ran {}", own.join(", "))
    };
    format!(
        "the probes ran {per_request}{:.1} ms a second on all CPUs{share} (the kernel's timing over {:.0} s); srvprof attached or detached programs {:.1} times a second, each holding a CPU up to {:.2} ms{own}",
        o.bpf_ms_per_s,
        o.timed_s,
        o.flips_per_s,
        o.flip_max_us / 1e3
    )
}

pub fn ring_full_line(stacks: u64) -> Option<String> {
    (stacks > 0).then(|| {
        format!(
            "{stacks} stacks found the user-stack ring full (the unwinding thread fell behind) and \
             carry the kernel's frame-pointer walk instead, shallow through code without frame pointers"
        )
    })
}

/// What tracks p99 per interval: only correlations that are not chance (the permutation test of
/// srvprof_analysis::correlation), or why none is named.
fn tracks_line(r: &RunReport) -> String {
    use srvprof_analysis::correlation::MIN_INTERVALS;
    let significant: Vec<String> = r
        .correlations
        .iter()
        .filter(|c| c.significant())
        .take(3)
        .map(|c| format!("{} (r={:.2}, p={:.3})", c.series, c.coefficient, c.p_value))
        .collect();
    if !significant.is_empty() {
        format!("p99 per interval tracks: {}", significant.join(", "))
    } else if r.timeline.len() < MIN_INTERVALS {
        format!(
            "p99 per interval: too few intervals ({} of the {MIN_INTERVALS} needed) to tell what tracks it",
            r.timeline.len()
        )
    } else {
        match r.correlations.first() {
            Some(c) => format!(
                "p99 per interval: nothing tracks it beyond chance (strongest: {}, r={:.2}, p={:.2})",
                c.series, c.coefficient, c.p_value
            ),
            None => "p99 per interval: nothing tracks it (no figure varied)".to_string(),
        }
    }
}

#[cfg(test)]
mod tests {
    use srvprof_analysis::correlation::Correlation;
    use srvprof_analysis::run_report::TimelineRow;

    use super::*;

    fn run(intervals: usize, p_value: f64) -> RunReport {
        RunReport {
            timeline: vec![TimelineRow::default(); intervals],
            correlations: vec![Correlation {
                series: "run-queue p99".into(),
                coefficient: 0.91,
                intervals,
                p_value,
            }],
            ..Default::default()
        }
    }

    #[test]
    fn only_what_is_not_chance_is_said_to_track_p99() {
        assert_eq!(
            tracks_line(&run(30, 0.002)),
            "p99 per interval tracks: run-queue p99 (r=0.91, p=0.002)"
        );
        assert_eq!(
            tracks_line(&run(30, 0.2)),
            "p99 per interval: nothing tracks it beyond chance (strongest: run-queue p99, r=0.91, p=0.20)"
        );
        assert_eq!(
            tracks_line(&run(6, 0.002)),
            "p99 per interval: too few intervals (6 of the 10 needed) to tell what tracks it"
        );
    }

    #[test]
    fn the_load_line_names_only_the_errors_that_happened() {
        let load_line = |errors: &[(&str, u64)]| {
            let mut r = RunReport::default();
            r.load.errors = errors.iter().map(|(_, n)| n).sum();
            for kind in ["connect_refused", "read_timeout", "reset"] {
                r.load.errors_by_kind.insert(kind.into(), 0);
            }
            for (kind, n) in errors {
                r.load.errors_by_kind.insert(kind.to_string(), *n);
            }
            let mut out = Vec::new();
            print(&mut out, &r);
            let text = String::from_utf8(out).unwrap();
            let line = text.lines().find(|l| l.starts_with("load: ")).unwrap();
            line.to_string()
        };
        let none = load_line(&[]);
        assert!(none.contains("0 ok, no errors, latency"), "{none}");
        let some = load_line(&[("read_timeout", 3), ("reset", 1)]);
        assert!(
            some.contains("4 errors (read_timeout 3, reset 1), latency"),
            "{some}"
        );
        assert!(!some.contains("connect_refused"), "{some}");
    }
}
