//! The result of a run: what the profiler stores as JSON and the printer shows as text.

use std::collections::BTreeMap;

#[cfg(feature = "engine")]
use hdrhistogram::Histogram;
use serde::{Deserialize, Serialize};

/// Which HTTP/1.1 client implementation sends the requests.
#[derive(Clone, Copy, Debug, Default, PartialEq, Eq, serde::Serialize, serde::Deserialize)]
#[serde(rename_all = "lowercase")]
pub enum Engine {
    /// The built-in client: request encoded once, responses parsed in place; no allocation per
    /// request. The fastest.
    #[default]
    Builtin,
    /// hyper's `client::conn::http1`: allocates per request, useful as an independent check.
    Hyper,
}

/// Why a request failed. Every failure lands in exactly one kind; none is dropped.
#[derive(Clone, Copy, Debug, PartialEq, Eq, PartialOrd, Ord, Hash)]
pub enum ErrorKind {
    ConnectRefused,
    ConnectTimeout,
    /// The server reset the connection (RST), or closed it before the response was complete.
    Reset,
    /// No complete response within `--timeout`.
    ReadTimeout,
    /// The server's bytes were not valid HTTP/1.x.
    ProtocolError,
    /// A complete response whose status was not 2xx.
    Non2xx,
    /// connect() found no local port free for this destination (EADDRNOTAVAIL): the ephemeral
    /// port range is used up, by open connections and TIME_WAIT.
    NoLocalPort,
    /// The process or the system ran out of file descriptors (EMFILE, ENFILE).
    TooManyOpenFiles,
    /// The TLS handshake failed (a certificate refused, an alert from the server).
    TlsHandshake,
    /// HTTP/2: the server's GOAWAY ended the connection before it answered this stream.
    GoAway,
    /// HTTP/2: the server reset this stream (RST_STREAM), e.g. REFUSED_STREAM.
    StreamReset,
    Other,
}

impl ErrorKind {
    pub const ALL: [ErrorKind; 12] = [
        ErrorKind::ConnectRefused,
        ErrorKind::ConnectTimeout,
        ErrorKind::Reset,
        ErrorKind::ReadTimeout,
        ErrorKind::ProtocolError,
        ErrorKind::Non2xx,
        ErrorKind::NoLocalPort,
        ErrorKind::TooManyOpenFiles,
        ErrorKind::TlsHandshake,
        ErrorKind::GoAway,
        ErrorKind::StreamReset,
        ErrorKind::Other,
    ];

    pub fn name(self) -> &'static str {
        match self {
            ErrorKind::ConnectRefused => "connect_refused",
            ErrorKind::ConnectTimeout => "connect_timeout",
            ErrorKind::Reset => "reset",
            ErrorKind::ReadTimeout => "read_timeout",
            ErrorKind::ProtocolError => "protocol_error",
            ErrorKind::Non2xx => "non_2xx",
            ErrorKind::NoLocalPort => "no_local_port",
            ErrorKind::TooManyOpenFiles => "too_many_open_files",
            ErrorKind::TlsHandshake => "tls_handshake",
            ErrorKind::GoAway => "goaway",
            ErrorKind::StreamReset => "stream_reset",
            ErrorKind::Other => "other",
        }
    }

    /// What to do about it, for the kinds whose name alone does not say.
    pub fn hint(self) -> Option<&'static str> {
        match self {
            ErrorKind::NoLocalPort => Some(
                "no local port was free for a new connection: the ephemeral port range is used up by open connections and TIME_WAIT; widen net.ipv4.ip_local_port_range, use keep-alive, or fewer connections",
            ),
            ErrorKind::TooManyOpenFiles => Some(
                "the client ran out of file descriptors: raise its open-file limit (ulimit -n) or use fewer connections",
            ),
            ErrorKind::GoAway => Some(
                "the server closed HTTP/2 connections with GOAWAY while streams were in flight: it is shutting down or enforces a request limit per connection (nginx: keepalive_requests)",
            ),
            ErrorKind::StreamReset => Some(
                "the server reset HTTP/2 streams (RST_STREAM): it refused or cancelled them; compare --streams with its concurrent-stream limit",
            ),
            _ => None,
        }
    }

    pub fn index(self) -> usize {
        self as usize
    }
}

/// The TLS handshakes of a run's connections opened in the measured window.
#[derive(Serialize, Deserialize, Clone, Debug, Default, PartialEq)]
pub struct TlsSummary {
    pub handshakes: u64,
    /// Of them, those that resumed an earlier session (no certificate, fewer round trips).
    pub resumed: u64,
    /// How long each took, from the TCP connection to the first byte it can carry (µs).
    pub handshake_us: LatencySummary,
}

/// `--targets`: how the list was taken and what each of its most sent requests got.
#[derive(Serialize, Deserialize, Clone, Debug, Default, PartialEq)]
pub struct TargetsSummary {
    /// "round-robin" or "random" (with `seed`).
    pub order: String,
    pub seed: Option<u64>,
    /// Entries in the file, and distinct requests among them.
    pub entries: usize,
    pub distinct: usize,
    /// The most sent distinct requests, most first (at most 20).
    pub top: Vec<TargetStats>,
}

/// One distinct request of a `--targets` list over the measured window.
#[derive(Serialize, Deserialize, Clone, Debug, Default, PartialEq)]
pub struct TargetStats {
    /// "METHOD URL".
    pub request: String,
    pub completed: u64,
    pub errors: u64,
    /// Its requests sent in the window (None past the first 100 distinct requests).
    pub latency_us: Option<LatencySummary>,
}

/// HTTP/2: what the server refused unprocessed and the client sent again (RFC 9113 8.7); such
/// requests are not errors, their retry is part of their latency.
#[derive(Serialize, Deserialize, Clone, Debug, Default, PartialEq)]
pub struct Http2Summary {
    /// Streams past the last one a graceful GOAWAY accepted (the server's request limit per
    /// connection, a reload).
    pub retried_after_goaway: u64,
    /// Streams reset with REFUSED_STREAM (more streams than the server takes at once).
    pub retried_after_refused_stream: u64,
}

/// Open loop: what keeping to the schedule cost.
#[derive(Serialize, Deserialize, Clone, Debug, Default, PartialEq)]
pub struct OpenLoopSummary {
    /// Latency from each request's actual send, not its intended time: service time only, the
    /// figure a client blind to coordinated omission reports (`latency_us` is the true one).
    pub uncorrected_latency_us: LatencySummary,
    /// Requests sent more than 1 ms after their intended time because their connection was
    /// still waiting for an earlier answer (more connections keep the schedule), and the most
    /// behind one (µs).
    pub sends_behind_schedule: u64,
    pub max_behind_us: u64,
    /// How late the requests at p99 (those within p99's 19 % latency bucket) were sent, on
    /// average (µs): the client's queue in them, as the load generator timed it.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub late_at_p99_us: Option<f64>,
}

/// Latency percentiles in microseconds.
#[derive(Serialize, Deserialize, Clone, Debug, Default, PartialEq)]
pub struct LatencySummary {
    pub p50: u64,
    pub p75: u64,
    pub p90: u64,
    pub p99: u64,
    pub p999: u64,
    pub p9999: u64,
    pub max: u64,
    pub min: u64,
    pub mean: f64,
    pub stdev: f64,
    /// How many values the histogram holds.
    pub count: u64,
}

#[cfg(feature = "engine")]
impl LatencySummary {
    pub fn from_histogram<T: hdrhistogram::Counter>(h: &Histogram<T>) -> LatencySummary {
        if h.is_empty() {
            return LatencySummary::default();
        }
        LatencySummary {
            p50: h.value_at_quantile(0.50),
            p75: h.value_at_quantile(0.75),
            p90: h.value_at_quantile(0.90),
            p99: h.value_at_quantile(0.99),
            p999: h.value_at_quantile(0.999),
            p9999: h.value_at_quantile(0.9999),
            max: h.max(),
            min: h.min(),
            mean: round3(h.mean()),
            stdev: round3(h.stdev()),
            count: h.len(),
        }
    }
}

/// One point of the percentile spectrum (HdrHistogram's percentile distribution).
#[derive(Serialize, Deserialize, Clone, Debug, PartialEq)]
pub struct SpectrumPoint {
    pub percentile: f64,
    pub value_us: u64,
    /// Values at or below `value_us`.
    pub count: u64,
}

#[cfg(feature = "engine")]
pub fn spectrum(h: &Histogram<u64>) -> Vec<SpectrumPoint> {
    if h.is_empty() {
        return Vec::new();
    }
    let mut points: Vec<SpectrumPoint> = h
        .iter_quantiles(2)
        .map(|v| SpectrumPoint {
            percentile: round3(v.quantile_iterated_to() * 100.0),
            value_us: h.highest_equivalent(v.value_iterated_to()),
            count: v.count_since_last_iteration(),
        })
        .collect();
    // Running totals read better than per-step counts.
    let mut total = 0;
    for p in &mut points {
        total += p.count;
        p.count = total;
    }
    points.dedup_by(|b, a| a.percentile == b.percentile);
    points
}

/// One interval of the run, by completion time.
#[derive(Serialize, Deserialize, Clone, Debug, PartialEq)]
pub struct LoadRow {
    /// Start of the interval, seconds after measurement started.
    pub t_s: f64,
    /// Successful (2xx) responses completed in the interval.
    pub completed: u64,
    /// Failed requests (any kind, non-2xx included) in the interval.
    pub errors: u64,
    pub p50_us: u64,
    pub p99_us: u64,
    pub max_us: u64,
    pub throughput_rps: f64,
}

/// This host's clock as the kernel sees it (adjtimex), recorded with `--start-at`: hosts that
/// start together agree only as well as their clocks do.
#[derive(Serialize, Deserialize, Clone, Copy, Debug, Default, PartialEq, Eq)]
pub struct ClockState {
    /// Disciplined by a time service (not STA_UNSYNC).
    pub synchronised: bool,
    /// The kernel's maximum and estimated error of the clock, µs.
    pub max_error_us: u64,
    pub est_error_us: u64,
}

/// The generator's own CPU use over the measured window.
#[derive(Serialize, Deserialize, Clone, Debug, Default, PartialEq)]
pub struct ClientCpu {
    pub user_ns: u64,
    pub sys_ns: u64,
    /// The load threads' context switches over the window (getrusage: the kernel's counts).
    #[serde(default)]
    pub voluntary_switches: u64,
    #[serde(default)]
    pub involuntary_switches: u64,
    /// (user + sys) / (wall × worker threads), 0..1.
    pub cpu_utilization: f64,
    /// Busiest worker thread's (user + sys) / wall.
    pub max_thread_utilization: f64,
    /// A worker thread was at least 90% busy: the figures may describe the client, not the server.
    pub saturated: bool,
    pub threads: usize,
}

/// The settings of the run, echoed into the report.
#[derive(Serialize, Deserialize, Clone, Debug, Default, PartialEq)]
pub struct ConfigEcho {
    pub url: String,
    /// This host's connections: its share with `segment`.
    pub connections: usize,
    /// This host's share of a run split over several client hosts ("2/3"); none on one host.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub segment: Option<String>,
    /// `--start-at`: the wall-clock instant the run began (RFC 3339, UTC), and this host's clock
    /// then.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub start_at: Option<String>,
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub clock: Option<ClockState>,
    /// The split run's id (`--run-id`, or from `--start-at`) and this host's name: the hosts'
    /// results are merged as one run by them.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub run_id: Option<String>,
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub host: Option<String>,
    pub threads: usize,
    pub duration_s: Option<f64>,
    pub requests: Option<u64>,
    pub rate: Option<f64>,
    /// A rate that changes over time (`--rate 1000:30s,ramp:1000-5000:60s`); `rate` is its
    /// first.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub rate_schedule: Option<String>,
    pub keepalive: bool,
    pub method: String,
    pub headers: Vec<(String, String)>,
    pub body_bytes: usize,
    pub timeout_s: f64,
    pub warmup_s: f64,
    pub cpus: Option<Vec<usize>>,
    pub ramp_up_s: f64,
    pub interval_s: f64,
    /// "closed" (next request when the previous answer is complete) or "open" (constant rate).
    pub mode: String,
    pub engine: Engine,
    #[serde(default)]
    pub protocol: Protocol,
    /// HTTP/2: requests in flight at once on each connection (`--streams`).
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub streams: Option<usize>,
}

/// What the requests were carried by.
#[derive(Clone, Copy, Debug, Default, PartialEq, Eq, serde::Serialize, serde::Deserialize)]
pub enum Protocol {
    #[default]
    #[serde(rename = "http/1.1")]
    Http11,
    /// HTTP/2 over TLS, chosen in ALPN.
    #[serde(rename = "h2")]
    H2,
    /// HTTP/2 over cleartext with prior knowledge.
    #[serde(rename = "h2c")]
    H2c,
}

impl Protocol {
    pub fn name(self) -> &'static str {
        match self {
            Protocol::Http11 => "http/1.1",
            Protocol::H2 => "h2",
            Protocol::H2c => "h2c",
        }
    }
}

#[derive(Serialize, Deserialize, Clone, Debug, Default)]
pub struct LoadReport {
    /// Successful (2xx) responses that arrived in the measured window, per second.
    pub throughput_rps: f64,
    /// Requests with an outcome in the measured window: `completed + errors`.
    pub requests: u64,
    /// Requests answered with a 2xx status.
    pub completed: u64,
    /// Failed requests of every kind (non-2xx responses included).
    pub errors: u64,
    /// Request attempts started in the measured window:
    /// `completed + errors + unfinished - carried_in`.
    pub sent: u64,
    /// Requests still waiting for an answer when the run stopped (duration over or stop asked).
    pub unfinished: u64,
    /// Requests sent during warmup.
    pub warmup_requests: u64,
    /// Warmup requests whose outcome arrived in the measured window: counted in `completed` or
    /// `errors` and in the timeline where they arrived (the server's work in that time), not in
    /// latency, which covers requests sent in the window only.
    #[serde(default)]
    pub carried_in: u64,
    /// Length of the measured window in seconds.
    pub duration_s: f64,
    /// Bytes read from the sockets in the measured window (headers and bodies).
    pub bytes: u64,
    pub status_codes: BTreeMap<u16, u64>,
    pub errors_by_kind: BTreeMap<String, u64>,
    /// Latency of every answered request (any status), from the intended send time in open loop.
    pub latency_us: LatencySummary,
    /// TCP connect time, when each request opens its own connection (`--no-keepalive`).
    pub connect_latency_us: Option<LatencySummary>,
    /// TCP connections opened during the measured window.
    pub connections_opened: u64,
    /// https: the TLS handshakes of the connections opened in the window.
    #[serde(default)]
    pub tls: Option<TlsSummary>,
    /// `--targets`: per-request counts and latencies.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub targets: Option<TargetsSummary>,
    /// HTTP/2 (`--http2`): requests refused unprocessed and sent again.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub http2: Option<Http2Summary>,
    /// Open loop (`--rate`): uncorrected latency and sends behind schedule.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub open_loop: Option<OpenLoopSummary>,
    /// Keep-alive connections the server closed while they were idle (found when the next
    /// request met EOF or a reset before any byte of its answer; that request is sent again on a
    /// new connection after the slot's reconnect backoff).
    #[serde(default)]
    pub idle_closed_by_server: u64,
    pub spectrum: Vec<SpectrumPoint>,
    pub timeline: Vec<LoadRow>,
    pub client_cpu: ClientCpu,
    /// CLOCK_MONOTONIC in ns when measurement started (comparable to bpf_ktime_get_ns).
    pub start_monotonic_ns: u64,
    /// True when the run ended early because `stop` was set.
    pub stopped_early: bool,
    pub config: ConfigEcho,
    /// A merged split run (`srvprof merge`): each client host's share, as its own report had it.
    #[serde(default, skip_serializing_if = "Vec::is_empty")]
    pub hosts: Vec<HostShare>,
    /// `--remote-write`: how the live pushes of each interval's figures went.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub remote_write: Option<RemoteWriteSummary>,
}

/// The pushes of `--remote-write`: a failed one loses only its intervals' points (the next
/// carries the running totals on) and never fails the run.
#[derive(Serialize, Deserialize, Clone, Debug, Default, PartialEq)]
pub struct RemoteWriteSummary {
    pub url: String,
    /// Pushes the receiver accepted.
    pub pushes: u64,
    /// Pushes that failed (no connection, no answer in time, an answer other than 2xx).
    pub failed: u64,
    /// The first failure, in one sentence.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub error: Option<String>,
}

/// One client host's share of a merged run: a slow host or an uneven split shows here.
#[derive(Serialize, Deserialize, Clone, Debug, Default, PartialEq)]
pub struct HostShare {
    pub host: String,
    pub segment: String,
    pub connections: usize,
    pub completed: u64,
    pub errors: u64,
    pub throughput_rps: f64,
    pub p50_us: u64,
    pub p99_us: u64,
    /// The busiest of its load generator's threads: near 1, that host measured itself.
    pub max_thread_utilization: f64,
    /// Its clock's error as its kernel estimated it (µs), when recorded.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub clock_max_error_us: Option<u64>,
}

impl LoadReport {
    /// At least one request got a 2xx answer.
    pub fn any_success(&self) -> bool {
        self.completed > 0
    }

    /// The kinds of error that happened, with their counts: `read_timeout 3, reset 1`.
    pub fn error_kinds(&self) -> String {
        (self.errors_by_kind.iter())
            .filter(|(_, n)| **n > 0)
            .map(|(kind, n)| format!("{kind} {n}"))
            .collect::<Vec<_>>()
            .join(", ")
    }
}

#[cfg(feature = "engine")]
pub(crate) fn round3(x: f64) -> f64 {
    if x.is_finite() {
        (x * 1000.0).round() / 1000.0
    } else {
        0.0
    }
}
