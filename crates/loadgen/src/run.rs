//! One load run: the configuration, the worker threads and their runtimes, and the report built
//! from what they recorded.

use std::sync::Arc;
use std::sync::atomic::{AtomicBool, AtomicU64};
use std::time::{Duration, Instant};

use crate::{connection, plan};
use crate::error::LoadError;
use crate::progress::Progress;
use crate::report::{self, ClientCpu, ConfigEcho, Engine, ErrorKind, LatencySummary, LoadReport};
use crate::request::{RequestTemplate, Target};
use crate::stats;
use crate::sys;

/// A worker thread busier than this (user + sys over wall) is called saturated.
const SATURATED_UTILIZATION: f64 = 0.9;

/// Everything that defines a load run.
#[derive(Clone, Debug, PartialEq)]
pub struct LoadConfig {
    pub url: String,
    /// Concurrent connections (closed loop: requests in flight): this host's share with
    /// `segment`.
    pub connections: usize,
    /// This host's share of a run split over several (`--segment`): its arrivals and list
    /// entries are the one-host run's with its index mod N.
    pub segment: crate::segment::Segment,
    /// Begin at this wall-clock instant (`--start-at`), with the clock checked first unless
    /// `allow_unsynced`.
    pub start_at: Option<crate::start::StartAt>,
    pub allow_unsynced: bool,
    /// The run's id when it is one host's share of a split run (start::run_id): recorded with
    /// this host's name, which also tags its latency log.
    pub run_id: Option<String>,
    /// Worker threads, each with its own single-threaded runtime.
    pub threads: usize,
    /// Length of the measured window (after warmup).
    pub duration: Option<Duration>,
    /// Exact number of measured requests to send.
    pub requests: Option<u64>,
    /// Open loop: requests per second over all connections, one rate or stages over time.
    pub rate: Option<crate::rate::RateSchedule>,
    /// False: a new TCP connection per request.
    pub keepalive: bool,
    pub method: String,
    pub headers: Vec<(String, String)>,
    pub body: Option<Vec<u8>>,
    /// Request timeout (connect included when each request opens its own connection).
    pub timeout: Duration,
    /// Load sent after the ramp-up and before measurement starts, excluded from every figure.
    pub warmup: Duration,
    /// Pin worker thread i to `cpus[i % len]`.
    pub cpus: Option<Vec<usize>>,
    /// Connections start spread over this time; it is never measured (measurement starts after
    /// ramp-up + warmup).
    pub ramp_up: Duration,
    /// Timeline interval.
    pub interval: Duration,
    /// HTTP/1.1 client implementation.
    pub engine: Engine,
    /// Also write each interval's latency here as an HdrHistogram interval log (`--hdr-log`).
    pub hdr_log: Option<std::path::PathBuf>,
    /// Push each interval's figures to this Prometheus remote-write receiver
    /// (`--remote-write`), labelled with the run id, the segment and this host.
    pub remote_write: Option<crate::http_push::Endpoint>,
    /// Its credentials (`--remote-write-auth-file`, or the environment).
    pub remote_write_auth: Option<crate::push_auth::PushAuth>,
    /// https: trusted CAs, client certificate, resumption, SNI.
    pub tls: crate::tls::TlsOptions,
    /// HTTP/2: over TLS with ALPN h2 for https URLs, cleartext with prior knowledge (h2c) for
    /// http ones.
    pub http2: bool,
    /// HTTP/2 streams in flight at once on each connection.
    pub streams: usize,
    /// A list of requests to send instead of the URL's one (`--targets`), all on the URL's
    /// server, taken in `targets_order` (random: from `seed`).
    pub targets: Option<std::path::PathBuf>,
    pub targets_order: crate::targets::Order,
    pub seed: u64,
}

impl Default for LoadConfig {
    fn default() -> LoadConfig {
        LoadConfig {
            url: String::new(),
            connections: 50,
            segment: crate::segment::Segment::WHOLE,
            start_at: None,
            run_id: None,
            allow_unsynced: false,
            threads: sys::available_cpus(),
            duration: Some(Duration::from_secs(10)),
            requests: None,
            rate: None,
            keepalive: true,
            method: "GET".to_string(),
            headers: Vec::new(),
            body: None,
            timeout: Duration::from_secs(10),
            warmup: Duration::ZERO,
            cpus: None,
            ramp_up: Duration::ZERO,
            interval: Duration::from_secs(1),
            engine: Engine::Builtin,
            hdr_log: None,
            remote_write: None,
            remote_write_auth: None,
            tls: crate::tls::TlsOptions {
                resumption: true,
                ..Default::default()
            },
            http2: false,
            streams: 1,
            targets: None,
            targets_order: crate::targets::Order::RoundRobin,
            seed: 0,
        }
    }
}

impl LoadConfig {
    fn validate(&self) -> Result<(), LoadError> {
        let bad = |m: &str| Err(LoadError::InvalidOption(m.to_string()));
        if self.connections == 0 {
            return bad("-c must be at least 1");
        }
        if self.threads == 0 {
            return bad("--threads must be at least 1");
        }
        if self.requests == Some(0) {
            return bad("-n must be at least 1");
        }
        if self.duration.is_some_and(|d| d.is_zero()) {
            return bad("-d must be longer than 0s");
        }
        if let Some(rate) = &self.rate
            && !(rate.peak().is_finite() && rate.peak() > 0.0)
        {
            return bad("--rate must be a positive number of requests per second");
        }
        if self.streams == 0 {
            return bad("--streams must be at least 1");
        }
        if self.streams > 1 && !self.http2 {
            return bad(
                "--streams needs --http2: HTTP/1.1 carries one request at a time per connection (raise -c instead)",
            );
        }
        if self.streams > 1 && !self.keepalive {
            return bad(
                "--streams needs keep-alive: without it each request has a connection of its own",
            );
        }
        if self.http2 && self.engine == Engine::Hyper {
            return bad("--http2 has its own client (h2); leave out --engine hyper");
        }
        if self.timeout.is_zero() {
            return bad("--timeout must be longer than 0s");
        }
        if self.interval < Duration::from_millis(10) {
            return bad("--interval must be at least 10ms");
        }
        if let Some(cpus) = &self.cpus {
            if cpus.is_empty() {
                return bad("--cpus needs at least one CPU number");
            }
            let allowed = sys::allowed_cpus();
            if let Some(cpu) = cpus.iter().find(|c| !allowed.contains(c)) {
                return Err(LoadError::InvalidOption(format!(
                    "CPU {cpu} in --cpus is not available to this process (allowed: {allowed:?}); pick CPUs from that list"
                )));
            }
        }
        Ok(())
    }

    /// The URL is https (`HTTPS://` too, as it is parsed).
    fn is_https(&self) -> bool {
        crate::http_url::HttpUrl::parse(&self.url).is_ok_and(|u| u.https)
    }

    /// The settings as load.json and the screen show them: secrets redacted.
    fn echo(&self, threads: usize) -> ConfigEcho {
        ConfigEcho {
            url: crate::redact::url(&self.url),
            connections: self.connections,
            segment: (!self.segment.is_whole()).then(|| self.segment.to_string()),
            start_at: self.start_at.map(|at| at.to_rfc3339()),
            clock: None,
            run_id: self.run_id.clone(),
            host: self.run_id.as_ref().map(|_| crate::start::host_name()),
            threads,
            duration_s: self.duration.map(|d| d.as_secs_f64()),
            requests: self.requests,
            rate: self.rate.as_ref().map(|r| r.initial()),
            rate_schedule: self
                .rate
                .as_ref()
                .filter(|r| !r.is_steady())
                .map(|r| r.to_string()),
            keepalive: self.keepalive,
            method: self.method.clone(),
            headers: crate::redact::headers(&self.headers),
            body_bytes: self.body.as_ref().map_or(0, Vec::len),
            timeout_s: self.timeout.as_secs_f64(),
            warmup_s: self.warmup.as_secs_f64(),
            cpus: self.cpus.clone(),
            ramp_up_s: self.ramp_up.as_secs_f64(),
            interval_s: self.interval.as_secs_f64(),
            mode: if self.rate.is_some() {
                "open"
            } else {
                "closed"
            }
            .to_string(),
            engine: self.engine,
            protocol: match (self.http2, self.is_https()) {
                (false, _) => report::Protocol::Http11,
                (true, true) => report::Protocol::H2,
                (true, false) => report::Protocol::H2c,
            },
            streams: self.http2.then_some(self.streams),
        }
    }
}

/// Run the load described by `config`, blocking until it is over or `stop` becomes true (then it
/// returns early with everything measured so far).
pub fn run(config: &LoadConfig, stop: Arc<AtomicBool>) -> Result<LoadReport, LoadError> {
    run_with_progress(config, stop, Arc::new(Progress::default()))
}

/// [`run`], counting responses into `progress` as they arrive, for a watcher on another thread.
pub fn run_with_progress(
    config: &LoadConfig,
    stop: Arc<AtomicBool>,
    progress: Arc<Progress>,
) -> Result<LoadReport, LoadError> {
    config.validate()?;
    let target = Target::parse(&config.url)?;
    let template = RequestTemplate::new(
        &target,
        &config.method,
        &config.headers,
        config.body.as_deref(),
        config.keepalive,
    )?;
    let targets = match &config.targets {
        None => crate::targets::Targets::one(template),
        Some(path) => crate::targets::Targets::list(
            &crate::targets::read(path)?,
            &target,
            config.keepalive,
            config.targets_order,
            config.seed,
        )?
        .dealt(config.segment),
    };
    sys::ensure_fd_limit(config.connections)?;
    let tls = match &target.tls_host {
        Some(host) => {
            // With --http2, http/1.1 as well: a server without h2 then says so by choosing it.
            let alpn: &[&[u8]] = if config.http2 {
                &[b"h2", b"http/1.1"]
            } else {
                &[b"http/1.1"]
            };
            Some(crate::tls::Tls::new(&config.tls, host, alpn)?)
        }
        None => None,
    };
    preflight(&target, config, tls.as_ref())?;
    // Its TLS set up before the run, so a --cacert it cannot read stops it now.
    let receiver = match &config.remote_write {
        Some(endpoint) => Some(crate::http_push::Receiver::new(
            endpoint.clone(),
            config.tls.cacert.as_deref(),
            config.remote_write_auth.clone(),
        )?),
        None => None,
    };

    let hdr_log = config
        .hdr_log
        .as_deref()
        .map(crate::hdr_log::HdrLogFile::create)
        .transpose()?;

    let threads = config.threads.min(config.connections);
    progress.init(threads);
    let clock = config.start_at.map(|_| crate::start::clock_state());
    if let (Some(at), Some(clock)) = (config.start_at, &clock) {
        // Stopped while waiting: the run starts and ends at once, with nothing measured.
        crate::start::wait_for(at, clock, config.allow_unsynced, &stop)?;
    }
    // With --start-at, the run starts at that instant, not when this thread woke for it (late
    // by the scheduler): every host's grid then sits on the same wall-clock times.
    let woke_late = config.start_at.map(crate::start::StartAt::passed).unwrap_or_default();
    let run_start = Instant::now()
        .checked_sub(woke_late)
        .unwrap_or_else(Instant::now);
    // The same instant on the wall clock: the HdrHistogram log's StartTime.
    let run_start_wall = match config.start_at {
        Some(at) => at.0,
        None => std::time::SystemTime::now() - run_start.elapsed(),
    };
    let measure_start_wall = run_start_wall + config.ramp_up + config.warmup;
    let measure_start = run_start + config.ramp_up + config.warmup;
    // Instant is CLOCK_MONOTONIC: the same instant in ns, for watchers on the kernel's clock.
    let measure_start_ns = sys::monotonic_ns() - run_start.elapsed().as_nanos() as u64
        + (config.ramp_up + config.warmup).as_nanos() as u64;
    progress.set_measure_start_ns(measure_start_ns);
    let plan = Arc::new(plan::RunPlan {
        targets,
        engine: config.engine,
        addr: target.addr,
        keepalive: config.keepalive,
        timeout: config.timeout,
        connections: config.connections,
        http2: config.http2,
        streams: config.streams,
        run_start,
        measure_start,
        measure_end: config
            .duration
            .or(if config.requests.is_none() {
                Some(Duration::from_secs(10))
            } else {
                None
            })
            .map(|d| measure_start + d),
        request_budget: config.requests,
        requests_claimed: AtomicU64::new(0),
        segment: config.segment,
        rate: config.rate.clone(),
        ramp_up: config.ramp_up,
        stop,
        tls,
    });

    let remote_write = match receiver {
        Some(receiver) => Some(crate::remote_write::Pusher::start(
            receiver,
            crate::remote_write::SeriesLabels {
                run: config.run_id.clone().unwrap_or_default(),
                segment: config.segment.to_string(),
                host: crate::start::host_name(),
            },
            measure_start_wall,
            config.interval,
        )?),
        None => None,
    };

    let (tx, rx) = std::sync::mpsc::channel();
    let mut workers = Vec::with_capacity(threads);
    for thread in 0..threads {
        let plan = plan.clone();
        let tx = tx.clone();
        let cpu = config.cpus.as_ref().map(|c| c[thread % c.len()]);
        let interval = config.interval;
        let indices: Vec<usize> = (thread..config.connections).step_by(threads).collect();
        let progress = progress.clone();
        let worker = std::thread::Builder::new()
            .name(format!("loadgen-{thread}"))
            .spawn(move || worker_thread(plan, thread, indices, cpu, interval, tx, progress))
            .map_err(|source| LoadError::Runtime {
                what: "cannot spawn worker thread",
                source,
            })?;
        workers.push(worker);
    }
    drop(tx);

    let mut collector = stats::Collector::new(threads, config.interval);
    if hdr_log.is_some() {
        collector.interval_latency = Some(Default::default());
    }
    collector.remote_write = remote_write.as_ref().map(|p| p.sender());
    collector.window = plan.measure_end.map(|end| end - measure_start);
    // Ends when every worker has dropped its sender, i.e. finished.
    for flush in rx {
        let closed = collector.timeline.len();
        collector.add(flush);
        if collector.timeline.len() > closed {
            progress.publish(collector.so_far());
        }
    }
    let mut totals = Vec::with_capacity(threads);
    for worker in workers {
        match worker.join() {
            Ok(Ok(t)) => totals.push(t),
            Ok(Err(e)) => return Err(e),
            Err(_) => return Err(LoadError::WorkerPanicked),
        }
    }
    let stopped_early = plan.stop.load(std::sync::atomic::Ordering::Relaxed);

    let last_end = totals.iter().map(|t| t.end).max().unwrap_or(measure_start);
    let end = match plan.measure_end {
        Some(deadline) => last_end.min(deadline),
        None => last_end,
    };
    let window = end.saturating_duration_since(measure_start);
    collector.finish(window);
    let interval_latency = collector.interval_latency.take();
    // Every interval is closed: the pusher's last push goes, and it is waited for.
    collector.remote_write = None;
    let remote_write = remote_write.map(crate::remote_write::Pusher::finish);

    let mut report = build_report(
        config,
        threads,
        measure_start_ns,
        collector,
        &totals,
        window,
        stopped_early,
    );
    if plan.targets.listed() {
        report.targets = Some(targets_summary(config, &plan.targets, &totals));
    }
    report.config.clock = clock;
    report.remote_write = remote_write;
    if let (Some(log), Some(latency)) = (hdr_log, interval_latency)
        && let Err(e) = log.write(
            &latency,
            measure_start_wall,
            config.interval,
            window,
            report.timeline.len(),
            report.config.host.as_deref(),
        )
    {
        // The error carries the report back: nothing measured is lost.
        return Err(e.with_measured(report));
    }
    Ok(report)
}

/// A single-threaded tokio runtime (each worker's, and the check before the run's).
fn current_thread_runtime() -> Result<tokio::runtime::Runtime, LoadError> {
    tokio::runtime::Builder::new_current_thread()
        .enable_all()
        .build()
        .map_err(|source| LoadError::Runtime {
            what: "cannot build the tokio runtime",
            source,
        })
}

/// Refuse a closed port before starting hundreds of connections to it; for https, a TLS
/// handshake that fails (an untrusted certificate, a wrong name, plain HTTP on the port); for
/// `--http2`, a server that does not speak it: one sentence with the fix, before the run, not
/// thousands of errors in it.
fn preflight(
    target: &Target,
    config: &LoadConfig,
    tls: Option<&crate::tls::Tls>,
) -> Result<(), LoadError> {
    let timeout = config.timeout;
    let stream = match std::net::TcpStream::connect_timeout(&target.addr, timeout) {
        Ok(s) => s,
        Err(e) if e.kind() == std::io::ErrorKind::ConnectionRefused => {
            return Err(LoadError::PortClosed { addr: target.addr });
        }
        Err(source) => {
            return Err(LoadError::Connect {
                addr: target.addr,
                source,
            });
        }
    };
    if tls.is_none() && !config.http2 {
        return Ok(());
    }
    let runtime = current_thread_runtime()?;
    let addr = target.addr;
    let name = config
        .tls
        .sni
        .clone()
        .or_else(|| target.tls_host.clone())
        .unwrap_or_default();
    runtime.block_on(async {
        stream
            .set_nonblocking(true)
            .map_err(|source| LoadError::Connect { addr, source })?;
        let tcp = tokio::net::TcpStream::from_std(stream)
            .map_err(|source| LoadError::Connect { addr, source })?;
        let Some(tls) = tls else {
            // h2c: the server must answer HTTP/2's preface with HTTP/2.
            let check = crate::http2::check_prior_knowledge(tcp);
            return match tokio::time::timeout(timeout, check).await {
                Ok(Ok(())) => Ok(()),
                Ok(Err(e)) => Err(LoadError::Http2(format!(
                    "{addr} does not speak HTTP/2 over cleartext with prior knowledge (h2c): {e}; drop --http2, or give an https:// URL if the server offers h2 through TLS"
                ))),
                Err(_) => Err(LoadError::Http2(format!(
                    "{addr} did not answer HTTP/2's preface within --timeout: it does not speak h2c on this port; drop --http2, or give an https:// URL"
                ))),
            };
        };
        match tokio::time::timeout(timeout, tls.connect(tcp)).await {
            Ok(Ok((stream, _))) => {
                if tls.certificate_asked_for() {
                    // TLS 1.3 completes the client's side of the handshake before the server
                    // judges the (empty) certificate: nginx then answers 400 to every request.
                    return Err(LoadError::Tls(format!(
                        "{addr}: the server asks for a client certificate and none was given: pass --cert FILE and --key FILE (PEM), signed by a CA the server trusts"
                    )));
                }
                let alpn = stream.get_ref().1.alpn_protocol().map(<[u8]>::to_vec);
                if config.http2 && alpn.as_deref() != Some(b"h2") {
                    return Err(LoadError::Http2(format!(
                        "{addr} did not choose HTTP/2 in the TLS handshake (ALPN: {}): it does not offer h2 on this port; drop --http2, or enable HTTP/2 on the server (nginx: `listen ... ssl http2`)",
                        alpn.map_or("none".to_string(), |p| String::from_utf8_lossy(&p).into_owned())
                    )));
                }
                Ok(())
            }
            Ok(Err(e)) => Err(LoadError::Tls(format!(
                "{addr}: {}",
                crate::tls::explain(&e, &name)
            ))),
            Err(_) => Err(LoadError::Tls(format!(
                "{addr}: no TLS handshake within --timeout: check that the server speaks TLS on this port"
            ))),
        }
    })
}

fn worker_thread(
    plan: Arc<plan::RunPlan>,
    thread: usize,
    connection_indices: Vec<usize>,
    cpu: Option<usize>,
    interval: Duration,
    tx: std::sync::mpsc::Sender<stats::IntervalFlush>,
    progress: Arc<Progress>,
) -> Result<stats::ThreadTotals, LoadError> {
    if let Some(cpu) = cpu {
        sys::pin_current_thread(cpu).map_err(|e| {
            LoadError::InvalidOption(format!("cannot pin a worker thread to CPU {cpu} ({e}); pick CPUs from `nproc`/taskset in --cpus"))
        })?;
    }
    let runtime = current_thread_runtime()?;
    let recorder = std::rc::Rc::new(std::cell::RefCell::new(stats::ThreadRecorder::new(
        thread,
        plan.measure_start,
        plan.measure_end,
        interval,
        tx,
        progress,
    )));
    if plan.targets.listed() {
        recorder.borrow_mut().per_target(plan.targets.names.len());
    }
    let local = tokio::task::LocalSet::new();
    local.block_on(
        &runtime,
        connection::run_thread_connections(plan.clone(), recorder.clone(), connection_indices),
    );
    drop(local);
    let mut recorder = std::rc::Rc::try_unwrap(recorder)
        .ok()
        .expect("connection tasks are gone")
        .into_inner();
    recorder.finish(Instant::now());
    Ok(recorder.totals)
}

fn build_report(
    config: &LoadConfig,
    threads: usize,
    start_monotonic_ns: u64,
    collector: stats::Collector,
    totals: &[stats::ThreadTotals],
    window: Duration,
    stopped_early: bool,
) -> LoadReport {
    let sum = |f: fn(&stats::ThreadTotals) -> u64| totals.iter().map(f).sum::<u64>();
    let completed = sum(|t| t.completed);
    let errors = sum(|t| t.errors);
    let mut status_codes = std::collections::BTreeMap::new();
    let mut errors_by_kind = std::collections::BTreeMap::new();
    for kind in ErrorKind::ALL {
        errors_by_kind.insert(kind.name().to_string(), 0);
    }
    let mut connect = crate::histogram::new_histogram();
    let mut tls_latency = crate::histogram::new_histogram();
    let mut user_ns = 0u64;
    let mut sys_ns = 0u64;
    let (mut voluntary_switches, mut involuntary_switches) = (0u64, 0u64);
    let mut max_thread_utilization = 0.0f64;
    for t in totals {
        for (code, &n) in t.status_codes.iter().enumerate() {
            if n > 0 {
                *status_codes.entry(code as u16).or_insert(0) += n;
            }
        }
        for kind in ErrorKind::ALL {
            *errors_by_kind
                .get_mut(kind.name())
                .expect("all kinds present") += t.errors_by_kind[kind.index()];
        }
        connect
            .add(&t.connect_latency)
            .expect("same histogram bounds");
        tls_latency
            .add(&t.tls_latency)
            .expect("same histogram bounds");
        user_ns += t.cpu.user.as_nanos() as u64;
        sys_ns += t.cpu.sys.as_nanos() as u64;
        voluntary_switches += t.cpu.voluntary_switches;
        involuntary_switches += t.cpu.involuntary_switches;
        let wall = t.cpu_wall.as_secs_f64();
        if wall > 0.0 {
            max_thread_utilization =
                max_thread_utilization.max((t.cpu.user + t.cpu.sys).as_secs_f64() / wall);
        }
    }
    let secs = window.as_secs_f64();
    let cpu_utilization = if secs > 0.0 {
        (user_ns + sys_ns) as f64 / 1e9 / (secs * threads as f64)
    } else {
        0.0
    };
    let latency_us = LatencySummary::from_histogram(&collector.latency);
    let p99_us = latency_us.p99;
    LoadReport {
        throughput_rps: if secs > 0.0 {
            report::round3(completed as f64 / secs)
        } else {
            0.0
        },
        requests: completed + errors,
        completed,
        errors,
        sent: sum(|t| t.sent),
        unfinished: sum(|t| t.in_flight),
        warmup_requests: sum(|t| t.warmup_requests),
        carried_in: sum(|t| t.carried_in),
        duration_s: report::round3(secs),
        bytes: sum(|t| t.bytes),
        status_codes,
        errors_by_kind,
        latency_us,
        connect_latency_us: (!config.keepalive).then(|| LatencySummary::from_histogram(&connect)),
        connections_opened: sum(|t| t.connections_opened),
        targets: None,
        http2: config.http2.then(|| report::Http2Summary {
            retried_after_goaway: sum(|t| t.h2_refused_goaway),
            retried_after_refused_stream: sum(|t| t.h2_refused_stream),
        }),
        open_loop: config.rate.is_some().then(|| {
            let mut uncorrected = crate::histogram::new_histogram();
            let mut late = crate::late::LateByLatency::new();
            for t in totals {
                uncorrected
                    .add(&t.service_latency)
                    .expect("same histogram bounds");
                late.add(&t.late_by_latency);
            }
            report::OpenLoopSummary {
                uncorrected_latency_us: LatencySummary::from_histogram(&uncorrected),
                sends_behind_schedule: sum(|t| t.behind_schedule),
                max_behind_us: totals
                    .iter()
                    .map(|t| t.behind_max.as_micros() as u64)
                    .max()
                    .unwrap_or(0),
                late_at_p99_us: late.mean_at(p99_us).map(report::round3),
            }
        }),
        tls: config.is_https().then(|| report::TlsSummary {
            handshakes: sum(|t| t.tls_handshakes),
            resumed: sum(|t| t.tls_resumed),
            handshake_us: LatencySummary::from_histogram(&tls_latency),
        }),
        idle_closed_by_server: sum(|t| t.closed_idle),
        spectrum: report::spectrum(&collector.latency),
        timeline: collector.timeline,
        client_cpu: ClientCpu {
            user_ns,
            sys_ns,
            voluntary_switches,
            involuntary_switches,
            cpu_utilization: report::round3(cpu_utilization),
            max_thread_utilization: report::round3(max_thread_utilization),
            saturated: max_thread_utilization >= SATURATED_UTILIZATION,
            threads,
        },
        start_monotonic_ns,
        stopped_early,
        config: config.echo(threads),
        hosts: Vec::new(),
        remote_write: None,
    }
}

/// Per distinct request of a `--targets` list, over every thread: the 20 most sent.
fn targets_summary(
    config: &LoadConfig,
    targets: &crate::targets::Targets,
    totals: &[stats::ThreadTotals],
) -> report::TargetsSummary {
    let mut top: Vec<report::TargetStats> = (targets.names.iter().enumerate())
        .map(|(i, name)| {
            let tallies = totals.iter().filter_map(|t| t.per_target.get(i));
            let mut latency: Option<hdrhistogram::Histogram<u32>> = None;
            let (mut completed, mut errors) = (0, 0);
            for tally in tallies {
                completed += tally.completed;
                errors += tally.errors;
                if let Some(h) = &tally.latency {
                    match &mut latency {
                        Some(sum) => sum.add(h).expect("same histogram bounds"),
                        None => latency = Some(h.clone()),
                    }
                }
            }
            report::TargetStats {
                request: name.clone(),
                completed,
                errors,
                latency_us: latency.as_ref().map(LatencySummary::from_histogram),
            }
        })
        .collect();
    top.sort_by_key(|t| std::cmp::Reverse(t.completed + t.errors));
    top.truncate(20);
    let random = config.targets_order == crate::targets::Order::Random;
    report::TargetsSummary {
        order: if random { "random" } else { "round-robin" }.to_string(),
        seed: random.then_some(config.seed),
        entries: targets.templates.len(),
        distinct: targets.names.len(),
        top,
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::loopback_server::{LoopbackServer, OK};

    #[test]
    fn a_run_given_secrets_sends_them_and_writes_and_prints_none() {
        let server = LoopbackServer::start(OK);
        let config = LoadConfig {
            url: format!("http://user:s3cret@127.0.0.1:{}/", server.addr.port()),
            connections: 1,
            threads: 1,
            requests: Some(3),
            duration: None,
            headers: vec![
                ("Authorization".into(), "Bearer s3cret".into()),
                ("X-Api-Key".into(), "s3cret-key".into()),
                ("Cookie".into(), "session=s3cret".into()),
            ],
            ..LoadConfig::default()
        };
        let report = run(&config, Arc::new(AtomicBool::new(false)));
        let (seen, _) = server.finish();
        let report = report.expect("the run");
        let seen = String::from_utf8_lossy(&seen).to_string();
        assert_eq!(report.completed, 3, "{seen}");
        // The request itself carries the secrets as given; its Host, no userinfo.
        assert!(seen.contains("authorization: Bearer s3cret\r\n"), "{seen}");
        assert!(seen.contains("x-api-key: s3cret-key\r\n"), "{seen}");
        let host = format!("host: 127.0.0.1:{}\r\n", config.url.rsplit(':').next().unwrap().trim_end_matches('/'));
        assert_eq!(seen.matches(host.as_str()).count(), 3, "{seen}");

        let file = std::env::temp_dir().join(format!("srvprof-secrets-{}.json", std::process::id()));
        crate::cli::write_report(&report, &file).unwrap();
        let written = std::fs::read(&file).unwrap();
        std::fs::remove_file(&file).unwrap();
        let json = String::from_utf8_lossy(&written);
        assert!(!json.contains("s3cret"), "{json}");
        assert!(json.contains("<redacted>"), "{json}");
        let mut screen = Vec::new();
        crate::printer::print_text(&report, &mut screen);
        let screen = String::from_utf8_lossy(&screen);
        assert!(!screen.contains("s3cret"), "{screen}");
    }
}
