//! Markdown: the study's tables (requests/s and p99 per server × concurrency, per connection
//! mode, the study's figure in brackets where it has one) and one kernel row per cell.

use std::fmt::Write;

use super::cells::Metrics;
use super::{BenchArgs, Cell, Outcome, outcome};

/// Study 1 (2009) used `keepalive_timeout 0` and ab without -k: its figures are "close" cells.
/// Rows: (our label, [req/s at 30, 100, 1000, 5000], [p99 ms at the same]).
/// A Study 1 row: our label, req/s and p99 ms at each of STUDY1_LEVELS.
type StudyRow = (&'static str, [f64; 4], Option<[f64; 4]>);

const STUDY1: &[StudyRow] = &[
    (
        "nginx-html",
        [21_301.0, 21_331.0, 23_746.0, 23_502.0],
        Some([1.0, 4.0, 42.0, 3_079.0]),
    ),
    (
        "nginx-hello",
        [25_809.0, 25_735.0, 30_380.0, 29_667.0],
        Some([1.0, 4.0, 32.0, 3_047.0]),
    ),
    (
        "nginx-hello-4w",
        [25_057.0, 24_507.0, 31_544.0, 33_274.0],
        Some([1.0, 6.0, 205.0, 3_036.0]),
    ),
    (
        "erlang-1core",
        [11_585.0, 12_367.0, 12_852.0, 12_815.0],
        Some([3.0, 8.0, 629.0, 6_337.0]),
    ),
    (
        "erlang-allcore",
        [15_101.0, 20_255.0, 26_468.0, 25_865.0],
        Some([2.0, 7.0, 223.0, 3_084.0]),
    ),
    (
        "java-netty",
        [24_152.0, 24_423.0, 25_487.0, 25_521.0],
        Some([1.0, 3.0, 3.0, 3_084.0]),
    ),
    (
        "go",
        [14_080.0, 14_748.0, 15_799.0, 16_110.0],
        Some([26.0, 33.0, 47.0, 9_005.0]),
    ),
];
const STUDY1_LEVELS: [usize; 4] = [30, 100, 1000, 5000];

/// Study 2 (2013): (label, keepalive, concurrency, req/s).
const STUDY2: &[(&str, bool, usize, f64)] = &[
    ("nginx-lua", false, 100, 17_329.0),
    ("nginx-lua", false, 1000, 15_852.0),
    ("go", false, 100, 16_538.0),
    ("go", false, 1000, 15_032.0),
    ("nginx-lua", true, 100, 72_274.0),
    ("go", true, 100, 39_072.0),
];

pub fn study_rps(label: &str, connections: usize, keepalive: bool) -> Option<f64> {
    let level = STUDY1_LEVELS.iter().position(|&c| c == connections);
    if !keepalive && let (Some(i), Some(row)) = (level, STUDY1.iter().find(|r| r.0 == label)) {
        return Some(row.1[i]);
    }
    STUDY2
        .iter()
        .find(|r| r.0 == label && r.1 == keepalive && r.2 == connections)
        .map(|r| r.3)
}

pub fn study_p99_ms(label: &str, connections: usize, keepalive: bool) -> Option<f64> {
    let i = STUDY1_LEVELS.iter().position(|&c| c == connections)?;
    if keepalive {
        return None;
    }
    STUDY1.iter().find(|r| r.0 == label)?.2.map(|p| p[i])
}

pub fn thousands(value: f64) -> String {
    let n = value.round() as i64;
    let digits = n.abs().to_string();
    let mut out = String::new();
    for (i, ch) in digits.chars().enumerate() {
        if i > 0 && (digits.len() - i).is_multiple_of(3) {
            out.push(',');
        }
        out.push(ch);
    }
    if n < 0 { format!("-{out}") } else { out }
}

fn ms(us: f64) -> String {
    let ms = us / 1000.0;
    if ms >= 100.0 {
        thousands(ms)
    } else if ms >= 10.0 {
        format!("{ms:.0}")
    } else {
        format!("{ms:.1}")
    }
}

fn mode_title(keepalive: bool) -> &'static str {
    if keepalive {
        "keep-alive (one connection per client, reused)"
    } else {
        "new connection per request (server `--no-keepalive`, client `--no-keepalive`: Study 1's setting)"
    }
}

/// One study-shaped table: a row per server, a column per concurrency level.
fn grid_table(
    out: &mut String,
    bench: &BenchArgs,
    results: &[(Cell, Outcome)],
    keepalive: bool,
    cell_text: impl Fn(&Metrics) -> String,
    study: impl Fn(&str, usize) -> Option<String>,
) {
    let _ = write!(out, "| server |");
    for c in &bench.concurrency {
        let _ = write!(out, " c={c} |");
    }
    let _ = write!(out, "\n| --- |");
    for _ in &bench.concurrency {
        let _ = write!(out, " ---: |");
    }
    out.push('\n');
    for server in &bench.servers {
        let _ = write!(out, "| {} |", server.label);
        for &c in &bench.concurrency {
            let ours = match outcome(results, server.label, c, keepalive) {
                Some(Outcome::Ran(m)) => cell_text(m),
                Some(Outcome::Failed(_)) => "failed".to_string(),
                None => "-".to_string(),
            };
            match study(server.label, c) {
                Some(s) => {
                    let _ = write!(out, " {ours} ({s}) |");
                }
                None => {
                    let _ = write!(out, " {ours} |");
                }
            }
        }
        out.push('\n');
    }
    out.push('\n');
}

pub fn render(bench: &BenchArgs, results: &[(Cell, Outcome)]) -> String {
    let mut out = String::new();
    let _ = writeln!(out, "# srvprof bench\n");
    let _ = writeln!(
        out,
        "Each server pinned with `--cpus` as listed, `srvprof run --pid PID --cpus 0 --threads 1` from CPU 0, \
         {:.0} s measured after {:.0} s warmup per cell. Figures in brackets are the study's (8 cores, ab).\n",
        bench.duration.as_secs_f64(),
        bench.warmup.as_secs_f64()
    );
    for server in &bench.servers {
        let workers = server
            .workers
            .map(|w| format!(" --workers {w}"))
            .unwrap_or_default();
        let _ = writeln!(
            out,
            "- `{}`: `servers/{}/run --cpus {}{workers}`",
            server.label, server.dir, server.cpus
        );
    }
    out.push('\n');
    for &keepalive in &bench.keepalive {
        let _ = writeln!(out, "## Requests/s, {}\n", mode_title(keepalive));
        grid_table(
            &mut out,
            bench,
            results,
            keepalive,
            |m| thousands(m.rps),
            |label, c| study_rps(label, c, keepalive).map(thousands),
        );
        let _ = writeln!(out, "## p99 latency (ms), {}\n", mode_title(keepalive));
        grid_table(
            &mut out,
            bench,
            results,
            keepalive,
            |m| ms(m.p99_us),
            |label, c| study_p99_ms(label, c, keepalive).map(thousands),
        );
    }
    let _ = writeln!(out, "## What the kernel did, per cell\n");
    let _ = writeln!(
        out,
        "Server figures: context switches and syscalls per completed request, user/sys time as % of one CPU, \
         share of NET_RX softirqs taken by the busiest CPU (which CPU), listen-queue overflows and SYN \
         retransmits during the run, whether srvprof found the client to be the bottleneck, and its most \
         severe other finding.\n"
    );
    out.push_str(
        "| cell | req/s | p99 ms | errors | ctx sw/req | syscalls/req | user % | sys % | NET_RX busiest CPU | listen overflows | SYN retx | client-bound | top finding (besides client-bound) |\n",
    );
    out.push_str("| --- | ---: | ---: | ---: | ---: | ---: | ---: | ---: | ---: | ---: | ---: | --- | --- |\n");
    for (cell, outcome) in results {
        match outcome {
            Outcome::Ran(m) => {
                let net_rx = match m.net_rx_busiest_cpu {
                    Some(cpu) => format!("{:.0} % (CPU {cpu})", m.net_rx_busiest_share * 100.0),
                    None => "-".to_string(),
                };
                let finding = match &m.top_finding {
                    Some((kind, summary)) => {
                        format!("`{kind}`: {}", escape(&shorten(summary, 140)))
                    }
                    None => "-".to_string(),
                };
                let _ = writeln!(
                    out,
                    "| {} | {} | {} | {} | {:.2} | {:.2} | {:.0} | {:.0} | {net_rx} | {} | {} | {} | {finding} |",
                    cell.name(),
                    thousands(m.rps),
                    ms(m.p99_us),
                    m.errors,
                    m.context_switches_per_request,
                    m.syscalls_per_request,
                    m.server_user_pct,
                    m.server_sys_pct,
                    m.listen_overflows,
                    m.syn_retransmits,
                    if m.client_bound { "**yes**" } else { "no" },
                );
            }
            Outcome::Failed(reason) => {
                let _ = writeln!(
                    out,
                    "| {} | failed | | | | | | | | | | | {} |",
                    cell.name(),
                    escape(&shorten(reason, 200))
                );
            }
        }
    }
    out.push('\n');
    out
}

fn shorten(text: &str, max_chars: usize) -> String {
    if text.chars().count() <= max_chars {
        return text.to_string();
    }
    let cut: String = text.chars().take(max_chars).collect();
    format!("{cut}…")
}

fn escape(text: &str) -> String {
    text.replace('|', "\\|").replace('\n', " ")
}
