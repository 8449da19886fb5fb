//! What `srvprof run` prints when it ends, in the order a user asks: what ran, what it measured,
//! whether the run is valid, what made the tail, what each request cost, where the server spent
//! its time, the kernel's figures, and where the report is. Within 100 columns; numbers with
//! units and thousands separators; the timeline only when asked for (`--timeline`).

use std::fmt::Write as _;

use srvprof_analysis::finding::{Finding, FindingKind, Severity};
use srvprof_analysis::run_report::RunReport;
use srvprof_analysis::stacks::{FoldedLine, FoldedStacks, StackKind};
use srvprof_analysis::tail_account::{self, TailAccount};
use srvprof_common::GROUP_SERVER;
use srvprof_loadgen::printer::human_us;

use super::run_text;
use super::status::thousands;
use super::text::wrap;

const WIDTH: usize = 100;
/// The label column.
const LABEL: usize = 13;
/// Where an account row's description starts.
const ACCOUNT_TEXT: usize = 18;
/// The account's parts shown: those of at least this share of p99.
const SHOWN_PART: f64 = 0.01;
/// Functions named per kind of stack.
const HOT_FUNCTIONS: usize = 3;
/// Stacks read as poor, and their quality shown, when fewer than this share reach their start.
const POOR_REACH: f64 = 0.5;
/// ...or more than this share has an unnamed frame.
const POOR_UNNAMED: f64 = 0.2;

/// Findings about the run itself rather than the server: they say whether to trust it.
fn about_the_run(kind: FindingKind) -> bool {
    matches!(
        kind,
        FindingKind::NoSuccess
            | FindingKind::TargetDied
            | FindingKind::ClientBound
            | FindingKind::ClientConcurrencyShort
            | FindingKind::LostEvents
            | FindingKind::ObserverCost
            | FindingKind::ShallowStacks
    )
}

/// The run's first screen; `timeline`: the interval table too.
pub fn text(r: &RunReport, stacks: Option<&FoldedStacks>, timeline: bool) -> String {
    let mut out = String::new();
    let l = &r.load;
    let c = &l.config;
    let pids: Vec<String> = r.target.pids.iter().map(u32::to_string).collect();
    line(
        &mut out,
        "srvprof run",
        &format!("{}, PIDs {}", r.target.url, pids.join(" ")),
    );
    let shape = match (&c.rate_schedule, c.rate) {
        (Some(stages), _) => format!("open loop, {stages}"),
        (None, Some(rate)) => format!("open loop, {} req/s", thousands(rate.round() as u64)),
        (None, None) => "closed loop".to_string(),
    };
    line(
        &mut out,
        "  load",
        &format!(
            "{shape}, {} connections{}, {:.1} s measured after {} s of warm-up",
            thousands(c.connections as u64),
            if c.keepalive {
                ""
            } else {
                ", a new one per request"
            },
            l.duration_s,
            c.warmup_s + c.ramp_up_s
        ),
    );
    let errors = match l.errors {
        0 => "no errors".to_string(),
        n => format!("{} errors ({})", thousands(n), l.error_kinds()),
    };
    line(
        &mut out,
        "result",
        &format!(
            "{} req/s, {} ok, {errors}",
            thousands(l.throughput_rps.round() as u64),
            thousands(l.completed)
        ),
    );
    let lat = &l.latency_us;
    line(
        &mut out,
        "  latency",
        &format!(
            "p50 {}, p99 {}, p99.9 {}, max {}",
            human_us(lat.p50 as f64),
            human_us(lat.p99 as f64),
            human_us(lat.p999 as f64),
            human_us(lat.max as f64)
        ),
    );
    let (run_findings, causes): (Vec<&Finding>, Vec<&Finding>) =
        r.findings.iter().partition(|f| about_the_run(f.kind));
    let invalid: Vec<&&Finding> = (run_findings.iter())
        .filter(|f| f.severity != Severity::Info)
        .collect();
    if invalid.is_empty() && l.errors == 0 {
        line(
            &mut out,
            "valid",
            "yes: the load generator kept up and every request succeeded",
        );
    } else if invalid.is_empty() {
        line(
            &mut out,
            "valid",
            "with errors: the figures count only the requests that succeeded",
        );
    }
    for f in &invalid {
        line(&mut out, "valid", &format!("NO: {}", f.summary));
    }
    let _ = writeln!(out, "causes of the tail, by their share of p99");
    // Told for a skewed tail, or when a finding was made from it (a wait every request meets).
    let from_account =
        (r.findings.iter()).any(|f| matches!(f.kind, FindingKind::TailWait | FindingKind::TailCpu));
    let account = (r.tail_account.as_ref()).filter(|a| a.skewed() || from_account);
    let skewed = tail_account::skewed(lat.p50 as f64, lat.p99 as f64);
    match (causes.is_empty(), account, skewed) {
        (false, _, _) => {}
        (true, Some(_), _) => {
            let _ = writeln!(out, "  no rule fired: where p99's time went is below");
        }
        (true, None, true) => {
            let _ = writeln!(
                out,
                "  no rule fired, and without the server's stacks srvprof cannot say where p99's time went"
            );
        }
        (true, None, false) => {
            let _ = writeln!(out, "  none: no rule fired (report.html shows the tables)");
        }
    }
    for (i, f) in causes.iter().enumerate() {
        let share = f
            .tail_share
            .map_or("    ".to_string(), |s| format!("{:>3.0}%", s * 100.0));
        let _ = writeln!(
            out,
            "{}",
            one_line(&format!(
                "  {}. {share} {}: {}",
                i + 1,
                f.kind,
                headline(&f.summary)
            ))
        );
    }
    if let Some(first) = causes.first() {
        // Copy-paste ready: the binary carries every kind's explanation.
        let _ = writeln!(
            out,
            "  (srvprof explain {} says what a kind means; report.html has the evidence)",
            first.kind
        );
    }
    if let Some(a) = account {
        tail_account(&mut out, a);
    }
    for f in run_findings.iter().filter(|f| f.severity == Severity::Info) {
        line(&mut out, "also", &f.summary);
    }
    let _ = writeln!(
        out,
        "{:<LABEL$}{:>9} {:>9} {:>9} {:>9} {:>9} {:>12}",
        "per request", "ctx sw", "syscalls", "CPU us", "user us", "sys us", "net softirqs"
    );
    for (who, p) in [
        ("  server", &r.per_request.server),
        ("  client", &r.per_request.client),
    ] {
        let _ = writeln!(
            out,
            "{who:<LABEL$}{:>9.3} {:>9} {:>9.2} {:>9.2} {:>9.2} {:>12.2}",
            p.context_switches,
            super::text::opt(p.syscalls, 2),
            p.cpu_us,
            p.user_us,
            p.sys_us,
            p.net_softirqs
        );
    }
    let top: Vec<String> = (r.per_request.server.top_syscalls.iter())
        .map(|s| format!("{} {:.2}", s.name, s.per_request))
        .collect();
    if !top.is_empty() {
        line(
            &mut out,
            "  syscalls",
            &format!(
                "server: {}{}",
                top.join(", "),
                super::text::estimate_note(&r.server)
            ),
        );
    }
    if let Some(stacks) = stacks {
        for (label, kind) in [
            ("hot on CPU", StackKind::OnCpu),
            ("off CPU", StackKind::OffCpu),
        ] {
            let lines = stacks.of_group(kind, GROUP_SERVER);
            let hot = hot_functions(&lines, kind);
            if !hot.is_empty() {
                line(&mut out, label, &format!("server: {hot}"));
            }
        }
    }
    let s = &r.server;
    let secs = s.duration_s.max(1e-9);
    line(
        &mut out,
        "kernel",
        &format!(
            "server: {} context switches/s ({:.0}% involuntary), run-queue p99 {}, user {:.0}% \
             sys {:.0}% of a CPU; {} listen overflows, {} SYN retransmits; resets sent {}, received {}",
            thousands(
                ((s.totals.voluntary_switches + s.totals.involuntary_switches) as f64 / secs)
                    .round() as u64
            ),
            s.totals.involuntary_switches as f64 * 100.0
                / (s.totals.voluntary_switches + s.totals.involuntary_switches).max(1) as f64,
            human_us(s.runq_latency_us.p99),
            s.totals.user_ns as f64 / secs / 1e7,
            s.totals.sys_ns as f64 / secs / 1e7,
            thousands(s.tcp.listen_overflows),
            thousands(s.tcp.syn_retransmits),
            thousands(s.tcp.resets_sent),
            thousands(s.tcp.resets_received)
        ),
    );
    if let Some(q) = &s.tcp.accept_queue {
        line(
            &mut out,
            "",
            &format!(
                "{} new connections waited {} on average to be taken (accept queue, then first \
                 read), p99 {}",
                thousands(q.accepts),
                human_us(q.wait_ns as f64 / 1e3 / q.accepts.max(1) as f64),
                human_us(q.p99_ms * 1e3),
            ),
        );
    }
    for q in (r.stacks.iter()).filter(|q| {
        q.with_user > 0 && (q.reach_start < POOR_REACH || q.with_unnamed > POOR_UNNAMED)
    }) {
        line(&mut out, "stacks", &run_text::unwind_line(q));
    }
    if let Some(ring) = run_text::ring_full_line(s.user_stack_ring_full) {
        line(&mut out, "stacks", &ring);
    }
    let restarted = s.oncpu_ticks.restarted;
    if let Some(l) = run_text::timer_restarted_line(restarted, s.duration_s) {
        line(&mut out, "stacks", &l);
    }
    if let Some(o) = &r.observer {
        line(&mut out, "watching", &run_text::observer_line(o));
    }
    if timeline {
        run_text::timeline_table(&mut out, r);
    }
    line(&mut out, "timeline", &run_text::tracks_line(r));
    for n in &r.notes {
        line(&mut out, "note", n);
    }
    out
}

/// Where p99's time went: each part's share and time, and what no part accounts for.
fn tail_account(out: &mut String, a: &TailAccount) {
    let _ = writeln!(
        out,
        "where p99's time went (p99 {}, {:.0}x the median; docs/how-it-measures.md says how)",
        human_us(a.p99_ms * 1e3),
        a.p99_ms / a.p50_ms.max(1e-9)
    );
    // A row wraps under its description rather than lose the end of it.
    let row = |share: f64, ms: f64, what: &str| {
        wrap(
            &format!(
                "  {:>3.0}% {:>9}  {what}",
                share * 100.0,
                human_us(ms * 1e3)
            ),
            ACCOUNT_TEXT,
            WIDTH,
        )
    };
    for p in a.parts.iter().filter(|p| p.share >= SHOWN_PART) {
        let what = match p.how_often(a.requests) {
            Some(often) => format!("{} ({often})", p.describe()),
            None => p.describe(),
        };
        let _ = writeln!(out, "{}", row(p.share, p.tail_ms, &what));
    }
    let _ = writeln!(
        out,
        "{}",
        row(a.unaccounted_share, a.unaccounted_ms, "not accounted for")
    );
}

/// A finding's headline: its summary up to the first colon (findings say what, then the detail),
/// or all of it.
fn headline(summary: &str) -> &str {
    match summary.find(": ") {
        Some(at) if at >= 20 => &summary[..at],
        _ => summary,
    }
}

/// `text` cut to WIDTH columns at a word, ending in "...".
fn one_line(text: &str) -> String {
    if text.chars().count() <= WIDTH {
        return text.to_string();
    }
    // The indent stays as it is; the words after it are cut.
    let body = text.trim_start_matches(' ');
    let mut out = " ".repeat(text.len() - body.len());
    let indent = out.len();
    for word in body.split(' ') {
        if out.chars().count() + 1 + word.chars().count() + 3 > WIDTH {
            break;
        }
        if out.len() > indent {
            out.push(' ');
        }
        out.push_str(word);
    }
    out.push_str("...");
    out
}

/// A labelled line, its text wrapped under itself.
fn line(out: &mut String, label: &str, text: &str) {
    let _ = writeln!(
        out,
        "{}",
        wrap(&format!("{label:<LABEL$}{text}"), LABEL, WIDTH)
    );
}

/// The functions with the largest shares of one kind of the server's stacks: on-CPU the running
/// function, off-CPU the innermost user function (the kernel's frames there are the same few
/// scheduler functions for every wait).
fn hot_functions(lines: &[FoldedLine], kind: StackKind) -> String {
    let total: u64 = lines.iter().map(|l| l.value).sum();
    if total == 0 {
        return String::new();
    }
    let mut by_function: std::collections::BTreeMap<&str, u64> = Default::default();
    for l in lines {
        let function = match kind {
            StackKind::OnCpu => l.frames.last(),
            StackKind::OffCpu => l.frames.iter().skip(1).rev().find(|f| !f.ends_with("_[k]")),
        };
        if let Some(f) = function {
            *by_function.entry(f.as_str()).or_default() += l.value;
        }
    }
    let mut ranked: Vec<(&str, u64)> = by_function.into_iter().collect();
    ranked.sort_by(|a, b| b.1.cmp(&a.1).then(a.0.cmp(b.0)));
    ranked
        .iter()
        .take(HOT_FUNCTIONS)
        .map(|(f, v)| format!("{f} {:.0}%", *v as f64 * 100.0 / total as f64))
        .collect::<Vec<_>>()
        .join(", ")
}

#[cfg(test)]
mod tests {
    use super::*;
    use srvprof_analysis::stacks::LineSet;

    fn report() -> RunReport {
        let mut r = RunReport::default();
        r.target.url = "http://127.0.0.1:8080/".into();
        r.target.pids = vec![4242, 4243];
        r.load.config.connections = 1000;
        r.load.config.keepalive = true;
        r.load.config.warmup_s = 2.0;
        r.load.duration_s = 10.0;
        r.load.throughput_rps = 132_001.4;
        r.load.completed = 1_320_014;
        r.load.latency_us.p50 = 412;
        r.load.latency_us.p99 = 1_020_000;
        r.load.latency_us.p999 = 1_030_000;
        r.load.latency_us.max = 3_010_000;
        r.server.duration_s = 10.0;
        r.server.totals.voluntary_switches = 90_000;
        r.server.totals.involuntary_switches = 10_000;
        r.server.totals.user_ns = 4_500_000_000;
        r.server.totals.sys_ns = 3_000_000_000;
        r.server.runq_latency_us.p99 = 35.0;
        r.server.tcp.listen_overflows = 412;
        r.server.tcp.syn_retransmits = 2_061;
        r.per_request.server.context_switches = 0.076;
        r.per_request.server.cpu_us = 5.68;
        r.per_request.server.user_us = 3.41;
        r.per_request.server.sys_us = 2.27;
        r.findings = vec![
            Finding::new(
                FindingKind::SynRetransmitTail,
                Severity::Critical,
                "p99 of 1.02 s = SYN retransmit after 412 accept-queue overflows: the listen \
                 backlog (4) is full; raise it (listen ... backlog=4096) and net.core.somaxconn"
                    .into(),
                &[],
            )
            .explaining(1000.0, 1020.0),
        ];
        r
    }

    fn stacks() -> FoldedStacks {
        let mut on = LineSet::default();
        let frames = |f: &[&str]| f.iter().map(|s| s.to_string()).collect();
        on.add(
            GROUP_SERVER,
            frames(&["nginx", "main", "ngx_http_handler"]),
            60,
        );
        on.add(
            GROUP_SERVER,
            frames(&["nginx", "main", "tcp_sendmsg_[k]"]),
            40,
        );
        let mut off = LineSet::default();
        off.add(
            GROUP_SERVER,
            frames(&[
                "nginx",
                "main",
                "epoll_wait",
                "do_epoll_wait_[k]",
                "schedule_[k]",
            ]),
            900,
        );
        off.add(
            GROUP_SERVER,
            frames(&["nginx", "main", "write", "schedule_[k]"]),
            100,
        );
        let mut s = FoldedStacks::default();
        s.set(StackKind::OnCpu, on.finish());
        s.set(StackKind::OffCpu, off.finish());
        s
    }

    #[test]
    fn the_first_screen_answers_in_order_within_100_columns() {
        let text = text(&report(), Some(&stacks()), false);
        assert_eq!(
            text,
            "\
srvprof run  http://127.0.0.1:8080/, PIDs 4242 4243
  load       closed loop, 1,000 connections, 10.0 s measured after 2 s of warm-up
result       132,001 req/s, 1,320,014 ok, no errors
  latency    p50 412us, p99 1.02s, p99.9 1.03s, max 3.01s
valid        yes: the load generator kept up and every request succeeded
causes of the tail, by their share of p99
  1.  98% syn_retransmit_tail: p99 of 1.02 s = SYN retransmit after 412 accept-queue overflows
  (srvprof explain syn_retransmit_tail says what a kind means; report.html has the evidence)
per request     ctx sw  syscalls    CPU us   user us    sys us net softirqs
  server         0.076         -      5.68      3.41      2.27         0.00
  client         0.000         -      0.00      0.00      0.00         0.00
hot on CPU   server: ngx_http_handler 60%, tcp_sendmsg_[k] 40%
off CPU      server: epoll_wait 90%, write 10%
kernel       server: 10,000 context switches/s (10% involuntary), run-queue p99 35us, user 45% sys
             30% of a CPU; 412 listen overflows, 2,061 SYN retransmits; resets sent 0, received 0
timeline     p99 per interval: too few intervals (0 of the 10 needed) to tell what tracks it
"
        );
        assert!(text.lines().all(|l| l.chars().count() <= WIDTH), "{text}");
    }

    #[test]
    fn new_connections_waits_to_be_taken_are_told_when_timed() {
        let mut r = report();
        r.server.tcp.accept_queue = Some(srvprof_analysis::kernel_report::AcceptQueueReport {
            accepts: 2_000,
            wait_ns: 10_240_000_000,
            p99_ms: 100.66,
            max_ms: 117.4,
            by_port: Vec::new(),
        });
        let text = text(&r, Some(&stacks()), false);
        assert!(
            text.contains(
                "2,000 new connections waited 5.12ms on average to be taken (accept queue, then first\n"
            ),
            "{text}"
        );
        assert!(text.lines().all(|l| l.chars().count() <= WIDTH), "{text}");
    }

    #[test]
    fn a_cause_is_one_line_its_headline_cut_at_a_word() {
        assert_eq!(
            headline("server threads waited for a CPU: run-queue p99 2.6 ms"),
            "server threads waited for a CPU"
        );
        assert_eq!(headline("short: detail"), "short: detail");
        let long = "word ".repeat(40);
        let cut = one_line(&long);
        assert!(
            cut.ends_with("word...") && cut.chars().count() <= WIDTH,
            "{cut}"
        );
        assert_eq!(one_line("fits"), "fits");
        let indented = one_line(&format!("  1.  99% {long}"));
        assert!(indented.starts_with("  1.  99% word"), "{indented}");
    }

    #[test]
    fn a_run_that_measured_the_client_says_so_before_the_causes() {
        let mut r = report();
        r.findings.push(Finding::new(
            FindingKind::ClientBound,
            Severity::Critical,
            "load generator CPU-bound: this run measured the client, not the server".into(),
            &[],
        ));
        r.load.errors = 3;
        r.load.errors_by_kind.insert("read_timeout".into(), 3);
        r.load.errors_by_kind.insert("connect_refused".into(), 0);
        let text = text(&r, None, false);
        let valid = text.lines().position(|l| l.starts_with("valid")).unwrap();
        let causes = text.lines().position(|l| l.starts_with("causes")).unwrap();
        assert!(valid < causes, "{text}");
        assert!(
            text.contains("valid        NO: load generator CPU-bound"),
            "{text}"
        );
        assert!(text.contains("3 errors (read_timeout 3)"), "{text}");
        assert!(
            !text.contains("connect_refused"),
            "kinds that did not happen: {text}"
        );
        assert!(!text.contains("hot on CPU"), "{text}");
    }

    #[test]
    fn with_no_rule_fired_a_skewed_tail_is_told_by_its_account() {
        use srvprof_analysis::tail_account::{Place, Resource, TailAccount, TailPart};
        let mut r = report();
        r.findings.clear();
        r.load.latency_us.p50 = 81;
        r.load.latency_us.p99 = 30_200;
        let part = |place, resource, kernel: Option<&str>, ms: f64| TailPart {
            place,
            resource,
            kernel: kernel.map(str::to_string),
            function: resource.map(|_| "wait_for_ticket".to_string()),
            threads: Vec::new(),
            per_request_ms: ms / 50.0,
            tail_ms: ms,
            share: ms / 30.2,
            ..Default::default()
        };
        let account = TailAccount {
            p50_ms: 0.081,
            p99_ms: 30.2,
            requests: 10_000,
            parts: vec![
                TailPart {
                    waits: Some(200.0),
                    mean_wait_ms: Some(30.1),
                    ..part(
                        Place::Blocked,
                        Some(Resource::Pipe),
                        Some("pipe_read"),
                        29.5,
                    )
                },
                part(Place::OnCpu, None, Some("conn_main"), 0.05),
                part(Place::RunQueue, None, None, 0.001),
            ],
            unaccounted_ms: 0.649,
            unaccounted_share: 0.649 / 30.2,
            ..Default::default()
        };
        r.tail_account = Some(account.clone());
        let text = text(&r, None, false);
        let block = "\
causes of the tail, by their share of p99
  no rule fired: where p99's time went is below
where p99's time went (p99 30.20ms, 373x the median; docs/how-it-measures.md says how)
   98%   29.50ms  blocked on a pipe in pipe_read, called from wait_for_ticket (1 request in 50 waits
                  30.1 ms)
    2%     649us  not accounted for
";
        assert!(text.contains(block), "{text}");
        assert!(text.lines().all(|l| l.chars().count() <= WIDTH), "{text}");
        // Without stacks there is no account, and the screen says what it would take.
        r.tail_account = None;
        let bare = super::text(&r, None, false);
        assert!(
            bare.contains("no rule fired, and without the server's stacks"),
            "{bare}"
        );
        // A tail under SKEWED_TAIL times the median is not told.
        r.load.latency_us.p99 = 200;
        r.tail_account = Some(TailAccount {
            p99_ms: 0.2,
            ..account
        });
        let short = super::text(&r, None, false);
        assert!(short.contains("none: no rule fired"), "{short}");
        assert!(!short.contains("where p99's time went"), "{short}");
    }
}
