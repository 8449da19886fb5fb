//! What every connection of a run shares (the target, the request, the window, the request
//! budget), and the policies the request loop applies to each connection slot: when a request may
//! begin, how long a failed slot waits before it connects again.

use crate::random::SplitMix64;
use std::cell::RefCell;
use std::net::SocketAddr;
use std::sync::Arc;
use std::sync::atomic::{AtomicBool, AtomicU64, Ordering};
use std::time::{Duration, Instant};

use tokio::time::sleep_until;

use crate::report::Engine;
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
/// no response served.
pub(crate) struct Backoff {
    streak: u32,
    rng: SplitMix64,
}

impl Backoff {
    pub(crate) fn new(index: usize) -> Backoff {
        // A seed per slot, so slots draw different jitter.
        Backoff {
            streak: 0,
            rng: SplitMix64(index as u64),
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
        let half = ceiling / 2;
        half + half.mul_f64(self.rng.uniform())
    }

    /// Failures in a row of this slot (for tests).
    #[cfg(test)]
    pub(crate) fn streak(&self) -> u32 {
        self.streak
    }
}

/// Everything the connections of all threads share; read-only except the request budget.
pub(crate) struct RunPlan {
    /// The request, or the list of them (`--targets`).
    pub targets: crate::targets::Targets,
    pub engine: Engine,
    pub addr: SocketAddr,
    pub keepalive: bool,
    pub timeout: Duration,
    pub connections: usize,
    /// HTTP/2 (`--http2`): requests go as streams, `streams` of them at once per connection.
    pub http2: bool,
    pub streams: usize,
    pub run_start: Instant,
    pub measure_start: Instant,
    /// End of the measured window (`-d`).
    pub measure_end: Option<Instant>,
    /// Total measured requests (`-n`).
    pub request_budget: Option<u64>,
    pub requests_claimed: AtomicU64,
    /// This host's share of a split run: slot i's k-th arrival is the one-host run's
    /// `segment.global(i + k * slots)`.
    pub segment: crate::segment::Segment,
    /// Open loop: requests per second over all connections, over time.
    pub rate: Option<crate::rate::RateSchedule>,
    pub ramp_up: Duration,
    pub stop: Arc<AtomicBool>,
    /// https: the TLS client every connection handshakes with.
    pub tls: Option<crate::tls::Tls>,
}

impl RunPlan {
    /// Request slots: each carries one request at a time (a connection, or an HTTP/2 stream).
    pub(crate) fn slots(&self) -> usize {
        self.connections * self.streams
    }

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

/// Sleep until `until` or the end of the run, whichever comes first; false when the run is over.
pub(crate) async fn pause(plan: &RunPlan, until: Instant) -> bool {
    let end = plan.measure_end.map_or(until, |end| end.min(until));
    if end > Instant::now() {
        sleep_until(end.into()).await;
    }
    !plan.over(Instant::now())
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
