//! Where the tail's time went: one account of a request's time at p99, split into the places it
//! can go (the server on a CPU, the server waiting for one, the server blocked on a named wait,
//! the network's lost SYNs and segments, the client's CPU and queue), with what no part accounts
//! for left as its own figure.
//!
//! The server's off-CPU stacks name each wait: the kernel function it slept in, the resource
//! that function waits on ([`Resource`]), and the user function that called it. Waits for work
//! (an event loop's epoll_wait, an accept, a thread reading its connection's next request) are
//! told apart from waits while a request is in progress by their kernel function; a thread that
//! never waits for work (a background refresher, a timer thread) serves no request, and its waits
//! are left out. Each part's time per request is its total over the measured span divided by the
//! requests completed; a blocked event loop delays every request in flight on it, so the waits of
//! a server with fewer threads than requests in flight count that many times (Little's law).
//!
//! The split of p99 ([`allocate`]): the median request carries what every request pays (the
//! CPU parts first, then the waits most requests meet, in proportion to their time); the rest of
//! p99 above the median goes to the waits and to the server's CPU beyond the median's, in
//! proportion to what the slowest TAIL_FRACTION of requests carry of each (from how often and
//! how long each is met), none taking more than one request at p99 can carry
//! (docs/how-it-measures.md).
//!
//! The parts: waits.rs names a wait from its stack, split.rs splits p99 among the parts,
//! compose.rs builds them from a run, pool.rs the queue for a worker pool's threads, preempted.rs
//! the waits for a CPU inside a request's run.

mod compose;
mod pool;
mod preempted;
mod split;
#[cfg(test)]
mod tests;
mod waits;

use serde::{Deserialize, Serialize};

pub(crate) use compose::hottest_function;
pub use compose::{Inputs, MAX_PARTS, account};
pub use split::{Cost, allocate, lengths_of};
pub use waits::{Wait, wait_of};

/// The share of requests p99 stands for: a wait's time per request at most this share of the
/// requests can carry is the most it adds to p99.
pub const TAIL_FRACTION: f64 = 0.01;
/// The kernel's initial retransmission timeout (TCP_TIMEOUT_INIT): a SYN or SYN-ACK lost is
/// resent this long after (ms).
pub const SYN_TIMEOUT_MS: f64 = 1000.0;
/// The kernel's floor of a connection's retransmission timeout (TCP_RTO_MIN, ms): a lost segment
/// waits at least this long, the time taken when sock_diag could not read the connections' own.
pub const RTO_MIN_MS: f64 = 200.0;
/// The account is told (first screen, report) when p99 is at least this many times the median.
pub const SKEWED_TAIL: f64 = 3.0;

/// Where a part of a request's time went.
#[derive(Clone, Copy, Debug, Default, PartialEq, Eq, Serialize, Deserialize)]
#[serde(rename_all = "snake_case")]
pub enum Place {
    /// The server's threads running its code.
    #[default]
    OnCpu,
    /// The server's request threads runnable, waiting for a CPU.
    RunQueue,
    /// The server's request threads asleep in the kernel while a request was in progress.
    Blocked,
    /// The load generator's CPU: sending, receiving.
    Client,
    /// The load generator's queue (open loop): a request sent late because its connection was
    /// still waiting for an earlier answer.
    ClientQueue,
    /// The network path with no thread involved: TCP's own timers (a SYN or SYN-ACK resent after
    /// the kernel's initial timeout) and queues (a connection in its listener's accept queue).
    Network,
}

/// What a blocked thread waited on, from the kernel function it slept in.
#[derive(Clone, Copy, Debug, PartialEq, Eq, PartialOrd, Ord, Serialize, Deserialize)]
#[serde(rename_all = "snake_case")]
pub enum Resource {
    /// A user-space lock or condition (a futex).
    Lock,
    /// A pipe: the process at its other end writes slowly.
    Pipe,
    /// A UNIX socket: the process at its other end answers slowly.
    UnixSocket,
    /// A TCP socket whose send buffer is full.
    TcpSend,
    /// A TCP connection being opened.
    TcpConnect,
    /// A sleep or a timer.
    Sleep,
    /// A page fault (the page read from disk or swap).
    PageFault,
    /// A disk read or write, or a page of a file being read in.
    Disk,
    /// A lock inside the kernel (an inode's, a process's memory map).
    KernelLock,
    /// A file lock (flock, fcntl, lockf) another thread or process holds.
    FileLock,
    /// A child process the server started and waits for (a helper, a shell command).
    Child,
    /// A kernel wait srvprof has no name for: its function is the wait point.
    Other,
    /// A wait for work: an event loop's poll, an accept, a connection's next request. A thread
    /// seen in one serves requests.
    Work,
    /// Idle in another way: a worker parked until handed work (a futex with no lock taken), a
    /// process waiting for signals, a runtime's own threads (Go's sysmon and idle threads).
    Idle,
    /// Preempted: runnable, not asleep (the run queue's part, counted there).
    Preempted,
    /// No kernel frame to tell by (the stack was not taken).
    Unknown,
    /// A SYN or SYN-ACK lost on the way and resent after the kernel's initial timeout.
    SynRetransmit,
    /// A data segment lost on the way and resent after the connection's retransmission timeout.
    Retransmit,
    /// Another service's answer, read on a connection the server opened to it (its address is
    /// the part's `held_by`).
    Service,
    /// A listening socket's accept queue: the connection established, the thread that accepts
    /// busy elsewhere (what it was doing is the part's `held_by`).
    AcceptQueue,
    /// A runtime's stop-the-world pause: every thread of the process stopped (the runtime is the
    /// part's `held_by`).
    Pause,
    /// An answer written but held in the server's socket until an ACK let it go (why: the part's
    /// `kernel`).
    HeldSend,
    /// An answer's transfer: whole segments sent only as fast as the path and the client took
    /// them, until the client acknowledged them (why: the part's `kernel`).
    Transfer,
    /// A free worker of the server's pool: requests handed to it queued while its workers were
    /// busy (the pool is the part's `held_by`).
    PoolQueue,
}

impl Resource {
    /// In a sentence: "a pipe".
    pub fn label(self) -> &'static str {
        match self {
            Resource::Lock => "a lock (futex)",
            Resource::Pipe => "a pipe",
            Resource::UnixSocket => "a UNIX socket",
            Resource::TcpSend => "a TCP send buffer",
            Resource::TcpConnect => "a TCP connect",
            Resource::Sleep => "a sleep or timer",
            Resource::PageFault => "a page fault",
            Resource::Disk => "disk I/O",
            Resource::KernelLock => "a kernel lock",
            Resource::FileLock => "a file lock",
            Resource::Child => "a child process",
            Resource::Other => "a kernel wait",
            Resource::Work => "the next piece of work",
            Resource::Idle => "nothing (idle)",
            Resource::Preempted => "a CPU",
            Resource::Unknown => "an unknown wait",
            Resource::SynRetransmit => "a lost SYN or SYN-ACK",
            Resource::Retransmit => "a lost segment",
            Resource::Service => "a service it calls",
            Resource::AcceptQueue => "the accept queue",
            Resource::Pause => "a stop-the-world pause",
            Resource::HeldSend => "an answer held in its socket",
            Resource::Transfer => "an answer's transfer to the client",
            Resource::PoolQueue => "a free worker of its pool",
        }
    }

    /// What usually removes such a wait from the request path.
    pub fn fix(self) -> &'static str {
        match self {
            Resource::Lock => {
                "hold the lock for less, or split it (srvprof's lock_contention names its holder when it can)"
            }
            Resource::Pipe | Resource::UnixSocket => {
                "the process at the other end answers slowly: look at it, or stop waiting for it inside a request"
            }
            Resource::TcpSend => "the peer reads slowly or the send buffer is small",
            Resource::TcpConnect => {
                "keep connections to that service open instead of one per request"
            }
            Resource::Sleep => {
                "a sleep or timed wait in the request path: remove it or move it off the request"
            }
            Resource::PageFault => {
                "keep the memory resident (more memory, a larger cgroup limit, mlock)"
            }
            Resource::Disk => "cache the file, or do the I/O off the request path",
            Resource::FileLock => {
                "the file lock's holder keeps it long: hold it for less, or give each writer a file of its own"
            }
            Resource::Child => {
                "a program started and waited for in the request path: do its work in the server, or keep it running and ask it"
            }
            Resource::KernelLock => {
                "threads share a kernel object (a file, the memory map): see its flamegraph"
            }
            Resource::SynRetransmit => {
                "make the accept queue longer (listen backlog, net.core.somaxconn) and accept faster"
            }
            Resource::Service => {
                "look at that service's latency, cache its answers, or call it with a timeout and in parallel"
            }
            Resource::AcceptQueue => {
                "the thread that accepts connections was busy elsewhere: give accepting a thread that does nothing else, or several listeners (SO_REUSEPORT), and move its other work off it"
            }
            Resource::Pause => {
                "the runtime stops every thread: allocate less, tune its collector, or find what keeps it from a safepoint"
            }
            Resource::HeldSend => {
                "write each answer in one call (writev), or set TCP_NODELAY on the server's connections so a small last part is not held for an ACK"
            }
            Resource::Transfer => {
                "the answers are larger than the path carries quickly: make them smaller (compression, pages of results) or serve them nearer the client, and look at the path (ss -ti: cwnd, delivery_rate; tc -s qdisc); a closed window means the client reads slowly"
            }
            Resource::PoolQueue => {
                "more workers in the pool, or less time per job: the pool was busy most of the time, so requests queued for it (what its workers waited on is among the other parts)"
            }
            Resource::Retransmit => {
                "find where packets are lost on the path (tc -s qdisc, ip -s link, nstat TcpExtTCPLostRetransmit), or a lower RTO (ip route ... rto_min)"
            }
            _ => "see the off-CPU flamegraph under that function",
        }
    }
}

/// One part of p99's time.
#[derive(Clone, Debug, Default, PartialEq, Serialize, Deserialize)]
pub struct TailPart {
    pub place: Place,
    /// For a blocked part: what it waited on.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub resource: Option<Resource>,
    /// The kernel function it waited in (blocked), the server's hottest function (on a CPU), or
    /// what TCP resent (network).
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub kernel: Option<String>,
    /// The user function that called the wait.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub function: Option<String>,
    /// The syscall it waited in.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub syscall: Option<String>,
    /// How many times the request threads waited there over the span, and the mean wait (ms):
    /// the scheduler's exact count of the syscall's sleeps, shared among its stacks by time.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub waits: Option<f64>,
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub mean_wait_ms: Option<f64>,
    /// When its waits' lengths are known and a few are far longer than the rest: those (see
    /// compose::LONG_WAIT_RATIO). A mean alone hides one slow answer among fifty fast ones.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub long_waits: Option<LongWaits>,
    /// The threads it was seen in, by name.
    #[serde(default, skip_serializing_if = "Vec::is_empty")]
    pub threads: Vec<String>,
    /// The requests one of its waits delays: 1 for a thread that serves one request at a time;
    /// for an event loop, those in flight and half of those that arrive during the wait.
    #[serde(default)]
    pub requests_delayed: f64,
    /// Who held what it waited for: the CPU's holder (run queue), the lock's (a lock), the
    /// service's address (a service it calls), the process at the other end (a pipe, a UNIX
    /// socket).
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub held_by: Option<String>,
    /// Its time per request (ms), over the measured span.
    pub per_request_ms: f64,
    /// Its time in a request at p99 (ms), and that as a share of p99.
    pub tail_ms: f64,
    pub share: f64,
    /// The run queue's part: how much of tail_ms is waits after a preemption inside the
    /// requests' runs (a quota's throttle, a neighbour's slices), the rest waits after a wakeup.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub preempted_tail_ms: Option<f64>,
}

/// A part's long waits: how many over the span, and their mean (ms).
#[derive(Clone, Debug, Default, PartialEq, Serialize, Deserialize)]
pub struct LongWaits {
    pub waits: f64,
    pub mean_ms: f64,
}

impl TailPart {
    /// "blocked on a pipe in pipe_read, called from wait_for_ticket".
    pub fn describe(&self) -> String {
        let called = |f: &Option<String>| match f {
            Some(f) => format!(", called from {f}"),
            None => String::new(),
        };
        match self.place {
            Place::OnCpu => match &self.function {
                Some(f) => format!("the server on a CPU (hottest: {f})"),
                None => "the server on a CPU".to_string(),
            },
            Place::RunQueue => match &self.held_by {
                Some(h) => format!("the server's threads waiting for a CPU (held most by {h})"),
                None => "the server's threads waiting for a CPU".to_string(),
            },
            Place::Client => "the load generator's CPU".to_string(),
            Place::ClientQueue => {
                "the load generator's queue: sent late, its connection still busy (more connections keep the schedule)".to_string()
            }
            Place::Network if self.resource == Some(Resource::AcceptQueue) => {
                let queue = match &self.kernel {
                    Some(port) => format!("the accept queue of {port}"),
                    None => "the accept queue".to_string(),
                };
                match &self.held_by {
                    Some(h) => format!(
                        "connections waiting in {queue} while the thread that accepts them was busy: {h}"
                    ),
                    None => format!("connections waiting in {queue}"),
                }
            }
            Place::Network if self.resource == Some(Resource::HeldSend) => {
                let why = self.kernel.as_deref().map_or(String::new(), |k| format!(": {k}"));
                match self.mean_wait_ms {
                    Some(ms) => format!("answers held unsent in the server's sockets{why}; each {ms:.1} ms"),
                    None => format!("answers held unsent in the server's sockets{why}"),
                }
            }
            Place::Network if self.resource == Some(Resource::Transfer) => {
                let why = self.kernel.as_deref().map_or(String::new(), |k| format!(": {k}"));
                match self.mean_wait_ms {
                    Some(ms) => format!("answers' transfers to the client{why}; each {ms:.1} ms"),
                    None => format!("answers' transfers to the client{why}"),
                }
            }
            Place::Network => match (&self.kernel, self.mean_wait_ms) {
                (Some(what), Some(ms)) => {
                    format!("the network: {what}, each resent after {ms:.0} ms")
                }
                (Some(what), None) => format!("the network: {what}"),
                _ => "the network".to_string(),
            },
            Place::Blocked if self.resource == Some(Resource::Pause) => match &self.held_by {
                Some(by) => format!("stopped by {by}: its stop-the-world pauses"),
                None => "stopped by its runtime: its stop-the-world pauses".to_string(),
            },
            Place::Blocked if self.resource == Some(Resource::Service) => match &self.held_by {
                Some(at) => format!("blocked on a service it calls, at {at}"),
                None => "blocked on a service it calls".to_string(),
            },
            Place::Blocked => {
                let what = self.resource.map_or("a wait", Resource::label);
                let held = match (&self.held_by, self.resource) {
                    (Some(h), Some(Resource::Pipe | Resource::UnixSocket)) => {
                        format!(", its other end {h}")
                    }
                    (Some(h), _) => format!(", held by {h}"),
                    (None, _) => String::new(),
                };
                match &self.kernel {
                    Some(k) => format!("blocked on {what} in {k}{}{held}", called(&self.function)),
                    None => format!("blocked on {what}{}{held}", called(&self.function)),
                }
            }
        }
    }

    /// "1 request in 52 waits 30.4 ms": how often and how long, when the waits were counted; by
    /// the long ones when a few are far longer than the rest.
    pub fn how_often(&self, requests: u64) -> Option<String> {
        let (waits, mean) = (self.waits?, self.mean_wait_ms?);
        if waits < 1.0 || requests == 0 {
            return None;
        }
        if let Some(long) = (self.long_waits.as_ref()).filter(|l| requests as f64 / l.waits >= 1.5)
        {
            let others = (waits * mean - long.waits * long.mean_ms) / (waits - long.waits);
            return Some(format!(
                "1 request in {:.0} waits {:.1} ms, its other waits {:.2} ms",
                requests as f64 / long.waits,
                long.mean_ms,
                others.max(0.0)
            ));
        }
        let per = requests as f64 / waits;
        Some(match per >= 1.5 {
            true => format!("1 request in {per:.0} waits {mean:.1} ms"),
            false => format!(
                "{:.1} waits of {mean:.2} ms a request",
                waits / requests as f64
            ),
        })
    }
}

/// The account of a run's p99.
#[derive(Clone, Debug, Default, PartialEq, Serialize, Deserialize)]
pub struct TailAccount {
    /// The requests it covers (completed in the measured span), and the latencies it splits.
    pub requests: u64,
    pub p50_ms: f64,
    pub p99_ms: f64,
    /// The server's threads that wait for work somewhere (they serve requests), by name.
    pub request_threads: Vec<String>,
    /// Requests in flight per request thread (at least 1): how many requests one blocked thread
    /// delays.
    pub requests_per_thread: f64,
    /// The request threads' waits for work per request (ms): idle time, in no part.
    pub idle_per_request_ms: f64,
    /// The parts, the largest share of p99 first.
    pub parts: Vec<TailPart>,
    /// p99's time no part accounts for (ms), and its share of p99.
    pub unaccounted_ms: f64,
    pub unaccounted_share: f64,
}

impl TailAccount {
    /// Whether p99 is far enough above the median for the account to be told.
    pub fn skewed(&self) -> bool {
        skewed(self.p50_ms, self.p99_ms)
    }
}

/// Whether a p99 is SKEWED_TAIL times its median or more (any one unit for both).
pub fn skewed(p50: f64, p99: f64) -> bool {
    p50 > 0.0 && p99 >= SKEWED_TAIL * p50
}
