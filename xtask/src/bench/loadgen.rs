//! `bench loadgen`: srvprof's load generator side by side with wrk and ab (and oha when
//! installed) against one pinned nginx worker, so "srvprof load" can be trusted as a client.
//!
//! nginx (1 worker) runs on CPU 1, every client on CPU 0, runs alternate tool by tool (the order
//! flips every round) so drift in the machine hits both sides alike. Returns (and prints) a
//! markdown report. SRVPROF_BENCH_ROUNDS overrides the number of rounds.

use std::io::Write;
use std::net::TcpStream;
use std::path::{Path, PathBuf};
use std::process::{Child, Command, Stdio};
use std::time::{Duration, Instant};

use anyhow::{Context, Result, anyhow, bail};

use super::host::{CLIENT_CPU, SERVER_CPU, require_tools, stop, which};
use super::stats::median;
use crate::{free_port, workspace_root};

const NGINX: &str = "/usr/sbin/nginx";

/// One measured run of one tool.
#[derive(Clone, Debug, Default)]
pub(crate) struct Sample {
    pub(crate) rps: f64,
    pub(crate) p99_ms: f64,
    /// The client's own CPU time (user + sys) per request sent: its efficiency, which the
    /// server's share of a busy machine does not blur.
    cpu_us_per_request: Option<f64>,
    /// The tool's own mean latency; with the throughput it tells how much of each connection's
    /// request cycle the tool's latency covers (Little's law: mean = connections / throughput).
    mean_ms: Option<f64>,
}

impl Sample {
    /// Each figure's median over the runs (the optional ones over the runs that have them).
    /// None when there are no runs.
    pub(crate) fn median(samples: &[Sample]) -> Option<Sample> {
        let of = |figure: fn(&Sample) -> Option<f64>| {
            median(&samples.iter().filter_map(figure).collect::<Vec<_>>())
        };
        Some(Sample {
            rps: of(|s| Some(s.rps))?,
            p99_ms: of(|s| Some(s.p99_ms))?,
            cpu_us_per_request: of(|s| s.cpu_us_per_request),
            mean_ms: of(|s| s.mean_ms),
        })
    }

    /// Share of the closed-loop cycle (connections / throughput) the mean latency accounts for:
    /// near 1 when the tool times everything from send to answer; lower when requests wait
    /// inside the tool before their clock starts (wrk starts it only when the socket is writable
    /// again on a later turn of its event loop).
    fn cycle_covered(&self, connections: usize) -> Option<f64> {
        self.mean_ms
            .map(|mean| mean / 1000.0 * self.rps / connections as f64)
    }
}

/// What a scenario's requests travel over.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
enum Proto {
    Http,
    /// https with HTTP/1.1; without keep-alive every connection is a full handshake (ab does not
    /// resume sessions, so srvprof runs with --tls-resumption off).
    Https,
    /// HTTP/2 over TLS, `streams` in flight on each connection (h2load -m).
    H2 {
        streams: usize,
    },
}

struct Scenario {
    name: &'static str,
    connections: usize,
    keepalive: bool,
    proto: Proto,
}

impl Scenario {
    /// Requests in flight at once: connections, times streams over HTTP/2.
    fn in_flight(&self) -> usize {
        match self.proto {
            Proto::H2 { streams } => self.connections * streams,
            _ => self.connections,
        }
    }

    /// The tool srvprof is compared with.
    fn peer(&self) -> &'static str {
        match (self.proto, self.keepalive) {
            (Proto::H2 { .. }, _) => "h2load",
            (_, true) => "wrk",
            (_, false) => "ab",
        }
    }

    /// Requests of a run without keep-alive: a full TLS handshake costs the server ~50x a plain
    /// request, so https runs send a tenth.
    fn close_requests(&self, plain: u64) -> u64 {
        if self.proto == Proto::Https {
            plain / 10
        } else {
            plain
        }
    }
}

const SCENARIOS: [Scenario; 6] = [
    Scenario {
        name: "keep-alive c=100",
        connections: 100,
        keepalive: true,
        proto: Proto::Http,
    },
    Scenario {
        name: "keep-alive c=1000",
        connections: 1000,
        keepalive: true,
        proto: Proto::Http,
    },
    Scenario {
        name: "new connection per request c=100",
        connections: 100,
        keepalive: false,
        proto: Proto::Http,
    },
    Scenario {
        name: "https keep-alive c=100",
        connections: 100,
        keepalive: true,
        proto: Proto::Https,
    },
    Scenario {
        name: "https new connection per request c=20",
        connections: 20,
        keepalive: false,
        proto: Proto::Https,
    },
    Scenario {
        name: "h2 c=10 x 10 streams",
        connections: 10,
        keepalive: true,
        proto: Proto::H2 { streams: 10 },
    },
];

pub fn run(quick: bool) -> Result<String> {
    let root = workspace_root();
    let rounds = std::env::var("SRVPROF_BENCH_ROUNDS")
        .ok()
        .and_then(|r| r.parse::<usize>().ok())
        .filter(|&r| r > 0)
        .unwrap_or(if quick { 1 } else { 5 });
    let seconds = if quick { 3 } else { 5 };
    let ab_requests: u64 = if quick { 20_000 } else { 50_000 };

    require_tools(
        &["wrk", "ab", "h2load", "openssl", "taskset"],
        "apt-get install wrk apache2-utils nghttp2-client openssl util-linux (cargo xtask setup does)",
    )?;
    let load = srvprof_load_command(&root)?;
    let oha = oha_tool(quick)?;

    let dir = std::env::temp_dir().join(format!("srvprof-bench-loadgen-{}", std::process::id()));
    std::fs::create_dir_all(&dir)?;
    let port = free_port()?;
    let tls_port = free_port()?;
    let mut nginx = Nginx::start_with_tls(&dir, port, Some(tls_port))?;
    let plain_url = format!("http://127.0.0.1:{port}/");
    let tls_url = format!("https://127.0.0.1:{tls_port}/");

    let mut report = String::new();
    report.push_str("# Load generator: srvprof vs wrk / ab / h2load / oha\n\n");
    report.push_str(&format!(
        "nginx 1 worker on CPU {SERVER_CPU} (`return 200 \"hello world\"`), clients on CPU {CLIENT_CPU}, \
         {rounds} alternating round(s) (the order flips every round), {seconds}s per keep-alive \
         run, {ab_requests} requests per new-connection run ({} over https, each a full handshake). \
         https and h2: nginx's second server, `listen ssl http2` with an ECDSA P-256 certificate \
         made by openssl; every client accepts it unchecked (srvprof: --insecure, which still \
         verifies the handshake's signature). srvprof: `{}` (the loadgen crate \
         built from this tree; `srvprof load` runs the same code).\n\n",
        ab_requests / 10,
        load.join(" ")
    ));
    report.push_str(
        "| scenario | tool | round | req/s | p99 ms | mean ms | cycle covered | client CPU us/req |\n|---|---|---|---|---|---|---|---|\n",
    );

    let mut summary = Vec::new();
    let mut restarts = 0;
    for scenario in &SCENARIOS {
        let peer_name = scenario.peer();
        let url = if scenario.proto == Proto::Http {
            &plain_url
        } else {
            &tls_url
        };
        let close_requests = scenario.close_requests(ab_requests);
        let mut peer = Vec::new();
        let mut ours = Vec::new();
        let mut oha_samples = Vec::new();
        // srvprof run as oha runs: oha's rustls resumes sessions on new connections (nginx logged
        // 1,980 of 2,000 resumed), so against it srvprof resumes too.
        let mut like_oha = Vec::new();
        let resumes = scenario.proto == Proto::Https && !scenario.keepalive;
        for round in 1..=rounds {
            let run_peer = |nginx: &mut Nginx, restarts: &mut usize| -> Result<Sample> {
                *restarts += nginx.ensure_running(&dir, port)? as usize;
                match (scenario.proto, scenario.keepalive) {
                    (Proto::H2 { streams }, _) => {
                        run_h2load(url, scenario.connections, streams, seconds)
                    }
                    (_, true) => run_wrk(url, scenario.connections, seconds),
                    (_, false) => run_ab(url, scenario.connections, close_requests),
                }
            };
            let run_ours = |nginx: &mut Nginx, restarts: &mut usize| -> Result<Sample> {
                *restarts += nginx.ensure_running(&dir, port)? as usize;
                run_srvprof(&load, url, scenario, seconds, close_requests, false)
            };
            let (p, s) = if round % 2 == 1 {
                let p = run_peer(&mut nginx, &mut restarts)?;
                (p, run_ours(&mut nginx, &mut restarts)?)
            } else {
                let s = run_ours(&mut nginx, &mut restarts)?;
                (run_peer(&mut nginx, &mut restarts)?, s)
            };
            report.push_str(&round_row(scenario, peer_name, round, &p));
            report.push_str(&round_row(scenario, "srvprof", round, &s));
            if let Some(oha) = oha.as_ref() {
                let run_oha = || run_oha(oha, url, scenario, seconds, close_requests);
                let (o, r) = if !resumes {
                    (run_oha()?, s.clone())
                } else {
                    // The resumed pair alternates its order too.
                    let resumed =
                        || run_srvprof(&load, url, scenario, seconds, close_requests, true);
                    let (o, r) = if round % 2 == 1 {
                        let o = run_oha()?;
                        (o, resumed()?)
                    } else {
                        let r = resumed()?;
                        (run_oha()?, r)
                    };
                    report.push_str(&round_row(scenario, "srvprof, sessions resumed", round, &r));
                    (o, r)
                };
                report.push_str(&round_row(scenario, "oha", round, &o));
                oha_samples.push(o);
                like_oha.push(r);
            }
            peer.push(p);
            ours.push(s);
        }
        // Rounds run back to back, so a paired count says more than medians on a noisy machine.
        let faster = peer
            .iter()
            .zip(&ours)
            .filter(|(p, s)| s.rps >= p.rps)
            .count();
        let ratios: Vec<f64> = peer
            .iter()
            .zip(&ours)
            .map(|(p, s)| s.rps / p.rps.max(1e-9))
            .collect();
        let paired_ratio = median(&ratios).expect("at least one round");
        let tail_ok = peer
            .iter()
            .zip(&ours)
            .filter(|(p, s)| p99_no_worse(s.p99_ms, p.p99_ms, !scenario.keepalive))
            .count();
        summary.push((
            scenario,
            peer_name,
            Sample::median(&peer).unwrap_or_default(),
            Sample::median(&ours).unwrap_or_default(),
            Sample::median(&oha_samples).zip(Sample::median(&like_oha)),
            (faster, tail_ok, paired_ratio),
        ));
    }
    drop(nginx);
    let _ = std::fs::remove_dir_all(&dir);

    report.push_str(
        "\n## Medians\n\nsrvprof/peer is the ratio of the two medians; the paired ratio is the median of \
         the per-round ratios (each round's two runs are back to back, so drift between rounds \
         cancels).\n\n| scenario | peer | peer req/s | srvprof req/s | srvprof/peer | paired ratio | peer p99 ms | srvprof p99 ms | rounds srvprof faster | rounds srvprof p99 no worse | peer cycle covered | srvprof cycle covered | peer CPU us/req | srvprof CPU us/req |\n|---|---|---|---|---|---|---|---|---|---|---|---|---|---|\n",
    );
    for (scenario, peer_name, peer, ours, _, (faster, tail_ok, paired_ratio)) in &summary {
        report.push_str(&format!(
            "| {} | {peer_name} | {:.0} | {:.0} | {:.2}x | {paired_ratio:.2}x | {:.2} | {:.2} | {faster}/{rounds} | {tail_ok}/{rounds} | {} | {} | {} | {} |\n",
            scenario.name,
            peer.rps,
            ours.rps,
            ours.rps / peer.rps.max(1e-9),
            peer.p99_ms,
            ours.p99_ms,
            fmt_opt(peer.cycle_covered(scenario.in_flight()), 2),
            fmt_opt(ours.cycle_covered(scenario.in_flight()), 2),
            fmt_opt(peer.cpu_us_per_request, 2),
            fmt_opt(ours.cpu_us_per_request, 2)
        ));
    }
    report.push_str(
        "\nCycle covered = mean latency x throughput / connections: by Little's law a closed loop's \
         requests take connections / throughput each, from one answer to the next. A tool whose \
         mean latency covers less of that cycle starts its clock after the request has already \
         waited inside the tool (wrk writes the next request on a later turn of its event loop \
         and starts timing there); its p99 leaves that wait out, srvprof's does not.\n\
         \nab prints its percentiles rounded to whole milliseconds, so against ab srvprof's p99 is \
         compared at that resolution (rounded the same way).\n",
    );
    if restarts > 0 {
        report.push_str(&format!(
            "\nnginx was found stopped (killed by something else on the machine) and restarted {restarts} time(s) between runs.\n"
        ));
    }
    if oha.is_none() {
        report.push_str(&format!(
            "\noha: not installed, and a quick run does not build it (`cargo install oha --version \
             {OHA_VERSION} --locked` adds it); skipped.\n"
        ));
    } else {
        report.push_str(&format!(
            "\n## oha {OHA_VERSION}, in the same rounds (medians)\n\n\
             oha resumes TLS sessions on new connections (its rustls keeps a session cache), so \
             in the https new-connection row srvprof's figures are its own run with sessions \
             resumed (`--tls-resumption on`), not the full-handshake run compared with ab.\n\n\
             | scenario | oha req/s | srvprof/oha | oha p99 ms | srvprof p99 ms | oha CPU us/req | srvprof CPU us/req |\n\
             |---|---|---|---|---|---|---|\n"
        ));
        for (scenario, _, _, _, o, _) in &summary {
            if let Some((o, ours)) = o {
                report.push_str(&format!(
                    "| {} | {:.0} | {:.2}x | {:.2} | {:.2} | {} | {} |\n",
                    scenario.name,
                    o.rps,
                    ours.rps / o.rps.max(1e-9),
                    o.p99_ms,
                    ours.p99_ms,
                    fmt_opt(o.cpu_us_per_request, 2),
                    fmt_opt(ours.cpu_us_per_request, 2)
                ));
            }
        }
    }
    print!("{report}");
    let _ = std::io::stdout().flush();
    Ok(report)
}

/// The loadgen crate's `load` example, built from this tree now: it runs exactly the code of
/// `srvprof load` (same arguments, same `run_load_command`), and a target/release/srvprof left by
/// an earlier build could be older than the tree. SRVPROF_BENCH_LOAD_BIN names another binary
/// that takes the same arguments.
fn srvprof_load_command(root: &Path) -> Result<Vec<String>> {
    if let Some(bin) = std::env::var_os("SRVPROF_BENCH_LOAD_BIN") {
        return Ok(vec![PathBuf::from(bin).display().to_string()]);
    }
    let status = Command::new("cargo")
        .current_dir(root)
        .args([
            "build",
            "--release",
            "-p",
            "srvprof-loadgen",
            "--example",
            "load",
        ])
        .status()
        .context("running cargo build for the load example")?;
    if !status.success() {
        bail!("cannot build the srvprof-loadgen `load` example; see the cargo output above");
    }
    Ok(vec![
        root.join("target/release/examples/load")
            .display()
            .to_string(),
    ])
}

/// One nginx master with one worker pinned to SERVER_CPU; stopped on drop.
pub(crate) struct Nginx {
    pub(crate) child: Child,
    tls_port: Option<u16>,
}

impl Nginx {
    pub(crate) fn start(dir: &Path, port: u16) -> Result<Nginx> {
        Nginx::start_with_tls(dir, port, None)
    }

    /// The same, plus a second server on `tls_port` speaking https and HTTP/2 (ALPN), with a
    /// certificate made for it by openssl in `dir`.
    pub(crate) fn start_with_tls(dir: &Path, port: u16, tls_port: Option<u16>) -> Result<Nginx> {
        if !Path::new(NGINX).exists() {
            bail!("nginx is not installed at {NGINX}; run `apt-get install nginx-light`");
        }
        let tls_server = match tls_port {
            None => String::new(),
            Some(tls_port) => {
                let out = Command::new("openssl")
                    .args([
                        "req",
                        "-x509",
                        "-newkey",
                        "ec",
                        "-pkeyopt",
                        "ec_paramgen_curve:prime256v1",
                        "-nodes",
                        "-keyout",
                        "tls.key",
                        "-out",
                        "tls.crt",
                        "-days",
                        "2",
                        "-subj",
                        "/CN=127.0.0.1",
                    ])
                    .current_dir(dir)
                    .output()
                    .context("running openssl (apt-get install openssl)")?;
                if !out.status.success() {
                    bail!(
                        "openssl could not make a certificate: {}",
                        String::from_utf8_lossy(&out.stderr)
                    );
                }
                format!(
                    "server {{\n\
                       listen 127.0.0.1:{tls_port} ssl http2 backlog=4096;\n\
                       ssl_certificate {d}/tls.crt; ssl_certificate_key {d}/tls.key;\n\
                       location / {{ return 200 \"hello world\"; }}\n\
                     }}\n",
                    d = dir.display()
                )
            }
        };
        let conf = dir.join("nginx.conf");
        std::fs::write(
            &conf,
            format!(
                "worker_processes 1;\n\
                 worker_rlimit_nofile 20000;\n\
                 daemon off;\n\
                 master_process on;\n\
                 pid {dir}/nginx.pid;\n\
                 error_log {dir}/error.log warn;\n\
                 events {{ worker_connections 16000; }}\n\
                 http {{\n\
                   access_log off;\n\
                   keepalive_requests 1000000;\n\
                   keepalive_timeout 65;\n\
                   client_body_temp_path {dir}/body;\n\
                   proxy_temp_path {dir}/proxy;\n\
                   server {{\n\
                     listen 127.0.0.1:{port} backlog=4096;\n\
                     location / {{ return 200 \"hello world\"; }}\n\
                   }}\n\
                   {tls_server}\
                 }}\n",
                dir = dir.display()
            ),
        )?;
        let child = Command::new("taskset")
            .args(["-c", SERVER_CPU, NGINX, "-c"])
            .arg(&conf)
            .arg("-p")
            .arg(dir)
            .stdout(Stdio::null())
            .stderr(Stdio::null())
            .spawn()
            .context("starting nginx")?;
        let nginx = Nginx { child, tls_port };
        let deadline = Instant::now() + Duration::from_secs(5);
        while TcpStream::connect(("127.0.0.1", port)).is_err() {
            if Instant::now() > deadline {
                bail!(
                    "nginx did not listen on port {port} within 5s; see {}/error.log",
                    dir.display()
                );
            }
            std::thread::sleep(Duration::from_millis(50));
        }
        Ok(nginx)
    }
}

impl Nginx {
    /// Restart nginx when it is no longer listening (another process on a shared machine may
    /// have stopped it); true when it had to.
    pub(crate) fn ensure_running(&mut self, dir: &Path, port: u16) -> Result<bool> {
        let exited = matches!(self.child.try_wait(), Ok(Some(_)));
        if !exited && TcpStream::connect(("127.0.0.1", port)).is_ok() {
            return Ok(false);
        }
        eprintln!("bench: nginx on port {port} is gone; starting it again");
        let fresh = Nginx::start_with_tls(dir, port, self.tls_port)?;
        // The old one's Drop stops whatever is left of it.
        drop(std::mem::replace(self, fresh));
        Ok(true)
    }
}

impl Drop for Nginx {
    fn drop(&mut self) {
        // SIGTERM lets the master stop its worker too (SIGKILL would orphan it).
        stop(&mut self.child, "TERM", Duration::from_secs(5));
    }
}

const GNU_TIME: &str = "/usr/bin/time";

fn cpu_time_file() -> PathBuf {
    std::env::temp_dir().join(format!("srvprof-bench-loadgen-{}.time", std::process::id()))
}

/// A client command pinned to CLIENT_CPU, under GNU time when installed to read its CPU use.
fn client_command() -> Command {
    if Path::new(GNU_TIME).exists() {
        let mut cmd = Command::new(GNU_TIME);
        cmd.args(["-f", "%U %S", "-o"])
            .arg(cpu_time_file())
            .args(["taskset", "-c", CLIENT_CPU]);
        cmd
    } else {
        let mut cmd = Command::new("taskset");
        cmd.args(["-c", CLIENT_CPU]);
        cmd
    }
}

/// Run a client command; its stdout and its CPU seconds (user + sys) when GNU time measured them.
fn output_of(cmd: &mut Command, what: &str) -> Result<(String, Option<f64>)> {
    let _ = std::fs::remove_file(cpu_time_file());
    let out = cmd.output().with_context(|| format!("running {what}"))?;
    if !out.status.success() {
        bail!(
            "{what} failed ({}): {}",
            out.status,
            String::from_utf8_lossy(&out.stderr).trim()
        );
    }
    let cpu_s = std::fs::read_to_string(cpu_time_file()).ok().and_then(|t| {
        let mut parts = t.split_whitespace().map(|v| v.parse::<f64>().ok());
        Some(parts.next()?? + parts.next()??)
    });
    Ok((String::from_utf8_lossy(&out.stdout).into_owned(), cpu_s))
}

fn per_request_us(cpu_s: Option<f64>, requests: f64) -> Option<f64> {
    cpu_s.filter(|_| requests > 0.0).map(|s| s * 1e6 / requests)
}

pub(crate) fn run_wrk(url: &str, connections: usize, seconds: u64) -> Result<Sample> {
    let (text, cpu_s) = output_of(
        client_command().args([
            "wrk",
            "-t1",
            &format!("-c{connections}"),
            &format!("-d{seconds}s"),
            "--latency",
            url,
        ]),
        "wrk",
    )?;
    let (rps, p99) = wrk_rps_p99_ms(&text)?;
    // "  562237 requests in 4.00s, 85.25MB read"
    let requests = text
        .lines()
        .find(|l| l.contains(" requests in "))
        .and_then(|l| l.split_whitespace().next())
        .and_then(|n| n.parse::<f64>().ok())
        .unwrap_or(0.0);
    Ok(Sample {
        rps,
        p99_ms: p99,
        cpu_us_per_request: per_request_us(cpu_s, requests),
        mean_ms: wrk_mean_ms(&text),
    })
}

/// h2load over TLS (ALPN h2), `connections` x `streams`, for `seconds`; p99 from its per-request
/// log (h2load itself prints min, max, mean and sd only).
fn run_h2load(url: &str, connections: usize, streams: usize, seconds: u64) -> Result<Sample> {
    let log = std::env::temp_dir().join(format!("srvprof-bench-h2load-{}.log", std::process::id()));
    let _ = std::fs::remove_file(&log);
    let (text, cpu_s) = output_of(
        client_command()
            .args([
                "h2load",
                "-t1",
                "-c",
                &connections.to_string(),
                "-m",
                &streams.to_string(),
                "-D",
                &seconds.to_string(),
                "--log-file",
            ])
            .arg(&log)
            .arg(url),
        "h2load",
    )?;
    let (rps, requests) = h2load_rps_done(&text)?;
    let mut elapsed_us: Vec<f64> = std::fs::read_to_string(&log)
        .unwrap_or_default()
        .lines()
        .filter_map(|l| l.split('\t').nth(2)?.trim().parse::<f64>().ok())
        .collect();
    let _ = std::fs::remove_file(&log);
    elapsed_us.sort_by(f64::total_cmp);
    let p99_ms = elapsed_us
        .get(((elapsed_us.len() as f64 * 0.99) as usize).min(elapsed_us.len().saturating_sub(1)))
        .map(|us| us / 1000.0)
        .ok_or_else(|| anyhow!("h2load wrote no per-request log:\n{text}"))?;
    let mean_ms = (!elapsed_us.is_empty())
        .then(|| elapsed_us.iter().sum::<f64>() / elapsed_us.len() as f64 / 1000.0);
    Ok(Sample {
        rps,
        p99_ms,
        cpu_us_per_request: per_request_us(cpu_s, requests),
        mean_ms,
    })
}

/// h2load's "finished in 5.00s, 41234.56 req/s, ..." and its requests done
/// ("requests: 206173 total, 206273 started, 206173 done, 206173 succeeded, ...").
fn h2load_rps_done(text: &str) -> Result<(f64, f64)> {
    let rps = text
        .lines()
        .find_map(|l| l.strip_prefix("finished in "))
        .and_then(|rest| rest.split(", ").nth(1))
        .and_then(|v| v.trim_end_matches(" req/s").parse().ok())
        .ok_or_else(|| anyhow!("no req/s in h2load output:\n{text}"))?;
    let done = text
        .lines()
        .find_map(|l| l.strip_prefix("requests: "))
        .and_then(|rest| rest.split(", ").find(|f| f.ends_with(" done")))
        .and_then(|f| f.trim_end_matches(" done").parse().ok())
        .unwrap_or(0.0);
    Ok((rps, done))
}

/// wrk's Requests/sec and its 99% latency in ms (from `--latency`).
pub(crate) fn wrk_rps_p99_ms(text: &str) -> Result<(f64, f64)> {
    let rps = field_after(text, "Requests/sec:")
        .and_then(|v| v.parse().ok())
        .ok_or_else(|| anyhow!("no Requests/sec in wrk output:\n{text}"))?;
    let p99 = text
        .lines()
        .find_map(|l| l.trim().strip_prefix("99%").map(str::trim))
        .and_then(duration_ms)
        .ok_or_else(|| anyhow!("no 99% line in wrk output:\n{text}"))?;
    Ok((rps, p99))
}

/// "    Latency     5.89ms    1.23ms  26.06ms   87.65%" (Thread Stats: avg, stdev, max, +/-).
fn wrk_mean_ms(text: &str) -> Option<f64> {
    text.lines().find_map(|l| {
        l.trim()
            .strip_prefix("Latency")
            .and_then(|rest| rest.split_whitespace().next())
            .and_then(duration_ms)
    })
}

/// "Total:          0    3   0.9      3       7" (Connection Times: min, mean, sd, median, max).
fn ab_mean_ms(text: &str) -> Option<f64> {
    text.lines()
        .find_map(|l| l.trim().strip_prefix("Total:"))
        .and_then(|rest| rest.split_whitespace().nth(1))
        .and_then(|v| v.parse().ok())
}

fn run_ab(url: &str, connections: usize, requests: u64) -> Result<Sample> {
    let (text, cpu_s) = output_of(
        client_command().args([
            "ab",
            "-q",
            "-c",
            &connections.to_string(),
            "-n",
            &requests.to_string(),
            url,
        ]),
        "ab",
    )?;
    let rps = field_after(&text, "Requests per second:")
        .and_then(|v| v.parse().ok())
        .ok_or_else(|| anyhow!("no Requests per second in ab output:\n{text}"))?;
    // "  99%     12" in the "served within a certain time (ms)" table.
    let p99 = text
        .lines()
        .find_map(|l| l.trim().strip_prefix("99%").map(str::trim))
        .and_then(|v| v.parse::<f64>().ok())
        .ok_or_else(|| anyhow!("no 99% line in ab output:\n{text}"))?;
    Ok(Sample {
        rps,
        p99_ms: p99,
        cpu_us_per_request: per_request_us(cpu_s, requests as f64),
        mean_ms: ab_mean_ms(&text),
    })
}

fn run_srvprof(
    load: &[String],
    url: &str,
    scenario: &Scenario,
    seconds: u64,
    requests: u64,
    resume_sessions: bool,
) -> Result<Sample> {
    let mut cmd = client_command();
    cmd.args(load).arg(url).args([
        "-c",
        &scenario.connections.to_string(),
        "--threads",
        "1",
        "--json",
    ]);
    if scenario.keepalive {
        cmd.args(["-d", &format!("{seconds}s")]);
    } else {
        cmd.args(["--no-keepalive", "-n", &requests.to_string()]);
    }
    match scenario.proto {
        Proto::Http => {}
        Proto::Https => {
            cmd.arg("--insecure");
            if !scenario.keepalive && !resume_sessions {
                cmd.args(["--tls-resumption", "off"]);
            }
        }
        Proto::H2 { streams } => {
            cmd.args(["--insecure", "--http2", "--streams", &streams.to_string()]);
        }
    }
    let (text, cpu_s) = output_of(&mut cmd, "srvprof load")?;
    let json: serde_json::Value =
        serde_json::from_str(&text).context("parsing srvprof load --json output")?;
    let rps = json["throughput_rps"]
        .as_f64()
        .ok_or_else(|| anyhow!("no throughput_rps in srvprof JSON"))?;
    let p99_us = json["latency_us"]["p99"]
        .as_f64()
        .ok_or_else(|| anyhow!("no latency_us.p99 in srvprof JSON"))?;
    let errors = json["errors"].as_u64().unwrap_or(0);
    if errors > 0 {
        eprintln!(
            "srvprof load {}: {errors} errors: {}",
            scenario.name, json["errors_by_kind"]
        );
    }
    let requests =
        json["sent"].as_f64().unwrap_or(0.0) + json["warmup_requests"].as_f64().unwrap_or(0.0);
    Ok(Sample {
        rps,
        p99_ms: p99_us / 1000.0,
        cpu_us_per_request: per_request_us(cpu_s, requests),
        mean_ms: json["latency_us"]["mean"].as_f64().map(|us| us / 1000.0),
    })
}

/// The oha the full bench compares with (the version its figures were taken with).
const OHA_VERSION: &str = "1.16.0";

/// oha from the PATH or CARGO_HOME; a full run builds it when missing (a few minutes, once), a
/// quick run (CI's) goes without.
fn oha_tool(quick: bool) -> Result<Option<PathBuf>> {
    let installed = crate::setup::cargo_home().join("bin/oha");
    if let Some(found) = which("oha").or_else(|| installed.is_file().then_some(installed.clone())) {
        return Ok(Some(found));
    }
    if quick {
        return Ok(None);
    }
    eprintln!("xtask: oha is not installed: building oha {OHA_VERSION} with cargo install (once)");
    crate::run_cmd(
        Command::new("cargo")
            .args([
                "install",
                "oha",
                "--version",
                OHA_VERSION,
                "--locked",
                "--root",
            ])
            .arg(crate::setup::cargo_home()),
    )
    .context("building oha, which the bench compares with")?;
    Ok(Some(installed))
}

/// oha over the scenario's protocol: https with --insecure (as every client here), HTTP/2 with
/// `-p` streams per connection (oha runs c x p requests at once).
fn run_oha(
    oha: &Path,
    url: &str,
    scenario: &Scenario,
    seconds: u64,
    requests: u64,
) -> Result<Sample> {
    let mut cmd = client_command();
    cmd.arg(oha).args([
        "--no-tui",
        "--output-format",
        "json",
        "-c",
        &scenario.connections.to_string(),
    ]);
    if scenario.proto != Proto::Http {
        cmd.arg("--insecure");
    }
    if let Proto::H2 { streams } = scenario.proto {
        cmd.args(["--http2", "-p", &streams.to_string()]);
    }
    if scenario.keepalive {
        cmd.args(["-z", &format!("{seconds}s")]);
    } else {
        cmd.args(["--disable-keepalive", "-n", &requests.to_string()]);
    }
    let (text, cpu_s) = output_of(cmd.arg(url), "oha")?;
    let json: serde_json::Value = serde_json::from_str(&text).context("parsing oha JSON")?;
    let rps = json["summary"]["requestsPerSec"]
        .as_f64()
        .ok_or_else(|| anyhow!("no summary.requestsPerSec in oha JSON"))?;
    let p99_s = json["latencyPercentiles"]["p99"]
        .as_f64()
        .unwrap_or(f64::NAN);
    let elapsed_s = json["summary"]["total"].as_f64().unwrap_or(0.0);
    Ok(Sample {
        rps,
        p99_ms: p99_s * 1000.0,
        cpu_us_per_request: per_request_us(cpu_s, rps * elapsed_s),
        mean_ms: json["summary"]["average"].as_f64().map(|s| s * 1000.0),
    })
}

/// One tool's run in the per-round table.
fn round_row(scenario: &Scenario, tool: &str, round: usize, sample: &Sample) -> String {
    format!(
        "| {} | {tool} | {round} | {:.0} | {:.2} | {} | {} | {} |\n",
        scenario.name,
        sample.rps,
        sample.p99_ms,
        fmt_opt(sample.mean_ms, 2),
        fmt_opt(sample.cycle_covered(scenario.in_flight()), 2),
        fmt_opt(sample.cpu_us_per_request, 2)
    )
}

fn fmt_opt(value: Option<f64>, decimals: usize) -> String {
    value.map_or_else(|| "n/a".to_string(), |v| format!("{v:.decimals$}"))
}

fn field_after<'a>(text: &'a str, label: &str) -> Option<&'a str> {
    text.lines()
        .find_map(|l| l.trim().strip_prefix(label))
        .and_then(|rest| rest.split_whitespace().next())
}

/// wrk's "1.80ms", "950.00us", "1.02s" in milliseconds.
fn duration_ms(text: &str) -> Option<f64> {
    let text = text.trim();
    let (number, scale) = if let Some(v) = text.strip_suffix("us") {
        (v, 1e-3)
    } else if let Some(v) = text.strip_suffix("ms") {
        (v, 1.0)
    } else if let Some(v) = text.strip_suffix('s') {
        (v, 1e3)
    } else {
        (text, 1.0)
    };
    number.trim().parse::<f64>().ok().map(|v| v * scale)
}

/// srvprof's p99 is no worse than the peer's; ab prints whole milliseconds (rounded), so against
/// ab the comparison is made at that resolution.
fn p99_no_worse(ours_ms: f64, peer_ms: f64, peer_rounds_to_ms: bool) -> bool {
    if peer_rounds_to_ms {
        ours_ms.round() <= peer_ms
    } else {
        ours_ms <= peer_ms
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn parses_h2load_throughput_and_requests_done() {
        let text = "finished in 5.00s, 41234.56 req/s, 1.23MB/s\n\
                    requests: 206173 total, 206273 started, 206170 done, 206170 succeeded, 3 failed, 0 errored, 0 timeout\n";
        assert_eq!(h2load_rps_done(text).unwrap(), (41234.56, 206170.0));
        assert!(h2load_rps_done("nothing").is_err());
    }

    #[test]
    fn parses_wrk_durations() {
        assert_eq!(duration_ms("1.80ms"), Some(1.8));
        assert!((duration_ms("950.00us").unwrap() - 0.95).abs() < 1e-9);
        assert_eq!(duration_ms("1.02s"), Some(1020.0));
    }

    #[test]
    fn p99_against_ab_is_compared_in_whole_milliseconds() {
        assert!(p99_no_worse(6.4, 6.0, true));
        assert!(!p99_no_worse(6.6, 6.0, true));
        assert!(!p99_no_worse(6.4, 6.0, false));
        assert!(p99_no_worse(5.9, 6.0, false));
    }

    #[test]
    fn finds_mean_latencies() {
        let wrk = "  Thread Stats   Avg      Stdev     Max   +/- Stdev\n    Latency     5.89ms    1.23ms  26.06ms   87.65%\n  Latency Distribution\n     50%    4.86ms\n";
        assert_eq!(wrk_mean_ms(wrk), Some(5.89));
        let ab = "Connection Times (ms)\n              min  mean[+/-sd] median   max\nConnect:        0    1   0.4      1       3\nTotal:          0    3   0.9      3       7\n";
        assert_eq!(ab_mean_ms(ab), Some(3.0));
        let s = Sample {
            rps: 100_000.0,
            p99_ms: 1.0,
            cpu_us_per_request: None,
            mean_ms: Some(5.0),
        };
        assert!((s.cycle_covered(1000).unwrap() - 0.5).abs() < 1e-9);
    }

    #[test]
    fn a_sample_median_takes_each_figure_apart() {
        let run = |rps, p99_ms, cpu| Sample {
            rps,
            p99_ms,
            cpu_us_per_request: cpu,
            mean_ms: None,
        };
        let m = Sample::median(&[
            run(300.0, 1.0, Some(9.0)),
            run(100.0, 3.0, None),
            run(200.0, 2.0, Some(7.0)),
        ])
        .unwrap();
        assert_eq!((m.rps, m.p99_ms), (200.0, 2.0));
        // Over the two runs that have it: the upper of the two.
        assert_eq!(m.cpu_us_per_request, Some(9.0));
        assert_eq!(m.mean_ms, None);
        assert!(Sample::median(&[]).is_none());
    }

    #[test]
    fn a_round_row_says_n_a_for_what_was_not_measured() {
        let oha = Sample {
            rps: 70_000.4,
            p99_ms: 1.234,
            cpu_us_per_request: None,
            mean_ms: Some(1.0),
        };
        assert_eq!(
            round_row(&SCENARIOS[0], "oha", 2, &oha),
            "| keep-alive c=100 | oha | 2 | 70000 | 1.23 | 1.00 | 0.70 | n/a |\n"
        );
        let ours = Sample {
            cpu_us_per_request: Some(3.456),
            mean_ms: None,
            ..oha
        };
        assert_eq!(
            round_row(&SCENARIOS[0], "srvprof", 1, &ours),
            "| keep-alive c=100 | srvprof | 1 | 70000 | 1.23 | n/a | n/a | 3.46 |\n"
        );
    }

    #[test]
    fn finds_fields() {
        let wrk = "Running 5s test\nRequests/sec:  70909.03\nTransfer/sec: 1MB\n";
        assert_eq!(field_after(wrk, "Requests/sec:"), Some("70909.03"));
        let ab = "Requests per second:    23000.12 [#/sec] (mean)\n";
        assert_eq!(field_after(ab, "Requests per second:"), Some("23000.12"));
    }
}
