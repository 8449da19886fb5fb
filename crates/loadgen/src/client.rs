//! The request loop: one task per connection, each on its worker thread's single-threaded
//! runtime, sharing that thread's recorder without locks.

use std::cell::RefCell;
use std::net::SocketAddr;
use std::pin::Pin;
use std::rc::Rc;
use std::sync::Arc;
use std::sync::atomic::{AtomicBool, AtomicU64, Ordering};
use std::time::{Duration, Instant};

use tokio::time::{Sleep, sleep_until};

use crate::http1::{Connection, Failure};
use crate::pacer::{Pacer, Schedule};
use crate::report::Engine;
use crate::report::ErrorKind;
use crate::request::RequestTemplate;
use crate::stats::ThreadRecorder;

/// First pause before replacing a connection that failed (refused, reset, closed by the server or
/// answered with garbage; not one the client timed out); doubled after each further failure of
/// the same connection slot, up to [`RECONNECT_BACKOFF_MAX`], each pause drawn in its upper half
/// (equal jitter) so slots that failed together do not come back together.
pub(crate) const RECONNECT_BACKOFF: Duration = Duration::from_millis(10);
/// Longest pause before a reconnect.
pub(crate) const RECONNECT_BACKOFF_MAX: Duration = Duration::from_secs(2);
/// A connection that carried a response and stayed open this long clears its slot's failure
/// streak: the next failure pauses [`RECONNECT_BACKOFF`] again.
pub(crate) const STABLE_CONNECTION: Duration = Duration::from_secs(10);

/// Reconnect policy of one connection slot: exponential backoff with jitter. A server that closes
/// or resets connections (nginx closes idle keep-alive connections whenever an accept leaves fewer
/// than 1/16 of `worker_connections` free) must not see each of them replaced at once: every
/// replacement is an accept that can close more, which was a storm of ~15,000 connections/s with
/// no response served (issue 21).
pub(crate) struct Backoff {
    streak: u32,
    rng: u64,
}

impl Backoff {
    pub(crate) fn new(index: usize) -> Backoff {
        // A nonzero seed per slot, so slots draw different jitter.
        let seed = (index as u64 + 1).wrapping_mul(0x9E37_79B9_7F4A_7C15) | 1;
        Backoff {
            streak: 0,
            rng: seed,
        }
    }

    /// A connection of this slot ended in a failure after living `lived` with `responses`
    /// answers: how long to wait before the slot connects again.
    pub(crate) fn after_failure(&mut self, lived: Duration, responses: u64) -> Duration {
        if responses > 0 && lived >= STABLE_CONNECTION {
            self.streak = 0;
        }
        let ceiling = RECONNECT_BACKOFF
            .saturating_mul(1u32 << self.streak.min(16))
            .min(RECONNECT_BACKOFF_MAX);
        if ceiling < RECONNECT_BACKOFF_MAX {
            self.streak += 1;
        }
        // xorshift64: no allocation, no shared state.
        self.rng ^= self.rng << 13;
        self.rng ^= self.rng >> 7;
        self.rng ^= self.rng << 17;
        let half = ceiling / 2;
        half + half.mul_f64((self.rng >> 11) as f64 / (1u64 << 53) as f64)
    }

    /// Failures in a row of this slot (for tests).
    #[cfg(test)]
    pub(crate) fn streak(&self) -> u32 {
        self.streak
    }
}

/// Everything the connections of all threads share; read-only except the request budget.
pub(crate) struct RunPlan {
    pub template: RequestTemplate,
    pub engine: Engine,
    pub addr: SocketAddr,
    pub keepalive: bool,
    pub timeout: Duration,
    pub connections: usize,
    pub run_start: Instant,
    pub measure_start: Instant,
    /// End of the measured window (`-d`).
    pub measure_end: Option<Instant>,
    /// Total measured requests (`-n`).
    pub request_budget: Option<u64>,
    pub requests_claimed: AtomicU64,
    /// Open loop: requests per second over all connections.
    pub rate: Option<f64>,
    pub ramp_up: Duration,
    pub stop: Arc<AtomicBool>,
}

impl RunPlan {
    /// Take one request from `-n`; false when all were taken.
    #[inline]
    fn claim(&self) -> bool {
        match self.request_budget {
            None => true,
            Some(limit) => self.requests_claimed.fetch_add(1, Ordering::Relaxed) < limit,
        }
    }

    #[inline]
    pub(crate) fn over(&self, now: Instant) -> bool {
        self.stop.load(Ordering::Relaxed) || self.measure_end.is_some_and(|end| now >= end)
    }
}

/// How a keep-alive connection ended.
pub(crate) enum ConnEnd {
    /// Open a new connection and go on.
    Reconnect,
    /// The run is over for this connection.
    Done,
    /// The connection failed: open a new one after the slot's backoff.
    Failed,
}

pub(crate) async fn connection(
    plan: Arc<RunPlan>,
    recorder: Rc<RefCell<ThreadRecorder>>,
    schedule: Option<Rc<Schedule>>,
    index: usize,
) {
    let ramp = plan
        .ramp_up
        .mul_f64(index as f64 / plan.connections.max(1) as f64);
    let start_at = plan.run_start + ramp;
    if start_at > Instant::now() {
        sleep_until(start_at.into()).await;
    }
    let mut pacer = Pacer::new(&plan, index, start_at, schedule);
    match (plan.engine, plan.keepalive) {
        (Engine::Builtin, true) => {
            let mut backoff = Backoff::new(index);
            while let ConnEnd::Reconnect =
                keepalive_connection(&plan, &recorder, &mut pacer, &mut backoff).await
            {}
        }
        (Engine::Builtin, false) => per_request_connections(&plan, &recorder, &mut pacer).await,
        (Engine::Hyper, true) => {
            let mut backoff = Backoff::new(index);
            while let ConnEnd::Reconnect = crate::hyper_client::keepalive_connection(
                &plan,
                &recorder,
                &mut pacer,
                &mut backoff,
            )
            .await
            {}
        }
        (Engine::Hyper, false) => {
            crate::hyper_client::per_request_connections(&plan, &recorder, &mut pacer).await
        }
    }
}

/// One TCP connection carrying requests back to back until it fails or the run ends.
async fn keepalive_connection(
    plan: &RunPlan,
    recorder: &RefCell<ThreadRecorder>,
    pacer: &mut Pacer,
    backoff: &mut Backoff,
) -> ConnEnd {
    if plan.over(Instant::now()) {
        return ConnEnd::Done;
    }
    // One timer per connection, pushed later for each request: extending a pending timer is
    // lock-free in tokio, registering a new one per request is not.
    let timer = sleep_until((Instant::now() + plan.timeout).into());
    tokio::pin!(timer);
    let connect_start = Instant::now();
    let mut conn = match open(plan.addr, timer.as_mut()).await {
        Ok(conn) => {
            recorder
                .borrow_mut()
                .connected(connect_start, connect_start.elapsed());
            conn
        }
        Err(kind) => {
            // A connection that cannot open is a request that could not be sent.
            let start = pacer.wait().await.unwrap_or(connect_start);
            let now = Instant::now();
            if plan.over(now) || !begin(plan, recorder, start) {
                return ConnEnd::Done;
            }
            let measured = start >= plan.measure_start;
            recorder.borrow_mut().failure(measured, now, kind, 0);
            pacer.advance();
            pause(plan, now + backoff.after_failure(Duration::ZERO, 0)).await;
            return ConnEnd::Reconnect;
        }
    };
    let mut opened_at = Instant::now();
    let request = plan.template.encoded();
    let head = plan.template.is_head();
    loop {
        let intended = pacer.wait().await;
        let now = Instant::now();
        let start = intended.unwrap_or(now);
        if plan.over(now) || !begin(plan, recorder, start) {
            return ConnEnd::Done;
        }
        pacer.advance();
        timer.as_mut().reset((now + plan.timeout).into());
        let read_before = conn.bytes_read;
        let mut outcome = tokio::select! {
            biased;
            outcome = conn.roundtrip(request, head) => outcome,
            _ = timer.as_mut() => Err(Failure::Kind(ErrorKind::ReadTimeout)),
        };
        if outcome == Err(Failure::Stale) {
            // The server had closed this idle connection: send the request once more on a new
            // one, after the slot's backoff (a server shedding idle connections must not see
            // them all replaced at once; the wait is part of this request's latency).
            recorder.borrow_mut().closed_idle();
            let lived = opened_at.elapsed();
            let wait = backoff.after_failure(lived, conn.responses);
            if !pause(plan, Instant::now() + wait).await {
                return ConnEnd::Done;
            }
            timer.as_mut().reset((Instant::now() + plan.timeout).into());
            match open(plan.addr, timer.as_mut()).await {
                Ok(fresh) => {
                    conn = fresh;
                    opened_at = Instant::now();
                    outcome = tokio::select! {
                        biased;
                        outcome = conn.roundtrip(request, head) => outcome,
                        _ = timer.as_mut() => Err(Failure::Kind(ErrorKind::ReadTimeout)),
                    };
                }
                Err(kind) => outcome = Err(Failure::Kind(kind)),
            }
        }
        let done = Instant::now();
        let measured = start >= plan.measure_start;
        let bytes = conn.bytes_read.saturating_sub(read_before);
        match outcome {
            Ok(response) => {
                recorder
                    .borrow_mut()
                    .response(measured, start, done, response.status, bytes);
                if !response.keep_alive {
                    return ConnEnd::Reconnect;
                }
            }
            Err(failure) => {
                let kind = match failure {
                    Failure::Kind(kind) => kind,
                    Failure::Stale => ErrorKind::Reset,
                };
                recorder.borrow_mut().failure(measured, done, kind, bytes);
                // The client gave up on a slow answer (--timeout): the server refused nothing,
                // so the next request goes at once, as -c asks.
                if kind != ErrorKind::ReadTimeout {
                    let lived = opened_at.elapsed();
                    pause(plan, done + backoff.after_failure(lived, conn.responses)).await;
                }
                return ConnEnd::Reconnect;
            }
        }
    }
}

/// Sleep until `until` or the end of the run, whichever comes first; false when the run is over.
pub(crate) async fn pause(plan: &RunPlan, until: Instant) -> bool {
    let end = plan.measure_end.map_or(until, |end| end.min(until));
    if end > Instant::now() {
        sleep_until(end.into()).await;
    }
    !plan.over(Instant::now())
}

/// `--no-keepalive`: a new TCP connection for every request; connect time is part of latency.
async fn per_request_connections(
    plan: &RunPlan,
    recorder: &RefCell<ThreadRecorder>,
    pacer: &mut Pacer,
) {
    // Reused for every request (see keepalive_connection).
    let timer = sleep_until((Instant::now() + plan.timeout).into());
    tokio::pin!(timer);
    let request = plan.template.encoded();
    let head = plan.template.is_head();
    let mut buffer = Some(Connection::new_buffer());
    loop {
        let intended = pacer.wait().await;
        let now = Instant::now();
        let start = intended.unwrap_or(now);
        if plan.over(now) || !begin(plan, recorder, start) {
            return;
        }
        pacer.advance();
        timer.as_mut().reset((now + plan.timeout).into());
        let buf = buffer.take().unwrap_or_else(Connection::new_buffer);
        let opened = tokio::select! {
            biased;
            opened = Connection::open_and_send(plan.addr, buf, request) => opened,
            _ = timer.as_mut() => Err(ErrorKind::ConnectTimeout),
        };
        let (outcome, bytes) = match opened {
            Err(kind) => (Err(kind), 0),
            Ok((mut conn, connected_at, sent)) => {
                recorder
                    .borrow_mut()
                    .connected(start, connected_at.saturating_duration_since(now));
                let outcome = tokio::select! {
                    biased;
                    outcome = conn.finish_request(&request[sent..], head) => outcome,
                    _ = timer.as_mut() => Err(ErrorKind::ReadTimeout),
                };
                let bytes = conn.bytes_read;
                buffer = Some(conn.into_buffer());
                (outcome, bytes)
            }
        };
        let done = Instant::now();
        let measured = start >= plan.measure_start;
        let mut rec = recorder.borrow_mut();
        match outcome {
            Ok(response) => rec.response(measured, start, done, response.status, bytes),
            Err(kind) => rec.failure(measured, done, kind, bytes),
        }
    }
}

/// Open a connection, giving up when `timer` fires.
async fn open(addr: SocketAddr, timer: Pin<&mut Sleep>) -> Result<Connection, ErrorKind> {
    tokio::select! {
        biased;
        opened = Connection::open(addr) => opened,
        _ = timer => Err(ErrorKind::ConnectTimeout),
    }
}

/// Count a request attempt; false when `-n` is used up.
#[inline]
pub(crate) fn begin(plan: &RunPlan, recorder: &RefCell<ThreadRecorder>, start: Instant) -> bool {
    if start >= plan.measure_start && !plan.claim() {
        return false;
    }
    recorder.borrow_mut().begin(start);
    true
}

/// How long requests in flight at the end of the run may take to finish before their connections
/// are dropped.
const DRAIN: Duration = Duration::from_secs(1);

/// Per-thread half of a run: this thread's connections on its own single-threaded runtime.
pub(crate) async fn run_thread_connections(
    plan: Arc<RunPlan>,
    recorder: Rc<RefCell<ThreadRecorder>>,
    connection_indices: Vec<usize>,
) {
    const TICK: Duration = Duration::from_millis(10);
    // Open loop: one timer for the thread's schedule (without a timerfd, tokio's timers).
    let schedule = plan.rate.and_then(|_| Schedule::new(plan.connections).ok());
    let timer_task = schedule
        .clone()
        .map(|schedule| tokio::task::spawn_local(schedule.run()));
    let mut tasks = tokio::task::JoinSet::new();
    for index in connection_indices {
        tasks.spawn_local(connection(
            plan.clone(),
            recorder.clone(),
            schedule.clone(),
            index,
        ));
    }
    loop {
        tokio::select! {
            joined = tasks.join_next() => if joined.is_none() { break },
            _ = tokio::time::sleep(TICK) => {}
        }
        let now = Instant::now();
        recorder.borrow_mut().tick(now);
        if plan.over(now) {
            // No connection begins another request now. Those in flight may finish for up to
            // DRAIN (still counted as unfinished: the window is over), so their connections
            // close after reading the answer, with a FIN. Aborted with the answer unread, each
            // would make the kernel send a reset: ~10,000 at the end of every -c 10000 run.
            let drain_until = now + DRAIN.min(plan.timeout);
            loop {
                tokio::select! {
                    joined = tasks.join_next() => if joined.is_none() { break },
                    _ = tokio::time::sleep_until(drain_until.into()) => break,
                }
            }
            tasks.abort_all();
            while tasks.join_next().await.is_some() {}
            break;
        }
    }
    if let Some(task) = timer_task {
        task.abort();
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn backoff_doubles_with_jitter_up_to_the_cap_and_clears_after_a_stable_connection() {
        let mut b = Backoff::new(7);
        let mut ceiling = RECONNECT_BACKOFF;
        for _ in 0..12 {
            let wait = b.after_failure(Duration::from_millis(1), 0);
            assert!(
                wait >= ceiling / 2 && wait <= ceiling,
                "{wait:?} vs {ceiling:?}"
            );
            ceiling = (ceiling * 2).min(RECONNECT_BACKOFF_MAX);
        }
        assert!(b.streak() > 0);
        // A short-lived connection with answers keeps the streak; a stable one clears it.
        assert!(b.after_failure(Duration::from_secs(1), 100) >= RECONNECT_BACKOFF_MAX / 2);
        assert!(b.after_failure(STABLE_CONNECTION, 1) <= RECONNECT_BACKOFF);
        // Slots draw different pauses.
        let (mut x, mut y) = (Backoff::new(1), Backoff::new(2));
        assert_ne!(
            x.after_failure(Duration::ZERO, 0),
            y.after_failure(Duration::ZERO, 0)
        );
    }
}
