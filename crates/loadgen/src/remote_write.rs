//! `--remote-write URL`: each interval's figures pushed live to a Prometheus remote-write receiver
//! (Prometheus itself, Mimir, Thanos, VictoriaMetrics...), as the remote-write 1.0 protocol has
//! them: a snappy-compressed protobuf `prometheus.WriteRequest`.
//!
//! The series, each labelled `run`, `segment` ("I/N") and `host`, so that the agents of a split
//! run add up with `sum`:
//! - `srvprof_requests_completed_total`: 2xx answers, a counter;
//! - `srvprof_request_errors_total{kind}`: failed requests by kind (load.json's errors_by_kind);
//! - `srvprof_throughput_rps`: the interval's 2xx answers per second, a gauge;
//! - `srvprof_latency_seconds`: a native histogram (exponential buckets, schema [`SCHEMA`]) of
//!   every measured answer's latency, cumulative like a counter, so `histogram_quantile` and
//!   `histogram_count` work on it and on its `sum` over agents.
//!
//! Every series starts with a zero at the measured window's start, so `increase` and `rate` count
//! the first interval too. The pushes go from a thread of their own, fed once per interval by the
//! collector: nothing is added to the request path. A push that fails loses only its intervals'
//! points (the next carries the running totals on) and is reported, never failing the run.

use std::collections::BTreeMap;
use std::sync::mpsc::{self, Sender};
use std::thread::JoinHandle;
use std::time::{Duration, SystemTime};

use hdrhistogram::Histogram;

use crate::error::LoadError;
use crate::http_push::Receiver;
use crate::report::{ErrorKind, RemoteWriteSummary};

/// Buckets 2^(1/32) wide: 2.2 % apart, where HdrHistogram's 3 digits keep 0.1 %; a latency's
/// quantile lands within one bucket, from 100 us to 10 s in about 550 buckets at most.
pub const SCHEMA: i32 = 5;

/// A push without an answer by then has failed: the run's end waits for the last one at most
/// this long.
const PUSH_TIMEOUT: Duration = Duration::from_secs(5);

/// The labels of every series one agent pushes.
#[derive(Clone, Debug)]
pub struct SeriesLabels {
    pub run: String,
    pub segment: String,
    pub host: String,
}

/// One closed interval, as the collector sends it.
pub(crate) struct IntervalPoint {
    pub index: u64,
    /// The interval's length: the last one ends with the measured window.
    pub length: Duration,
    pub completed: u64,
    pub errors_by_kind: [u64; ErrorKind::ALL.len()],
    /// None when nothing measured was answered in it.
    pub latency: Option<Histogram<u64>>,
}

/// The pushing thread, and the collector's way to it.
pub(crate) struct Pusher {
    url: String,
    tx: Sender<IntervalPoint>,
    thread: JoinHandle<RemoteWriteSummary>,
}

impl Pusher {
    /// Starts the thread; intervals are `interval` long from `start` (the measured window's
    /// start on the wall clock).
    pub fn start(
        receiver: Receiver,
        labels: SeriesLabels,
        start: SystemTime,
        interval: Duration,
    ) -> Result<Pusher, LoadError> {
        let (tx, rx) = std::sync::mpsc::channel();
        let url = receiver.endpoint().url.clone();
        let thread = std::thread::Builder::new()
            .name("remote-write".to_string())
            .spawn(move || push_loop(receiver, Series::new(labels, start, interval), rx))
            .map_err(|source| LoadError::Runtime {
                what: "cannot spawn the remote-write thread",
                source,
            })?;
        Ok(Pusher { url, tx, thread })
    }

    pub fn sender(&self) -> Sender<IntervalPoint> {
        self.tx.clone()
    }

    /// Waits for the last push (at most [`PUSH_TIMEOUT`]) once every sender is dropped.
    pub fn finish(self) -> RemoteWriteSummary {
        drop(self.tx);
        self.thread.join().unwrap_or_else(|_| RemoteWriteSummary {
            url: self.url,
            pushes: 0,
            failed: 1,
            error: Some("the remote-write thread panicked".to_string()),
        })
    }
}

fn push_loop(
    receiver: Receiver,
    mut series: Series,
    rx: mpsc::Receiver<IntervalPoint>,
) -> RemoteWriteSummary {
    let mut summary = RemoteWriteSummary {
        url: receiver.endpoint().url.clone(),
        pushes: 0,
        failed: 0,
        error: None,
    };
    let runtime = match tokio::runtime::Builder::new_current_thread()
        .enable_all()
        .build()
    {
        Ok(r) => r,
        Err(e) => {
            summary.failed = 1;
            summary.error = Some(format!("cannot build the remote-write thread's runtime: {e}"));
            return summary;
        }
    };
    // Points that arrived while a push was on its way go together in the next one.
    while let Ok(first) = rx.recv() {
        let mut batch = vec![first];
        batch.extend(rx.try_iter());
        for point in &batch {
            series.add(point, SystemTime::now());
        }
        let body = series.take_request().encode_compressed();
        let outcome = runtime
            .block_on(async { tokio::time::timeout(PUSH_TIMEOUT, post(&receiver, body)).await })
            .unwrap_or_else(|_| {
                Err(format!(
                    "no answer within {} s",
                    PUSH_TIMEOUT.as_secs()
                ))
            });
        match outcome {
            Ok(()) => summary.pushes += 1,
            Err(why) => {
                summary.failed += 1;
                summary.error.get_or_insert_with(|| {
                    format!(
                        "remote write to {} failed: {why}; check that the URL is the receiver's write endpoint (Prometheus: /api/v1/write, started with --web.enable-remote-write-receiver and --enable-feature=native-histograms)",
                        receiver.endpoint().url
                    )
                });
            }
        }
    }
    summary
}

/// POST one compressed WriteRequest; Ok on a 2xx answer.
async fn post(receiver: &Receiver, body: Vec<u8>) -> Result<(), String> {
    let headers = [
        ("Content-Encoding", "snappy"),
        ("Content-Type", "application/x-protobuf"),
        ("X-Prometheus-Remote-Write-Version", "0.1.0"),
    ];
    let path = receiver.endpoint().path_and_query();
    receiver.post(path, &headers, body).await
}

/// The native-histogram bucket of a positive value at `schema`: bucket i holds
/// (2^((i-1)/2^schema), 2^(i/2^schema)], as Prometheus bounds them.
pub fn bucket_index(value: f64, schema: i32) -> i32 {
    // frexp: value = frac * 2^exp, frac in [0.5, 1); exact for powers of two, which are bounds.
    let (frac, exp) = frexp(value);
    if frac == 0.5 {
        return (exp - 1) << schema;
    }
    let scale = f64::from(1u32 << schema);
    ((exp - 1) << schema) + (frac.log2() * scale).ceil() as i32 + (1 << schema)
}

fn frexp(value: f64) -> (f64, i32) {
    let bits = value.to_bits();
    let exp = ((bits >> 52) & 0x7ff) as i32;
    if exp == 0 {
        // Subnormal: scale into the normal range first.
        let (frac, e) = frexp(value * 2f64.powi(64));
        return (frac, e - 64);
    }
    let frac = f64::from_bits((bits & !(0x7ff << 52)) | (1022 << 52));
    (frac, exp - 1022)
}

/// The running totals of one agent's series, and the points not yet pushed.
struct Series {
    labels: SeriesLabels,
    start: SystemTime,
    interval: Duration,
    start_ms: i64,
    /// The last point's timestamp: each must be later than the one before.
    last_ms: i64,
    completed: u64,
    errors: [u64; ErrorKind::ALL.len()],
    /// Latency buckets (seconds, at SCHEMA): index to count, with their count and sum.
    buckets: BTreeMap<i32, u64>,
    count: u64,
    sum_s: f64,
    /// Whether each series (completed, latency, then the error kinds) has had its zero yet.
    started: [bool; 2 + ErrorKind::ALL.len()],
    pending: Vec<TimeSeries>,
}

const COMPLETED: usize = 0;
const LATENCY: usize = 1;

impl Series {
    fn new(labels: SeriesLabels, start: SystemTime, interval: Duration) -> Series {
        let start_ms = millis(start);
        Series {
            labels,
            start,
            interval,
            start_ms,
            last_ms: start_ms,
            completed: 0,
            errors: [0; ErrorKind::ALL.len()],
            buckets: BTreeMap::new(),
            count: 0,
            sum_s: 0.0,
            started: [false; 2 + ErrorKind::ALL.len()],
            pending: Vec::new(),
        }
    }

    /// One closed interval, `now` on the wall clock (its end is no later).
    fn add(&mut self, point: &IntervalPoint, now: SystemTime) {
        let begin = self.start + self.interval * point.index as u32;
        let end = (begin + point.length).min(now).max(begin);
        let ts = millis(end).max(self.last_ms + 1);
        self.last_ms = ts;
        self.completed += point.completed;
        if let Some(h) = &point.latency {
            for v in h.iter_recorded() {
                let us = h.median_equivalent(v.value_iterated_to());
                let seconds = us as f64 / 1e6;
                let n = v.count_at_value();
                *self.buckets.entry(bucket_index(seconds, SCHEMA)).or_default() += n;
                self.count += n;
                self.sum_s += seconds * n as f64;
            }
        }
        let completed = self.completed as f64;
        self.sample(COMPLETED, "srvprof_requests_completed_total", None, completed, ts);
        let seconds = end.duration_since(begin).unwrap_or_default().as_secs_f64();
        let rps = if seconds > 0.0 {
            point.completed as f64 / seconds
        } else {
            0.0
        };
        self.push_sample("srvprof_throughput_rps", None, rps, ts);
        for (i, kind) in ErrorKind::ALL.iter().enumerate() {
            self.errors[i] += point.errors_by_kind[i];
            if self.errors[i] > 0 {
                let total = self.errors[i] as f64;
                let name = "srvprof_request_errors_total";
                self.sample(2 + i, name, Some(kind.name()), total, ts);
            }
        }
        if !self.started[LATENCY] {
            self.started[LATENCY] = true;
            let zero = self.histogram(self.start_ms, true);
            self.timeseries("srvprof_latency_seconds", None).histograms.push(zero);
        }
        let h = self.histogram(ts, false);
        self.timeseries("srvprof_latency_seconds", None).histograms.push(h);
    }

    /// A counter's point, after its zero at the window's start the first time.
    fn sample(&mut self, which: usize, name: &str, kind: Option<&str>, value: f64, ts: i64) {
        if !self.started[which] {
            self.started[which] = true;
            self.push_sample(name, kind, 0.0, self.start_ms);
        }
        self.push_sample(name, kind, value, ts);
    }

    fn push_sample(&mut self, name: &str, kind: Option<&str>, value: f64, timestamp: i64) {
        let sample = Sample { value, timestamp };
        self.timeseries(name, kind).samples.push(sample);
    }

    /// The pending series of `name` (and `kind`), made on first use.
    fn timeseries(&mut self, name: &str, kind: Option<&str>) -> &mut TimeSeries {
        let at = self.pending.iter().position(|ts| {
            ts.labels[0].value == name
                && kind.is_none_or(|k| ts.labels.iter().any(|l| l.name == "kind" && l.value == k))
        });
        match at {
            Some(i) => &mut self.pending[i],
            None => {
                let mut labels = vec![
                    label("__name__", name),
                    label("host", &self.labels.host),
                    label("run", &self.labels.run),
                    label("segment", &self.labels.segment),
                ];
                if let Some(kind) = kind {
                    labels.push(label("kind", kind));
                }
                // The protocol wants them sorted by name.
                labels.sort_by(|a, b| a.name.cmp(&b.name));
                self.pending.push(TimeSeries {
                    labels,
                    ..Default::default()
                });
                self.pending.last_mut().expect("just pushed")
            }
        }
    }

    /// The running latency histogram (or an empty one), its buckets as spans of consecutive
    /// indexes and each count as the difference from the bucket before.
    fn histogram(&self, timestamp: i64, empty: bool) -> NativeHistogram {
        let mut h = NativeHistogram {
            count: Some(native_histogram::Count::CountInt(0)),
            sum: 0.0,
            schema: SCHEMA,
            zero_threshold: 0.0,
            zero_count: Some(native_histogram::ZeroCount::ZeroCountInt(0)),
            // UNKNOWN: the receiver checks for a reset itself, as it does for a scrape.
            reset_hint: 0,
            timestamp,
            ..Default::default()
        };
        if empty {
            return h;
        }
        h.count = Some(native_histogram::Count::CountInt(self.count));
        h.sum = self.sum_s;
        let (spans, deltas) = spans_and_deltas(&self.buckets);
        h.positive_spans = spans;
        h.positive_deltas = deltas;
        h
    }

    /// The points since the last push, as one request.
    fn take_request(&mut self) -> WriteRequest {
        WriteRequest {
            timeseries: std::mem::take(&mut self.pending),
        }
    }
}

/// Spans of consecutive bucket indexes (the first's offset from 0, each next one's from the end
/// of the one before) and the counts as deltas, each from the previous bucket's count.
fn spans_and_deltas(buckets: &BTreeMap<i32, u64>) -> (Vec<BucketSpan>, Vec<i64>) {
    let mut spans: Vec<BucketSpan> = Vec::new();
    let mut deltas = Vec::with_capacity(buckets.len());
    let (mut next, mut previous) = (None::<i32>, 0i64);
    for (&index, &count) in buckets.iter().filter(|(_, c)| **c > 0) {
        match (next, spans.last_mut()) {
            (Some(n), Some(span)) if n == index => span.length += 1,
            _ => spans.push(BucketSpan {
                offset: index - next.unwrap_or(0),
                length: 1,
            }),
        }
        next = Some(index + 1);
        deltas.push(count as i64 - previous);
        previous = count as i64;
    }
    (spans, deltas)
}

fn label(name: &str, value: &str) -> Label {
    Label {
        name: name.to_string(),
        value: value.to_string(),
    }
}

fn millis(t: SystemTime) -> i64 {
    t.duration_since(SystemTime::UNIX_EPOCH)
        .map_or(0, |d| d.as_millis() as i64)
}

impl WriteRequest {
    /// The body of a push: protobuf, then snappy's raw block format (not its framed one).
    fn encode_compressed(&self) -> Vec<u8> {
        let bytes = prost::Message::encode_to_vec(self);
        snap::raw::Encoder::new()
            .compress_vec(&bytes)
            .expect("a WriteRequest is far below snappy's 4 GB block limit")
    }
}

// The messages of prometheus/prompb (remote.proto, types.proto) this pushes, by hand: field
// numbers and types as there.

/// prometheus.WriteRequest (its metadata, field 3, is not sent).
#[derive(Clone, PartialEq, prost::Message)]
pub struct WriteRequest {
    #[prost(message, repeated, tag = "1")]
    pub timeseries: Vec<TimeSeries>,
}

#[derive(Clone, PartialEq, prost::Message)]
pub struct TimeSeries {
    #[prost(message, repeated, tag = "1")]
    pub labels: Vec<Label>,
    #[prost(message, repeated, tag = "2")]
    pub samples: Vec<Sample>,
    #[prost(message, repeated, tag = "4")]
    pub histograms: Vec<NativeHistogram>,
}

#[derive(Clone, PartialEq, prost::Message)]
pub struct Label {
    #[prost(string, tag = "1")]
    pub name: String,
    #[prost(string, tag = "2")]
    pub value: String,
}

#[derive(Clone, PartialEq, prost::Message)]
pub struct Sample {
    #[prost(double, tag = "1")]
    pub value: f64,
    /// Milliseconds since the epoch.
    #[prost(int64, tag = "2")]
    pub timestamp: i64,
}

/// prometheus.Histogram, with integer counts (the float variants are for float histograms).
#[derive(Clone, PartialEq, prost::Message)]
pub struct NativeHistogram {
    #[prost(oneof = "native_histogram::Count", tags = "1, 2")]
    pub count: Option<native_histogram::Count>,
    #[prost(double, tag = "3")]
    pub sum: f64,
    #[prost(sint32, tag = "4")]
    pub schema: i32,
    #[prost(double, tag = "5")]
    pub zero_threshold: f64,
    #[prost(oneof = "native_histogram::ZeroCount", tags = "6, 7")]
    pub zero_count: Option<native_histogram::ZeroCount>,
    #[prost(message, repeated, tag = "8")]
    pub negative_spans: Vec<BucketSpan>,
    #[prost(sint64, repeated, tag = "9")]
    pub negative_deltas: Vec<i64>,
    #[prost(message, repeated, tag = "11")]
    pub positive_spans: Vec<BucketSpan>,
    #[prost(sint64, repeated, tag = "12")]
    pub positive_deltas: Vec<i64>,
    #[prost(int32, tag = "14")]
    pub reset_hint: i32,
    #[prost(int64, tag = "15")]
    pub timestamp: i64,
}

pub mod native_histogram {
    #[derive(Clone, PartialEq, prost::Oneof)]
    pub enum Count {
        #[prost(uint64, tag = "1")]
        CountInt(u64),
        #[prost(double, tag = "2")]
        CountFloat(f64),
    }

    #[derive(Clone, PartialEq, prost::Oneof)]
    pub enum ZeroCount {
        #[prost(uint64, tag = "6")]
        ZeroCountInt(u64),
        #[prost(double, tag = "7")]
        ZeroCountFloat(f64),
    }
}

#[derive(Clone, PartialEq, prost::Message)]
pub struct BucketSpan {
    #[prost(sint32, tag = "1")]
    pub offset: i32,
    #[prost(uint32, tag = "2")]
    pub length: u32,
}

#[cfg(test)]
mod tests {
    use super::*;

    /// Prometheus's upper bound of bucket `index` (model/histogram getBound): 2^(index/2^schema).
    fn upper(index: i32, schema: i32) -> f64 {
        2f64.powf(f64::from(index) / f64::from(1 << schema))
    }

    #[test]
    fn a_value_falls_in_the_bucket_prometheus_bounds_it_in() {
        for schema in [0, 3, 5, 8] {
            for &v in &[1e-6, 3.7e-5, 0.000_250, 0.001, 0.012_345, 0.5, 0.999, 1.0, 1.5, 2.0, 7.3] {
                let i = bucket_index(v, schema);
                let (lo, hi) = (upper(i - 1, schema), upper(i, schema));
                assert!(lo < v * (1.0 + 1e-12) && v <= hi * (1.0 + 1e-12), "{v} at {schema}: bucket {i} ({lo}, {hi}]");
            }
        }
        // Powers of two are upper bounds: 1 s closes bucket 0, 0.5 s bucket -2^schema.
        assert_eq!(bucket_index(1.0, 5), 0);
        assert_eq!(bucket_index(0.5, 5), -32);
        assert_eq!(bucket_index(2.0, 3), 8);
    }

    #[test]
    fn buckets_go_as_spans_and_deltas() {
        let buckets = BTreeMap::from([(-3, 2), (-2, 5), (0, 1), (4, 4), (5, 0)]);
        let (spans, deltas) = spans_and_deltas(&buckets);
        let spans: Vec<(i32, u32)> = spans.iter().map(|s| (s.offset, s.length)).collect();
        assert_eq!(spans, [(-3, 2), (1, 1), (3, 1)]);
        assert_eq!(deltas, [2, 3, -4, 3]);
    }

    fn point(index: u64, completed: u64, latencies_us: &[u64], resets: u64) -> IntervalPoint {
        let mut h = crate::histogram::new_histogram();
        for &us in latencies_us {
            h.record(us).unwrap();
        }
        let mut errors_by_kind = [0; ErrorKind::ALL.len()];
        errors_by_kind[ErrorKind::Reset.index()] = resets;
        IntervalPoint {
            index,
            length: Duration::from_secs(1),
            completed,
            errors_by_kind,
            latency: (!h.is_empty()).then_some(h),
        }
    }

    #[test]
    fn the_series_run_on_from_a_zero_and_decode_as_sent() {
        let start = SystemTime::UNIX_EPOCH + Duration::from_secs(1_800_000_000);
        let labels = SeriesLabels {
            run: "r1".into(),
            segment: "2/3".into(),
            host: "client-2".into(),
        };
        let mut series = Series::new(labels, start, Duration::from_secs(1));
        let later = start + Duration::from_secs(60);
        series.add(&point(0, 3, &[1_000, 1_000, 3_000], 0), later);
        series.add(&point(1, 2, &[1_000, 250_000], 1), later);
        let body = series.take_request().encode_compressed();
        let raw = snap::raw::Decoder::new().decompress_vec(&body).unwrap();
        let request: WriteRequest = prost::Message::decode(raw.as_slice()).unwrap();
        let find = |name: &str| {
            (request.timeseries.iter())
                .find(|ts| ts.labels[0].value == name)
                .unwrap_or_else(|| panic!("no {name} in {request:?}"))
        };
        let completed = find("srvprof_requests_completed_total");
        let names: Vec<&str> = completed.labels.iter().map(|l| l.name.as_str()).collect();
        assert_eq!(names, ["__name__", "host", "run", "segment"]);
        assert_eq!(completed.labels[3].value, "2/3");
        let points: Vec<(f64, i64)> = completed.samples.iter().map(|s| (s.value, s.timestamp)).collect();
        let t0 = 1_800_000_000_000;
        assert_eq!(points, [(0.0, t0), (3.0, t0 + 1_000), (5.0, t0 + 2_000)]);
        let resets = find("srvprof_request_errors_total");
        let names: Vec<&str> = resets.labels.iter().map(|l| l.name.as_str()).collect();
        assert_eq!(names, ["__name__", "host", "kind", "run", "segment"]);
        assert_eq!(resets.labels[2].value, "reset");
        let values: Vec<f64> = resets.samples.iter().map(|s| s.value).collect();
        assert_eq!(values, [0.0, 1.0]);
        let latency = find("srvprof_latency_seconds");
        assert_eq!(latency.histograms.len(), 3);
        let last = latency.histograms.last().unwrap();
        assert_eq!(last.count, Some(native_histogram::Count::CountInt(5)));
        assert!((last.sum - 0.256).abs() < 0.001, "{}", last.sum);
        assert_eq!(last.schema, SCHEMA);
        // 1 ms three times, 3 ms, 250 ms: three buckets far apart.
        let one_ms = bucket_index(0.001, SCHEMA);
        assert_eq!(last.positive_spans[0].offset, one_ms);
        assert_eq!(last.positive_spans.len(), 3);
        assert_eq!(last.positive_deltas, [3, -2, 0]);
        // Pushed points are gone: the next request holds only new ones.
        assert!(series.take_request().timeseries.is_empty());
    }

    #[test]
    fn a_receiver_that_is_not_there_is_a_failure_said_once() {
        // A port just freed: nothing listens there.
        let port = std::net::TcpListener::bind("127.0.0.1:0").unwrap().local_addr().unwrap().port();
        let url = format!("http://127.0.0.1:{port}/api/v1/write");
        let endpoint = crate::http_push::Endpoint::remote_write(&url).unwrap();
        let receiver = Receiver::new(endpoint, None, None).unwrap();
        let labels = SeriesLabels {
            run: "r".into(),
            segment: "1/1".into(),
            host: "h".into(),
        };
        let pusher = Pusher::start(receiver, labels, SystemTime::now(), Duration::from_secs(1)).unwrap();
        let tx = pusher.sender();
        tx.send(point(0, 1, &[100], 0)).unwrap();
        drop(tx);
        let summary = pusher.finish();
        assert_eq!((summary.pushes, summary.failed), (0, 1));
        let error = summary.error.unwrap();
        assert!(error.contains("cannot connect to 127.0.0.1"), "{error}");
    }
}
