//! Parts of `srvprof run`'s text (the first screen is first_screen.rs): the timeline as a table
//! and as CSV, what tracks p99, the stacks' quality and what watching cost, in a line each.

use std::fmt::Write as _;

use srvprof_analysis::run_report::RunReport;

/// First columns of timeline.csv; also how srvprof recognizes a file it wrote.
pub const CSV_HEADER_START: &str = "t_s,throughput_rps,";

/// The timeline as a table, a row per interval (`run --timeline`).
pub fn timeline_table(out: &mut String, r: &RunReport) {
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
    let count = match (q.sample_hz, q.measured_samples, q.expected_samples) {
        (Some(hz), Some(n), Some(expected)) if expected >= 1.0 => format!(
            "; {n} samples in the measured span, {:.0}% of the {expected:.0} its time on a CPU calls for at {hz} Hz{}",
            n as f64 * 100.0 / expected,
            match q.precharged_samples {
                Some(p) if p >= 0.5 => format!(
                    " (the scheduler charged it {p:.0} samples' worth more, from wakeups to switch-ins while the CPU left idle, where no timer lands for it)"
                ),
                _ => String::new(),
            }
        ),
        _ => String::new(),
    };
    format!(
        "{} {}: {:.0}% of {} {unit} with a user part reach their start, {:.0}% have an unnamed frame, {:.1} user frames on average (unwound by {}{copied}){count}",
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

/// The on-CPU timer restarted off its grid at least once a second of the window: another
/// profiler's control-group events switching (none restart it otherwise: 0 in a quiet run).
pub fn timer_restarted_line(restarted: u64, duration_s: f64) -> Option<String> {
    (restarted > 0 && restarted as f64 >= duration_s).then(|| {
        format!(
            "the sampling timer was restarted off its grid {restarted} times ({:.0} a second): another \
             profiler's control-group perf events (perf record -G, a container agent) switch it at \
             each switch into or out of their group, and per-CPU samples, srvprof's and perf -a's \
             alike, then lean toward that group's threads (+10-19 % measured with perf -G on a \
             thread-per-connection server)",
            restarted as f64 / duration_s.max(1e-9)
        )
    })
}

/// What tracks p99 per interval: only correlations that are not chance (the permutation test of
/// srvprof_analysis::correlation), or why none is named.
pub fn tracks_line(r: &RunReport) -> String {
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

    #[test]
    fn a_timer_restarted_once_a_second_or_more_is_said_with_its_rate() {
        assert_eq!(timer_restarted_line(0, 15.0), None);
        assert_eq!(timer_restarted_line(14, 15.0), None);
        let line = timer_restarted_line(1406, 15.0).unwrap();
        assert!(line.contains("1406 times (94 a second)"), "{line}");
    }

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
}
