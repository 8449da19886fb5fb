//! Text report in the spirit of wrk: what ran, latency percentiles, throughput, errors.

use std::io::Write;

use crate::{ErrorKind, LatencySummary, LoadReport};

/// Print `report` as text. Write errors (a closed pipe) are ignored: the JSON file is the record.
pub fn print_text(report: &LoadReport, out: &mut impl Write) {
    let _ = write_text(report, out);
}

fn write_text(r: &LoadReport, out: &mut impl Write) -> std::io::Result<()> {
    let c = &r.config;
    let what = match (c.requests, c.duration_s) {
        (Some(n), _) => format!("{n} requests"),
        (None, Some(d)) => format!("{d}s test"),
        (None, None) => "test".to_string(),
    };
    writeln!(out, "Running {what} @ {}", c.url)?;
    let mode = match (&c.rate_schedule, c.rate) {
        (Some(stages), _) => format!("open loop, rate stages {stages} req/s"),
        (None, Some(rate)) => format!("open loop at {rate} req/s"),
        (None, None) => "closed loop".to_string(),
    };
    let mode = match (c.protocol, c.streams) {
        (crate::report::Protocol::Http11, _) => mode,
        (p, streams) => format!(
            "{mode}, {} with {} streams per connection",
            p.name(),
            streams.unwrap_or(1)
        ),
    };
    let conn = if c.keepalive {
        "keep-alive"
    } else {
        "new connection per request"
    };
    writeln!(
        out,
        "  {} threads and {} connections ({mode}, {conn})",
        c.threads, c.connections
    )?;
    if let Some(segment) = &c.segment {
        let of = segment.split('/').nth(1).unwrap_or("N");
        let rate = match c.rate {
            Some(_) => format!(", 1 arrival in {of} of the schedule above"),
            None => String::new(),
        };
        writeln!(out, "  segment {segment}: this host's share of a load split over {of}{rate}")?;
    }
    if c.warmup_s > 0.0 {
        writeln!(
            out,
            "  warmup {}s excluded ({} requests)",
            c.warmup_s, r.warmup_requests
        )?;
    }
    writeln!(out)?;
    latency_block(out, "Latency", &r.latency_us)?;
    if let Some(connect) = &r.connect_latency_us {
        latency_block(out, "Connect", connect)?;
    }
    if let Some(tls) = r.tls.as_ref().filter(|t| t.handshakes > 0) {
        latency_block(out, "TLS", &tls.handshake_us)?;
        writeln!(
            out,
            "  {} TLS handshakes, {} of them resumed",
            tls.handshakes, tls.resumed
        )?;
    }
    if let Some(h2) = &r.http2 {
        let retried = h2.retried_after_goaway + h2.retried_after_refused_stream;
        if retried > 0 {
            writeln!(
                out,
                "  {retried} requests refused unprocessed by the server and sent again ({} past a GOAWAY, {} by REFUSED_STREAM)",
                h2.retried_after_goaway, h2.retried_after_refused_stream
            )?;
        }
    }
    if let Some(open) = &r.open_loop {
        latency_block(out, "Uncorr.", &open.uncorrected_latency_us)?;
        writeln!(
            out,
            "  (Latency counts from each request's intended send time; Uncorr. from its actual send, as a client blind to coordinated omission would.)"
        )?;
        if open.sends_behind_schedule > 0 {
            writeln!(
                out,
                "  {} sends fell behind the schedule (up to {} late): their connections were still waiting for earlier answers; more -c keeps the rate",
                open.sends_behind_schedule,
                human_us(open.max_behind_us as f64)
            )?;
        }
    }
    writeln!(out)?;
    writeln!(
        out,
        "  {} requests in {:.2}s, {} read",
        r.requests,
        r.duration_s,
        human_bytes(r.bytes)
    )?;
    if r.unfinished > 0 {
        writeln!(
            out,
            "  {} requests unanswered when the run ended",
            r.unfinished
        )?;
    }
    let codes: Vec<String> = r
        .status_codes
        .iter()
        .map(|(code, n)| format!("{code}: {n}"))
        .collect();
    if !codes.is_empty() {
        writeln!(out, "  Status codes: {}", codes.join(", "))?;
    }
    if let Some(t) = &r.targets {
        writeln!(
            out,
            "  Targets ({}, {} entries, {} distinct), most sent:",
            t.order, t.entries, t.distinct
        )?;
        for s in t.top.iter().take(5) {
            let p99 = s
                .latency_us
                .as_ref()
                .map(|l| format!(", p99 {}", human_us(l.p99 as f64)))
                .unwrap_or_default();
            writeln!(
                out,
                "    {} {} ok, {} errors{p99}",
                s.request, s.completed, s.errors
            )?;
        }
    }
    if r.errors > 0 {
        writeln!(out, "  Errors: {} ({})", r.errors, r.error_kinds())?;
        for kind in ErrorKind::ALL {
            if let Some(hint) = kind.hint()
                && r.errors_by_kind.get(kind.name()).is_some_and(|n| *n > 0)
            {
                writeln!(out, "  {}: {hint}", kind.name())?;
            }
        }
    }
    writeln!(out, "Requests/sec: {:>10.2}", r.throughput_rps)?;
    writeln!(
        out,
        "Transfer/sec: {:>10}",
        human_bytes((r.bytes as f64 / r.duration_s.max(1e-9)) as u64)
    )?;
    let cpu = &r.client_cpu;
    writeln!(
        out,
        "Client CPU:   {:>9.1}% of {} threads (user {:.2}s, sys {:.2}s){}",
        cpu.cpu_utilization * 100.0,
        cpu.threads,
        cpu.user_ns as f64 / 1e9,
        cpu.sys_ns as f64 / 1e9,
        if cpu.saturated {
            " SATURATED: the client may be the bottleneck; add --threads or CPUs"
        } else {
            ""
        }
    )?;
    if let Some(rw) = &r.remote_write {
        let run = r.config.run_id.as_deref().unwrap_or_default();
        match &rw.error {
            None => writeln!(
                out,
                "Remote write: {} pushes to {} (run=\"{run}\")",
                rw.pushes, rw.url
            )?,
            Some(error) => writeln!(
                out,
                "Remote write: {} of {} pushes failed, their intervals' points lost: {error}",
                rw.failed,
                rw.pushes + rw.failed
            )?,
        }
    }
    if r.stopped_early {
        writeln!(
            out,
            "Stopped early: the figures cover the time until the stop."
        )?;
    }
    Ok(())
}

fn latency_block(out: &mut impl Write, title: &str, l: &LatencySummary) -> std::io::Result<()> {
    writeln!(
        out,
        "  {title:<8} {:>9} {:>9} {:>9} {:>9} {:>9} {:>9} {:>9} {:>9}",
        "mean", "p50", "p75", "p90", "p99", "p99.9", "p99.99", "max"
    )?;
    writeln!(
        out,
        "  {:<8} {:>9} {:>9} {:>9} {:>9} {:>9} {:>9} {:>9} {:>9}",
        "",
        human_us(l.mean),
        human_us(l.p50 as f64),
        human_us(l.p75 as f64),
        human_us(l.p90 as f64),
        human_us(l.p99 as f64),
        human_us(l.p999 as f64),
        human_us(l.p9999 as f64),
        human_us(l.max as f64)
    )
}

/// A latency in the unit that reads best: 642us, 1.25ms, 2.00s.
pub fn human_us(us: f64) -> String {
    if us >= 1e6 {
        format!("{:.2}s", us / 1e6)
    } else if us >= 1e3 {
        format!("{:.2}ms", us / 1e3)
    } else {
        format!("{us:.0}us")
    }
}

fn human_bytes(b: u64) -> String {
    let b = b as f64;
    if b >= 1024.0 * 1024.0 * 1024.0 {
        format!("{:.2}GiB", b / (1024.0 * 1024.0 * 1024.0))
    } else if b >= 1024.0 * 1024.0 {
        format!("{:.2}MiB", b / (1024.0 * 1024.0))
    } else if b >= 1024.0 {
        format!("{:.2}KiB", b / 1024.0)
    } else {
        format!("{b:.0}B")
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn units() {
        assert_eq!(human_us(12.0), "12us");
        assert_eq!(human_us(1500.0), "1.50ms");
        assert_eq!(human_us(2_500_000.0), "2.50s");
        assert_eq!(human_bytes(2048), "2.00KiB");
    }
}
