//! A worker pool too small for its load: requests handed to it wait for a free worker. No
//! thread sleeps in that queue of the server's own (a user-space list), so its time is what the
//! threads that hand the work wait for it to come back beyond what the workers spent on it.

use super::split::Cost;
use super::{Place, Resource, TailPart};
use crate::kernel_report::ThreadReport;

/// A pool whose workers were busy (on a CPU, waiting for one, or blocked on the work) at least
/// this share of their time makes requests queue for them; a pool mostly parked makes none,
/// and its hand-offs' own latency (a wakeup each) is no queue.
pub const POOL_BUSY: f64 = 0.5;

/// The time requests spent handed to a pool, seen from both sides (µs over the measured span).
#[derive(Clone, Debug, Default, PartialEq)]
pub struct Handoffs {
    /// The threads that hand work over and wait for it (a connection's thread), by name, and
    /// their waits for it to come back (a condition variable's, parked: `Idle`).
    pub handing: Vec<String>,
    pub waited_us: f64,
    /// The pool's threads by name, how many of them, and their time on the work: CPU, run
    /// queue, and their waits other than for the next job.
    pub workers: Vec<String>,
    pub worker_threads: usize,
    pub busy_us: f64,
    /// The measured span (µs).
    pub span_us: f64,
}

impl Handoffs {
    /// The pool of `workers` over a span of `span_s`, with their CPU and run-queue time from
    /// the server's `threads`; their waits and the handing threads' are added with add_wait.
    pub fn new(workers: Vec<String>, span_s: f64, threads: &[ThreadReport]) -> Handoffs {
        let mine = || threads.iter().filter(|t| workers.contains(&t.comm));
        Handoffs {
            worker_threads: mine().count(),
            busy_us: mine()
                .map(|t| (t.oncpu_ns.max(t.user_ns + t.sys_ns) + t.runq_ns) as f64 / 1e3)
                .sum(),
            span_us: span_s * 1e6,
            workers,
            ..Default::default()
        }
    }

    /// A request thread's off-CPU time (`us`) in a wait on `resource`: a worker's wait on the
    /// work is busy time; another thread's parked wait is one for work it handed over.
    pub fn add_wait(&mut self, thread: &str, resource: Resource, us: f64) {
        let worker = self.workers.iter().any(|w| w == thread);
        match resource {
            Resource::Idle if !worker => {
                self.waited_us += us;
                if let Err(at) = self.handing.binary_search_by(|h| h.as_str().cmp(thread)) {
                    self.handing.insert(at, thread.to_string());
                }
            }
            Resource::Idle | Resource::Work | Resource::Preempted => {}
            _ if worker => self.busy_us += us,
            _ => {}
        }
    }

    /// The share of the workers' time they were busy.
    pub fn busy_share(&self) -> f64 {
        self.busy_us / (self.worker_threads.max(1) as f64 * self.span_us).max(1.0)
    }
}

/// The queue for a free worker, a part of its own when the pool was busy POOL_BUSY of the time
/// and the handing threads waited longer than the workers worked: its time per request over
/// `requests`, held by the pool ("2 worker threads, busy 93% of the time").
pub fn pool_queue(h: &Handoffs, requests: u64) -> Option<Cost> {
    let queued_us = h.waited_us - h.busy_us;
    if h.workers.is_empty() || requests == 0 || h.busy_share() < POOL_BUSY || queued_us <= 0.0 {
        return None;
    }
    Some(Cost {
        part: TailPart {
            place: Place::Blocked,
            resource: Some(Resource::PoolQueue),
            threads: h.handing.clone(),
            requests_delayed: 1.0,
            held_by: Some(format!(
                "{} {} threads, busy {:.0}% of the time",
                h.worker_threads,
                h.workers.join(", "),
                (h.busy_share() * 100.0).min(100.0)
            )),
            per_request_ms: queued_us / 1e3 / requests as f64,
            ..Default::default()
        },
        // Who queued, and how long each, is not known: a queue's time falls on the requests
        // that arrive in a burst, the slowest.
        uniform: false,
        affected: None,
        each_ms: None,
        pinned_ms: None,
        lengths: None,
    })
}

#[cfg(test)]
mod tests {
    use super::*;

    /// Two workers over a 10 s span, busy `busy_s` seconds between them, and connection threads
    /// that waited `waited_s` seconds for their work.
    fn handoffs(busy_s: f64, waited_s: f64) -> Handoffs {
        Handoffs {
            handing: vec!["conn".into()],
            waited_us: waited_s * 1e6,
            workers: vec!["worker".into()],
            worker_threads: 2,
            busy_us: busy_s * 1e6,
            span_us: 10e6,
        }
    }

    #[test]
    fn the_queue_is_the_handing_threads_wait_beyond_the_workers_work_when_they_were_busy() {
        // 1,000 requests: 18 s of work, 138 s waited for it: 120 ms a request queued.
        let q = pool_queue(&handoffs(18.0, 138.0), 1_000).unwrap();
        assert!((q.part.per_request_ms - 120.0).abs() < 1e-9, "{q:?}");
        assert_eq!(q.part.resource, Some(Resource::PoolQueue));
        assert_eq!(q.part.threads, ["conn"]);
        assert_eq!(
            q.part.held_by.as_deref(),
            Some("2 worker threads, busy 90% of the time")
        );
        // At POOL_BUSY it is a part; below, or with no wait beyond the work, none.
        assert!(pool_queue(&handoffs(2.0 * 10.0 * POOL_BUSY, 138.0), 1_000).is_some());
        assert!(pool_queue(&handoffs(9.9, 138.0), 1_000).is_none());
        assert!(pool_queue(&handoffs(18.0, 18.0), 1_000).is_none());
        assert!(
            pool_queue(
                &Handoffs {
                    workers: Vec::new(),
                    ..handoffs(18.0, 138.0)
                },
                1_000
            )
            .is_none()
        );
    }

    #[test]
    fn a_workers_waits_on_the_work_are_busy_time_and_the_handing_threads_parked_waits_are_waited() {
        let threads = [
            ("worker", 2_000_000u64),
            ("worker", 3_000_000),
            ("conn", 9_000_000),
        ]
        .map(|(comm, oncpu_ns)| ThreadReport {
            comm: comm.into(),
            oncpu_ns,
            runq_ns: 1_000_000,
            ..Default::default()
        });
        let mut h = Handoffs::new(vec!["worker".into()], 10.0, &threads);
        assert_eq!((h.worker_threads, h.busy_us), (2, 7_000.0));
        h.add_wait("worker", Resource::Sleep, 500.0);
        h.add_wait("worker", Resource::Idle, 9_000.0);
        h.add_wait("conn", Resource::Idle, 800.0);
        h.add_wait("conn", Resource::Work, 5_000.0);
        h.add_wait("conn", Resource::Idle, 200.0);
        assert_eq!((h.busy_us, h.waited_us), (7_500.0, 1_000.0));
        assert_eq!(h.handing, ["conn"]);
    }
}
