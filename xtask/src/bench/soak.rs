//! `cargo xtask bench soak`: `srvprof run` against one nginx worker for long runs, to show whether
//! its memory and its output grow with the run's length: its RSS every 10 s (/proc/PID/status), its
//! peak (VmHWM, read every second through the end), the run folder's size, and how long the end's
//! processing took (from its "reading stacks" line to its exit).
//!
//!     cargo xtask bench soak [--durations 600s,3600s] [--connections 1000] [--out DIR]

use std::io::{BufRead, BufReader};
use std::path::{Path, PathBuf};
use std::process::{Command, Stdio};
use std::sync::{Arc, Mutex};
use std::time::{Duration, Instant};

use anyhow::{Context, Result, anyhow, bail};

use super::cells::Server;
use super::conns::status_kb;
use super::host::{CLIENT_CPU, raise_fd_limit};
use super::{SERVERS, parse_secs};
use crate::{free_port, workspace_root};

/// RSS is recorded this often while the load runs.
const RSS_EVERY: Duration = Duration::from_secs(10);

struct Args {
    durations: Vec<Duration>,
    connections: u64,
    out: PathBuf,
}

/// One long run.
struct Outcome {
    duration: Duration,
    /// (seconds since srvprof started, RSS kB), every RSS_EVERY.
    rss_kb: Vec<(f64, u64)>,
    peak_kb: u64,
    folder_bytes: u64,
    /// From "reading stacks" to srvprof's exit.
    end_s: Option<f64>,
}

pub fn run(args: &[String]) -> Result<()> {
    let args = parse(args)?;
    let _ = raise_fd_limit(u64::MAX);
    std::fs::create_dir_all(&args.out)?;
    let srvprof = crate::release_srvprof()?;
    let mut outcomes = Vec::new();
    for &duration in &args.durations {
        outcomes.push(one_run(&args, &srvprof, duration)?);
    }
    let table = render(&args, &outcomes);
    super::write_results(&args.out, "soak", &table)
}

fn parse(args: &[String]) -> Result<Args> {
    let mut a = Args {
        durations: vec![Duration::from_secs(600), Duration::from_secs(3600)],
        connections: 1000,
        out: workspace_root().join("target/bench/soak"),
    };
    let mut it = args.iter();
    while let Some(flag) = it.next() {
        let mut value = || it.next().ok_or_else(|| anyhow!("{flag} needs a value"));
        match flag.as_str() {
            "--durations" => {
                a.durations = (value()?.split(','))
                    .map(parse_secs)
                    .collect::<Result<_>>()?
            }
            "--connections" => a.connections = value()?.parse()?,
            "--out" => a.out = PathBuf::from(value()?),
            other => {
                bail!("unknown option {other}; bench soak takes --durations, --connections, --out")
            }
        }
    }
    Ok(a)
}

fn one_run(args: &Args, srvprof: &Path, duration: Duration) -> Result<Outcome> {
    let spec = SERVERS
        .iter()
        .find(|s| s.label == "nginx-hello")
        .expect("nginx-hello is a reference server");
    let port = free_port()?;
    let secs = duration.as_secs().max(1);
    let dir = args.out.join(format!("{secs}s"));
    let _ = std::fs::remove_dir_all(&dir);
    std::fs::create_dir_all(&dir)?;
    let server = Server::start_with(spec, true, port, &dir.join("server.log"), &[])?;
    let url = format!("http://127.0.0.1:{port}/");
    eprintln!(
        "bench soak: srvprof run -c {} for {secs} s",
        args.connections
    );
    // taskset execs srvprof, so the child's PID is srvprof's.
    let mut child = Command::new("taskset")
        .args(["-c", CLIENT_CPU])
        .arg(srvprof)
        .args(["run", "--pid", &server.pid().to_string(), "--url", &url])
        .args([
            "-c",
            &args.connections.to_string(),
            "-d",
            &format!("{secs}s"),
        ])
        .args(["--cpus", CLIENT_CPU, "--force", "--out"])
        .arg(dir.join("run"))
        .stdout(Stdio::null())
        .stderr(Stdio::piped())
        .spawn()
        .context("starting srvprof run")?;
    let reading_stacks: Arc<Mutex<Option<Instant>>> = Arc::default();
    let stderr = child.stderr.take().expect("piped");
    let seen = Arc::clone(&reading_stacks);
    let log = std::thread::spawn(move || {
        let mut text = String::new();
        for line in BufReader::new(stderr).lines().map_while(Result::ok) {
            if line.contains("reading stacks") {
                *seen.lock().unwrap() = Some(Instant::now());
            }
            text.push_str(&line);
            text.push('\n');
        }
        text
    });
    let started = Instant::now();
    // From the first RSS_EVERY on: at once, taskset may not have exec'd srvprof yet.
    let (mut rss, mut peak_kb, mut next) = (Vec::new(), 0, RSS_EVERY);
    while child.try_wait()?.is_none() {
        let pid = child.id();
        peak_kb = peak_kb.max(status_kb(pid, "VmHWM:").unwrap_or(0));
        if started.elapsed() >= next
            && let Some(kb) = status_kb(pid, "VmRSS:")
        {
            rss.push((started.elapsed().as_secs_f64(), kb));
            next += RSS_EVERY;
        }
        std::thread::sleep(Duration::from_secs(1));
    }
    let exited = Instant::now();
    let status = child.wait()?;
    let text = log.join().unwrap_or_default();
    std::fs::write(dir.join("srvprof.log"), &text)?;
    drop(server);
    if !status.success() {
        bail!("srvprof run failed ({status}):\n{text}");
    }
    let end_s = reading_stacks
        .lock()
        .unwrap()
        .map(|t| exited.duration_since(t).as_secs_f64());
    Ok(Outcome {
        duration,
        rss_kb: rss,
        peak_kb,
        folder_bytes: folder_bytes(&dir.join("run")),
        end_s,
    })
}

fn folder_bytes(dir: &Path) -> u64 {
    std::fs::read_dir(dir)
        .map(|entries| {
            entries
                .filter_map(Result::ok)
                .filter_map(|e| e.metadata().ok())
                .map(|m| m.len())
                .sum()
        })
        .unwrap_or(0)
}

/// The RSS recorded closest to `at_s` seconds in.
fn rss_at(rss: &[(f64, u64)], at_s: f64) -> Option<u64> {
    rss.iter()
        .min_by(|a, b| (a.0 - at_s).abs().total_cmp(&(b.0 - at_s).abs()))
        .map(|(_, kb)| *kb)
}

fn render(args: &Args, outcomes: &[Outcome]) -> String {
    let mb = |kb: u64| kb as f64 / 1024.0;
    let mut out = format!(
        "# srvprof run against one nginx worker, -c {}, over time\n\n\
         | run | RSS at 1 min | RSS at the last reading | growth after the first minute | per hour | peak (VmHWM) | peak / last reading | run folder | end's processing |\n\
         | --- | --- | --- | --- | --- | --- | --- | --- | --- |\n",
        args.connections
    );
    for o in outcomes {
        let secs = o.duration.as_secs();
        let first = rss_at(&o.rss_kb, 60.0).unwrap_or(0);
        let (last_s, last) = o.rss_kb.last().copied().unwrap_or((0.0, 0));
        let growth = mb(last.saturating_sub(first));
        let per_hour = if last_s > 60.0 {
            growth * 3600.0 / (last_s - 60.0)
        } else {
            0.0
        };
        out.push_str(&format!(
            "| {secs} s | {:.1} MB | {:.1} MB ({last_s:.0} s) | {growth:.1} MB ({:.1} %) | {per_hour:.0} MB | {:.1} MB | {:.2} | {:.1} MB | {} |\n",
            mb(first),
            mb(last),
            if first > 0 { 100.0 * growth / mb(first) } else { 0.0 },
            mb(o.peak_kb),
            if last > 0 { o.peak_kb as f64 / last as f64 } else { 0.0 },
            o.folder_bytes as f64 / 1e6,
            o.end_s.map_or("?".into(), |s| format!("{s:.1} s")),
        ));
    }
    out.push_str("\nRSS every 10 s (s: MB):\n\n");
    for o in outcomes {
        let series: Vec<String> = (o.rss_kb.iter())
            .map(|(t, kb)| format!("{t:.0}: {:.1}", mb(*kb)))
            .collect();
        out.push_str(&format!(
            "- {} s: {}\n",
            o.duration.as_secs(),
            series.join(", ")
        ));
    }
    out
}
