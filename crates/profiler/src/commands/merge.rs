//! `srvprof merge DIR... --out DIR`: the folders a split run's hosts wrote made one run's. Load
//! agents' folders (load.json, latency.hlog) merge without loss (srvprof_loadgen::merge); with
//! the server hosts' folders (`srvprof probe --start-at ... --out`), checked to be the same run's,
//! the merged load is joined with their kernel series into the run folder `srvprof run` writes.

use std::io::Write;
use std::path::{Path, PathBuf};
use std::time::SystemTime;

use srvprof_analysis::probe_output::ProbeSeries;
use srvprof_analysis::split_run::{ServerSeries, build_split};
use srvprof_loadgen::merge::{Agent, MAX_START_SPREAD, merge, read_agent, write_log};
use srvprof_loadgen::start::StartAt;

use crate::error::SrvprofError;
use crate::output;

/// Whether a server's probe watched from the load's measured window's start (its `start_at`,
/// probe.json's), within MAX_START_SPREAD: else its rows would join the wrong load intervals.
fn aligned(
    dir: &Path,
    watched_from: Option<&str>,
    measured_from: SystemTime,
) -> Result<(), String> {
    let load = StartAt(measured_from).to_rfc3339();
    let Some(text) = watched_from else {
        return Err(format!(
            "{} was probed without --start-at: run `srvprof probe --start-at {load}` with the agents' --run-id, so that its intervals are the load's",
            dir.display()
        ));
    };
    let probe = StartAt::parse(text).map_err(|e| format!("{}: start_at {e}", dir.display()))?;
    let apart = match probe.0.duration_since(measured_from) {
        Ok(d) => d,
        Err(e) => e.duration(),
    };
    if apart > MAX_START_SPREAD {
        return Err(format!(
            "{} watched from {text} but the load measured from {load} (the agents' --start-at plus --ramp-up and --warmup): run `srvprof probe --start-at {load}` with the agents' --run-id (srvprof plan does)",
            dir.display()
        ));
    }
    Ok(())
}

/// A server folder's JSON file: what could not be read or was not `what`, in one sentence.
fn read_json<T: serde::de::DeserializeOwned>(path: &Path, what: &str) -> Result<T, SrvprofError> {
    let text = output::read_input(
        path,
        "a server's folder must be written by `srvprof probe --out DIR` of this version",
    )?;
    serde_json::from_str(&text).map_err(|e| {
        SrvprofError::Usage(format!("{} is not a srvprof {what}: {e}", path.display()))
    })
}

/// A server host's folder: its probe.json, and the run id and host it names.
struct ServerSide {
    dir: PathBuf,
    json: serde_json::Value,
}

impl ServerSide {
    fn host(&self) -> &str {
        self.json["host"].as_str().unwrap_or("server")
    }

    /// Its series.json, for the run report.
    fn series(&self) -> Result<ProbeSeries, SrvprofError> {
        read_json(&self.dir.join("series.json"), "probe series")
    }
}

pub fn run(dirs: &[PathBuf], out: &Path, force: bool) -> Result<(), SrvprofError> {
    let (mut agents, mut servers): (Vec<Agent>, Vec<ServerSide>) = (Vec::new(), Vec::new());
    for dir in dirs {
        let probe = dir.join("probe.json");
        if !dir.join("load.json").exists() && probe.exists() {
            servers.push(ServerSide {
                dir: dir.clone(),
                json: read_json(&probe, "probe report")?,
            });
            continue;
        }
        agents.push(read_agent(dir).map_err(SrvprofError::Usage)?);
    }
    let merged = merge(&agents).map_err(SrvprofError::Usage)?;
    let id = merged.report.config.run_id.clone().unwrap_or_default();
    for s in &servers {
        let theirs = s.json["run_id"].as_str().unwrap_or("none");
        if theirs != id {
            return Err(SrvprofError::Usage(format!(
                "{} is run {theirs} and the load agents' is run {id}: give `srvprof probe` the agents' --start-at (or --run-id)",
                s.dir.display()
            )));
        }
    }
    let mut series = Vec::new();
    for s in &servers {
        aligned(&s.dir, s.json["start_at"].as_str(), merged.start).map_err(SrvprofError::Usage)?;
        let probe = s.series()?;
        let (theirs, ours) = (probe.series.interval(), merged.report.config.interval_s);
        if (theirs.as_secs_f64() - ours).abs() > 1e-6 {
            return Err(SrvprofError::Usage(format!(
                "{} was probed in intervals of {:?} and the load measured in intervals of {ours} s: give `srvprof probe` the agents' --interval",
                s.dir.display(),
                theirs
            )));
        }
        series.push(ServerSeries {
            host: s.host().to_string(),
            probe,
        });
    }
    let out_path = out;
    let out = &output::open_dir(out_path)?;
    for name in ["run.json", "load.json", "latency.hlog"] {
        output::check_writable(out, name, force)?;
    }
    // The first server host's stacks, as its figures are the report's (split_run).
    let stacks = match servers.first() {
        Some(s) => Some(output::stacks::read_dir(&s.dir)?),
        None => None,
    }
    .filter(|s| !s.oncpu.is_empty() || !s.offcpu.is_empty());
    let report = (!series.is_empty())
        .then(|| build_split(merged.report.clone(), &series, stacks.as_ref(), Vec::new()));
    if let Some(report) = &report {
        super::run::write_run(out, report, stacks.as_ref(), force)?;
    }
    let json = serde_json::to_string_pretty(&merged.report).expect("a report serializes");
    output::write_atomic(out, "load.json", json.as_bytes(), force)?;
    write_log(&merged, out, "latency.hlog").map_err(SrvprofError::Usage)?;
    let mut names = Vec::new();
    for (k, s) in servers.iter().enumerate() {
        let name = format!("probe-{}-{}.json", k + 1, s.host());
        let text = serde_json::to_string_pretty(&s.json).expect("JSON serializes");
        output::write_atomic(out, &name, text.as_bytes(), force)?;
        names.push(name);
    }
    let r = &merged.report;
    let mut stdout = std::io::stdout().lock();
    if let Some(report) = &report {
        let _ = write!(
            stdout,
            "{}",
            crate::render::first_screen::text(report, None, false)
        );
    }
    let _ = writeln!(
        stdout,
        "run {id}: {} client hosts, {} connections, {:.0} req/s, {} ok, {} errors; latency p50 {:.2} ms, p99 {:.2} ms, max {:.2} ms (every host's latencies added)",
        r.hosts.len(),
        r.config.connections,
        r.throughput_rps,
        r.completed,
        r.errors,
        r.latency_us.p50 as f64 / 1e3,
        r.latency_us.p99 as f64 / 1e3,
        r.latency_us.max as f64 / 1e3
    );
    for h in &r.hosts {
        let _ = writeln!(
            stdout,
            "  {} {}: {} connections, {:.0} req/s, p99 {:.2} ms, its busiest load thread {:.0}% busy",
            h.segment,
            h.host,
            h.connections,
            h.throughput_rps,
            h.p99_us as f64 / 1e3,
            h.max_thread_utilization * 100.0
        );
    }
    for (s, name) in servers.iter().zip(&names) {
        let _ = writeln!(stdout, "  server side: {} as {name}", s.dir.display());
    }
    if let Some(report) = &report {
        for h in &report.servers {
            let _ = writeln!(
                stdout,
                "  server {}: {:.2} s CPU ({:.2}x the mean server host's), {:.1} µs a request, {} context switches",
                h.host, h.cpu_s, h.cpu_vs_mean, h.cpu_us_per_request, h.context_switches
            );
        }
        let _ = writeln!(stdout, "report       {}", out.join("report.html").display());
    }
    let _ = writeln!(stdout, "wrote {}", out.path().display());
    Ok(())
}

#[cfg(test)]
mod tests {
    use super::*;
    use std::time::Duration;

    #[test]
    fn a_probe_joins_the_load_only_from_the_start_of_its_window() {
        let dir = Path::new("server-1");
        let load = SystemTime::UNIX_EPOCH + Duration::from_secs(1_800_000_000);
        let at = |ms: u64| StartAt(load + Duration::from_millis(ms)).to_rfc3339();
        let before = StartAt(load - Duration::from_millis(500)).to_rfc3339();
        assert_eq!(aligned(dir, Some(&at(0)), load), Ok(()));
        assert_eq!(aligned(dir, Some(&at(8)), load), Ok(()));
        let late = aligned(dir, Some(&at(500)), load).unwrap_err();
        assert!(
            late.contains("--start-at 2027-01-15T08:00:00.000Z"),
            "{late}"
        );
        assert!(aligned(dir, Some(&before), load).is_err());
        let none = aligned(dir, None, load).unwrap_err();
        assert!(none.contains("without --start-at"), "{none}");
        for e in [late, none] {
            assert_eq!(e.lines().count(), 1);
        }
    }
}
