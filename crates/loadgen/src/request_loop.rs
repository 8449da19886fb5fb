//! The request loop, one for every engine: one task per connection slot, each on its worker
//! thread's single-threaded runtime, sharing that thread's recorder without locks. The loop owns
//! pacing, timeouts, recording, error counting and reconnects; the engine ([`Protocol`]) only
//! opens connections and carries requests on them.

use std::cell::RefCell;
use std::time::{Duration, Instant};

use tokio::time::sleep_until;

use crate::pacer::Pacer;
use crate::plan::{Backoff, RunPlan, begin, pause};
use crate::protocol::{Failure, Protocol};
use crate::report::ErrorKind;
use crate::request::RequestTemplate;
use crate::stats::{ThreadRecorder, Times};

/// How a keep-alive connection ended.
enum ConnEnd {
    /// Open a new connection and go on.
    Reconnect,
    /// The run is over for this connection.
    Done,
}

/// One request slot: requests one after another on its connection (a new one per request
/// without keep-alive, or after a failure), until the run is over.
pub(crate) async fn slot<P: Protocol>(
    plan: &RunPlan,
    recorder: &RefCell<ThreadRecorder>,
    pacer: &mut Pacer,
    index: usize,
    shared: &P::Shared,
) {
    if plan.keepalive {
        let mut backoff = Backoff::new(index);
        while let ConnEnd::Reconnect =
            keepalive_connection::<P>(plan, recorder, pacer, &mut backoff, shared).await
        {}
    } else {
        per_request_connections::<P>(plan, recorder, pacer, shared).await
    }
}

/// A request that may begin: moves the slot's schedule on, notes a send behind it, and picks
/// the request (its template and its index among the distinct ones).
#[inline]
fn next_request<'p>(
    plan: &'p RunPlan,
    recorder: &RefCell<ThreadRecorder>,
    pacer: &mut Pacer,
    intended: Option<Instant>,
    now: Instant,
) -> (&'p RequestTemplate, u32) {
    pacer.advance(plan);
    if let Some(intended) = intended {
        recorder.borrow_mut().sent(intended, now);
    }
    let picked = pacer.pick(plan);
    (&plan.targets.templates[picked], plan.targets.distinct[picked])
}

/// Count a connection `open` made for a request that started at `start`: its connect time from
/// `open_start` to `connected_at`, and its TLS handshake. `connected_at` None: an HTTP/2 stream
/// joined a connection another stream opened and counted. Returns whether it was new.
fn record_open<P: Protocol>(
    rec: &mut ThreadRecorder,
    conn: &P,
    start: Instant,
    open_start: Instant,
    connected_at: Option<Instant>,
) -> bool {
    let Some(connected_at) = connected_at else {
        return false;
    };
    rec.connected(start, connected_at.saturating_duration_since(open_start));
    if let Some(h) = conn.handshake() {
        rec.tls_handshake(start, h);
    }
    true
}

/// Open a connection, giving up when `timer` fires.
async fn open<P: Protocol>(
    plan: &RunPlan,
    shared: &P::Shared,
    spare: &mut Option<P::Spare>,
    eager: Option<&RequestTemplate>,
    timer: std::pin::Pin<&mut tokio::time::Sleep>,
) -> Result<(P, Option<Instant>), ErrorKind> {
    tokio::select! {
        biased;
        opened = P::open(plan, shared, spare, eager) => opened,
        _ = timer => Err(ErrorKind::ConnectTimeout),
    }
}

/// One connection carrying requests back to back until it fails or the run ends.
async fn keepalive_connection<P: Protocol>(
    plan: &RunPlan,
    recorder: &RefCell<ThreadRecorder>,
    pacer: &mut Pacer,
    backoff: &mut Backoff,
    shared: &P::Shared,
) -> ConnEnd {
    if plan.over(Instant::now()) {
        return ConnEnd::Done;
    }
    // One timer per connection, pushed later for each request: extending a pending timer is
    // lock-free in tokio, registering a new one per request is not.
    let timer = sleep_until((Instant::now() + plan.timeout).into());
    tokio::pin!(timer);
    let connect_start = Instant::now();
    let mut conn = match open::<P>(plan, shared, &mut None, None, timer.as_mut()).await {
        Ok((conn, connected_at)) => {
            let mut rec = recorder.borrow_mut();
            record_open(&mut rec, &conn, connect_start, connect_start, connected_at);
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
            let target = plan.targets.distinct[pacer.pick(plan)];
            recorder.borrow_mut().failure(measured, now, kind, 0, target);
            pacer.advance(plan);
            pause(plan, now + backoff.after_failure(Duration::ZERO, 0)).await;
            return ConnEnd::Reconnect;
        }
    };
    let mut opened_at = Instant::now();
    loop {
        let intended = pacer.wait().await;
        let now = Instant::now();
        let start = intended.unwrap_or(now);
        if plan.over(now) || !begin(plan, recorder, start) {
            return ConnEnd::Done;
        }
        let (request, target) = next_request(plan, recorder, pacer, intended, now);
        timer.as_mut().reset((now + plan.timeout).into());
        let mut read_before = conn.bytes_read();
        let mut outcome = tokio::select! {
            biased;
            outcome = conn.exchange(request) => outcome,
            _ = timer.as_mut() => Err(Failure::Kind(ErrorKind::ReadTimeout)),
        };
        if let Err(retry @ (Failure::Stale | Failure::Closed | Failure::Unprocessed { .. })) = outcome
        {
            if let Failure::Unprocessed { goaway } = retry {
                recorder.borrow_mut().h2_refused(goaway);
            }
            // The server had closed this idle connection (over HTTP/2: sent GOAWAY, or closed
            // it): send the request once more on a new one, after the slot's backoff (a server
            // shedding idle connections must not see them all replaced at once; the wait is
            // part of this request's latency).
            let stale = retry == Failure::Stale;
            if stale {
                let wait = backoff.after_failure(opened_at.elapsed(), conn.responses());
                if !pause(plan, Instant::now() + wait).await {
                    return ConnEnd::Done;
                }
            }
            let reopen_start = Instant::now();
            timer.as_mut().reset((reopen_start + plan.timeout).into());
            match open::<P>(plan, shared, &mut None, None, timer.as_mut()).await {
                Ok((fresh, connected_at)) => {
                    // Counted once per connection closed, by the slot that replaced it.
                    {
                        let mut rec = recorder.borrow_mut();
                        let new = record_open(&mut rec, &fresh, start, reopen_start, connected_at);
                        if new && stale {
                            rec.closed_idle();
                        }
                    }
                    conn = fresh;
                    opened_at = Instant::now();
                    read_before = 0;
                    outcome = tokio::select! {
                        biased;
                        outcome = conn.exchange(request) => outcome,
                        _ = timer.as_mut() => Err(Failure::Kind(ErrorKind::ReadTimeout)),
                    };
                }
                Err(kind) => {
                    if stale {
                        recorder.borrow_mut().closed_idle();
                    }
                    outcome = Err(Failure::Kind(kind));
                }
            }
        }
        let done = Instant::now();
        let measured = start >= plan.measure_start;
        let bytes = conn.bytes_read().saturating_sub(read_before);
        match outcome {
            Ok(answer) => {
                let times = Times {
                    start,
                    sent: intended.map(|_| now),
                    done,
                };
                recorder
                    .borrow_mut()
                    .response(measured, times, answer.status, bytes, target);
                if !answer.keep_alive {
                    return ConnEnd::Reconnect;
                }
            }
            Err(failure) => {
                let kind = failure.kind();
                recorder
                    .borrow_mut()
                    .failure(measured, done, kind, bytes, target);
                // The client gave up on a slow answer (--timeout), or an HTTP/2 server ended a
                // stream or its connection in order: nothing failed that a pause would spare,
                // so the next request goes at once, as -c asks.
                if !matches!(
                    kind,
                    ErrorKind::ReadTimeout | ErrorKind::GoAway | ErrorKind::StreamReset
                ) {
                    let wait = backoff.after_failure(opened_at.elapsed(), conn.responses());
                    pause(plan, done + wait).await;
                }
                return ConnEnd::Reconnect;
            }
        }
    }
}

/// `--no-keepalive`: a new connection for every request; connect time is part of latency.
async fn per_request_connections<P: Protocol>(
    plan: &RunPlan,
    recorder: &RefCell<ThreadRecorder>,
    pacer: &mut Pacer,
    shared: &P::Shared,
) {
    // Reused for every request (see keepalive_connection).
    let timer = sleep_until((Instant::now() + plan.timeout).into());
    tokio::pin!(timer);
    let mut spare = None;
    loop {
        let intended = pacer.wait().await;
        let now = Instant::now();
        let start = intended.unwrap_or(now);
        if plan.over(now) || !begin(plan, recorder, start) {
            return;
        }
        let (request, target) = next_request(plan, recorder, pacer, intended, now);
        timer.as_mut().reset((now + plan.timeout).into());
        let opened = open::<P>(plan, shared, &mut spare, Some(request), timer.as_mut()).await;
        let (outcome, bytes) = match opened {
            Err(kind) => (Err(kind), 0),
            Ok((mut conn, connected_at)) => {
                // Always a new connection here: nothing is shared without keep-alive.
                record_open(
                    &mut recorder.borrow_mut(),
                    &conn,
                    start,
                    now,
                    Some(connected_at.unwrap_or(now)),
                );
                let outcome = tokio::select! {
                    biased;
                    outcome = conn.exchange(request) => outcome.map_err(Failure::kind),
                    _ = timer.as_mut() => Err(ErrorKind::ReadTimeout),
                };
                let bytes = conn.bytes_read();
                conn.close(&mut spare);
                (outcome, bytes)
            }
        };
        let done = Instant::now();
        let measured = start >= plan.measure_start;
        let mut rec = recorder.borrow_mut();
        match outcome {
            Ok(answer) => {
                let times = Times {
                    start,
                    sent: intended.map(|_| now),
                    done,
                };
                rec.response(measured, times, answer.status, bytes, target)
            }
            Err(kind) => rec.failure(measured, done, kind, bytes, target),
        }
    }
}

