//! The generator against servers whose behaviour is known by construction; every figure is
//! compared with the server's own count or with the delay the server was built with.

mod support;

use std::sync::Arc;
use std::sync::atomic::{AtomicBool, Ordering};
use std::time::{Duration, Instant};

use srvprof_loadgen::{Engine, LoadConfig, LoadError};

/// Both HTTP/1.1 clients must give the same counts.
const ENGINES: [Engine; 2] = [Engine::Builtin, Engine::Hyper];
use support::{
    Behaviour, TestServer, assert_accounted, assert_within, config, exactly, run, run_accounted,
    run_refused, serial,
};

const MS: u64 = 1000; // microseconds

#[test]
fn fixed_10ms_delay_gives_p50_between_10_and_15_ms() {
    let _serial = serial();
    let server = TestServer::start(Behaviour::Delay(Duration::from_millis(10)));
    let r = run_accounted(&LoadConfig {
        connections: 10,
        duration: Some(Duration::from_secs(1)),
        ..config(&server.url())
    });
    assert_within("p50 (us)", r.latency_us.p50, 10 * MS..=15 * MS);
    assert!(r.latency_us.min >= 10 * MS, "min {}us", r.latency_us.min);
    // 10 connections × 1 s / ~10.5 ms each.
    assert_within("completed", r.completed, 600..=1000);
    assert_eq!(r.errors, 0);
    // Between what the client completed and what it sent.
    let received = server.counts.requests();
    assert_within("requests the server got", received, r.completed..=r.sent);
    assert!(
        (r.duration_s - 1.0).abs() < 0.05,
        "duration {}",
        r.duration_s
    );
}

#[test]
fn exactly_n_requests_keepalive() {
    let _serial = serial();
    for engine in ENGINES {
        let server = TestServer::start(Behaviour::Delay(Duration::ZERO));
        let r = run_accounted(&exactly(&server, engine, 10, 10_000));
        assert_eq!(server.counts.requests(), 10_000);
        assert_eq!(r.sent, 10_000);
        assert_eq!(r.completed, 10_000);
        assert_eq!(r.unfinished, 0);
        assert_eq!(r.status_codes[&200], 10_000);
        // Keep-alive: one connection each (the server also saw the generator's port check).
        assert_eq!(server.counts.connections(), 10 + 1);
        assert_eq!(r.bytes, 10_000 * support::OK.len() as u64);
    }
}

/// A server that closes each kept-alive connection after its 100th answer, without saying so: the
/// next request on it finds it closed before any answer, and both engines send it again on a new
/// connection, counted as an idle close; no request is lost, none fails.
#[test]
fn both_engines_resend_a_request_whose_idle_connection_the_server_closed() {
    let _serial = serial();
    for engine in ENGINES {
        let server = TestServer::start(Behaviour::CloseAfter(100));
        let r = run_accounted(&exactly(&server, engine, 4, 2_000));
        assert_eq!(server.counts.requests(), 2_000, "{engine:?}");
        assert_eq!(
            (r.completed, r.errors),
            (2_000, 0),
            "{engine:?}: {:?}",
            r.errors_by_kind
        );
        // 20 connections closed after 100 answers; a request found each closed, but maybe a
        // slot's last, and each such one, and nothing else, opened a connection: the server saw
        // the 4 slots' first ones, one per idle close, and the generator's port check.
        // The slot's backoff paces the replacements (10, 20, 40, 80 ms...).
        let closed = r.idle_closed_by_server;
        assert!(
            (16..=20).contains(&closed),
            "{engine:?}: {closed} idle closes"
        );
        assert_eq!(server.counts.connections(), 4 + closed + 1, "{engine:?}");
    }
}

#[test]
fn exactly_n_requests_without_keepalive() {
    let _serial = serial();
    for engine in ENGINES {
        let server = TestServer::start(Behaviour::Delay(Duration::ZERO));
        let r = run_accounted(&LoadConfig {
            keepalive: false,
            ..exactly(&server, engine, 10, 10_000)
        });
        assert_eq!(server.counts.requests(), 10_000);
        assert_eq!(r.completed, 10_000);
        assert_eq!(server.counts.connections(), 10_000 + 1);
        assert_eq!(r.connections_opened, 10_000);
        let connect = r
            .connect_latency_us
            .expect("connect latency without keep-alive");
        assert_eq!(connect.count, 10_000);
        // Connect time is part of each request's latency.
        assert!(r.latency_us.min >= connect.min);
    }
}

#[test]
fn every_third_connection_reset_is_counted_exactly() {
    let _serial = serial();
    for engine in ENGINES {
        let server = TestServer::start(Behaviour::ResetEvery(3));
        let r = run_accounted(&LoadConfig {
            keepalive: false,
            ..exactly(&server, engine, 3, 300)
        });
        assert_eq!(server.counts.requests(), 300);
        assert_eq!(server.counts.resets(), 100);
        assert_eq!(r.errors_by_kind["reset"], 100);
        assert_eq!(r.errors, 100);
        assert_eq!(r.completed, 200);
    }
}

#[test]
fn open_loop_shows_a_stall_that_closed_loop_hides() {
    let _serial = serial();
    let stall = Duration::from_secs(1);

    // Closed loop: only the few requests in flight during the stall wait; p99 stays low.
    let server = TestServer::start(Behaviour::StallOnce {
        after: 2_000,
        length: stall,
    });
    let closed = run_accounted(&LoadConfig {
        connections: 8,
        duration: Some(Duration::from_secs(3)),
        ..config(&server.url())
    });
    assert!(
        closed.latency_us.max >= 900 * MS,
        "the stall happened: max {}us",
        closed.latency_us.max
    );
    assert!(
        closed.latency_us.p99 < 100 * MS,
        "closed-loop p99 {}us",
        closed.latency_us.p99
    );

    // Open loop at 1000 req/s: every request scheduled during the stall is late, from its
    // intended send time, so about a third of the run is delayed and p99 is near the stall.
    let server = TestServer::start(Behaviour::StallOnce {
        after: 500,
        length: stall,
    });
    let open = run_accounted(&LoadConfig {
        connections: 20,
        rate: Some(srvprof_loadgen::rate::RateSchedule::steady(1000.0)),
        duration: Some(Duration::from_secs(3)),
        ..config(&server.url())
    });
    assert!(
        open.latency_us.p99 >= 900 * MS,
        "open-loop p99 {}us",
        open.latency_us.p99
    );
    assert!(
        open.latency_us.p90 >= 500 * MS,
        "open-loop p90 {}us",
        open.latency_us.p90
    );
    // The schedule held: about 3000 requests in 3 s.
    assert_within("open-loop sent", open.sent, 2_700..=3_050);
    assert!(open.latency_us.p99 > 10 * closed.latency_us.p99);
    // Counted from the actual sends, as a client blind to coordinated omission would, the
    // stall shows in the 20 requests it held only; the ~1000 scheduled during it went out late.
    let o = open.open_loop.as_ref().expect("open-loop summary");
    eprintln!(
        "corrected p90 {}us; uncorrected p90 {}us p99.9 {}us; {} sends behind, up to {}us",
        open.latency_us.p90,
        o.uncorrected_latency_us.p90,
        o.uncorrected_latency_us.p999,
        o.sends_behind_schedule,
        o.max_behind_us
    );
    assert!(o.uncorrected_latency_us.p90 < 50 * MS, "{o:?}");
    assert!(o.uncorrected_latency_us.max >= 900 * MS, "{o:?}");
    // At least the ~1000 scheduled while the 20 connections were held; at most every send after
    // the 500 that went out before the stall (how many more the catch-up delays depends on how
    // busy the machine is, so no tighter bound holds on a shared host).
    assert_within(
        "sends behind schedule",
        o.sends_behind_schedule,
        800..=open.sent - 450,
    );
    assert!(o.max_behind_us >= 900 * MS, "{o:?}");
}

#[test]
fn rate_stages_send_what_each_stage_asks_as_the_server_counts() {
    let _serial = serial();
    let server = TestServer::start(Behaviour::Delay(Duration::ZERO));
    let rate =
        srvprof_loadgen::rate::RateSchedule::parse("200:1s,ramp:200-1000:1s,1000:1s").unwrap();
    // The server's count at the end of each stage, read from another thread.
    let counts = server.counts.clone();
    let sampler = std::thread::spawn(move || {
        let start = Instant::now();
        (1..=3)
            .map(|s| {
                std::thread::sleep(
                    (start + Duration::from_secs(s)).saturating_duration_since(Instant::now()),
                );
                counts.requests()
            })
            .collect::<Vec<u64>>()
    });
    let r = run_accounted(&LoadConfig {
        connections: 20,
        threads: 1,
        rate: Some(rate),
        duration: Some(Duration::from_secs(3)),
        ..config(&server.url())
    });
    let at = sampler.join().unwrap();
    let per_interval: Vec<u64> = r.timeline.iter().map(|t| t.completed).collect();
    eprintln!("server counts at 1, 2, 3 s: {at:?}; srvprof per second: {per_interval:?}");
    // 200 in the first second, 600 in the ramp (its mean rate), 1000 in the last.
    assert_within("by 1 s", at[0], 180..=230);
    assert_within("by 2 s", at[1], 740..=840);
    assert_within("by 3 s", at[2], 1_700..=1_830);
    assert_within("first second", per_interval[0], 190..=210);
    assert_within("the ramp's second", per_interval[1], 570..=630);
    assert_within("last second", per_interval[2], 950..=1_010);
    assert_eq!(r.config.rate, Some(200.0));
    assert_eq!(
        r.config.rate_schedule.as_deref(),
        Some("200:1s,ramp:200-1000:1s,1000:1s")
    );
}

#[test]
fn open_loop_latency_is_the_servers_not_the_timers() {
    let _serial = serial();
    let server = TestServer::start(Behaviour::Delay(Duration::ZERO));
    // The server's own answer time, from a closed loop that never waits on a timer.
    let closed = run(&LoadConfig {
        connections: 1,
        threads: 1,
        duration: Some(Duration::from_secs(1)),
        ..config(&server.url())
    });
    // An open loop well below capacity: every request waits for its send time. Timers that
    // round up to the next millisecond (tokio's) would add about 1 ms to each latency, as the
    // latency counts from the intended send time.
    let open = run_accounted(&LoadConfig {
        connections: 10,
        threads: 1,
        rate: Some(srvprof_loadgen::rate::RateSchedule::steady(1000.0)),
        duration: Some(Duration::from_secs(2)),
        ..config(&server.url())
    });
    assert_within("open-loop sent", open.sent, 1_900..=2_050);
    eprintln!(
        "closed-loop p50 {}us, open-loop p50 {}us min {}us",
        closed.latency_us.p50, open.latency_us.p50, open.latency_us.min
    );
    assert!(
        open.latency_us.p50 < closed.latency_us.p50 + 600,
        "open-loop p50 {}us against the server's {}us",
        open.latency_us.p50,
        closed.latency_us.p50
    );
}

#[test]
fn non_2xx_responses_are_counted_as_errors_and_by_status() {
    let _serial = serial();
    for engine in ENGINES {
        let server = TestServer::start(Behaviour::ServiceUnavailableEvery(4));
        let r = run_accounted(&exactly(&server, engine, 4, 400));
        assert_eq!(server.counts.non_2xx(), 100);
        assert_eq!(r.status_codes[&503], 100);
        assert_eq!(r.status_codes[&200], 300);
        assert_eq!(r.errors_by_kind["non_2xx"], 100);
        assert_eq!(r.completed, 300);
        assert_eq!(
            r.latency_us.count, 400,
            "answered requests all have a latency"
        );
    }
}

#[test]
fn malformed_http_is_a_protocol_error() {
    let _serial = serial();
    for engine in ENGINES {
        let server = TestServer::start(Behaviour::Garbage);
        let r = run_accounted(&exactly(&server, engine, 2, 20));
        assert_eq!(server.counts.requests(), 20);
        assert_eq!(r.errors_by_kind["protocol_error"], 20);
        assert_eq!(r.completed, 0);
        assert!(!r.any_success());
    }
}

#[test]
fn silent_server_gives_read_timeouts() {
    let _serial = serial();
    for engine in ENGINES {
        let server = TestServer::start(Behaviour::Silent);
        let started = Instant::now();
        let r = run_accounted(&LoadConfig {
            timeout: Duration::from_millis(300),
            ..exactly(&server, engine, 3, 6)
        });
        assert_eq!(r.errors_by_kind["read_timeout"], 6);
        assert_eq!(server.counts.requests(), 6);
        // Two rounds of 300 ms timeouts.
        let took = started.elapsed();
        assert!(took >= Duration::from_millis(550), "took {took:?}");
        assert!(took < Duration::from_secs(3), "took {took:?}");
    }
}

#[test]
fn refuses_more_connections_than_the_fd_limit() {
    let _serial = serial();
    let server = TestServer::start(Behaviour::Delay(Duration::ZERO));
    // 30000 on these machines (hard limit 20000); always more than the hard limit elsewhere.
    let connections = 30_000usize.max(hard_fd_limit().saturating_add(1) as usize);
    let err = run_refused(
        &LoadConfig {
            connections,
            ..config(&server.url())
        },
        "more connections than the open-file limit",
    );
    assert!(matches!(err, LoadError::FdLimit { .. }), "{err:?}");
    let sentence = err.to_string();
    assert!(
        sentence.contains(&format!("-c {connections}")),
        "{sentence}"
    );
    assert!(sentence.contains("ulimit -n"), "{sentence}");
    assert_eq!(
        sentence.matches(". ").count(),
        0,
        "one sentence: {sentence}"
    );
    assert_eq!(server.counts.connections(), 0, "refused before connecting");
}

fn hard_fd_limit() -> u64 {
    let mut lim = libc::rlimit {
        rlim_cur: 0,
        rlim_max: 0,
    };
    // SAFETY: getrlimit writes into the struct we own.
    assert_eq!(unsafe { libc::getrlimit(libc::RLIMIT_NOFILE, &mut lim) }, 0);
    lim.rlim_max
}

#[test]
fn closed_port_is_one_clear_error() {
    let _serial = serial();
    let port = {
        let l = std::net::TcpListener::bind("127.0.0.1:0").unwrap();
        l.local_addr().unwrap().port()
    };
    let err = run_refused(
        &config(&format!("http://127.0.0.1:{port}/")),
        "nothing listens there",
    );
    assert!(matches!(err, LoadError::PortClosed { .. }), "{err:?}");
    assert!(err.to_string().contains("port closed"), "{err}");
}

#[test]
fn bad_urls_are_refused_with_a_sentence() {
    let err = run_refused(&config("ftp://127.0.0.1:1/"), "ftp");
    assert!(err.to_string().contains("is not http or https"), "{err}");
    let err = run_refused(&config("127.0.0.1:80"), "no scheme");
    assert!(matches!(err, LoadError::BadUrl { .. }), "{err:?}");
}

#[test]
fn pinned_threads_run_and_unknown_cpus_are_refused() {
    let _serial = serial();
    let server = TestServer::start(Behaviour::Delay(Duration::ZERO));
    let r = run(&LoadConfig {
        cpus: Some(vec![0]),
        duration: Some(Duration::from_millis(300)),
        ..config(&server.url())
    });
    assert!(r.completed > 0);
    assert_eq!(r.config.cpus, Some(vec![0]));
    let err = run_refused(
        &LoadConfig {
            cpus: Some(vec![1000]),
            ..config(&server.url())
        },
        "no CPU 1000",
    );
    assert!(err.to_string().contains("CPU 1000"), "{err}");
}

#[test]
fn timeline_covers_the_window_in_intervals() {
    let _serial = serial();
    let server = TestServer::start(Behaviour::Delay(Duration::from_millis(2)));
    let r = run_accounted(&LoadConfig {
        connections: 4,
        duration: Some(Duration::from_secs(2)),
        interval: Duration::from_millis(500),
        ..config(&server.url())
    });
    let starts: Vec<f64> = r.timeline.iter().map(|e| e.t_s).collect();
    assert_eq!(starts, vec![0.0, 0.5, 1.0, 1.5]);
    for e in &r.timeline {
        assert!(e.completed > 100, "{e:?}");
        assert!((2 * MS..=10 * MS).contains(&e.p50_us), "{e:?}");
        assert!(e.p99_us >= e.p50_us);
        assert!((e.throughput_rps - e.completed as f64 * 2.0).abs() < 1e-6);
    }
}

/// Answers slower than the interval: the warmup's requests are answered inside the window, and
/// the first interval counts them (the server's work then), while latency covers only requests
/// sent in the window. Known by construction: every answer takes 1.2 s, 5 connections.
#[test]
fn answers_to_warmup_requests_count_where_they_arrive() {
    let _serial = serial();
    let server = TestServer::start(Behaviour::Delay(Duration::from_millis(1200)));
    for engine in ENGINES {
        let r = run_accounted(&LoadConfig {
            connections: 5,
            warmup: Duration::from_secs(1),
            duration: Some(Duration::from_secs(2)),
            interval: Duration::from_secs(1),
            engine,
            ..config(&server.url())
        });
        // Sent at 0 s, answered at 1.2 s: 0.2 s into the window.
        assert_eq!(r.carried_in, 5, "{engine:?}");
        assert_eq!(r.timeline[0].completed, 5, "{engine:?}: {:?}", r.timeline);
        // Sent at 1.2 s (in the window), answered at 2.4 s; the next ones at 3.6 s are after it.
        assert_eq!(r.sent, 10, "{engine:?}");
        assert_eq!(r.completed, 10, "{engine:?}");
        assert_eq!(r.unfinished, 5, "{engine:?}");
        assert_eq!(
            r.latency_us.count, 5,
            "{engine:?}: latency of requests sent in the window"
        );
    }
}

#[test]
fn warmup_is_excluded_and_stop_returns_early() {
    let _serial = serial();
    let server = TestServer::start(Behaviour::Delay(Duration::from_millis(1)));
    let stop = Arc::new(AtomicBool::new(false));
    let stopper = {
        let stop = stop.clone();
        std::thread::spawn(move || {
            std::thread::sleep(Duration::from_millis(800));
            stop.store(true, Ordering::Relaxed);
        })
    };
    let started = Instant::now();
    let before_ns = srvprof_loadgen::monotonic_ns();
    let r = srvprof_loadgen::run(
        &LoadConfig {
            warmup: Duration::from_millis(300),
            duration: Some(Duration::from_secs(20)),
            ..config(&server.url())
        },
        stop,
    )
    .unwrap();
    stopper.join().unwrap();
    assert!(
        started.elapsed() < Duration::from_secs(2),
        "{:?}",
        started.elapsed()
    );
    assert!(r.stopped_early);
    assert_accounted(&r);
    assert!(r.warmup_requests > 0);
    assert_within("duration (s)", r.duration_s, 0.4..0.7);
    // Measurement started after the warmup, on CLOCK_MONOTONIC.
    let offset_ms = (r.start_monotonic_ns - before_ns) as f64 / 1e6;
    assert_within("start offset (ms)", offset_ms, 250.0..400.0);
    // Every request started reached the server, but for at most one per connection at the stop.
    let received = server.counts.requests();
    let started_requests = r.sent + r.warmup_requests;
    assert_within(
        "requests the server got",
        received,
        started_requests - 4..=started_requests,
    );
}

#[test]
fn thousands_of_connections_from_one_process() {
    let _serial = serial();
    let server = TestServer::start(Behaviour::Delay(Duration::ZERO));
    // Client and server share this process's open-file limit (20000 here).
    let connections =
        5_000usize.min((hard_fd_limit().min(1 << 20) as usize).saturating_sub(200) / 2);
    let r = run_accounted(&LoadConfig {
        connections,
        duration: Some(Duration::from_secs(2)),
        ramp_up: Duration::from_secs(1),
        timeout: Duration::from_secs(10),
        ..config(&server.url())
    });
    assert_eq!(server.counts.connections(), connections as u64 + 1);
    assert_eq!(r.errors, 0);
    assert!(
        r.completed > connections as u64,
        "completed {}",
        r.completed
    );
}

#[test]
fn report_serializes_with_the_documented_fields_and_prints() {
    let _serial = serial();
    let server = TestServer::start(Behaviour::Delay(Duration::ZERO));
    let r = run(&LoadConfig {
        connections: 2,
        requests: Some(500),
        duration: None,
        keepalive: false,
        method: "POST".into(),
        headers: vec![("X-Test".into(), "1".into())],
        body: Some(b"ping".to_vec()),
        ..config(&server.url())
    });
    let json = serde_json::to_value(&r).unwrap();
    for key in [
        "throughput_rps",
        "requests",
        "errors",
        "duration_s",
        "status_codes",
        "errors_by_kind",
        "bytes",
        "connect_latency_us",
        "spectrum",
        "client_cpu",
        "start_monotonic_ns",
        "config",
        "timeline",
    ] {
        assert!(json.get(key).is_some(), "missing {key}");
    }
    for key in ["p50", "p75", "p90", "p99", "p999", "p9999", "max", "mean"] {
        assert!(
            json["latency_us"].get(key).is_some(),
            "missing latency_us.{key}"
        );
    }
    for key in ["user_ns", "sys_ns", "cpu_utilization", "saturated"] {
        assert!(
            json["client_cpu"].get(key).is_some(),
            "missing client_cpu.{key}"
        );
    }
    assert_eq!(json["status_codes"]["200"], 500);
    assert_eq!(json["config"]["method"], "POST");
    let back: srvprof_loadgen::LoadReport = serde_json::from_value(json).unwrap();
    assert_eq!(back.completed, 500);
    // The spectrum climbs to 100% and the last point is the max.
    let last = r.spectrum.last().unwrap();
    assert_eq!(last.percentile, 100.0);
    assert_eq!(last.count, 500);
    assert!(
        r.spectrum
            .windows(2)
            .all(|w| w[0].value_us <= w[1].value_us)
    );
    assert!(r.client_cpu.user_ns + r.client_cpu.sys_ns > 0);

    let mut text = Vec::new();
    srvprof_loadgen::printer::print_text(&r, &mut text);
    let text = String::from_utf8(text).unwrap();
    assert!(text.contains("Requests/sec:"), "{text}");
    assert!(text.contains("500 requests"), "{text}");
    assert!(text.contains("200: 500"), "{text}");
}

#[test]
fn load_command_writes_the_report_and_fails_when_nothing_succeeded() {
    use srvprof_loadgen::cli::{LoadArgs, run_load_command};
    use std::process::ExitCode;
    let _serial = serial();
    let dir = std::env::temp_dir().join(format!("loadgen-cmd-{}", std::process::id()));
    std::fs::create_dir_all(&dir).unwrap();
    let out = dir.join("report.json");
    let args = LoadArgs {
        connections: 2,
        requests: Some(50),
        threads: Some(1),
        ..LoadArgs::default()
    };

    let written = || -> srvprof_loadgen::LoadReport {
        serde_json::from_slice(&std::fs::read(&out).unwrap()).unwrap()
    };

    let good = TestServer::start(Behaviour::Delay(Duration::ZERO));
    let code = run_load_command(&good.url(), &args, true, Some(&out));
    assert_eq!(code, ExitCode::SUCCESS);
    let report = written();
    assert_eq!(report.completed, 50);
    assert_eq!(good.counts.requests(), 50);

    let bad = TestServer::start(Behaviour::Garbage);
    let code = run_load_command(&bad.url(), &args, false, Some(&out));
    assert_eq!(code, ExitCode::FAILURE);
    let report = written();
    assert_eq!(report.errors_by_kind["protocol_error"], 50);
    assert!(!dir.join("report.json.tmp").exists());
    std::fs::remove_dir_all(&dir).unwrap();
}

/// A run split over three hosts (`--segment I/3`, here three runs at once in one process): each
/// takes its share of the connections, and sends exactly the arrivals of the one-host schedule
/// whose index is its own mod 3; together they send that schedule, every arrival once, as the
/// server counts.
#[test]
fn three_segments_send_the_one_host_schedule_between_them() {
    let _serial = serial();
    let server = TestServer::start(Behaviour::Delay(Duration::ZERO));
    let stages = "300:1s,ramp:300-900:1s";
    let length = Duration::from_secs(2);
    let schedule = srvprof_loadgen::rate::RateSchedule::parse(stages).unwrap();
    let due_in_window = |keep: &dyn Fn(u64) -> bool| {
        (0..)
            .take_while(|k| schedule.due(*k as f64) < length)
            .filter(|k| keep(*k))
            .count() as u64
    };
    let url = server.url();
    let agents: Vec<_> = (1..=3)
        .map(|i| {
            let args = srvprof_loadgen::cli::LoadArgs {
                segment: Some(srvprof_loadgen::segment::Segment::parse(&format!("{i}/3")).unwrap()),
                connections: 7,
                rate: Some(schedule.clone()),
                duration: Some(length),
                threads: Some(1),
                ..Default::default()
            };
            let config = LoadConfig {
                url: url.clone(),
                ..args.to_config().unwrap()
            };
            std::thread::spawn(move || run_accounted(&config))
        })
        .collect();
    let reports: Vec<_> = agents.into_iter().map(|a| a.join().unwrap()).collect();
    let one_host = due_in_window(&|_| true);
    let sent: Vec<u64> = reports.iter().map(|r| r.sent).collect();
    let received = server.counts.requests();
    eprintln!(
        "one host's schedule: {one_host} arrivals; the segments sent {sent:?}; the server got {received}"
    );
    for (i, r) in reports.iter().enumerate() {
        assert_eq!(
            r.config.segment.as_deref(),
            Some(format!("{}/3", i + 1).as_str())
        );
        assert_eq!(r.config.connections, [3, 2, 2][i], "7 connections over 3");
        let own = due_in_window(&|k| k % 3 == i as u64);
        assert_within(
            "a segment's sends against its arrivals",
            r.sent,
            own - 1..=own,
        );
        assert_eq!(r.errors, 0);
    }
    let total: u64 = sent.iter().sum();
    assert_within(
        "the segments' sends together",
        total,
        one_host - 3..=one_host,
    );
    let completed: u64 = reports.iter().map(|r| r.completed).sum();
    assert_within("requests the server got", received, completed..=total);
}
