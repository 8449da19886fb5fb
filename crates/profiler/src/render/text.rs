//! Terminal output: timeline rows and summaries. Every number has its unit in its header.

use std::io::Write;

use srvprof_analysis::interval::KernelRow;
use srvprof_analysis::kernel_report::KernelReport;

pub fn interval_header(out: &mut impl Write, ncpus: usize) {
    let mut h = format!(
        "{:>6} {:>10} {:>10} {:>10} {:>6} {:>6} {:>11}",
        "t(s)", "vol cs/s", "invol cs/s", "runq p99us", "usr%", "sys%", "syscalls/s"
    );
    for cpu in 0..ncpus {
        h.push_str(&format!(" {:>11}", format!("NET_RX/s c{cpu}")));
    }
    let _ = writeln!(out, "{h}");
}

pub fn interval_line(out: &mut impl Write, r: &KernelRow) {
    let mut l = format!(
        "{:>6.1} {:>10.0} {:>10.0} {:>10.0} {:>6.1} {:>6.1} {:>11}",
        r.t_s + r.duration_s,
        r.voluntary_switches_per_s,
        r.involuntary_switches_per_s,
        r.runq_p99_us,
        r.user_pct,
        r.sys_pct,
        opt(r.syscalls_per_s, 0)
    );
    for v in &r.net_rx_per_s {
        l.push_str(&format!(" {v:>11.0}"));
    }
    let _ = writeln!(out, "{l}");
}

pub fn kernel_summary(out: &mut impl Write, r: &KernelReport, notes: &[String]) {
    let t = &r.totals;
    let secs = r.duration_s.max(1e-9);
    let _ = writeln!(
        out,
        "\n== summary: {:.1} s, {} process(es), {} active thread(s)",
        r.duration_s, t.processes, t.threads
    );
    let _ = writeln!(
        out,
        "context switches: {} voluntary ({:.0}/s), {} involuntary ({:.0}/s), {} migrations",
        t.voluntary_switches,
        t.voluntary_switches as f64 / secs,
        t.involuntary_switches,
        t.involuntary_switches as f64 / secs,
        t.migrations
    );
    let _ = writeln!(
        out,
        "CPU: user {:.1} ms ({:.1}%), sys {:.1} ms ({:.1}%)",
        t.user_ns as f64 / 1e6,
        t.user_ns as f64 / (secs * 1e7),
        t.sys_ns as f64 / 1e6,
        t.sys_ns as f64 / (secs * 1e7)
    );
    let _ = writeln!(
        out,
        "run-queue latency (us): p50 {:.0}, p99 {:.0}, max {:.0} over {} waits",
        r.runq_latency_us.p50,
        r.runq_latency_us.p99,
        r.runq_latency_us.max,
        r.runq_latency_us.count
    );
    if r.syscalls_off {
        let _ = writeln!(out, "syscalls: not recorded (--syscalls off)");
    } else if r.syscalls_missed {
        let _ = writeln!(
            out,
            "syscalls: unknown (no sampled window caught the server busy; --exact counts them all)"
        );
    } else {
        let _ = writeln!(
            out,
            "syscalls: {} ({:.0}/s){}",
            t.syscalls,
            t.syscalls as f64 / secs,
            estimate_note(r)
        );
        let sampled = r.traced_fraction.is_some();
        let _ = writeln!(
            out,
            "  {:<20} {:>10}{} {:>12}{} {:>10}",
            "syscall",
            "count",
            if sampled { "  (95 %)" } else { "" },
            "total ms",
            if sampled { "  (95 %)" } else { "" },
            "avg us"
        );
    }
    for s in r.syscalls.iter().take(10) {
        let _ = writeln!(
            out,
            "  {:<20} {:>10}{} {:>12.2}{} {:>10.2}",
            s.name,
            s.count,
            spread(r, s.count_error),
            s.total_ns as f64 / 1e6,
            spread(r, s.time_error),
            s.total_ns as f64 / 1e3 / s.count.max(1) as f64
        );
    }
    if !r.wakeups.is_empty() {
        let _ = writeln!(out, "top wakers (waker pid/tid -> woken tid: wakeups):");
        for w in r.wakeups.iter().take(5) {
            let _ = writeln!(
                out,
                "  {} {}/{} -> {} {}: {}",
                w.waker_comm, w.waker_pid, w.waker_tid, w.wakee_comm, w.wakee_tid, w.count
            );
        }
    }
    let _ = writeln!(out, "threads:");
    let _ = writeln!(
        out,
        "  {:>8} {:>8} {:<16} {:>9} {:>9} {:>10} {:>10} {:>9} {:>9}",
        "pid", "tid", "comm", "vol cs", "invol cs", "oncpu ms", "offcpu ms", "usr ms", "sys ms"
    );
    let mut threads = r.threads.clone();
    threads.sort_by_key(|t| std::cmp::Reverse(t.voluntary_switches + t.involuntary_switches));
    for th in threads.iter().take(20) {
        let _ = writeln!(
            out,
            "  {:>8} {:>8} {:<16} {:>9} {:>9} {:>10.1} {:>10.1} {:>9.1} {:>9.1}",
            th.pid,
            th.tid,
            th.comm,
            th.voluntary_switches,
            th.involuntary_switches,
            th.oncpu_ns as f64 / 1e6,
            th.offcpu_ns as f64 / 1e6,
            th.user_ns as f64 / 1e6,
            th.sys_ns as f64 / 1e6
        );
    }
    let mut net: Vec<_> = r
        .softirqs
        .iter()
        .filter(|s| s.vector.starts_with("NET"))
        .collect();
    net.sort_by_key(|s| (s.vector.clone(), s.cpu));
    if !net.is_empty() {
        let _ = writeln!(out, "network softirqs (system-wide):");
        for s in net {
            let _ = writeln!(
                out,
                "  cpu{} {:<7} {:>10} ({:.0}/s, {})",
                s.cpu,
                s.vector,
                s.count,
                s.count as f64 / secs,
                if s.time_unknown {
                    "time unknown: no window saw one".to_string()
                } else {
                    format!(
                        "{:.1} ms{}",
                        s.total_ns as f64 / 1e6,
                        spread(r, s.time_error).trim_end()
                    )
                }
            );
        }
    }
    let tcp = &r.tcp;
    let _ = writeln!(
        out,
        "TCP (the server's sockets): {} listen overflows, {} listen drops, {} SYN retransmits, {} retransmits, {} resets sent, {} received",
        tcp.listen_overflows,
        tcp.listen_drops,
        tcp.syn_retransmits,
        tcp.retransmits,
        tcp.resets_sent,
        tcp.resets_received
    );
    for reset in &tcp.resets {
        let _ = writeln!(
            out,
            "  {} {} resets in {}{}",
            reset.count,
            reset.direction,
            reset.state,
            reset
                .reason
                .as_deref()
                .map(|why| format!(", kernel reason {why}"))
                .unwrap_or_default()
        );
    }
    let host = &r.host_tcp;
    let _ = writeln!(
        out,
        "TCP (whole host): {} listen overflows, {} retransmits, {} resets sent ({} on neither side's sockets)",
        host.listen_overflows, host.retransmits, host.resets_sent, host.other_resets_sent
    );
    for e in &r.exits {
        let how = match (e.signal, e.exit_code) {
            (Some(sig), _) => format!(
                "killed by signal {sig} ({})",
                srvprof_analysis::names::signal_name(sig)
            ),
            (None, Some(code)) => format!("exited with code {code}"),
            _ => "exited".into(),
        };
        let _ = writeln!(
            out,
            "exit: pid {} tid {} ({}) {} at {:.2} s",
            e.pid, e.tid, e.comm, how, e.t_s
        );
    }
    let lost: u64 = r.lost_events.values().sum();
    if lost > 0 {
        let by_reason: Vec<String> = (r.lost_events.iter())
            .filter(|(_, n)| **n > 0)
            .map(|(reason, n)| format!("{reason} {n}"))
            .collect();
        let _ = writeln!(
            out,
            "WARNING: {lost} kernel records were lost ({})",
            by_reason.join(", ")
        );
    }
    for n in notes {
        let _ = writeln!(out, "note: {n}");
    }
}

/// A figure with `prec` decimals, or "-" when it was not measured.
pub fn opt(v: Option<f64>, prec: usize) -> String {
    v.map(|v| format!("{v:.prec$}"))
        .unwrap_or_else(|| "-".into())
}

/// Sampled mode: an estimate's 95 % uncertainty as " ±12 %", padded to one width (" ±?" when
/// too few windows could tell); nothing in exact mode, where every figure is counted.
pub fn spread(r: &KernelReport, error: Option<f64>) -> String {
    if r.traced_fraction.is_none() {
        return String::new();
    }
    let e = error
        .map(|e| format!("±{:.0} %", e * 100.0))
        .unwrap_or_else(|| "±?".into());
    format!(" {e:<7}")
}

/// Sampled mode: how far the syscall figures may be off, and what they were scaled by.
pub fn estimate_note(r: &KernelReport) -> String {
    match (r.syscalls_error, r.scaled_by.as_deref()) {
        (Some(e), Some(by)) => format!(", estimated ±{:.0} % (95 %, scaled by {by})", e * 100.0),
        (None, Some(by)) => {
            format!(", estimated (scaled by {by}; too few windows to state how closely)")
        }
        _ => String::new(),
    }
}

/// `text` in lines of at most `width` columns, broken at spaces, the lines after the first
/// indented by `indent` (a word longer than the room left stays whole).
pub fn wrap(text: &str, indent: usize, width: usize) -> String {
    let mut out = String::new();
    let mut column = 0;
    for (i, word) in text.split(' ').enumerate() {
        if i > 0 && column + 1 + word.chars().count() > width && column > indent {
            out.push('\n');
            out.push_str(&" ".repeat(indent));
            column = indent;
        } else if i > 0 {
            out.push(' ');
            column += 1;
        }
        out.push_str(word);
        column += word.chars().count();
    }
    out
}
