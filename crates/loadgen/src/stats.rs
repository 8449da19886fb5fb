//! Recording results: one `ThreadRecorder` per worker thread (no locks, no allocation per
//! request), interval histograms shipped once per interval to the `Collector`, which builds the
//! timeline and the run's total histogram.

use std::collections::BTreeMap;
use std::sync::mpsc::Sender;
use std::time::{Duration, Instant};

use hdrhistogram::Histogram;

use crate::histogram::{new_histogram, target_histogram};
use crate::report::{ErrorKind, LatencySummary, LoadRow, round3};
use crate::sys::CpuTime;

const STATUS_SLOTS: usize = 1000;
/// Open loop: a request sent later than this after its intended time fell behind the schedule.
/// The schedule's own wakeups are at most ~0.3 ms late (pacer.rs); anything later means the
/// request's slot was busy.
pub const LATE: Duration = Duration::from_millis(1);

#[inline]
fn micros(d: Duration) -> u64 {
    (d.as_nanos() / 1000) as u64
}

/// When a request started (its intended time in open loop), went out (open loop only) and
/// ended.
#[derive(Clone, Copy, Debug)]
pub struct Times {
    pub start: Instant,
    pub sent: Option<Instant>,
    pub done: Instant,
}

/// Distinct targets of a `--targets` list whose latency is kept apart (the rest are counted).
pub const TARGET_LATENCIES: usize = 100;

/// One distinct request of a `--targets` list, on one thread.
pub(crate) struct TargetTally {
    pub completed: u64,
    pub errors: u64,
    pub latency: Option<Histogram<u32>>,
}

/// One worker thread's interval, sent to the collector.
pub(crate) struct IntervalFlush {
    pub thread: usize,
    pub index: u64,
    /// None when no response completed in the interval.
    pub latency: Option<Histogram<u64>>,
    pub completed: u64,
    pub errors: u64,
    pub errors_by_kind: [u64; ErrorKind::ALL.len()],
    /// Every interval below this index is complete for this thread (u64::MAX when it finished).
    pub through: u64,
}

/// Whole-run counters of one worker thread.
pub(crate) struct ThreadTotals {
    pub sent: u64,
    pub completed: u64,
    pub errors: u64,
    /// Measured requests sent and not yet answered or failed.
    pub in_flight: u64,
    pub warmup_requests: u64,
    /// Warmup requests whose outcome arrived in the measured window: counted where they arrived
    /// (throughput, errors, the timeline), not in latency.
    pub carried_in: u64,
    pub bytes: u64,
    pub connections_opened: u64,
    /// Keep-alive connections the server closed while idle (the next request met EOF or RST
    /// before any byte of its answer).
    pub closed_idle: u64,
    pub status_codes: Vec<u64>,
    pub errors_by_kind: [u64; ErrorKind::ALL.len()],
    pub connect_latency: Histogram<u64>,
    /// https: handshakes of the connections opened in the window, those resumed, their times.
    pub tls_handshakes: u64,
    pub tls_resumed: u64,
    pub tls_latency: Histogram<u64>,
    /// Open loop: latency from each request's actual send (service time only, what a client
    /// that ignores its schedule reports), beside the intended-time latency of the intervals.
    pub service_latency: Histogram<u64>,
    /// Open loop: measured requests sent more than [`LATE`] after their intended time (their
    /// slot was still waiting for an earlier answer), and the latest of them.
    pub behind_schedule: u64,
    pub behind_max: Duration,
    /// Open loop: how late the measured requests of each latency were sent.
    pub late_by_latency: crate::late::LateByLatency,
    /// `--targets`: per distinct request, in the list's order (empty without a list).
    pub per_target: Vec<TargetTally>,
    /// HTTP/2: requests the server refused unprocessed and the client sent again, after a
    /// graceful GOAWAY and after REFUSED_STREAM.
    pub h2_refused_goaway: u64,
    pub h2_refused_stream: u64,
    pub cpu: CpuTime,
    pub cpu_wall: Duration,
    pub end: Instant,
}

pub(crate) struct ThreadRecorder {
    thread: usize,
    measure_start: Instant,
    /// Outcomes after this instant are left unfinished: the window is over.
    measure_end: Option<Instant>,
    interval: Duration,
    current_index: u64,
    current_end: Instant,
    latency: Histogram<u64>,
    interval_completed: u64,
    interval_errors: u64,
    interval_errors_by_kind: [u64; ErrorKind::ALL.len()],
    cpu_at_start: Option<(CpuTime, Instant)>,
    tx: Sender<IntervalFlush>,
    progress: std::sync::Arc<crate::Progress>,
    pub totals: ThreadTotals,
}

impl ThreadRecorder {
    pub fn new(
        thread: usize,
        measure_start: Instant,
        measure_end: Option<Instant>,
        interval: Duration,
        tx: Sender<IntervalFlush>,
        progress: std::sync::Arc<crate::Progress>,
    ) -> ThreadRecorder {
        ThreadRecorder {
            thread,
            measure_start,
            measure_end,
            interval,
            current_index: 0,
            current_end: measure_start + interval,
            latency: new_histogram(),
            interval_completed: 0,
            interval_errors: 0,
            interval_errors_by_kind: [0; ErrorKind::ALL.len()],
            cpu_at_start: None,
            tx,
            progress,
            totals: ThreadTotals {
                sent: 0,
                completed: 0,
                errors: 0,
                in_flight: 0,
                warmup_requests: 0,
                carried_in: 0,
                bytes: 0,
                connections_opened: 0,
                closed_idle: 0,
                status_codes: vec![0; STATUS_SLOTS],
                errors_by_kind: [0; ErrorKind::ALL.len()],
                connect_latency: new_histogram(),
                tls_handshakes: 0,
                tls_resumed: 0,
                tls_latency: new_histogram(),
                service_latency: new_histogram(),
                behind_schedule: 0,
                behind_max: Duration::ZERO,
                late_by_latency: crate::late::LateByLatency::new(),
                per_target: Vec::new(),
                h2_refused_goaway: 0,
                h2_refused_stream: 0,
                cpu: CpuTime::default(),
                cpu_wall: Duration::ZERO,
                end: measure_start,
            },
        }
    }

    /// A request attempt starts at `start` (its intended time in open loop). Returns whether it
    /// belongs to the measured window.
    #[inline]
    pub fn begin(&mut self, start: Instant) -> bool {
        if start < self.measure_start {
            self.totals.warmup_requests += 1;
            false
        } else {
            self.totals.sent += 1;
            self.totals.in_flight += 1;
            true
        }
    }

    /// Open loop: a measured request intended for `intended` went out at `sent`.
    #[inline]
    pub fn sent(&mut self, intended: Instant, sent: Instant) {
        let behind = sent.saturating_duration_since(intended);
        if behind > LATE && intended >= self.measure_start {
            self.totals.behind_schedule += 1;
            self.totals.behind_max = self.totals.behind_max.max(behind);
        }
    }

    /// Count requests per distinct target of a `--targets` list (`targets` of them).
    pub fn per_target(&mut self, targets: usize) {
        self.totals.per_target = (0..targets)
            .map(|i| TargetTally {
                completed: 0,
                errors: 0,
                latency: (i < TARGET_LATENCIES).then(target_histogram),
            })
            .collect();
    }

    /// A complete answer to a request of `target` (its index among the distinct requests).
    #[inline]
    pub fn response(&mut self, measured: bool, t: Times, status: u16, bytes: u64, target: u32) {
        let now = t.done;
        if !self.arrived_in_window(measured, now) {
            return;
        }
        self.roll(now);
        self.progress.bump(self.thread);
        let ok = (200..300).contains(&status);
        if measured {
            self.totals.in_flight -= 1;
            let us = micros(now - t.start).max(1);
            self.latency.saturating_record(us);
            if let Some(sent) = t.sent {
                self.totals
                    .service_latency
                    .saturating_record(micros(now - sent).max(1));
                let late = micros(sent.saturating_duration_since(t.start));
                self.totals.late_by_latency.record(us, late);
            }
            if let Some(tally) = self.totals.per_target.get_mut(target as usize)
                && let Some(h) = &mut tally.latency
            {
                h.saturating_record(us);
            }
        } else {
            self.totals.carried_in += 1;
        }
        if let Some(tally) = self.totals.per_target.get_mut(target as usize) {
            if ok {
                tally.completed += 1;
            } else {
                tally.errors += 1;
            }
        }
        self.totals.bytes += bytes;
        self.totals.status_codes[(status as usize).min(STATUS_SLOTS - 1)] += 1;
        if ok {
            self.totals.completed += 1;
            self.interval_completed += 1;
        } else {
            self.count_error(ErrorKind::Non2xx);
        }
    }

    #[inline]
    pub fn failure(
        &mut self,
        measured: bool,
        now: Instant,
        kind: ErrorKind,
        bytes: u64,
        target: u32,
    ) {
        if !self.arrived_in_window(measured, now) {
            return;
        }
        if let Some(tally) = self.totals.per_target.get_mut(target as usize) {
            tally.errors += 1;
        }
        self.roll(now);
        self.progress.bump(self.thread);
        if measured {
            self.totals.in_flight -= 1;
        } else {
            self.totals.carried_in += 1;
        }
        self.totals.bytes += bytes;
        self.count_error(kind);
    }

    /// The server had closed an idle keep-alive connection (counted for the whole run, warmup
    /// included: it explains reconnects whenever they happen).
    #[inline]
    pub fn closed_idle(&mut self) {
        self.totals.closed_idle += 1;
    }

    #[inline]
    pub fn connected(&mut self, start: Instant, took: Duration) {
        if start >= self.measure_start {
            self.totals.connections_opened += 1;
            self.totals
                .connect_latency
                .saturating_record(micros(took).max(1));
        }
    }

    /// HTTP/2: the server refused a request unprocessed (see `Failure::Unprocessed`); it goes
    /// again (counted for the whole run: it explains the extra connections and latency).
    #[inline]
    pub fn h2_refused(&mut self, goaway: bool) {
        if goaway {
            self.totals.h2_refused_goaway += 1;
        } else {
            self.totals.h2_refused_stream += 1;
        }
    }

    /// A TLS handshake done for a connection opened at `start`.
    #[inline]
    pub fn tls_handshake(&mut self, start: Instant, h: crate::tls::Handshake) {
        if start >= self.measure_start {
            self.totals.tls_handshakes += 1;
            self.totals.tls_resumed += u64::from(h.resumed);
            self.totals
                .tls_latency
                .saturating_record(micros(h.took).max(1));
        }
    }

    /// Whether an outcome arriving at `now` counts: every outcome inside the measured window,
    /// whenever its request started (one sent in the warmup is carried in), so an interval's
    /// count is what arrived in it. With -c 10,000 and 1 s answers, counting only requests sent
    /// in the window left the first interval empty while the server answered 10,000 a second.
    #[inline]
    fn arrived_in_window(&self, measured: bool, now: Instant) -> bool {
        (measured || now >= self.measure_start) && !self.after_window(now)
    }

    #[inline]
    fn after_window(&self, now: Instant) -> bool {
        self.measure_end.is_some_and(|end| now >= end)
    }

    fn count_error(&mut self, kind: ErrorKind) {
        self.totals.errors += 1;
        self.totals.errors_by_kind[kind.index()] += 1;
        self.interval_errors += 1;
        self.interval_errors_by_kind[kind.index()] += 1;
    }

    /// Close the intervals that ended before `now`.
    #[inline]
    pub fn roll(&mut self, now: Instant) {
        if now >= self.current_end {
            self.roll_slow(now);
        }
    }

    #[cold]
    fn roll_slow(&mut self, now: Instant) {
        let index = (now.saturating_duration_since(self.measure_start).as_nanos()
            / self.interval.as_nanos().max(1)) as u64;
        self.flush(index);
        self.current_index = index;
        self.current_end = self.measure_start + self.interval * (index as u32 + 1);
    }

    fn flush(&mut self, through: u64) {
        let latency = if self.latency.is_empty() {
            None
        } else {
            Some(std::mem::replace(&mut self.latency, new_histogram()))
        };
        // The collector outlives every worker; a send error only means the run is being torn down.
        let _ = self.tx.send(IntervalFlush {
            thread: self.thread,
            index: self.current_index,
            latency,
            completed: std::mem::take(&mut self.interval_completed),
            errors: std::mem::take(&mut self.interval_errors),
            errors_by_kind: std::mem::take(&mut self.interval_errors_by_kind),
            through,
        });
    }

    /// Called every tick: starts CPU accounting once measurement begins, closes idle intervals.
    pub fn tick(&mut self, now: Instant) {
        if self.cpu_at_start.is_none() && now >= self.measure_start {
            self.cpu_at_start = Some((CpuTime::of_current_thread(), now));
        }
        if now >= self.measure_start {
            self.roll(now);
        }
    }

    /// Last flush; the thread's totals stay in `self.totals`.
    pub fn finish(&mut self, now: Instant) {
        if let Some((cpu, at)) = self.cpu_at_start {
            self.totals.cpu = CpuTime::of_current_thread().since(cpu);
            self.totals.cpu_wall = now.saturating_duration_since(at);
        }
        self.totals.end = now;
        self.flush(u64::MAX);
    }
}

#[derive(Default)]
struct IntervalAccum {
    latency: Option<Histogram<u64>>,
    completed: u64,
    errors: u64,
    errors_by_kind: [u64; ErrorKind::ALL.len()],
}

/// Merges the worker threads' intervals into the timeline and the total latency histogram.
pub(crate) struct Collector {
    interval: Duration,
    /// Per thread: every interval below this index has arrived.
    through: Vec<u64>,
    pending: BTreeMap<u64, IntervalAccum>,
    pub timeline: Vec<LoadRow>,
    pub latency: Histogram<u64>,
    /// Each interval's histogram, kept for `--hdr-log` when it is Some.
    pub interval_latency: Option<crate::hdr_log::IntervalLatency>,
    /// `--remote-write`: each closed interval goes to the pushing thread.
    pub remote_write: Option<Sender<crate::remote_write::IntervalPoint>>,
    /// The measured window's length when known (-d, then the run's end): an interval past it is
    /// not pushed, and the last one is pushed as long as the window left it.
    pub window: Option<Duration>,
    completed: u64,
    errors: u64,
}

impl Collector {
    pub fn new(threads: usize, interval: Duration) -> Collector {
        Collector {
            interval,
            through: vec![0; threads],
            pending: BTreeMap::new(),
            timeline: Vec::new(),
            latency: new_histogram(),
            interval_latency: None,
            remote_write: None,
            window: None,
            completed: 0,
            errors: 0,
        }
    }

    /// The figures of the intervals closed so far.
    pub fn so_far(&self) -> crate::progress::SoFar {
        crate::progress::SoFar {
            completed: self.completed,
            errors: self.errors,
            p99_us: match self.latency.len() {
                0 => 0,
                _ => self.latency.value_at_quantile(0.99),
            },
            intervals: self.timeline.len() as u64,
        }
    }

    pub fn add(&mut self, flush: IntervalFlush) {
        let acc = self.pending.entry(flush.index).or_default();
        acc.completed += flush.completed;
        acc.errors += flush.errors;
        for (sum, n) in acc.errors_by_kind.iter_mut().zip(flush.errors_by_kind) {
            *sum += n;
        }
        if let Some(h) = flush.latency {
            match &mut acc.latency {
                Some(total) => total.add(&h).expect("same histogram bounds"),
                None => acc.latency = Some(h),
            }
        }
        let slot = &mut self.through[flush.thread];
        *slot = (*slot).max(flush.through);
        let complete_below = self.through.iter().copied().min().unwrap_or(0);
        while let Some(entry) = self.pending.first_entry() {
            if *entry.key() >= complete_below {
                break;
            }
            let (index, acc) = entry.remove_entry();
            self.close(index, acc);
        }
    }

    fn close(&mut self, index: u64, acc: IntervalAccum) {
        // Intervals nobody reported (a stalled server) still appear, with zeros.
        while (self.timeline.len() as u64) < index {
            let i = self.timeline.len() as u64;
            self.timeline.push(self.entry(i, &IntervalAccum::default()));
        }
        let entry = self.entry(index, &acc);
        self.timeline.push(entry);
        self.completed += acc.completed;
        self.errors += acc.errors;
        let begin = self.interval * index as u32;
        let length = match self.window {
            Some(window) => window.saturating_sub(begin).min(self.interval),
            None => self.interval,
        };
        if let Some(tx) = &self.remote_write
            && !length.is_zero()
        {
            // The pusher may have ended (a panic): its summary says so, the run goes on.
            let _ = tx.send(crate::remote_write::IntervalPoint {
                index,
                length,
                completed: acc.completed,
                errors_by_kind: acc.errors_by_kind,
                latency: acc.latency.clone(),
            });
        }
        if let Some(h) = acc.latency {
            if let Some(kept) = &mut self.interval_latency {
                kept.keep(index, &h);
            }
            self.latency.add(&h).expect("same histogram bounds");
        }
    }

    fn entry(&self, index: u64, acc: &IntervalAccum) -> LoadRow {
        // The run's own summary, over this interval's histogram: one percentile path.
        let latency = acc
            .latency
            .as_ref()
            .map(LatencySummary::from_histogram)
            .unwrap_or_default();
        let secs = self.interval.as_secs_f64();
        LoadRow {
            t_s: round3(index as f64 * secs),
            completed: acc.completed,
            errors: acc.errors,
            p50_us: latency.p50,
            p99_us: latency.p99,
            max_us: latency.max,
            throughput_rps: round3(acc.completed as f64 / secs),
        }
    }

    /// Close every interval and trim the timeline to the measured window.
    pub fn finish(&mut self, window: Duration) {
        self.window = Some(window);
        let pending = std::mem::take(&mut self.pending);
        for (index, acc) in pending {
            self.close(index, acc);
        }
        let secs = self.interval.as_secs_f64();
        let wanted = (window.as_secs_f64() / secs).ceil().max(1.0) as usize;
        while self.timeline.len() < wanted {
            let i = self.timeline.len() as u64;
            self.timeline.push(self.entry(i, &IntervalAccum::default()));
        }
        // A tick at the very end of the window may open one more, empty, interval.
        while self.timeline.len() > wanted
            && self
                .timeline
                .last()
                .is_some_and(|e| e.completed == 0 && e.errors == 0)
        {
            self.timeline.pop();
        }
        // The last interval may be shorter than the others.
        if let Some(last) = self.timeline.last_mut() {
            let len = window.as_secs_f64() - last.t_s;
            if len > 0.0 && len < secs {
                last.throughput_rps = round3(last.completed as f64 / len);
            }
        }
    }
}
