//! Open loop: each connection's requests go out on a fixed schedule, and latency counts from the
//! intended send time. A connection that is early waits in its thread's `Schedule`; one timerfd
//! per thread, armed for the earliest waiting connection, wakes each at its time. tokio's timers
//! round every deadline up to the next millisecond, and in an open loop that lateness would be
//! counted as latency (about 1 ms against a server answering in 60 µs); a timerfd fires to the
//! microsecond, and one per thread costs a system call per wakeup, not a timer per request.

use std::cell::RefCell;
use std::cmp::Reverse;
use std::collections::BinaryHeap;
use std::io;
use std::os::fd::{AsRawFd, FromRawFd, OwnedFd};
use std::rc::Rc;
use std::task::{Poll, Waker};
use std::time::{Duration, Instant};

use tokio::io::unix::AsyncFd;

use crate::plan::RunPlan;

/// Send times closer than this share one wakeup, so each request goes out less than this (plus
/// the machine's wakeup latency, 80-170 µs on the VMs measured here) after its intended time.
/// Measured with 50 connections on one thread against nginx: at 1,000 req/s p50 287 µs where
/// tokio's timers gave 921 µs; the price is the wakeups, 34 instead of 16 µs of CPU per request
/// at 10,000 req/s and 14 instead of 8 at 40,000; from 80,000 req/s both cost the same.
const COALESCE: Duration = Duration::from_micros(100);

/// When each request of one request slot (a connection, or an HTTP/2 stream) should go out.
pub(crate) struct Pacer {
    /// Open loop: the intended time of the slot's next request, that request's number over all
    /// slots (slot i sends requests i, i + slots, i + 2 slots...; a segment's numbers, dealt out
    /// of the one-host schedule), and the instant the rate's
    /// schedule counts from for this slot (the run's start, later for a slot that began late).
    next: Option<(Instant, u64, Instant)>,
    schedule: Option<(Rc<Schedule>, usize)>,
    /// The slot's generator for `--targets-order random`.
    rng: crate::random::SplitMix64,
}

impl Pacer {
    pub(crate) fn new(
        plan: &RunPlan,
        index: usize,
        started: Instant,
        schedule: Option<Rc<Schedule>>,
    ) -> Pacer {
        let next = plan.rate.as_ref().map(|rate| {
            // Slots' first requests are spread over the first slots' worth of the schedule, so
            // it is even, not bursty; a slot that starts later (--ramp-up) shifts its own.
            let due = plan.run_start + rate.due(plan.segment.global(index as u64) as f64);
            let origin = plan.run_start + started.saturating_duration_since(due);
            (due.max(started), index as u64, origin)
        });
        Pacer {
            next,
            schedule: schedule.map(|s| (s, index)),
            rng: plan.targets.rng_for(plan.segment.global(index as u64) as usize),
        }
    }

    /// The next request's template, by its index in the plan's list.
    #[inline]
    pub(crate) fn pick(&mut self, plan: &RunPlan) -> usize {
        plan.targets.pick(&mut self.rng)
    }

    /// Wait for the next intended send time; returns when the request starts (its latency
    /// origin): the intended time in open loop, so a stalled server shows in the percentiles.
    #[inline]
    pub(crate) async fn wait(&self) -> Option<Instant> {
        let (at, _, _) = self.next?;
        if at > Instant::now() {
            match &self.schedule {
                Some((schedule, slot)) => schedule.wait_until(*slot, at).await,
                // No timerfd (cannot happen on Linux short of running out of descriptors).
                None => tokio::time::sleep_until(at.into()).await,
            }
        }
        Some(at)
    }

    #[inline]
    pub(crate) fn advance(&mut self, plan: &RunPlan) {
        if let (Some((at, k, origin)), Some(rate)) = (&mut self.next, &plan.rate) {
            *k += plan.slots() as u64;
            *at = *origin + rate.due(plan.segment.global(*k) as f64);
        }
    }
}

/// One thread's waiting connections and the timer that wakes them.
pub(crate) struct Schedule {
    state: RefCell<Waiting>,
    timer: AsyncFd<OwnedFd>,
    /// The same moment on both clocks, to turn an `Instant` into a CLOCK_MONOTONIC deadline.
    origin: (Instant, u64),
}

struct Waiting {
    /// (send time, slot) of every waiting connection, earliest first.
    queue: BinaryHeap<Reverse<(Instant, usize)>>,
    /// Per slot (connection index): the time it waits for and its task's waker.
    slots: Vec<Option<(Instant, Waker)>>,
    /// The deadline the timerfd is armed for.
    armed: Option<Instant>,
}

impl Schedule {
    /// A schedule for connection indices below `connections`; must be created inside the
    /// thread's runtime (the timerfd is registered with its reactor).
    pub(crate) fn new(connections: usize) -> io::Result<Rc<Schedule>> {
        // SAFETY: plain timerfd_create; the descriptor is owned right after.
        let fd = unsafe {
            libc::timerfd_create(
                libc::CLOCK_MONOTONIC,
                libc::TFD_NONBLOCK | libc::TFD_CLOEXEC,
            )
        };
        if fd < 0 {
            return Err(io::Error::last_os_error());
        }
        // SAFETY: fd is a fresh descriptor nobody else owns.
        let fd = unsafe { OwnedFd::from_raw_fd(fd) };
        // `register_with_interest` replaces it from tokio 1.54; the workspace accepts 1.40. The fd
        // is owned by the AsyncFd and never closed or replaced behind its back.
        #[allow(deprecated)]
        let timer = AsyncFd::with_interest(fd, tokio::io::Interest::READABLE)?;
        Ok(Rc::new(Schedule {
            state: RefCell::new(Waiting {
                queue: BinaryHeap::with_capacity(connections),
                slots: (0..connections).map(|_| None).collect(),
                armed: None,
            }),
            timer,
            origin: (Instant::now(), crate::sys::monotonic_ns()),
        }))
    }

    /// Park the calling task until `at`.
    async fn wait_until(&self, slot: usize, at: Instant) {
        std::future::poll_fn(|cx| {
            let mut waiting = self.state.borrow_mut();
            if Instant::now() >= at {
                if waiting.slots[slot].as_ref().is_some_and(|(t, _)| *t == at) {
                    waiting.slots[slot] = None;
                }
                return Poll::Ready(());
            }
            match &mut waiting.slots[slot] {
                // Polled again while waiting: keep the entry, refresh the waker if it changed.
                Some((t, waker)) if *t == at => {
                    if !waker.will_wake(cx.waker()) {
                        *waker = cx.waker().clone();
                    }
                    return Poll::Pending;
                }
                entry => *entry = Some((at, cx.waker().clone())),
            }
            waiting.queue.push(Reverse((at, slot)));
            if waiting.armed.is_none_or(|armed| at < armed) {
                waiting.armed = Some(at);
                self.arm(at);
            }
            Poll::Pending
        })
        .await
    }

    /// Wake every connection whose time has come, then arm the timer for the next one.
    fn wake_due(&self) {
        let now = Instant::now();
        let mut waiting = self.state.borrow_mut();
        while let Some(&Reverse((at, slot))) = waiting.queue.peek() {
            if at > now {
                break;
            }
            waiting.queue.pop();
            // An entry whose slot moved on (its task was dropped and nothing waits) is stale.
            if let Some((t, _)) = &waiting.slots[slot]
                && *t == at
                && let Some((_, waker)) = waiting.slots[slot].take()
            {
                waker.wake();
            }
        }
        waiting.armed = waiting.queue.peek().map(|&Reverse((at, _))| at);
        if let Some(at) = waiting.armed {
            self.arm(at);
        }
    }

    /// Set the timerfd to fire at `at` (absolute CLOCK_MONOTONIC), rounded up to the wakeup grid.
    fn arm(&self, at: Instant) {
        let (origin, origin_ns) = self.origin;
        let grid = COALESCE.as_nanos() as u64;
        let ns = match at.checked_duration_since(origin) {
            Some(after) => {
                origin_ns.saturating_add((after.as_nanos() as u64).div_ceil(grid) * grid)
            }
            None => origin_ns.saturating_sub(origin.duration_since(at).as_nanos() as u64),
        }
        .max(1); // 0 would disarm the timer.
        let spec = libc::itimerspec {
            it_interval: libc::timespec {
                tv_sec: 0,
                tv_nsec: 0,
            },
            it_value: libc::timespec {
                tv_sec: (ns / 1_000_000_000) as _, // the field's own time_t (libc deprecates the alias on musl)
                tv_nsec: (ns % 1_000_000_000) as libc::c_long,
            },
        };
        // SAFETY: spec is a valid itimerspec; the old value is not asked for.
        unsafe {
            libc::timerfd_settime(
                self.timer.get_ref().as_raw_fd(),
                libc::TFD_TIMER_ABSTIME,
                &spec,
                std::ptr::null_mut(),
            )
        };
    }

    /// The thread's timer task: runs until the runtime drops it.
    pub(crate) async fn run(self: Rc<Schedule>) {
        loop {
            let Ok(mut ready) = self.timer.readable().await else {
                return;
            };
            let mut expirations = [0u8; 8];
            // SAFETY: reads at most 8 bytes into the buffer we own.
            let n = unsafe {
                libc::read(
                    self.timer.get_ref().as_raw_fd(),
                    expirations.as_mut_ptr().cast(),
                    expirations.len(),
                )
            };
            // Read or not (EAGAIN), the next expiry is a new edge: wait for it.
            ready.clear_ready();
            if n > 0 {
                self.wake_due();
            }
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use std::cell::RefCell;

    /// Connections wake in the order of their send times, never before them, and less than
    /// the coalescing grid (plus scheduling noise) after.
    #[test]
    fn waiters_wake_in_order_never_early() {
        let runtime = tokio::runtime::Builder::new_current_thread()
            .enable_all()
            .build()
            .unwrap();
        let local = tokio::task::LocalSet::new();
        let woke = local.block_on(&runtime, async {
            let schedule = Schedule::new(4).unwrap();
            let timer = tokio::task::spawn_local(schedule.clone().run());
            let start = Instant::now();
            let woke = Rc::new(RefCell::new(Vec::new()));
            let mut tasks = Vec::new();
            for (slot, ms) in [(0, 30u64), (1, 10), (2, 20), (3, 10)] {
                let (schedule, woke) = (schedule.clone(), woke.clone());
                let at = start + Duration::from_millis(ms);
                tasks.push(tokio::task::spawn_local(async move {
                    schedule.wait_until(slot, at).await;
                    woke.borrow_mut().push((slot, at, Instant::now()));
                }));
            }
            for task in tasks {
                task.await.unwrap();
            }
            timer.abort();
            Rc::try_unwrap(woke).unwrap().into_inner()
        });
        let order: Vec<usize> = woke.iter().map(|(slot, _, _)| *slot).collect();
        assert!(order == [1, 3, 2, 0] || order == [3, 1, 2, 0], "{order:?}");
        for (slot, at, now) in woke {
            assert!(now >= at, "slot {slot} woke early");
            let late = now - at;
            assert!(
                late < COALESCE + Duration::from_millis(20),
                "slot {slot} late by {late:?}"
            );
        }
    }
}
