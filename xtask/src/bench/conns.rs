//! `cargo xtask bench conns`: holding 10,000 keep-alive connections, srvprof run beside wrk, one
//! after the other on the same nginx configuration: connections opened and resets by
//! the kernel's own counters, req/s and its ratio, p99, errors, and the client's RSS over time.
//!
//!     cargo xtask bench conns [--connections 10000] [--duration 600s] [--rounds 1]
//!                             [--worker-connections 16384] [--out DIR]

use std::collections::BTreeMap;
use std::path::{Path, PathBuf};
use std::process::{Child, Command, Stdio};
use std::time::{Duration, Instant};

use anyhow::{Context, Result, anyhow, bail};

use super::cells::Server;
use super::host::{CLIENT_CPU, raise_fd_limit, require_tools};
use super::loadgen::wrk_rps_p99_ms;
use super::stats::{median, spread};
use super::{SERVERS, parse_secs};
use crate::{free_port, workspace_root};

/// The kernel counters a run is judged by, as "Tcp:ActiveOpens" in /proc/net/snmp and netstat.
const COUNTERS: &[&str] = &[
    "Tcp:ActiveOpens",
    "Tcp:EstabResets",
    "Tcp:OutRsts",
    "TcpExt:TCPAbortOnClose",
    "TcpExt:TCPAbortOnData",
    "TcpExt:ListenOverflows",
    "TcpExt:TCPSynRetrans",
];

struct Args {
    connections: u64,
    duration: Duration,
    rounds: usize,
    worker_connections: u64,
    out: PathBuf,
}

/// One client's run.
struct Outcome {
    tool: &'static str,
    round: usize,
    rps: f64,
    p99_ms: f64,
    errors: String,
    kernel: BTreeMap<&'static str, u64>,
    /// (seconds since the client started, RSS kB), one a second.
    rss_kb: Vec<(f64, u64)>,
    /// srvprof only: timeline intervals without a response.
    empty_intervals: Option<usize>,
    /// srvprof only: resets sent by the server's and by the client's sockets (its probes).
    resets_by_side: Option<(u64, u64)>,
}

pub fn run(args: &[String]) -> Result<()> {
    let args = parse(args)?;
    require_tools(&["wrk", "taskset"], "cargo xtask setup")?;
    // As high as it goes: wrk does not raise its own.
    let _ = raise_fd_limit(u64::MAX);
    std::fs::create_dir_all(&args.out)?;
    let srvprof = crate::release_srvprof()?;
    let mut outcomes = Vec::new();
    for round in 0..args.rounds {
        // Alternate which client goes first, so a drift of the machine does not favour one.
        let order: [&'static str; 2] = if round % 2 == 0 {
            ["srvprof", "wrk"]
        } else {
            ["wrk", "srvprof"]
        };
        for tool in order {
            outcomes.push(one_run(&args, &srvprof, tool, round)?);
        }
    }
    let table = render(&args, &outcomes);
    super::write_results(&args.out, "conns", &table)
}

fn parse(args: &[String]) -> Result<Args> {
    let mut a = Args {
        connections: 10_000,
        duration: Duration::from_secs(600),
        rounds: 1,
        worker_connections: 16_384,
        out: workspace_root().join("target/bench/conns"),
    };
    let mut it = args.iter();
    while let Some(flag) = it.next() {
        let mut value = || it.next().ok_or_else(|| anyhow!("{flag} needs a value"));
        match flag.as_str() {
            "--connections" => a.connections = value()?.parse()?,
            "--duration" => a.duration = parse_secs(value()?)?,
            "--rounds" => a.rounds = value()?.parse()?,
            "--worker-connections" => a.worker_connections = value()?.parse()?,
            "--out" => a.out = PathBuf::from(value()?),
            other => bail!(
                "unknown option {other}; bench conns takes --connections, --duration, --rounds, --worker-connections, --out"
            ),
        }
    }
    Ok(a)
}

fn one_run(args: &Args, srvprof: &Path, tool: &'static str, round: usize) -> Result<Outcome> {
    let spec = SERVERS
        .iter()
        .find(|s| s.label == "nginx-hello")
        .expect("nginx-hello is a reference server");
    let port = free_port()?;
    let dir = args.out.join(format!("{tool}-{round}"));
    let _ = std::fs::remove_dir_all(&dir);
    std::fs::create_dir_all(&dir)?;
    let worker_connections = args.worker_connections.to_string();
    // The nginx: one worker on CPU 1, backlog 4096, idle connections kept 600 s.
    let server = Server::start_with(
        spec,
        true,
        port,
        &dir.join("server.log"),
        &[
            "--backlog",
            "4096",
            "--worker-connections",
            &worker_connections,
            "--keepalive-timeout",
            "600",
        ],
    )?;
    let url = format!("http://127.0.0.1:{port}/");
    let secs = args.duration.as_secs().max(1);
    let c = args.connections.to_string();
    let mut cmd = Command::new("taskset");
    cmd.args(["-c", CLIENT_CPU]);
    match tool {
        "wrk" => {
            cmd.args(["wrk", "-t1", "-c", &c, "-d", &format!("{secs}s")])
                .args(["--latency", "--timeout", "10s", &url]);
        }
        _ => {
            cmd.arg(srvprof)
                .args(["run", "--pid", &server.pid().to_string(), "--url", &url])
                .args(["-c", &c, "-d", &format!("{secs}s"), "--cpus", CLIENT_CPU])
                .args(["--force", "--out"])
                .arg(dir.join("run"));
        }
    }
    eprintln!("bench conns: round {round}, {tool}, -c {c} for {secs} s");
    let before = kernel_counters()?;
    let child = cmd
        .stdout(Stdio::piped())
        .stderr(Stdio::inherit())
        .spawn()
        .with_context(|| format!("starting {tool}"))?;
    let (text, rss_kb) = wait_sampling_rss(child)?;
    let after = kernel_counters()?;
    drop(server);
    std::fs::write(dir.join("client.txt"), &text)?;
    let kernel: BTreeMap<&'static str, u64> = COUNTERS
        .iter()
        .map(|k| (*k, after[*k].saturating_sub(before[*k])))
        .collect();
    if tool == "wrk" {
        let (rps, p99_ms) = wrk_rps_p99_ms(&text)?;
        let errors = text
            .lines()
            .filter(|l| l.contains("Socket errors") || l.contains("Non-2xx"))
            .map(str::trim)
            .collect::<Vec<_>>()
            .join("; ");
        return Ok(Outcome {
            tool,
            round,
            rps,
            p99_ms,
            errors: if errors.is_empty() {
                "none".into()
            } else {
                errors
            },
            kernel,
            rss_kb,
            empty_intervals: None,
            resets_by_side: None,
        });
    }
    let run: serde_json::Value = serde_json::from_slice(&std::fs::read(dir.join("run/run.json"))?)?;
    let load = &run["load"];
    let errors: Vec<String> = load["errors_by_kind"]
        .as_object()
        .map(|m| {
            m.iter()
                .filter(|(_, v)| v.as_u64().unwrap_or(0) > 0)
                .map(|(k, v)| format!("{k} {v}"))
                .collect()
        })
        .unwrap_or_default();
    let empty = run["timeline"].as_array().map(|t| {
        t.iter()
            .filter(|r| r["completed"].as_u64() == Some(0))
            .count()
    });
    Ok(Outcome {
        tool,
        round,
        rps: load["throughput_rps"].as_f64().unwrap_or(0.0),
        p99_ms: load["latency_us"]["p99"].as_f64().unwrap_or(f64::NAN) / 1000.0,
        errors: if errors.is_empty() {
            "none".into()
        } else {
            errors.join(", ")
        },
        kernel,
        rss_kb,
        empty_intervals: empty,
        resets_by_side: Some((
            run["server"]["tcp"]["resets_sent"].as_u64().unwrap_or(0),
            run["client"]["tcp"]["resets_sent"].as_u64().unwrap_or(0),
        )),
    })
}

/// Waits for the client, reading its RSS once a second; returns its stdout and the readings.
fn wait_sampling_rss(mut child: Child) -> Result<(String, Vec<(f64, u64)>)> {
    use std::io::Read;
    let mut stdout = child.stdout.take().expect("piped");
    let reader = std::thread::spawn(move || {
        let mut text = String::new();
        let _ = stdout.read_to_string(&mut text);
        text
    });
    // taskset execs the client, so the child's PID is the client's.
    let started = Instant::now();
    let mut rss = Vec::new();
    while child.try_wait()?.is_none() {
        if let Some(kb) = rss_kb(child.id()) {
            rss.push((started.elapsed().as_secs_f64(), kb));
        }
        std::thread::sleep(Duration::from_secs(1));
    }
    let status = child.wait()?;
    let text = reader.join().unwrap_or_default();
    if !status.success() {
        bail!("the client failed ({status}):\n{text}");
    }
    Ok((text, rss))
}

fn rss_kb(pid: u32) -> Option<u64> {
    status_kb(pid, "VmRSS:")
}

/// A kB field of /proc/PID/status (`field` with its colon, as "VmRSS:").
pub(super) fn status_kb(pid: u32, field: &str) -> Option<u64> {
    std::fs::read_to_string(format!("/proc/{pid}/status"))
        .ok()?
        .lines()
        .find_map(|l| l.strip_prefix(field))?
        .trim()
        .trim_end_matches("kB")
        .trim()
        .parse()
        .ok()
}

/// The COUNTERS from /proc/net/snmp and /proc/net/netstat (pairs of header and value lines).
fn kernel_counters() -> Result<BTreeMap<String, u64>> {
    let mut out = BTreeMap::new();
    for file in ["/proc/net/snmp", "/proc/net/netstat"] {
        let text = std::fs::read_to_string(file).with_context(|| format!("reading {file}"))?;
        let lines: Vec<&str> = text.lines().collect();
        for pair in lines.chunks(2) {
            let [names, values] = pair else { continue };
            let mut names = names.split_whitespace();
            let Some(prefix) = names.next() else { continue };
            for (name, value) in names.zip(values.split_whitespace().skip(1)) {
                out.insert(format!("{prefix}{name}"), value.parse().unwrap_or(0));
            }
        }
    }
    for k in COUNTERS {
        if !out.contains_key(*k) {
            bail!("the kernel reports no {k}");
        }
    }
    Ok(out)
}

/// RSS after the first minute (or third of the run) and at the end, and the growth between.
fn rss_summary(rss: &[(f64, u64)]) -> String {
    let Some(&(end_s, end)) = rss.last() else {
        return "n/a".into();
    };
    let settle_s = (end_s / 3.0).min(60.0);
    let settled = rss
        .iter()
        .find(|(t, _)| *t >= settle_s)
        .map_or(end, |(_, kb)| *kb);
    let peak = rss
        .iter()
        .filter(|(t, _)| *t >= settle_s)
        .map(|(_, kb)| *kb)
        .max()
        .unwrap_or(end);
    format!(
        "{:.0} → {:.0} MB (peak {:+.1} %)",
        settled as f64 / 1024.0,
        end as f64 / 1024.0,
        (peak as f64 / settled.max(1) as f64 - 1.0) * 100.0
    )
}

fn render(args: &Args, outcomes: &[Outcome]) -> String {
    let mut s = format!(
        "# {} keep-alive connections held: srvprof run beside wrk\n\n\
         nginx-hello, 1 worker on CPU 1, worker_connections {}, backlog 4096, keepalive_timeout 600 s; \
         each client on CPU 0 (`wrk -t1`; `srvprof run --cpus 0`, whose 2 s warmup is not in its \
         figures), {} s each, {} round(s), alternating who goes first. Kernel counters are the \
         host's deltas over the client's whole run (nothing else opens connections here).\n\n\
         | round | client | req/s | p99 ms | TCP opens | EstabResets | OutRsts | AbortOnClose | AbortOnData | ListenOverflows | SynRetrans | resets sent by server / client (srvprof's probes) | errors | intervals without responses | RSS after the first minute → end |\n\
         | --- | --- | ---: | ---: | ---: | ---: | ---: | ---: | ---: | ---: | ---: | --- | --- | ---: | --- |\n",
        args.connections,
        args.worker_connections,
        args.duration.as_secs(),
        args.rounds
    );
    for o in outcomes {
        let k = |name: &str| o.kernel.get(name).copied().unwrap_or(0);
        s.push_str(&format!(
            "| {} | {} | {:.0} | {:.1} | {} | {} | {} | {} | {} | {} | {} | {} | {} | {} | {} |\n",
            o.round,
            o.tool,
            o.rps,
            o.p99_ms,
            k("Tcp:ActiveOpens"),
            k("Tcp:EstabResets"),
            k("Tcp:OutRsts"),
            k("TcpExt:TCPAbortOnClose"),
            k("TcpExt:TCPAbortOnData"),
            k("TcpExt:ListenOverflows"),
            k("TcpExt:TCPSynRetrans"),
            o.resets_by_side
                .map_or("–".into(), |(server, client)| format!(
                    "{server} / {client}"
                )),
            o.errors,
            o.empty_intervals.map_or("–".into(), |n| n.to_string()),
            rss_summary(&o.rss_kb)
        ));
    }
    let ratios: Vec<f64> = (0..args.rounds)
        .filter_map(|r| {
            let of = |tool| outcomes.iter().find(|o| o.round == r && o.tool == tool);
            Some(of("srvprof")?.rps / of("wrk")?.rps.max(1e-9))
        })
        .collect();
    if let (Some(mid), Some((lo, hi))) = (median(&ratios), spread(&ratios)) {
        s.push_str(&format!(
            "\nreq/s srvprof / wrk: median {mid:.3} over {} round(s) (range {lo:.3}–{hi:.3})\n",
            ratios.len()
        ));
    }
    s
}

#[cfg(test)]
mod tests {
    use super::*;

    fn outcome(tool: &'static str, round: usize, rps: f64) -> Outcome {
        Outcome {
            tool,
            round,
            rps,
            p99_ms: 1.0,
            errors: "none".into(),
            kernel: BTreeMap::new(),
            rss_kb: Vec::new(),
            empty_intervals: None,
            resets_by_side: None,
        }
    }

    #[test]
    fn the_ratio_line_has_the_median_and_range_of_the_rounds() {
        let args = Args {
            connections: 10,
            duration: Duration::from_secs(1),
            rounds: 2,
            worker_connections: 100,
            out: PathBuf::new(),
        };
        let outcomes = [
            outcome("srvprof", 0, 90.0),
            outcome("wrk", 0, 100.0),
            outcome("wrk", 1, 100.0),
            outcome("srvprof", 1, 110.0),
        ];
        let text = render(&args, &outcomes);
        // Two rounds: the upper of the two ratios.
        assert!(
            text.ends_with(
                "\nreq/s srvprof / wrk: median 1.100 over 2 round(s) (range 0.900–1.100)\n"
            ),
            "{text}"
        );
    }
}
