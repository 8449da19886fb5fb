//! One cell of the grid: a server started pinned (in its own process group), `srvprof run --pid`
//! against it from CPU 0, and the figures read back from its run.json.

use std::fs::File;
use std::net::TcpStream;
use std::os::unix::process::CommandExt;
use std::path::Path;
use std::process::{Child, Command, Stdio};
use std::time::{Duration, Instant};

use anyhow::{Context, Result, bail};
use serde_json::Value;

use super::host::{CLIENT_CPU, raise_fd_limit};
use super::{BenchArgs, ServerSpec};
use crate::{free_port, workspace_root};

/// First runs build the server (go compiles its standard library cold in ~45 s).
const SERVER_START_TIMEOUT: Duration = Duration::from_secs(240);

#[derive(Clone, Debug)]
pub struct Cell {
    pub server: ServerSpec,
    pub connections: usize,
    pub keepalive: bool,
}

impl Cell {
    pub fn mode(&self) -> &'static str {
        mode_name(self.keepalive)
    }
    /// The run folder's name: `<server>-c<N>-<ka|close>`.
    pub fn name(&self) -> String {
        format!(
            "{}-c{}-{}",
            self.server.label,
            self.connections,
            self.mode()
        )
    }
}

/// The connection mode as run folders and chart files name it.
pub fn mode_name(keepalive: bool) -> &'static str {
    if keepalive { "ka" } else { "close" }
}

/// What a cell produced.
#[derive(Clone, Debug)]
pub enum Outcome {
    Ran(Box<Metrics>),
    Failed(String),
}

/// The figures the tables and charts show, read from one run.json.
#[derive(Clone, Debug, Default)]
pub struct Metrics {
    pub rps: f64,
    pub completed: u64,
    pub errors: u64,
    pub p50_us: f64,
    pub p99_us: f64,
    pub context_switches_per_request: f64,
    pub syscalls_per_request: f64,
    pub server_user_pct: f64,
    pub server_sys_pct: f64,
    /// NET_RX softirqs of the CPU that took most of them, as a share of all NET_RX (0..1).
    pub net_rx_busiest_share: f64,
    pub net_rx_busiest_cpu: Option<u64>,
    pub listen_overflows: u64,
    pub syn_retransmits: u64,
    pub client_bound: bool,
    /// `kind: summary` of the most severe finding.
    pub top_finding: Option<(String, String)>,
    pub has_report: bool,
}

impl Metrics {
    pub fn from_run_json(json: &Value) -> Metrics {
        let f = |v: &Value| v.as_f64().unwrap_or(0.0);
        let u = |v: &Value| v.as_u64().unwrap_or(0);
        let load = &json["load"];
        let server = &json["server"];
        let duration_ns = f(&server["duration_s"]).max(1e-9) * 1e9;
        let tcp = &server["tcp"];
        let findings = json["findings"].as_array().cloned().unwrap_or_default();
        let (net_rx_busiest_share, net_rx_busiest_cpu) = net_rx_busiest(&server["softirqs"]);
        Metrics {
            rps: f(&load["throughput_rps"]),
            completed: u(&load["completed"]),
            errors: u(&load["errors"]),
            p50_us: f(&load["latency_us"]["p50"]),
            p99_us: f(&load["latency_us"]["p99"]),
            context_switches_per_request: f(&json["per_request"]["context_switches"]),
            syscalls_per_request: f(&json["per_request"]["syscalls"]),
            server_user_pct: f(&server["totals"]["user_ns"]) / duration_ns * 100.0,
            server_sys_pct: f(&server["totals"]["sys_ns"]) / duration_ns * 100.0,
            net_rx_busiest_share,
            net_rx_busiest_cpu,
            listen_overflows: u(&tcp["listen_overflows"]),
            // The tracepoint count: the MIB counter is machine-wide and counts other processes' SYNs.
            syn_retransmits: u(&tcp["syn_retransmits"]),
            client_bound: findings.iter().any(|x| x["kind"] == "client_bound"),
            top_finding: top_finding(&findings),
            has_report: false,
        }
    }
}

fn net_rx_busiest(softirqs: &Value) -> (f64, Option<u64>) {
    let rows = softirqs.as_array().cloned().unwrap_or_default();
    let net_rx: Vec<(u64, u64)> = rows
        .iter()
        .filter(|r| r["vector"] == "NET_RX")
        .map(|r| {
            (
                r["cpu"].as_u64().unwrap_or(0),
                r["count"].as_u64().unwrap_or(0),
            )
        })
        .collect();
    let total: u64 = net_rx.iter().map(|(_, n)| n).sum();
    match net_rx.iter().max_by_key(|(_, n)| *n) {
        Some(&(cpu, n)) if total > 0 => (n as f64 / total as f64, Some(cpu)),
        _ => (0.0, None),
    }
}

fn severity_rank(severity: &str) -> u8 {
    match severity {
        "critical" | "error" => 3,
        "warning" => 2,
        "info" => 1,
        _ => 0,
    }
}

fn top_finding(findings: &[Value]) -> Option<(String, String)> {
    // The first of the most severe (srvprof lists findings in its own order of importance),
    // client_bound aside: the tables give it its own column.
    let ranked = |x: &&Value| severity_rank(x["severity"].as_str().unwrap_or(""));
    let best = findings
        .iter()
        .rev()
        .filter(|x| x["kind"] != "client_bound")
        .max_by_key(ranked)
        .or_else(|| findings.iter().rev().max_by_key(ranked))?;
    Some((
        best["kind"].as_str().unwrap_or("?").to_string(),
        best["summary"].as_str().unwrap_or("").to_string(),
    ))
}

/// Reads a cell's folder as a previous bench left it (for --render).
pub fn read_back(out: &Path, cell: &Cell) -> Outcome {
    let dir = out.join(cell.name());
    if let Ok(reason) = std::fs::read_to_string(dir.join("failed.txt")) {
        return Outcome::Failed(reason.trim().to_string());
    }
    read_run_json(&dir)
}

fn read_run_json(dir: &Path) -> Outcome {
    let path = dir.join("run.json");
    let text = match std::fs::read_to_string(&path) {
        Ok(t) => t,
        Err(e) => return Outcome::Failed(format!("no run.json ({e})")),
    };
    match serde_json::from_str::<Value>(&text) {
        Ok(json) => {
            let mut m = Metrics::from_run_json(&json);
            m.has_report = dir.join("report.html").exists();
            Outcome::Ran(Box::new(m))
        }
        Err(e) => Outcome::Failed(format!("run.json does not parse: {e}")),
    }
}

/// Raises the soft open-files limit toward the hard one (children inherit it) and fails when
/// 2 fds per connection (client and server side) plus 64 do not fit.
pub fn ensure_fd_limit(connections: usize) -> Result<()> {
    let needed = (2 * connections + 64) as u64;
    let limit = raise_fd_limit(needed)?;
    if limit < needed {
        bail!(
            "-c {connections} needs {needed} open files (2 per connection + 64) but the limit is {limit}; \
             raise it (`ulimit -n {needed}`, as root) or lower --concurrency"
        );
    }
    Ok(())
}

/// A reference server in its own process group; the whole group is killed on drop.
pub(crate) struct Server {
    child: Child,
    label: String,
}

impl Server {
    fn start(spec: &ServerSpec, keepalive: bool, port: u16, log: &Path) -> Result<Server> {
        Self::start_with(spec, keepalive, port, log, &[])
    }

    /// The same with the server's own options after the common ones.
    pub(crate) fn start_with(
        spec: &ServerSpec,
        keepalive: bool,
        port: u16,
        log: &Path,
        extra: &[&str],
    ) -> Result<Server> {
        let script = workspace_root().join("servers").join(spec.dir).join("run");
        let mut cmd = Command::new(&script);
        cmd.args(["--port", &port.to_string(), "--cpus", spec.cpus]);
        cmd.args(extra);
        if let Some(workers) = spec.workers {
            cmd.args(["--workers", &workers.to_string()]);
        }
        if !keepalive {
            cmd.arg("--no-keepalive");
        }
        // Its own process group, so that killing the group also kills nginx workers.
        cmd.process_group(0)
            .stdin(Stdio::null())
            .stdout(Stdio::null());
        cmd.stderr(File::create(log).with_context(|| format!("creating {}", log.display()))?);
        eprintln!("bench: starting {cmd:?}");
        let child = cmd
            .spawn()
            .with_context(|| format!("starting {}", script.display()))?;
        let mut server = Server {
            child,
            label: spec.label.to_string(),
        };
        let deadline = Instant::now() + SERVER_START_TIMEOUT;
        loop {
            if TcpStream::connect(("127.0.0.1", port)).is_ok() {
                return Ok(server);
            }
            if let Ok(Some(status)) = server.child.try_wait() {
                bail!(
                    "{} exited with {status} before listening: {}",
                    spec.label,
                    log_tail(log)
                );
            }
            if Instant::now() > deadline {
                bail!(
                    "{} did not listen on port {port} within {} s: {}",
                    spec.label,
                    SERVER_START_TIMEOUT.as_secs(),
                    log_tail(log)
                );
            }
            std::thread::sleep(Duration::from_millis(100));
        }
    }

    pub(crate) fn pid(&self) -> u32 {
        self.child.id()
    }
}

impl Drop for Server {
    fn drop(&mut self) {
        let group = -(self.child.id() as i32);
        // SAFETY: kill has no memory preconditions; the group is the one we created.
        unsafe { libc::kill(group, libc::SIGTERM) };
        let deadline = Instant::now() + Duration::from_secs(5);
        while Instant::now() < deadline && !matches!(self.child.try_wait(), Ok(Some(_))) {
            std::thread::sleep(Duration::from_millis(50));
        }
        // Whatever survived SIGTERM (nginx workers of a dead master, erl helpers) goes now.
        unsafe { libc::kill(group, libc::SIGKILL) };
        let _ = self.child.wait();
        let deadline = Instant::now() + Duration::from_secs(5);
        // kill(group, 0) fails with ESRCH once no process of the group is left.
        while unsafe { libc::kill(group, 0) } == 0 {
            if Instant::now() > deadline {
                eprintln!(
                    "bench: WARNING processes of {} (group {}) are still alive",
                    self.label, -group
                );
                break;
            }
            std::thread::sleep(Duration::from_millis(50));
        }
    }
}

fn log_tail(log: &Path) -> String {
    let text = std::fs::read_to_string(log).unwrap_or_default();
    let lines: Vec<&str> = text.lines().filter(|l| !l.trim().is_empty()).collect();
    let tail = lines[lines.len().saturating_sub(3)..].join(" | ");
    if tail.is_empty() {
        format!("(nothing in {})", log.display())
    } else {
        tail
    }
}

/// Runs every cell of one server: one server process per connection mode (the server gets
/// `--no-keepalive` for the close cells, as the study's `keepalive_timeout 0`).
pub fn run_server_cells(
    srvprof: &Path,
    bench: &BenchArgs,
    spec: &ServerSpec,
    cells: &[&Cell],
) -> Vec<Outcome> {
    let logs = bench.out.join("logs");
    let _ = std::fs::create_dir_all(&logs);
    let mut outcomes = Vec::new();
    for keepalive in [true, false] {
        let mode_cells: Vec<&Cell> = cells
            .iter()
            .copied()
            .filter(|c| c.keepalive == keepalive)
            .collect();
        if mode_cells.is_empty() {
            continue;
        }
        let mode = mode_cells[0].mode();
        let log = logs.join(format!("{}-{mode}-server.log", spec.label));
        let server = free_port().and_then(|port| Server::start(spec, keepalive, port, &log));
        for cell in &mode_cells {
            let dir = bench.out.join(cell.name());
            let _ = std::fs::create_dir_all(&dir);
            let _ = std::fs::remove_file(dir.join("failed.txt"));
            let outcome = match &server {
                Ok(server) => run_cell(srvprof, bench, cell, server.pid(), &dir, &logs),
                Err(e) => Outcome::Failed(format!("server did not start: {e:#}")),
            };
            if let Outcome::Failed(reason) = &outcome {
                eprintln!("bench: {} FAILED: {reason}", cell.name());
                let _ = std::fs::write(dir.join("failed.txt"), reason);
            }
            outcomes.push((cell.name(), outcome));
        }
        drop(server);
    }
    // Back in the caller's order.
    cells
        .iter()
        .map(|c| {
            let i = outcomes
                .iter()
                .position(|(n, _)| *n == c.name())
                .expect("every cell ran");
            outcomes.remove(i).1
        })
        .collect()
}

fn run_cell(
    srvprof: &Path,
    bench: &BenchArgs,
    cell: &Cell,
    pid: u32,
    dir: &Path,
    logs: &Path,
) -> Outcome {
    let log_path = logs.join(format!("{}.log", cell.name()));
    let log = match File::create(&log_path) {
        Ok(f) => f,
        Err(e) => return Outcome::Failed(format!("creating {}: {e}", log_path.display())),
    };
    let mut cmd = Command::new(srvprof);
    cmd.args(["run", "--pid", &pid.to_string()])
        .args(["-c", &cell.connections.to_string()])
        .args(["-d", &format!("{}ms", bench.duration.as_millis())])
        .args(["--warmup", &format!("{}ms", bench.warmup.as_millis())])
        // One client thread on CPU 0: the server owns CPU 1.
        .args(["--cpus", CLIENT_CPU, "--threads", "1"])
        .arg("--out")
        .arg(dir)
        .arg("--force");
    if !cell.keepalive {
        cmd.arg("--no-keepalive");
    }
    eprintln!("bench: {}: {}", cell.name(), command_line(&cmd));
    let stderr = log.try_clone().map(Stdio::from).unwrap_or(Stdio::null());
    let mut child = match cmd.stdin(Stdio::null()).stdout(log).stderr(stderr).spawn() {
        Ok(c) => c,
        Err(e) => return Outcome::Failed(format!("cannot start srvprof: {e}")),
    };
    // Bounded: the load itself, plus request timeouts (10 s) and the report.
    let deadline = Instant::now() + bench.duration + bench.warmup + Duration::from_secs(60);
    let status = loop {
        match child.try_wait() {
            Ok(Some(status)) => break status,
            Ok(None) if Instant::now() > deadline => {
                let _ = child.kill();
                let _ = child.wait();
                return Outcome::Failed(format!(
                    "srvprof run did not finish in time; see {}",
                    log_path.display()
                ));
            }
            Ok(None) => std::thread::sleep(Duration::from_millis(100)),
            Err(e) => return Outcome::Failed(format!("waiting for srvprof: {e}")),
        }
    };
    match read_run_json(dir) {
        Outcome::Failed(reason) => Outcome::Failed(format!(
            "srvprof run exited with {status}, {reason}: {}",
            log_tail(&log_path)
        )),
        ran => ran,
    }
}

fn command_line(cmd: &Command) -> String {
    let mut parts = vec![cmd.get_program().to_string_lossy().into_owned()];
    parts.extend(cmd.get_args().map(|a| a.to_string_lossy().into_owned()));
    parts.join(" ")
}
