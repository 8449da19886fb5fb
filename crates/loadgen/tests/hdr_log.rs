//! `--hdr-log`: the interval log read back with the hdrhistogram crate's own reader
//! (`IntervalLogIterator`, `Deserializer`), against the report of the same run; and a log that
//! cannot be written, before the run and after it.

mod support;

use std::path::{Path, PathBuf};
use std::process::ExitCode;
use std::time::{Duration, SystemTime};

use hdrhistogram::Histogram;
use hdrhistogram::serialization::Deserializer;
use hdrhistogram::serialization::interval_log::{IntervalLogIterator, LogEntry};
use srvprof_loadgen::cli::{LoadArgs, run_load_command};
use srvprof_loadgen::hdr_log_read::base64_decode;
use srvprof_loadgen::{LoadConfig, LoadReport};
use support::{Behaviour, TestServer, config, run_accounted, run_refused, serial};

/// What a log holds: StartTime, BaseTime, and per interval (start, length, Interval_Max column,
/// histogram), and its tag.
struct Log {
    start_time: Option<Duration>,
    base_time: Option<Duration>,
    intervals: Vec<(Duration, Duration, f64, Histogram<u64>)>,
    tags: Vec<Option<String>>,
}

fn read_log(path: &Path) -> Log {
    let bytes = std::fs::read(path).unwrap_or_else(|e| panic!("{}: {e}", path.display()));
    let mut log = Log {
        start_time: None,
        base_time: None,
        intervals: Vec::new(),
        tags: Vec::new(),
    };
    let mut deserializer = Deserializer::new();
    for entry in IntervalLogIterator::new(&bytes) {
        match entry.expect("the crate's reader parses every line") {
            LogEntry::StartTime(t) => log.start_time = Some(t),
            LogEntry::BaseTime(t) => log.base_time = Some(t),
            LogEntry::Interval(i) => {
                log.tags.push(i.tag().map(|t| t.as_str().to_string()));
                let compressed = base64_decode(i.encoded_histogram()).expect("base64");
                let h: Histogram<u64> = deserializer
                    .deserialize(&mut compressed.as_slice())
                    .expect("a V2 histogram");
                log.intervals
                    .push((i.start_timestamp(), i.duration(), i.max(), h));
            }
        }
    }
    log
}

fn temp_path(name: &str) -> PathBuf {
    std::env::temp_dir().join(format!("loadgen-hdrlog-{}-{name}", std::process::id()))
}

#[test]
fn log_has_one_histogram_per_interval_that_add_up_to_the_report() {
    let _serial = serial();
    let server = TestServer::start(Behaviour::Delay(Duration::from_millis(2)));
    let path = temp_path("ok.hlog");
    let interval = Duration::from_millis(500);
    let warmup = Duration::from_millis(300);
    let before = SystemTime::now();
    let r = run_accounted(&LoadConfig {
        connections: 4,
        duration: Some(Duration::from_millis(2250)),
        warmup,
        interval,
        hdr_log: Some(path.clone()),
        ..config(&server.url())
    });
    let after = SystemTime::now();
    let log = read_log(&path);
    std::fs::remove_file(&path).unwrap();
    // A run of one host alone: no tag.
    assert!(log.tags.iter().all(Option::is_none), "{:?}", log.tags);

    // StartTime = BaseTime = the measured window's start on the wall clock (ms in the log).
    let since_epoch = |t: SystemTime| t.duration_since(SystemTime::UNIX_EPOCH).unwrap();
    let start = log.start_time.expect("StartTime");
    assert_eq!(log.base_time, Some(start));
    assert!(
        start + Duration::from_millis(1) >= since_epoch(before) + warmup
            && start <= since_epoch(after),
        "StartTime {start:?} outside the run ({:?} + warmup .. {:?})",
        since_epoch(before),
        since_epoch(after)
    );

    // One histogram per timeline interval: 2.25 s / 0.5 s, the last one 250 ms long.
    assert_eq!(log.intervals.len(), 5);
    assert_eq!(log.intervals.len(), r.timeline.len());
    for (i, ((start, length, max_column, h), entry)) in
        log.intervals.iter().zip(&r.timeline).enumerate()
    {
        assert_eq!(*start, interval * i as u32, "interval {i} start");
        let expected_length = if i == 4 { interval / 2 } else { interval };
        assert_eq!(*length, expected_length, "interval {i} length");
        // Latency covers the requests sent in the window: warmup requests answered in the
        // first interval are in its count (carried in), not in its histogram.
        let carried_in = if i == 0 { r.carried_in } else { 0 };
        assert_eq!(h.len(), entry.completed - carried_in, "interval {i} count");
        assert_eq!(h.value_at_quantile(0.99), entry.p99_us, "interval {i} p99");
        assert_eq!(h.max(), entry.max_us, "interval {i} max");
        assert_eq!(
            *max_column,
            h.max() as f64,
            "interval {i}: Interval_Max in us"
        );
    }
    assert!(
        r.carried_in > 0,
        "4 connections were busy when warmup ended"
    );
    assert_eq!(r.errors, 0);

    // Merged, they are the run's histogram: the report's count and percentiles, same us.
    let mut merged = Histogram::<u64>::new_from(&log.intervals[0].3);
    for (_, _, _, h) in &log.intervals {
        merged.add(h).unwrap();
    }
    assert_eq!(merged.len(), r.latency_us.count);
    assert_eq!(merged.len(), r.completed - r.carried_in);
    assert_eq!(merged.value_at_quantile(0.50), r.latency_us.p50);
    assert_eq!(merged.value_at_quantile(0.99), r.latency_us.p99);
    assert_eq!(merged.value_at_quantile(0.999), r.latency_us.p999);
    assert_eq!(merged.max(), r.latency_us.max);
    assert_eq!(merged.min(), r.latency_us.min);
    // The server's 2 ms delay, in microseconds.
    assert!(r.latency_us.min >= 2_000, "min {} us", r.latency_us.min);
}

#[test]
fn a_log_path_that_cannot_be_written_stops_the_run_before_it_starts() {
    let _serial = serial();
    let server = TestServer::start(Behaviour::Delay(Duration::ZERO));
    let path = PathBuf::from("/nonexistent-srvprof-dir/latency.hlog");
    let e = run_refused(
        &LoadConfig {
            hdr_log: Some(path.clone()),
            ..config(&server.url())
        },
        "no such directory",
    );
    assert_eq!(
        e.to_string(),
        "cannot write the latency log (--hdr-log) to /nonexistent-srvprof-dir/latency.hlog: No such file or directory (os error 2); check that the directory exists and is writable"
    );
    assert_eq!(server.counts.requests(), 0, "nothing was sent");

    let out = temp_path("refused.json");
    let args = LoadArgs {
        requests: Some(10),
        hdr_log: Some(path),
        ..LoadArgs::default()
    };
    assert_eq!(
        run_load_command(&server.url(), &args, false, Some(&out)),
        ExitCode::FAILURE
    );
    assert_eq!(server.counts.requests(), 0, "nothing was sent");
    assert!(!out.exists(), "nothing was measured, no report");
}

#[test]
fn a_log_that_fails_at_the_end_keeps_the_report() {
    let _serial = serial();
    let server = TestServer::start(Behaviour::Delay(Duration::ZERO));
    // /dev/full opens but every write fails (ENOSPC): the log fails only once the run is over.
    let full = PathBuf::from("/dev/full");
    let e = run_refused(
        &LoadConfig {
            requests: Some(200),
            duration: None,
            hdr_log: Some(full.clone()),
            ..config(&server.url())
        },
        "the device is full",
    );
    let mut e = e;
    assert_eq!(
        e.to_string(),
        "cannot write the latency log (--hdr-log) to /dev/full: No space left on device (os error 28); check that the directory exists and is writable"
    );
    let measured = e
        .take_measured()
        .expect("the report comes back with the error");
    assert_eq!(measured.completed, 200);
    assert_eq!(e.take_measured().map(|r| r.completed), None);

    // `srvprof load`: the report is still written, then the exit status says the log failed.
    let out = temp_path("full.json");
    let args = LoadArgs {
        connections: 2,
        requests: Some(100),
        threads: Some(1),
        hdr_log: Some(full.clone()),
        ..LoadArgs::default()
    };
    assert_eq!(
        run_load_command(&server.url(), &args, true, Some(&out)),
        ExitCode::FAILURE
    );
    let report: LoadReport = serde_json::from_slice(&std::fs::read(&out).unwrap()).unwrap();
    std::fs::remove_file(&out).unwrap();
    assert_eq!(report.completed, 100);
    assert_eq!(server.counts.requests(), 300);
    assert!(full.exists(), "a device given as the log is never removed");
}

/// Two hosts of a split load given the same `--start-at`, started 300 ms apart: their measured
/// windows begin at the same wall-clock time, as their logs' StartTime (read by the hdrhistogram
/// crate) says, within 2 ms, at the time given; each report names the time, this host's clock,
/// the run's id (from the time) and the host, whose name tags each interval of its log.
#[test]
fn hosts_given_one_start_time_start_their_windows_together() {
    let _serial = serial();
    let server = TestServer::start(Behaviour::Delay(Duration::ZERO));
    let text = srvprof_loadgen::start::StartAt(SystemTime::now() + Duration::from_millis(1500))
        .to_rfc3339();
    let at = srvprof_loadgen::start::StartAt::parse(&text).unwrap().0;
    let since_epoch = at.duration_since(SystemTime::UNIX_EPOCH).unwrap();
    let hosts: Vec<_> = (1..=2)
        .map(|i| {
            let log = temp_path(&format!("start-at-{i}.hlog"));
            let args = LoadArgs {
                segment: Some(srvprof_loadgen::segment::Segment::parse(&format!("{i}/2")).unwrap()),
                start_at: Some(srvprof_loadgen::start::StartAt::parse(&text).unwrap()),
                // This test machine's clock need not be synchronised; the run says how it is.
                allow_unsynced: true,
                connections: 4,
                rate: Some(srvprof_loadgen::rate::RateSchedule::steady(200.0)),
                duration: Some(Duration::from_secs(1)),
                interval: Duration::from_millis(500),
                threads: Some(1),
                hdr_log: Some(log.clone()),
                ..Default::default()
            };
            let config = LoadConfig {
                url: server.url(),
                ..args.to_config().unwrap()
            };
            std::thread::sleep(Duration::from_millis(300));
            (log, std::thread::spawn(move || run_accounted(&config)))
        })
        .collect();
    let mut starts = Vec::new();
    for (log, host) in hosts {
        let report = host.join().unwrap();
        let read = read_log(&log);
        let start = read.start_time.expect("StartTime");
        let _ = std::fs::remove_file(&log);
        assert_eq!(report.config.start_at.as_deref(), Some(text.as_str()));
        // One run's by its id, this host's by its name, which tags each of its intervals.
        let id = format!("start-{text}");
        assert_eq!(report.config.run_id.as_deref(), Some(id.as_str()));
        let host = std::fs::read_to_string("/proc/sys/kernel/hostname").unwrap();
        assert_eq!(report.config.host.as_deref(), Some(host.trim()));
        assert!(!read.tags.is_empty());
        assert!(
            read.tags.iter().all(|t| t.as_deref() == Some(host.trim())),
            "{:?}",
            read.tags
        );
        let clock = report.config.clock.expect("the host's clock");
        assert!(clock.max_error_us >= clock.est_error_us, "{clock:?}");
        starts.push(start);
    }
    eprintln!("StartTime {starts:?}, --start-at {since_epoch:?}");
    for s in &starts {
        let off = s.as_secs_f64() - since_epoch.as_secs_f64();
        assert!(
            (0.0..0.002).contains(&off),
            "a window began {off} s after --start-at"
        );
    }
}
