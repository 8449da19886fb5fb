//! The load agents of one split run made one run (`srvprof merge`): each agent's folder holds
//! its report (load.json) and its latency log (latency.hlog, one HdrHistogram per interval).
//! Histograms are added, never percentiles averaged, so the merged percentiles are those of
//! every latency recorded on every host; counters are summed, and each host keeps its own line.
//! Inputs that are not one run's whole are refused in one sentence: different run ids, segments
//! that do not cover 1..N once each, windows that began further apart than MAX_START_SPREAD.

use std::collections::BTreeMap;
use std::path::{Path, PathBuf};
use std::time::{Duration, SystemTime};

use hdrhistogram::Histogram;
use srvprof_files::OutDir;

use crate::hdr_log::{HdrLogFile, IntervalLatency};
use crate::hdr_log_read;
use crate::report::{HostShare, LatencySummary, LoadReport, LoadRow, spectrum};
use crate::segment::Segment;

/// The hosts' windows may begin at most this far apart (their logs' StartTime): their clocks
/// agree that well when synchronised (chrony keeps a LAN's within a millisecond); further apart,
/// their intervals are not the same spans of time and adding them would mix them.
pub const MAX_START_SPREAD: Duration = Duration::from_millis(10);

/// The largest load.json srvprof reads: its per-target figures for thousands of targets.
const MAX_REPORT_BYTES: u64 = 64 << 20;

/// One agent's folder, read.
#[derive(Debug)]
pub struct Agent {
    pub dir: PathBuf,
    pub report: LoadReport,
    /// Its log's StartTime, and per interval its start (from StartTime), length and latencies.
    pub start: Duration,
    pub intervals: Vec<(Duration, Duration, Histogram<u64>)>,
}

/// The merged run: its report, and its log's intervals.
pub struct Merged {
    pub report: LoadReport,
    pub start: SystemTime,
    pub interval: Duration,
    pub intervals: Vec<Histogram<u64>>,
}

/// Reads DIR/load.json and DIR/latency.hlog.
pub fn read_agent(dir: &Path) -> Result<Agent, String> {
    let json = dir.join("load.json");
    let text = srvprof_files::read_input_string(&json, MAX_REPORT_BYTES).map_err(|e| {
        format!(
            "cannot read {}: {e}; a load agent's folder is the one `srvprof load --out DIR` wrote",
            json.display()
        )
    })?;
    let report: LoadReport = serde_json::from_str(&text)
        .map_err(|e| format!("{} is not a load report srvprof wrote: {e}", json.display()))?;
    let log = dir.join("latency.hlog");
    let bytes = srvprof_files::read_input(&log, hdr_log_read::MAX_LOG_BYTES).map_err(|e| {
        format!(
            "cannot read {}: {e}; `srvprof load --out DIR` writes it beside load.json",
            log.display()
        )
    })?;
    let parsed = hdr_log_read::parse(&bytes).map_err(|e| {
        format!(
            "{} is not a latency log srvprof can merge: {e}; give the latency.hlog `srvprof load --out DIR` wrote",
            log.display()
        )
    })?;
    Ok(Agent {
        dir: dir.to_path_buf(),
        report,
        start: parsed.start,
        intervals: parsed.intervals,
    })
}

/// Whether `agents` are one run's whole: one run id, segments 1..N once each, windows begun
/// within MAX_START_SPREAD. The first thing wrong, in one sentence.
pub fn check(agents: &[Agent]) -> Result<(), String> {
    let Some(first) = agents.first() else {
        return Err("give the folders of a split run's load agents (srvprof load --out DIR on each host)".into());
    };
    let id_of = |a: &Agent| {
        a.report.config.run_id.clone().ok_or_else(|| {
            format!(
                "{} has no run id: start each agent with the same --start-at (or --run-id) so that their results are known to be one run's",
                a.dir.display()
            )
        })
    };
    let id = id_of(first)?;
    for a in &agents[1..] {
        let other = id_of(a)?;
        if other != id {
            return Err(format!(
                "{} is run {other} and {} is run {id}: only one run's agents merge",
                a.dir.display(),
                first.dir.display()
            ));
        }
    }
    let mut by_number: BTreeMap<u64, &Agent> = BTreeMap::new();
    let mut count = None;
    for a in agents {
        let segment = match &a.report.config.segment {
            Some(text) => Segment::parse(text).map_err(|e| format!("{}: {e}", a.dir.display()))?,
            None => Segment::WHOLE,
        };
        if *count.get_or_insert(segment.count()) != segment.count() {
            return Err(format!(
                "{} is a share of {} hosts, the others of {}: give the agents of one split",
                a.dir.display(),
                segment.count(),
                count.unwrap_or(0)
            ));
        }
        if let Some(twice) = by_number.insert(segment.number(), a) {
            return Err(format!(
                "segment {}/{} is given twice ({} and {})",
                segment.number(),
                segment.count(),
                twice.dir.display(),
                a.dir.display()
            ));
        }
    }
    let n = count.unwrap_or(1);
    if let Some(missing) = (1..=n).find(|i| !by_number.contains_key(i)) {
        return Err(format!(
            "segment {missing}/{n} is missing: give the folder of the agent that ran it, or the merged run would lack its share of the load"
        ));
    }
    let earliest = agents.iter().min_by_key(|a| a.start);
    let latest = agents.iter().max_by_key(|a| a.start);
    if let (Some(a), Some(b)) = (earliest, latest)
        && b.start - a.start > MAX_START_SPREAD
    {
        return Err(format!(
            "the windows of {} and {} began {:.1} ms apart, more than the {} ms a merge allows: their clocks disagree (synchronise them: chrony, systemd-timesyncd) or they were not given one --start-at",
            a.dir.display(),
            b.dir.display(),
            (b.start - a.start).as_secs_f64() * 1e3,
            MAX_START_SPREAD.as_millis()
        ));
    }
    Ok(())
}

/// The agents' run as one: `check`ed first.
pub fn merge(agents: &[Agent]) -> Result<Merged, String> {
    check(agents)?;
    let first = &agents[0];
    let interval = (first.intervals.first())
        .map(|(_, length, _)| *length)
        .unwrap_or(Duration::from_secs(1));
    let rows = agents.iter().map(|a| a.intervals.len()).max().unwrap_or(0);
    let empty = crate::histogram::new_histogram();
    let mut intervals = vec![empty.clone(); rows];
    let mut all = empty.clone();
    for a in agents {
        for (k, (_, _, h)) in a.intervals.iter().enumerate() {
            intervals[k].add(h).map_err(|e| format!("{}: {e:?}", a.dir.display()))?;
            all.add(h).map_err(|e| format!("{}: {e:?}", a.dir.display()))?;
        }
    }
    let mut r = first.report.clone();
    let sum = |f: fn(&LoadReport) -> u64| agents.iter().map(|a| f(&a.report)).sum::<u64>();
    r.requests = sum(|r| r.requests);
    r.completed = sum(|r| r.completed);
    r.errors = sum(|r| r.errors);
    r.sent = sum(|r| r.sent);
    r.unfinished = sum(|r| r.unfinished);
    r.warmup_requests = sum(|r| r.warmup_requests);
    r.carried_in = sum(|r| r.carried_in);
    r.bytes = sum(|r| r.bytes);
    r.connections_opened = sum(|r| r.connections_opened);
    r.idle_closed_by_server = sum(|r| r.idle_closed_by_server);
    r.duration_s = agents.iter().map(|a| a.report.duration_s).fold(0.0, f64::max);
    r.throughput_rps = r.completed as f64 / r.duration_s.max(1e-9);
    r.status_codes = BTreeMap::new();
    r.errors_by_kind = BTreeMap::new();
    for a in agents {
        for (code, n) in &a.report.status_codes {
            *r.status_codes.entry(*code).or_default() += n;
        }
        for (kind, n) in &a.report.errors_by_kind {
            *r.errors_by_kind.entry(kind.clone()).or_default() += n;
        }
    }
    r.latency_us = LatencySummary::from_histogram(&all);
    r.spectrum = spectrum(&all);
    r.timeline = (0..rows)
        .map(|k| {
            let rows: Vec<&LoadRow> = agents.iter().filter_map(|a| a.report.timeline.get(k)).collect();
            let completed: u64 = rows.iter().map(|t| t.completed).sum();
            let errors: u64 = rows.iter().map(|t| t.errors).sum();
            let h = &intervals[k];
            LoadRow {
                t_s: (interval * k as u32).as_secs_f64(),
                completed,
                errors,
                p50_us: h.value_at_quantile(0.5),
                p99_us: h.value_at_quantile(0.99),
                max_us: h.max(),
                throughput_rps: rows.iter().map(|t| t.throughput_rps).sum(),
            }
        })
        .collect();
    // Figures kept per host only: their histograms are not in the logs.
    r.connect_latency_us = None;
    r.tls = None;
    r.targets = None;
    r.open_loop = None;
    r.http2 = None;
    r.client_cpu.user_ns = sum(|r| r.client_cpu.user_ns);
    r.client_cpu.sys_ns = sum(|r| r.client_cpu.sys_ns);
    r.client_cpu.voluntary_switches = sum(|r| r.client_cpu.voluntary_switches);
    r.client_cpu.involuntary_switches = sum(|r| r.client_cpu.involuntary_switches);
    r.client_cpu.threads = agents.iter().map(|a| a.report.client_cpu.threads).sum();
    r.client_cpu.max_thread_utilization = (agents.iter())
        .map(|a| a.report.client_cpu.max_thread_utilization)
        .fold(0.0, f64::max);
    r.client_cpu.saturated = agents.iter().any(|a| a.report.client_cpu.saturated);
    r.stopped_early = agents.iter().any(|a| a.report.stopped_early);
    r.config.connections = agents.iter().map(|a| a.report.config.connections).sum();
    r.config.segment = None;
    r.config.host = None;
    r.config.clock = None;
    r.hosts = (agents.iter())
        .map(|a| HostShare {
            host: a.report.config.host.clone().unwrap_or_default(),
            segment: a.report.config.segment.clone().unwrap_or_else(|| "1/1".into()),
            connections: a.report.config.connections,
            completed: a.report.completed,
            errors: a.report.errors,
            throughput_rps: a.report.throughput_rps,
            p50_us: a.report.latency_us.p50,
            p99_us: a.report.latency_us.p99,
            max_thread_utilization: a.report.client_cpu.max_thread_utilization,
            clock_max_error_us: a.report.config.clock.as_ref().map(|c| c.max_error_us),
        })
        .collect();
    Ok(Merged {
        report: r,
        start: SystemTime::UNIX_EPOCH + first.start,
        interval,
        intervals,
    })
}

/// Writes the merged log to `name` in `dir`, its intervals untagged (every host's latencies
/// added).
pub fn write_log(merged: &Merged, dir: &OutDir, name: &str) -> Result<(), String> {
    let mut kept = IntervalLatency::default();
    for (k, h) in merged.intervals.iter().enumerate() {
        kept.keep(k as u64, h);
    }
    let window = Duration::from_secs_f64(merged.report.duration_s);
    let file = HdrLogFile::create_in(dir, name).map_err(|e| e.to_string())?;
    (file.write(
        &kept,
        merged.start,
        merged.interval,
        window,
        merged.intervals.len(),
        None,
    ))
    .map_err(|e| e.to_string())
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::report::ConfigEcho;

    /// Agent `i` of `n` of run `id`, its window begun `start_ms` after the epoch, recording
    /// `values` (µs) in its one interval.
    fn agent(i: u64, n: u64, id: &str, start_ms: u64, values: &[u64]) -> Agent {
        let mut h = crate::histogram::new_histogram();
        for v in values {
            h.record(*v).unwrap();
        }
        let report = LoadReport {
            completed: values.len() as u64,
            requests: values.len() as u64,
            duration_s: 1.0,
            config: ConfigEcho {
                connections: 4,
                segment: Some(format!("{i}/{n}")),
                run_id: Some(id.into()),
                host: Some(format!("client-{i}")),
                ..Default::default()
            },
            timeline: vec![LoadRow {
                t_s: 0.0,
                completed: values.len() as u64,
                errors: 0,
                p50_us: 0,
                p99_us: 0,
                max_us: 0,
                throughput_rps: values.len() as f64,
            }],
            ..Default::default()
        };
        Agent {
            dir: PathBuf::from(format!("agent-{i}")),
            report,
            start: Duration::from_millis(start_ms),
            intervals: vec![(Duration::ZERO, Duration::from_secs(1), h)],
        }
    }

    #[test]
    fn the_same_latencies_split_over_hosts_give_the_percentiles_of_one_histogram() {
        let values: Vec<u64> = (1..=1_000).map(|v| v * 37 % 9_973 + 100).collect();
        let mut one = crate::histogram::new_histogram();
        for v in &values {
            one.record(*v).unwrap();
        }
        // Dealt out as a split run deals its arrivals: k to host k mod 3.
        let share = |i: u64| -> Vec<u64> {
            (values.iter().enumerate())
                .filter(|(k, _)| *k as u64 % 3 == i - 1)
                .map(|(_, v)| *v)
                .collect()
        };
        let agents: Vec<Agent> = (1..=3).map(|i| agent(i, 3, "r", 5_000, &share(i))).collect();
        let m = merge(&agents).unwrap();
        assert_eq!(m.report.latency_us, LatencySummary::from_histogram(&one));
        assert_eq!(m.report.completed, 1_000);
        assert_eq!(m.report.config.connections, 12);
        assert_eq!(m.report.timeline[0].p99_us, one.value_at_quantile(0.99));
        assert_eq!(m.report.hosts.len(), 3);
        assert_eq!(m.report.hosts[1].host, "client-2");
        assert_eq!(m.report.hosts[1].completed, share(2).len() as u64);
    }

    #[test]
    fn inputs_not_one_runs_whole_are_refused_in_one_sentence() {
        let ok = || vec![agent(1, 2, "r", 5_000, &[1]), agent(2, 2, "r", 5_003, &[2])];
        assert!(check(&ok()).is_ok());
        let mut missing = ok();
        missing.pop();
        let e = check(&missing).unwrap_err();
        assert!(e.starts_with("segment 2/2 is missing"), "{e}");
        let twice = vec![agent(1, 2, "r", 5_000, &[1]), agent(1, 2, "r", 5_000, &[2])];
        assert!(check(&twice).unwrap_err().starts_with("segment 1/2 is given twice"));
        let other_run = vec![agent(1, 2, "r", 5_000, &[1]), agent(2, 2, "s", 5_000, &[2])];
        assert!(check(&other_run).unwrap_err().contains("only one run's agents merge"));
        let mut no_id = ok();
        no_id[1].report.config.run_id = None;
        assert!(check(&no_id).unwrap_err().contains("has no run id"));
        let apart = vec![agent(1, 2, "r", 5_000, &[1]), agent(2, 2, "r", 5_011, &[2])];
        let e = check(&apart).unwrap_err();
        assert!(e.contains("began 11.0 ms apart") && e.contains("10 ms"), "{e}");
        let other_split = vec![agent(1, 2, "r", 5_000, &[1]), agent(2, 3, "r", 5_000, &[2])];
        assert!(check(&other_split).unwrap_err().contains("a share of 3 hosts"));
        assert!(check(&[]).unwrap_err().contains("give the folders"));
    }
}
