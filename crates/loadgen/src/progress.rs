//! Responses so far, readable from another thread while the load runs (srvprof reads it at the
//! edges of its sampled windows, to relate what it traced to the requests served meanwhile).
//! One cache-line-padded counter per worker thread, written only by that thread with a plain
//! load and store (no locked instruction): no contention and no lock per request.
//! It also publishes when measurement starts, the origin of the timeline's interval grid, so a
//! watcher can sample on the same grid, and the measured figures so far as each interval of the
//! timeline closes (for a live status line).

use std::sync::OnceLock;
use std::sync::atomic::{AtomicU64, Ordering};

#[repr(align(64))]
#[derive(Default)]
struct Padded(AtomicU64);

/// One per run: pass it to [`crate::run_with_progress`] and read it from any thread.
#[derive(Default)]
pub struct Progress {
    per_thread: OnceLock<Box<[Padded]>>,
    /// CLOCK_MONOTONIC ns when measurement starts (after warmup and ramp-up); 0 until known.
    measure_start_ns: AtomicU64,
    /// The closed intervals' figures: 2xx responses, errors, p99 (us) of every latency so far,
    /// and how many intervals are closed.
    completed: AtomicU64,
    errors: AtomicU64,
    p99_us: AtomicU64,
    intervals: AtomicU64,
}

/// The measured figures over the intervals closed so far.
#[derive(Clone, Copy, Debug, Default, PartialEq, Eq)]
pub struct SoFar {
    pub completed: u64,
    pub errors: u64,
    pub p99_us: u64,
    /// Intervals of the timeline closed: the time these figures cover.
    pub intervals: u64,
}

impl Progress {
    pub(crate) fn init(&self, threads: usize) {
        let _ = self
            .per_thread
            .set((0..threads).map(|_| Padded::default()).collect());
    }

    pub(crate) fn set_measure_start_ns(&self, ns: u64) {
        self.measure_start_ns.store(ns, Ordering::Release);
    }

    /// When measurement starts (CLOCK_MONOTONIC ns, the clock of [`crate::monotonic_ns`] and of
    /// `bpf_ktime_get_ns`): the timeline's interval k covers `start + k * interval` onwards.
    /// None until the run has started (it is set before any request is sent).
    pub fn measure_start_ns(&self) -> Option<u64> {
        Some(self.measure_start_ns.load(Ordering::Acquire)).filter(|&ns| ns != 0)
    }

    /// One more response on worker `thread`; only that thread calls this with its index.
    #[inline]
    pub(crate) fn bump(&self, thread: usize) {
        if let Some(c) = self.per_thread.get().and_then(|c| c.get(thread)) {
            c.0.store(c.0.load(Ordering::Relaxed) + 1, Ordering::Relaxed);
        }
    }

    /// Publishes the figures of the intervals closed so far (by the one thread that closes them).
    pub(crate) fn publish(&self, so_far: SoFar) {
        self.completed.store(so_far.completed, Ordering::Relaxed);
        self.errors.store(so_far.errors, Ordering::Relaxed);
        self.p99_us.store(so_far.p99_us, Ordering::Relaxed);
        self.intervals.store(so_far.intervals, Ordering::Release);
    }

    /// The measured figures over the intervals closed so far.
    pub fn so_far(&self) -> SoFar {
        let intervals = self.intervals.load(Ordering::Acquire);
        SoFar {
            completed: self.completed.load(Ordering::Relaxed),
            errors: self.errors.load(Ordering::Relaxed),
            p99_us: self.p99_us.load(Ordering::Relaxed),
            intervals,
        }
    }

    /// Responses received in the measured window so far (any status), over all threads.
    pub fn responses(&self) -> u64 {
        self.per_thread
            .get()
            .map_or(0, |c| c.iter().map(|p| p.0.load(Ordering::Relaxed)).sum())
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn each_thread_counts_into_its_own_slot_and_the_sum_is_read_anywhere() {
        let p = std::sync::Arc::new(Progress::default());
        assert_eq!(p.responses(), 0);
        p.init(3);
        let handles: Vec<_> = (0..3)
            .map(|t| {
                let p = p.clone();
                std::thread::spawn(move || (0..1000).for_each(|_| p.bump(t)))
            })
            .collect();
        handles.into_iter().for_each(|h| h.join().unwrap());
        assert_eq!(p.responses(), 3000);
    }
}
