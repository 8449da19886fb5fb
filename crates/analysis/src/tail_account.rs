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

use std::collections::HashMap;

use serde::{Deserialize, Serialize};
use srvprof_common::GROUP_SERVER;

use srvprof_loadgen::LoadReport;

use crate::kernel_report::KernelReport;
use crate::record::NsHistogram;
use crate::stacks::{FoldedLine, FoldedStacks, StackKind};

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
    /// the kernel's initial timeout).
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
            Resource::Other => "a kernel wait",
            Resource::Work => "the next piece of work",
            Resource::Idle => "nothing (idle)",
            Resource::Preempted => "a CPU",
            Resource::Unknown => "an unknown wait",
            Resource::SynRetransmit => "a lost SYN or SYN-ACK",
            Resource::Retransmit => "a lost segment",
            Resource::Service => "a service it calls",
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
            Resource::KernelLock => {
                "threads share a kernel object (a file, the memory map): see its flamegraph"
            }
            Resource::SynRetransmit => {
                "make the accept queue longer (listen backlog, net.core.somaxconn) and accept faster"
            }
            Resource::Service => {
                "look at that service's latency, cache its answers, or call it with a timeout and in parallel"
            }
            Resource::Retransmit => {
                "find where packets are lost on the path (tc -s qdisc, ip -s link, nstat TcpExtTCPLostRetransmit), or a lower RTO (ip route ... rto_min)"
            }
            _ => "see the off-CPU flamegraph under that function",
        }
    }
}

/// Kernel functions and the wait each is, checked from the leaf outwards: the first match names
/// the wait, but a page fault's waits inside it (the page's disk read) are the fault's.
const WAIT_POINTS: &[(&str, Resource)] = &[
    ("futex_wait", Resource::Lock),
    ("__futex_wait", Resource::Lock),
    ("futex_wait_queue", Resource::Lock),
    ("futex_lock_pi", Resource::Lock),
    ("pipe_read", Resource::Pipe),
    ("pipe_write", Resource::Pipe),
    ("anon_pipe_read", Resource::Pipe),
    ("anon_pipe_write", Resource::Pipe),
    ("wait_for_partner", Resource::Pipe),
    ("unix_stream_data_wait", Resource::UnixSocket),
    ("unix_stream_read_generic", Resource::UnixSocket),
    ("unix_dgram_recvmsg", Resource::UnixSocket),
    ("unix_wait_for_peer", Resource::UnixSocket),
    ("sk_stream_wait_memory", Resource::TcpSend),
    ("inet_wait_for_connect", Resource::TcpConnect),
    ("do_nanosleep", Resource::Sleep),
    ("hrtimer_nanosleep", Resource::Sleep),
    ("do_handle_mm_fault", Resource::PageFault),
    ("handle_mm_fault", Resource::PageFault),
    ("do_swap_page", Resource::PageFault),
    ("filemap_fault", Resource::PageFault),
    ("io_schedule", Resource::Disk),
    ("folio_wait_bit_common", Resource::Disk),
    ("bit_wait_io", Resource::Disk),
    ("blk_mq_get_tag", Resource::Disk),
    ("rwsem_down_read_slowpath", Resource::KernelLock),
    ("rwsem_down_write_slowpath", Resource::KernelLock),
    ("__mutex_lock", Resource::KernelLock),
    ("ep_poll", Resource::Work),
    ("do_epoll_wait", Resource::Work),
    ("do_select", Resource::Work),
    ("do_sys_poll", Resource::Work),
    ("inet_csk_accept", Resource::Work),
    ("sigsuspend", Resource::Idle),
    ("do_sigtimedwait", Resource::Idle),
    ("do_sched_yield", Resource::Preempted),
    ("__do_sys_sched_yield", Resource::Preempted),
    ("sk_wait_data", Resource::Work),
    ("tcp_recvmsg", Resource::Work),
    ("exit_to_user_mode_loop", Resource::Preempted),
    ("irqentry_exit_to_user_mode", Resource::Preempted),
    ("preempt_schedule", Resource::Preempted),
    ("preempt_schedule_irq", Resource::Preempted),
    ("__cond_resched", Resource::Preempted),
];

/// A futex wait is a lock's when a user frame of its stack takes a lock (any of these in its
/// name); otherwise it is a worker parked until it is handed work (a condition variable, a
/// runtime's idle thread: Go's notesleep, tokio's and Java's park): idle.
const LOCK_FRAMES: &[&str] = &[
    "mutex_lock",
    "lll_lock",
    "rwlock",
    "lock_slow",
    "Mutex",
    "RwLock",
    "sem_wait",
    "futex_lock",
];

/// The scheduler's own frames, under every wait: never a wait point.
const SCHEDULER: &[&str] = &[
    "schedule",
    "__schedule",
    "schedule_timeout",
    "schedule_hrtimeout_range",
    "schedule_hrtimeout_range_clock",
    "io_schedule_timeout",
    "wait_woken",
];

/// Library wrappers a wait is called through: the user function is the first frame past them.
const WRAPPERS: &[&str] = &[
    "read",
    "write",
    "recv",
    "send",
    "recvfrom",
    "sendto",
    "recvmsg",
    "sendmsg",
    "readv",
    "writev",
    "pread64",
    "pwrite64",
    "nanosleep",
    "clock_nanosleep",
    "usleep",
    "sleep",
    "epoll_wait",
    "epoll_pwait",
    "poll",
    "ppoll",
    "select",
    "pselect",
    "accept",
    "accept4",
    "connect",
    "syscall",
    "pthread_mutex_lock",
    "pthread_cond_wait",
    "pthread_cond_timedwait",
    "pthread_rwlock_rdlock",
    "pthread_rwlock_wrlock",
    "sem_wait",
    "open",
    "openat",
    "fsync",
    "fdatasync",
    "sendfile",
    "pipe",
    "pipe2",
    "futex",
    "sched_yield",
    "clock_gettime",
    "gettimeofday",
    "fread",
    "fgets",
    "fwrite",
    "getc",
    "pclose",
    "popen",
    "system",
    "flock",
    "fcntl",
    "lockf",
    "msgrcv",
    "semop",
    "wait",
    "waitpid",
];

/// One stack's wait: the resource, the kernel function that names it, the user function that
/// called it.
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct Wait {
    pub resource: Resource,
    pub kernel: Option<String>,
    pub function: Option<String>,
    /// The syscall it waited in ("read"), None outside one (a page fault).
    pub syscall: Option<String>,
}

/// The syscall a stack's kernel frames are in: the outermost of `__x64_sys_NAME`, `ksys_NAME`
/// (read and write's, whose `__x64_sys_` is inlined) and `__sys_NAME`.
fn syscall_of(kernel: &[&str]) -> Option<String> {
    kernel.iter().find_map(|k| {
        ["__x64_sys_", "__ia32_sys_", "ksys_", "__sys_", "__do_sys_"]
            .iter()
            .find_map(|prefix| k.strip_prefix(prefix))
            .map(str::to_string)
    })
}

/// A kernel frame's function ("pipe_read_[k]" -> "pipe_read"; ".isra.0" and the like dropped).
fn kernel_name(frame: &str) -> Option<&str> {
    let name = frame.strip_suffix("_[k]")?;
    Some(name.split('.').next().unwrap_or(name))
}

fn is_wrapper(frame: &str) -> bool {
    frame.starts_with('_')
        || frame.starts_with("runtime.")
        || frame.starts_with("std::")
        || frame.starts_with("core::")
        || frame.starts_with("syscall.")
        || frame.starts_with('[')
        // An address in a file without symbols says less than the named caller outside it.
        || frame.contains("+0x")
        || WRAPPERS.contains(&frame)
}

/// The wait an off-CPU stack (thread name first, then outermost to leaf) was in.
pub fn wait_of(frames: &[String]) -> Wait {
    let frames = frames.get(1..).unwrap_or_default();
    let kernel_frames: Vec<&str> = frames.iter().filter_map(|f| kernel_name(f)).collect();
    let kernel = &kernel_frames;
    let user: Vec<&str> = (frames.iter())
        .filter(|f| kernel_name(f).is_none())
        .map(String::as_str)
        .collect();
    let function = (user.iter().rev())
        .find(|f| !is_wrapper(f))
        .or(user.last())
        .map(|f| f.to_string());
    let points = kernel.iter().rev().filter_map(|k| {
        (WAIT_POINTS.iter())
            .find(|(name, _)| name == k)
            .map(|(name, r)| (*r, name.to_string()))
    });
    // A fault's wait is the fault's, whatever it waited on inside (the page's disk read).
    let named = (points.clone().find(|(r, _)| *r == Resource::PageFault)).or(points.clone().next());
    let takes_lock = || {
        user.iter()
            .any(|f| LOCK_FRAMES.iter().any(|l| f.contains(l)))
    };
    let (resource, kernel) = match named {
        Some((Resource::Lock, k)) if !takes_lock() => (Resource::Idle, Some(k)),
        Some((r, k)) => (r, Some(k)),
        None => match (kernel.iter().rev()).find(|k| !SCHEDULER.contains(k)) {
            Some(k) => (Resource::Other, Some(k.to_string())),
            None => (Resource::Unknown, None),
        },
    };
    // The Go runtime's own waits (sysmon's sleeps, an idle thread's): no request's code calls
    // them; a request's blocking syscall has its caller outside the runtime.
    let runtime_own = function
        .as_deref()
        .is_some_and(|f| f.starts_with("runtime."));
    let resource = match resource {
        Resource::Work | Resource::Preempted => resource,
        _ if runtime_own => Resource::Idle,
        r => r,
    };
    Wait {
        resource,
        kernel,
        function,
        syscall: syscall_of(&kernel_frames),
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
    /// The threads it was seen in, by name.
    #[serde(default, skip_serializing_if = "Vec::is_empty")]
    pub threads: Vec<String>,
    /// The requests one of its waits delays: 1 for a thread that serves one request at a time;
    /// for an event loop, those in flight and half of those that arrive during the wait.
    #[serde(default)]
    pub requests_delayed: f64,
    /// Who held what it waited for: the CPU's holder (run queue), the lock's (a lock), the
    /// service's address (a service it calls).
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub held_by: Option<String>,
    /// Its time per request (ms), over the measured span.
    pub per_request_ms: f64,
    /// Its time in a request at p99 (ms), and that as a share of p99.
    pub tail_ms: f64,
    pub share: f64,
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
            Place::Network => match (&self.kernel, self.mean_wait_ms) {
                (Some(what), Some(ms)) => {
                    format!("the network: {what}, each resent after {ms:.0} ms")
                }
                (Some(what), None) => format!("the network: {what}"),
                _ => "the network".to_string(),
            },
            Place::Blocked if self.resource == Some(Resource::Service) => match &self.held_by {
                Some(at) => format!("blocked on a service it calls, at {at}"),
                None => "blocked on a service it calls".to_string(),
            },
            Place::Blocked => {
                let what = self.resource.map_or("a wait", Resource::label);
                let held = match &self.held_by {
                    Some(h) => format!(", held by {h}"),
                    None => String::new(),
                };
                match &self.kernel {
                    Some(k) => format!("blocked on {what} in {k}{}{held}", called(&self.function)),
                    None => format!("blocked on {what}{}{held}", called(&self.function)),
                }
            }
        }
    }

    /// "1 request in 52 waits 30.4 ms": how often and how long, when the waits were counted.
    pub fn how_often(&self, requests: u64) -> Option<String> {
        let (waits, mean) = (self.waits?, self.mean_wait_ms?);
        if waits < 1.0 || requests == 0 {
            return None;
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

/// A part before the split of p99: where, its time per request, whether every request pays it
/// (the CPU parts) or some wait for it, and when known the share of requests that meet it
/// (waits times the requests each delays, over the requests; above 1 when each meets it more
/// than once).
#[derive(Clone, Debug, Default)]
pub struct Cost {
    pub part: TailPart,
    pub uniform: bool,
    pub affected: Option<f64>,
    /// When known, how one wait's length is spread: (ms, share of the waits), the run queue's
    /// from the scheduler's histogram. Without it, every wait is the mean wait.
    pub lengths: Option<Vec<(f64, f64)>>,
}

/// Splits p99 among the parts (see the module's doc): each part's tail_ms and share, the parts
/// by their share, and the rest unaccounted.
pub fn allocate(costs: Vec<Cost>, p50_ms: f64, p99_ms: f64) -> (Vec<TailPart>, f64) {
    let ms = |c: &Cost| c.part.per_request_ms.max(0.0);
    let mut left = p50_ms.max(0.0);
    let mut median = vec![0.0; costs.len()];
    for (i, c) in costs.iter().enumerate().filter(|(_, c)| c.uniform) {
        median[i] = ms(c).min(left);
        left -= median[i];
    }
    // The median request meets a wait that half the requests or more meet, or one of unknown
    // reach.
    let in_median = |c: &Cost| !c.uniform && c.affected.is_none_or(|a| a >= 0.5);
    let waits: f64 = costs.iter().filter(|c| in_median(c)).map(ms).sum();
    let fill = if waits > 0.0 {
        (left / waits).min(1.0)
    } else {
        0.0
    };
    for (i, c) in costs.iter().enumerate().filter(|(_, c)| in_median(c)) {
        median[i] = ms(c) * fill;
    }
    // Above the median: what each wait can add to one request at p99. Known reach: its mean
    // wait (or its time per request, if more) when at least TAIL_FRACTION of requests meet it,
    // nothing when fewer do. Unknown: all its time on the slowest TAIL_FRACTION of requests.
    // The server's CPU beyond what the median carries is some requests' more than others': it
    // competes for the excess as a wait of unknown reach. The client's is spread over them all.
    let rest: Vec<f64> = (costs.iter().zip(&median))
        .map(|(c, m)| match c.part.place {
            Place::Client => 0.0,
            _ => (ms(c) - m).max(0.0),
        })
        .collect();
    let known = |c: &Cost| match (c.affected, c.part.mean_wait_ms) {
        (Some(a), Some(wait)) if wait > 0.0 => Some((a, wait)),
        _ => None,
    };
    let slowest: f64 = (costs.iter().zip(&rest))
        .filter(|(c, _)| known(c).is_none())
        .map(|(_, r)| r / TAIL_FRACTION)
        .sum();
    let mut spreads = vec![Spread::on_slowest(slowest)];
    spreads.extend(costs.iter().filter_map(|c| {
        let (a, wait) = known(c)?;
        // Without their lengths, every wait the mean one.
        let even = [(wait, 1.0)];
        Some(Spread::compound(a, c.lengths.as_deref().unwrap_or(&even)))
    }));
    let slowest_carried = slowest_carry(&spreads);
    let mut k = 0;
    // What the slowest TAIL_FRACTION of requests carry of each part with a known reach.
    let carried: Vec<Option<f64>> = (costs.iter())
        .map(|c| {
            known(c).map(|_| {
                k += 1;
                slowest_carried[k]
            })
        })
        .collect();
    // Each part's weight is what the slowest TAIL_FRACTION of requests carry of it beyond the
    // median: a wait met by few but long outweighs one met by many but short.
    let weight: Vec<f64> = (costs.iter().zip(&median).zip(&rest).zip(&carried))
        .map(|(((c, m), r), carried)| match (c.part.place, carried) {
            (Place::Client, _) => 0.0,
            (_, Some(carried)) => (carried - m).max(0.0),
            (_, None) if slowest > 0.0 => r / TAIL_FRACTION * slowest_carried[0] / slowest,
            _ => 0.0,
        })
        .collect();
    // A part whose waits' lengths are known can give a slow request as much as the slowest
    // carry of it (several waits, or one long one); others one mean wait.
    let cap: Vec<f64> = (costs.iter().zip(&median).zip(&rest).zip(&carried))
        .map(
            |(((c, m), r), carried)| match (c.affected, c.part.mean_wait_ms) {
                (Some(a), Some(wait)) if a >= TAIL_FRACTION => {
                    let most = match (&c.lengths, carried) {
                        (Some(_), Some(carried)) => wait.max(ms(c)).max(*carried),
                        _ => wait.max(ms(c)),
                    };
                    (most - m).max(0.0)
                }
                (Some(_), Some(_)) => 0.0,
                _ => r / TAIL_FRACTION,
            },
        )
        .collect();
    let above = share_out((p99_ms - p50_ms).max(0.0), &weight, &cap);
    let mut parts: Vec<TailPart> = Vec::new();
    for ((c, m), a) in costs.into_iter().zip(median).zip(above) {
        let mut part = c.part;
        part.tail_ms = m + a;
        part.share = match p99_ms > 0.0 {
            true => (part.tail_ms / p99_ms).min(1.0),
            false => 0.0,
        };
        parts.push(part);
    }
    parts.retain(|p| p.tail_ms > 0.0 || p.per_request_ms > 0.0);
    parts.sort_by(|a, b| b.tail_ms.total_cmp(&a.tail_ms));
    let accounted: f64 = parts.iter().map(|p| p.tail_ms).sum();
    (parts, (p99_ms - accounted).max(0.0))
}

/// A part's time in one request, as (ms, probability) pairs.
struct Spread(Vec<(f64, f64)>);

impl Spread {
    /// All of `ms` on the slowest TAIL_FRACTION of requests, none on the others.
    fn on_slowest(ms: f64) -> Self {
        Spread(vec![(0.0, 1.0 - TAIL_FRACTION), (ms, TAIL_FRACTION)])
    }

    /// The sum of the waits a request meets, `a` of them on average, each as long as `lengths`
    /// spreads them (ms, share): at most one when `a` is 1 or less; otherwise as many as
    /// independent arrivals would bring (Poisson), summed on a grid of GRID steps up to the
    /// sum's mean plus 8 deviations; from MANY a request on, as normal as the central limit
    /// makes the sum.
    fn compound(a: f64, lengths: &[(f64, f64)]) -> Self {
        const GRID: usize = 512;
        const MANY: f64 = 100.0;
        let mean: f64 = lengths.iter().map(|(ms, p)| ms * p).sum();
        let square: f64 = lengths.iter().map(|(ms, p)| ms * ms * p).sum();
        let longest = lengths.iter().map(|l| l.0).fold(0.0, f64::max);
        if a <= 0.0 || longest <= 0.0 {
            return Spread(vec![(0.0, 1.0)]);
        }
        if a <= 1.0 {
            let met = lengths.iter().map(|&(ms, p)| (ms, a * p));
            return Spread(std::iter::once((0.0, 1.0 - a)).chain(met).collect());
        }
        if a >= MANY {
            let (mu, sigma) = (a * mean, (a * square).sqrt());
            let from = (mu - 6.0 * sigma).max(0.0);
            let step = (mu + 6.0 * sigma - from) / (GRID - 1) as f64;
            let atoms: Vec<(f64, f64)> = (0..GRID)
                .map(|i| from + i as f64 * step)
                .map(|x| (x, (-((x - mu) / sigma).powi(2) / 2.0).exp()))
                .collect();
            let total: f64 = atoms.iter().map(|a| a.1).sum();
            return Spread(atoms.into_iter().map(|(x, p)| (x, p / total)).collect());
        }
        let top = a * mean + 8.0 * (a * square).sqrt() + longest;
        let step = top / (GRID - 1) as f64;
        let at = |ms: f64| ((ms / step).round() as usize).min(GRID - 1);
        let mut one = vec![0.0; GRID];
        for &(ms, p) in lengths {
            one[at(ms)] += p;
        }
        // How many waits, cut where what is left is under 1e-9.
        let mut p = (-a).exp();
        let (mut counts, mut total) = (vec![p], p);
        while ((counts.len() as f64) <= a || 1.0 - total > 1e-9) && counts.len() < 10_000 {
            p *= a / counts.len() as f64;
            total += p;
            counts.push(p);
        }
        let mut sum = vec![0.0; GRID];
        let mut k_waits = vec![0.0; GRID];
        k_waits[0] = 1.0;
        for (k, pk) in counts.iter().enumerate() {
            if k > 0 {
                let mut next = vec![0.0; GRID];
                for (i, q) in k_waits.iter().enumerate().filter(|(_, q)| **q > 0.0) {
                    for (j, w) in one.iter().enumerate().filter(|(_, w)| **w > 0.0) {
                        next[(i + j).min(GRID - 1)] += q * w;
                    }
                }
                k_waits = next;
            }
            for (s, q) in sum.iter_mut().zip(&k_waits) {
                *s += pk * q;
            }
        }
        let total: f64 = sum.iter().sum();
        Spread(
            (sum.iter().enumerate())
                .filter(|(_, p)| **p > 1e-12)
                .map(|(i, p)| (i as f64 * step, p / total))
                .collect(),
        )
    }
}

/// One wait's lengths from a histogram of them (ns, srvprof_common::hist slots): each slot at
/// the middle of its bounds, scaled so that their mean is `mean_ms`, the exact one.
pub fn lengths_of(h: &NsHistogram, mean_ms: f64) -> Option<Vec<(f64, f64)>> {
    use srvprof_common::hist;
    let total = h.total();
    if total == 0 || mean_ms <= 0.0 {
        return None;
    }
    let raw: Vec<(f64, f64)> = (h.slots.iter().enumerate())
        .filter(|(_, n)| **n > 0)
        .map(|(slot, n)| {
            let (low, high) = (
                hist::slot_lower_bound(slot as u32) as f64,
                hist::slot_value(slot as u32) as f64,
            );
            ((low + high) / 2.0 / 1e6, *n as f64 / total as f64)
        })
        .collect();
    let raw_mean: f64 = raw.iter().map(|(ms, p)| ms * p).sum();
    (raw_mean > 0.0).then(|| {
        raw.into_iter()
            .map(|(ms, p)| (ms * mean_ms / raw_mean, p))
            .collect()
    })
}

/// What the slowest TAIL_FRACTION of requests carry of each part on average, the parts met
/// independently of each other: each part's mean over the requests whose sum of all parts is in
/// the top TAIL_FRACTION (sums on a grid of BINS).
fn slowest_carry(spreads: &[Spread]) -> Vec<f64> {
    const BINS: usize = 2048;
    let top: f64 = spreads
        .iter()
        .map(|s| s.0.iter().map(|a| a.0).fold(0.0, f64::max))
        .sum();
    if top <= 0.0 {
        return vec![0.0; spreads.len()];
    }
    let bin = |ms: f64| (ms * (BINS - 1) as f64 / top).round() as usize;
    let len = BINS + spreads.len();
    let add = |sum: &[f64], s: &Spread| {
        let mut out = vec![0.0; len];
        for &(ms, p) in &s.0 {
            let shift = bin(ms);
            for (j, q) in sum.iter().enumerate().filter(|(_, q)| **q > 0.0) {
                out[(j + shift).min(len - 1)] += q * p;
            }
        }
        out
    };
    let none = || {
        let mut d = vec![0.0; len];
        d[0] = 1.0;
        d
    };
    let all = spreads.iter().fold(none(), |d, s| add(&d, s));
    // The top TAIL_FRACTION of the sums: every bin above `edge`, `part` of the one at it.
    let (mut edge, mut above) = (len - 1, 0.0);
    while edge > 0 && above + all[edge] < TAIL_FRACTION {
        above += all[edge];
        edge -= 1;
    }
    let part = match all[edge] > 0.0 {
        true => ((TAIL_FRACTION - above) / all[edge]).min(1.0),
        false => 0.0,
    };
    let in_top = |j: usize| match j.cmp(&edge) {
        std::cmp::Ordering::Greater => 1.0,
        std::cmp::Ordering::Equal => part,
        std::cmp::Ordering::Less => 0.0,
    };
    let mass = (0..len).map(|j| all[j] * in_top(j)).sum::<f64>();
    (0..spreads.len())
        .map(|i| {
            let others = (spreads.iter().enumerate())
                .filter(|(j, _)| *j != i)
                .fold(none(), |d, (_, s)| add(&d, s));
            let carried: f64 = (spreads[i].0.iter())
                .map(|&(ms, p)| {
                    let shift = bin(ms);
                    let reach: f64 = (others.iter().enumerate())
                        .map(|(j, q)| q * in_top((j + shift).min(len - 1)))
                        .sum();
                    ms * p * reach
                })
                .sum();
            match mass > 0.0 {
                true => carried / mass,
                false => 0.0,
            }
        })
        .collect()
}

/// `total` shared in proportion to `weights`, none above its cap: what a capped one cannot take
/// goes to the others, and what none can take is left over.
fn share_out(total: f64, weights: &[f64], caps: &[f64]) -> Vec<f64> {
    let mut out = vec![0.0; weights.len()];
    let mut open: Vec<usize> = (0..weights.len())
        .filter(|&i| weights[i] > 0.0 && caps[i] > 0.0)
        .collect();
    let mut left = total;
    while left > 1e-12 && !open.is_empty() {
        let sum: f64 = open.iter().map(|&i| weights[i]).sum();
        let full: Vec<usize> = (open.iter().copied())
            .filter(|&i| out[i] + left * weights[i] / sum >= caps[i])
            .collect();
        if full.is_empty() {
            for &i in &open {
                out[i] += left * weights[i] / sum;
            }
            break;
        }
        for &i in &full {
            left -= caps[i] - out[i];
            out[i] = caps[i];
        }
        open.retain(|i| !full.contains(i));
    }
    out
}

/// The server's own function with the most on-CPU samples: the innermost frame of its code, not
/// the kernel's, a library wrapper's nor a shared library's (`modules` says where each frame was
/// found; a JIT's frames have none and count as the server's).
fn hottest_function(
    lines: &[FoldedLine],
    modules: &std::collections::BTreeMap<String, crate::stacks::Module>,
) -> Option<String> {
    let library = |f: &str| {
        (modules.get(f)).is_some_and(|m| m.path.contains(".so") || m.path.starts_with('['))
    };
    let mut by: HashMap<&str, u64> = HashMap::new();
    for l in lines {
        let user = (l.frames.iter().skip(1)).filter(|f| kernel_name(f).is_none());
        let own = user.clone().rev().find(|f| !is_wrapper(f) && !library(f));
        let named = own.or_else(|| user.clone().rev().find(|f| !is_wrapper(f)));
        if let Some(f) = named.or(user.clone().next_back()) {
            *by.entry(f.as_str()).or_default() += l.value;
        }
    }
    (by.into_iter())
        .max_by(|a, b| a.1.cmp(&b.1).then(b.0.cmp(a.0)))
        .map(|(f, _)| f.to_string())
}

/// One wait's time over the span (us), and the request threads seen in it.
struct Waited {
    wait: Wait,
    us: f64,
    /// Its stacks' whole-run time (us) and the periods it is the time of (0: not known).
    length: (u64, u64),
    threads: Vec<String>,
}

/// The parts kept at most: smaller waits beyond them are left in what is not accounted for.
pub const MAX_PARTS: usize = 8;

/// What the account is made from: the load's latencies, the server's threads, each side's CPU
/// per request (µs), and the stacks.
pub struct Inputs<'a> {
    pub load: &'a LoadReport,
    pub server: &'a KernelReport,
    pub client: &'a KernelReport,
    /// The server's run-queue waits in the measured span (srvprof_common::hist slots, ns).
    pub runq_lengths: Option<&'a NsHistogram>,
    pub server_cpu_us: f64,
    pub client_cpu_us: f64,
    pub stacks: &'a FoldedStacks,
}

/// The account of a run's p99 from its server's stacks; None without stacks, requests or p99.
pub fn account(input: Inputs) -> Option<TailAccount> {
    let Inputs {
        load,
        server,
        client,
        stacks,
        runq_lengths,
        ..
    } = input;
    let n = load.completed;
    let (p50_ms, p99_ms) = (
        load.latency_us.p50 as f64 / 1e3,
        load.latency_us.p99 as f64 / 1e3,
    );
    if n == 0 || p99_ms <= 0.0 {
        return None;
    }
    // Each wait's mean length, from the whole run's drawn periods: a length, not a total, so
    // the warm-up's count as well as the measured span's.
    let mut lengths: HashMap<&[String], (u64, u64)> = HashMap::new();
    for l in (stacks.offcpu.iter()).filter(|l| l.group == GROUP_SERVER && l.periods > 0) {
        let e = lengths.entry(&l.frames).or_default();
        *e = (e.0 + l.value, e.1 + l.periods);
    }
    let measured;
    let stacks = match stacks.is_timed() {
        true => {
            measured = stacks.window(0, (load.duration_s * 1000.0).ceil() as i64);
            &measured
        }
        false => stacks,
    };
    let offcpu: Vec<&FoldedLine> = (stacks.lines(StackKind::OffCpu).iter())
        .filter(|l| l.group == GROUP_SERVER)
        .collect();
    if offcpu.is_empty() {
        return None;
    }
    let waits: Vec<(&FoldedLine, Wait)> = offcpu.iter().map(|l| (*l, wait_of(&l.frames))).collect();
    let thread = |l: &FoldedLine| l.frames.first().cloned().unwrap_or_default();
    let mut request_threads: Vec<String> = (waits.iter())
        .filter(|(_, w)| w.resource == Resource::Work)
        .map(|(l, _)| thread(l))
        .collect();
    request_threads.sort();
    request_threads.dedup();
    let serves =
        |name: &str| request_threads.is_empty() || request_threads.iter().any(|t| t == name);
    // Little's law: the requests in flight, over the request threads that ran.
    let in_flight = load.throughput_rps * load.latency_us.mean / 1e6;
    let running = (server.threads.iter())
        .filter(|t| serves(&t.comm) && t.oncpu_ns + t.user_ns + t.sys_ns > 0)
        .count()
        .max(1);
    let per_thread = (in_flight / running as f64).max(1.0);
    let per_request = |us: f64| us / 1e3 / n as f64;

    // The stacks are a draw of the off-CPU periods, shared out per thread name; the scheduler
    // times every sleep inside each syscall exactly (a rare long wait of a busy event loop is
    // drawn a few times at most). Each syscall's stacks are scaled to its exact time.
    let exact: HashMap<&str, (u64, u64)> = (server.syscalls.iter())
        .filter_map(|s| Some((s.name.as_str(), (s.blocked?, s.blocked_ns?))))
        .collect();
    let mut drawn_us: HashMap<&str, u64> = HashMap::new();
    for (l, w) in &waits {
        if let (Some(sc), false) = (&w.syscall, w.resource == Resource::Preempted) {
            *drawn_us.entry(sc.as_str()).or_default() += l.value;
        }
    }
    // A line's time (us).
    let calibrated = |l: &FoldedLine, w: &Wait| -> f64 {
        let known = (w.syscall.as_deref())
            .filter(|_| w.resource != Resource::Preempted)
            .and_then(|sc| Some((exact.get(sc)?, drawn_us.get(sc)?)));
        match known {
            Some(((_, ns), &drawn)) if drawn > 0 && *ns > 0 => {
                *ns as f64 / 1e3 * l.value as f64 / drawn as f64
            }
            _ => l.value as f64,
        }
    };

    let mut blocked: Vec<Waited> = Vec::new();
    let mut idle_us = 0.0;
    for (l, w) in &waits {
        let name = thread(l);
        if !serves(&name) {
            continue;
        }
        let us = calibrated(l, w);
        let length = lengths
            .get(l.frames.as_slice())
            .copied()
            .unwrap_or_default();
        match w.resource {
            Resource::Work | Resource::Idle => idle_us += us,
            // The run queue's part, from the scheduler's own count.
            Resource::Preempted => {}
            _ => match blocked.iter_mut().find(|b| b.wait == *w) {
                Some(b) => {
                    b.us += us;
                    b.length = (b.length.0 + length.0, b.length.1 + length.1);
                    if !b.threads.contains(&name) {
                        b.threads.push(name);
                    }
                }
                None => blocked.push(Waited {
                    wait: w.clone(),
                    us,
                    length,
                    threads: vec![name],
                }),
            },
        }
    }
    blocked.sort_by(|a, b| b.us.total_cmp(&a.us));

    let part = |place, per_request_ms| TailPart {
        place,
        per_request_ms,
        ..Default::default()
    };
    let reach = |waits: f64| waits * per_thread / n as f64;
    let arrivals_per_thread = load.throughput_rps / running as f64;
    let mut costs = Vec::new();
    // The request threads' CPU: a background thread's (a refresher, a collector) is no
    // request's.
    let cpu_ns: u64 = (server.threads.iter())
        .filter(|t| serves(&t.comm))
        .map(|t| t.oncpu_ns.max(t.user_ns + t.sys_ns))
        .sum();
    let cpu_ms = match cpu_ns {
        0 => input.server_cpu_us / 1e3,
        ns => ns as f64 / 1e6 / n as f64,
    };
    let oncpu: Vec<FoldedLine> = (stacks.of_group(StackKind::OnCpu, GROUP_SERVER).into_iter())
        .filter(|l| l.frames.first().is_some_and(|t| serves(t)))
        .collect();
    costs.push(Cost {
        part: TailPart {
            function: hottest_function(&oncpu, &input.stacks.modules),
            threads: request_threads.clone(),
            ..part(Place::OnCpu, cpu_ms)
        },
        uniform: true,
        affected: None,
        lengths: None,
    });
    costs.push(Cost {
        part: part(Place::Client, input.client_cpu_us / 1e3),
        uniform: true,
        affected: None,
        lengths: None,
    });
    let (runq_ns, runq_waits) = (server.threads.iter())
        .filter(|t| serves(&t.comm))
        .fold((0, 0), |(ns, k), t| (ns + t.runq_ns, k + t.runq_waits));
    // The process that held the CPUs the server waited for longest (pid 0: an idle CPU, the
    // wake-up's own latency, is no one's).
    let cpu_holder = (server.runq_holders.iter())
        .filter(|h| h.pid != 0)
        .max_by_key(|h| h.wait_ns)
        .map(|h| format!("{} (pid {}), {:.0}% of it", h.comm, h.pid, h.share * 100.0));
    let runq_mean_ms = (runq_waits > 0).then(|| runq_ns as f64 / 1e6 / runq_waits as f64);
    costs.push(Cost {
        part: TailPart {
            requests_delayed: per_thread,
            held_by: cpu_holder,
            waits: Some(runq_waits as f64),
            mean_wait_ms: runq_mean_ms,
            ..part(
                Place::RunQueue,
                per_request(runq_ns as f64 / 1e3) * per_thread,
            )
        },
        uniform: false,
        affected: (runq_waits > 0).then(|| reach(runq_waits as f64)),
        lengths: runq_lengths
            .zip(runq_mean_ms)
            .and_then(|(h, mean)| lengths_of(h, mean)),
    });
    // Open loop: the time from a request's intended send to its actual one, the corrected
    // latency's mean less the uncorrected's, on the requests sent behind schedule.
    if let Some(o) = load
        .open_loop
        .as_ref()
        .filter(|o| o.sends_behind_schedule > 0)
    {
        let per_request_ms =
            ((load.latency_us.mean - o.uncorrected_latency_us.mean) / 1e3).max(0.0);
        let behind = o.sends_behind_schedule as f64;
        costs.push(Cost {
            part: TailPart {
                waits: Some(behind),
                mean_wait_ms: Some(per_request_ms * n as f64 / behind),
                ..part(Place::ClientQueue, per_request_ms)
            },
            uniform: false,
            affected: Some(behind / n as f64),
            lengths: None,
        });
    }
    // A SYN or SYN-ACK resent: that connection's first request waited the kernel's timeout. A
    // data segment resent (the server's SYN-ACKs are not among its segments): its request waited
    // the connection's retransmission timeout. A lost response often has both ends resend (the
    // server its response, the client its unanswered request): the larger count is the losses.
    let (by_server, by_client) = (
        server.tcp.retransmits,
        (client.tcp.retransmits).saturating_sub(client.tcp.syn_retransmits),
    );
    let segments =
        format!("segments retransmitted ({by_server} by the server, {by_client} by the client)");
    let rto_ms = (server.tcp.rto_ms.or(client.tcp.rto_ms)).unwrap_or(RTO_MIN_MS);
    for (what, resource, resent, wait_ms) in [
        (
            "SYNs retransmitted to the server",
            Resource::SynRetransmit,
            server.tcp.syn_retransmits,
            SYN_TIMEOUT_MS,
        ),
        (
            "SYN-ACKs the server retransmitted",
            Resource::SynRetransmit,
            server.tcp.synack_retransmits,
            SYN_TIMEOUT_MS,
        ),
        (
            segments.as_str(),
            Resource::Retransmit,
            by_server.max(by_client),
            rto_ms,
        ),
    ] {
        if resent > 0 {
            costs.push(Cost {
                part: TailPart {
                    resource: Some(resource),
                    kernel: Some(what.to_string()),
                    waits: Some(resent as f64),
                    mean_wait_ms: Some(wait_ms),
                    ..part(Place::Network, resent as f64 * wait_ms / n as f64)
                },
                uniform: false,
                affected: Some(resent as f64 / n as f64),
                lengths: None,
            });
        }
    }
    // A thread asleep reading a connection the server opened waits for that service's answer, in
    // a request: the kernel timed each such sleep (a thread per connection's read looks like
    // one for its client's next request in the stacks, so that time is out of the idle time).
    let mut service_us = 0.0;
    for o in server.outbound.iter().filter(|o| o.waits > 0) {
        let us = o.wait_ns as f64 / 1e3;
        service_us += us;
        let mean_wait_ms = us / 1e3 / o.waits as f64;
        let delayed = match per_thread > 1.0 {
            true => per_thread + arrivals_per_thread * mean_wait_ms / 1e3 / 2.0,
            false => per_thread,
        };
        costs.push(Cost {
            affected: Some(o.waits as f64 * delayed / n as f64),
            lengths: None,
            part: TailPart {
                requests_delayed: delayed,
                resource: Some(Resource::Service),
                waits: Some(o.waits as f64),
                mean_wait_ms: Some(mean_wait_ms),
                held_by: Some(o.remote.clone()),
                ..part(Place::Blocked, per_request(us) * delayed)
            },
            uniform: false,
        });
    }
    idle_us = (idle_us - service_us).max(0.0);
    let shown = MAX_PARTS.saturating_sub(costs.len());
    for b in blocked.into_iter().take(shown) {
        let (drawn_us, periods) = b.length;
        let mean_wait_ms = (periods > 0).then(|| drawn_us as f64 / 1e3 / periods as f64);
        let count = mean_wait_ms.filter(|m| *m > 0.0).map(|m| b.us / 1e3 / m);
        // A lock's holder: the lock waited on longest from this function (the lock probes'
        // waiter stack names it).
        let held_by = (b.wait.resource == Resource::Lock)
            .then(|| {
                (server.locks.iter())
                    .filter(|l| {
                        (b.wait.function.as_ref()).is_some_and(|f| l.stack.iter().any(|s| s == f))
                    })
                    .max_by_key(|l| l.wait_ns)
                    .and_then(|l| {
                        let h = l.holders.first()?;
                        Some(format!("{} (tid {}) at {}", h.comm, h.tid, l.address))
                    })
            })
            .flatten();
        // A thread that serves several requests at once (an event loop) delays those in flight
        // and, on average, half of those that arrive while it waits.
        let delayed = match (per_thread > 1.0, mean_wait_ms) {
            (true, Some(wait_ms)) => per_thread + arrivals_per_thread * wait_ms / 1e3 / 2.0,
            _ => per_thread,
        };
        costs.push(Cost {
            affected: count.map(|c| c * delayed / n as f64),
            lengths: None,
            part: TailPart {
                requests_delayed: delayed,
                resource: Some(b.wait.resource),
                kernel: b.wait.kernel,
                function: b.wait.function,
                syscall: b.wait.syscall,
                waits: count,
                mean_wait_ms,
                held_by,
                threads: b.threads,
                ..part(Place::Blocked, per_request(b.us) * delayed)
            },
            uniform: false,
        });
    }
    let (parts, unaccounted_ms) = allocate(costs, p50_ms, p99_ms);
    Some(TailAccount {
        requests: n,
        p50_ms,
        p99_ms,
        request_threads,
        requests_per_thread: per_thread,
        idle_per_request_ms: per_request(idle_us),
        parts,
        unaccounted_ms,
        unaccounted_share: unaccounted_ms / p99_ms,
    })
}

#[cfg(test)]
mod tests {
    use super::*;

    /// The account of a run whose server and client used 20 and 10 us of CPU a request.
    fn account_of(
        load: &LoadReport,
        server: &KernelReport,
        client: &KernelReport,
        stacks: &FoldedStacks,
    ) -> TailAccount {
        account(Inputs {
            load,
            server,
            client,
            runq_lengths: None,
            server_cpu_us: 20.0,
            client_cpu_us: 10.0,
            stacks,
        })
        .unwrap()
    }

    fn frames(s: &str) -> Vec<String> {
        s.split(';').map(str::to_string).collect()
    }

    #[test]
    fn a_wait_is_named_by_its_kernel_function_and_the_user_function_that_called_it() {
        let cases = [
            (
                "conn;clone3;start_thread;conn_main;count_request;___pthread_mutex_lock;__GI___lll_lock_wait;entry_SYSCALL_64_after_hwframe_[k];do_syscall_64_[k];__x64_sys_futex_[k];do_futex_[k];futex_wait_[k];__futex_wait_[k];futex_do_wait_[k];schedule_[k];__schedule_[k]",
                Resource::Lock,
                Some("__futex_wait"),
                Some("count_request"),
            ),
            (
                "worker;start_thread;std::thread::park;std::sys::pal::unix::futex::futex_wait;syscall;entry_SYSCALL_64_[k];do_syscall_64_[k];__x64_sys_futex_[k];do_futex_[k];futex_wait_[k];__futex_wait_[k];schedule_[k]",
                Resource::Idle,
                Some("__futex_wait"),
                None,
            ),
            (
                "server;runtime.mstart;runtime.schedule;runtime.findRunnable;runtime.stopm;runtime.notesleep;runtime.futexsleep;runtime.futex;entry_SYSCALL_64_[k];do_syscall_64_[k];__x64_sys_futex_[k];do_futex_[k];futex_wait_[k];schedule_[k]",
                Resource::Idle,
                Some("futex_wait"),
                None,
            ),
            (
                "nginx;main;ngx_master_process_cycle;__sigsuspend;entry_SYSCALL_64_[k];do_syscall_64_[k];__x64_sys_rt_sigsuspend_[k];sigsuspend_[k];schedule_[k]",
                Resource::Idle,
                Some("sigsuspend"),
                Some("ngx_master_process_cycle"),
            ),
            (
                "conn;conn_main;wait_for_ticket;__GI___libc_read;entry_SYSCALL_64_after_hwframe_[k];do_syscall_64_[k];ksys_read_[k];vfs_read_[k];pipe_read_[k];schedule_[k];__schedule_[k]",
                Resource::Pipe,
                Some("pipe_read"),
                Some("wait_for_ticket"),
            ),
            (
                "conn;conn_main;wait_for_ticket;__GI___nanosleep;__GI___clock_nanosleep;entry_SYSCALL_64_after_hwframe_[k];do_syscall_64_[k];__x64_sys_clock_nanosleep_[k];common_nsleep_[k];hrtimer_nanosleep_[k];do_nanosleep_[k];schedule_[k];__schedule_[k]",
                Resource::Sleep,
                Some("do_nanosleep"),
                Some("wait_for_ticket"),
            ),
            (
                "conn;clone3;start_thread;conn_main;__GI___libc_read;entry_SYSCALL_64_after_hwframe_[k];do_syscall_64_[k];ksys_read_[k];vfs_read_[k];sock_read_iter_[k];sock_recvmsg_[k];tcp_recvmsg_[k];tcp_recvmsg_locked_[k];sk_wait_data_[k];wait_woken_[k];schedule_timeout_[k];schedule_[k];__schedule_[k]",
                Resource::Work,
                Some("sk_wait_data"),
                Some("conn_main"),
            ),
            (
                "nginx;main;ngx_process_events_and_timers;epoll_wait;entry_SYSCALL_64_[k];do_epoll_wait_[k];ep_poll_[k];schedule_hrtimeout_range_[k];schedule_[k]",
                Resource::Work,
                Some("ep_poll"),
                Some("ngx_process_events_and_timers"),
            ),
            (
                "conn;conn_main;touch_page;asm_exc_page_fault_[k];exc_page_fault_[k];handle_mm_fault_[k];__handle_mm_fault_[k];filemap_fault_[k];folio_wait_bit_common_[k];io_schedule_[k];schedule_[k]",
                Resource::PageFault,
                Some("filemap_fault"),
                Some("touch_page"),
            ),
            (
                "nginx;main;ngx_linux_sendfile;sendfile;entry_SYSCALL_64_[k];do_sendfile_[k];filemap_read_[k];folio_wait_bit_common_[k];io_schedule_[k];schedule_[k]",
                Resource::Disk,
                Some("io_schedule"),
                Some("ngx_linux_sendfile"),
            ),
            (
                "conn;conn_main;__GI___libc_write;entry_SYSCALL_64_after_hwframe_[k];do_syscall_64_[k];exit_to_user_mode_loop_[k];schedule_[k];__schedule_[k]",
                Resource::Preempted,
                Some("exit_to_user_mode_loop"),
                Some("conn_main"),
            ),
            (
                "worker;main;serve;flock;entry_SYSCALL_64_[k];__x64_sys_flock_[k];locks_lock_inode_wait_[k];schedule_[k]",
                Resource::Other,
                Some("locks_lock_inode_wait"),
                Some("serve"),
            ),
            (
                "hello-go;runtime.mstart;runtime.sysmon;runtime.usleep;entry_SYSCALL_64_[k];do_syscall_64_[k];__x64_sys_nanosleep_[k];hrtimer_nanosleep_[k];do_nanosleep_[k];schedule_[k]",
                Resource::Idle,
                Some("do_nanosleep"),
                Some("runtime.usleep"),
            ),
            (
                "hello-go;main.handler;os.(*File).Read;syscall.Syscall;runtime.entersyscall;entry_SYSCALL_64_[k];do_syscall_64_[k];ksys_read_[k];pipe_read_[k];schedule_[k]",
                Resource::Pipe,
                Some("pipe_read"),
                Some("os.(*File).Read"),
            ),
            (
                "1_scheduler;erts_schedule;sched_yield;entry_SYSCALL_64_[k];do_syscall_64_[k];__do_sys_sched_yield_[k];schedule_[k]",
                Resource::Preempted,
                Some("__do_sys_sched_yield"),
                Some("erts_schedule"),
            ),
            ("conn;[no stack]", Resource::Unknown, None, None),
        ];
        for (stack, resource, kernel, function) in cases {
            let w = wait_of(&frames(stack));
            assert_eq!(w.resource, resource, "{stack}");
            assert_eq!(w.kernel.as_deref(), kernel, "{stack}");
            if function.is_some() {
                assert_eq!(w.function.as_deref(), function, "{stack}");
            }
        }
    }

    fn cost(place: Place, ms: f64, uniform: bool) -> Cost {
        Cost {
            part: TailPart {
                place,
                per_request_ms: ms,
                ..Default::default()
            },
            uniform,
            affected: None,
            lengths: None,
        }
    }

    #[test]
    fn the_shares_and_the_unaccounted_rest_add_up_to_p99() {
        let cases = [
            // 2 % of requests sleep 30 ms: p50 0.1, p99 30.
            (
                vec![
                    cost(Place::OnCpu, 0.05, true),
                    cost(Place::Blocked, 0.6, false),
                ],
                0.1,
                30.0,
            ),
            // Every request waits 43 ms: p50 44, p99 46.
            (
                vec![
                    cost(Place::OnCpu, 0.1, true),
                    cost(Place::Blocked, 43.0, false),
                ],
                44.0,
                46.0,
            ),
            // Nothing waits: all of the tail is unaccounted.
            (vec![cost(Place::OnCpu, 0.05, true)], 0.1, 5.0),
            // More CPU than the median: capped.
            (
                vec![
                    cost(Place::OnCpu, 9.0, true),
                    cost(Place::RunQueue, 1.0, false),
                ],
                1.0,
                2.0,
            ),
        ];
        for (costs, p50, p99) in cases {
            let (parts, rest) = allocate(costs, p50, p99);
            let sum: f64 = parts.iter().map(|p| p.tail_ms).sum::<f64>() + rest;
            assert!((sum - p99).abs() < 1e-9, "{parts:?} + {rest} != {p99}");
            assert!(parts.iter().all(|p| p.share >= 0.0 && p.share <= 1.0));
            assert!(parts.windows(2).all(|w| w[0].tail_ms >= w[1].tail_ms));
        }
    }

    #[test]
    fn a_wait_some_requests_meet_takes_the_tail_and_one_all_meet_takes_the_median() {
        let share = |costs, p50, p99| {
            let (parts, _): (Vec<TailPart>, f64) = allocate(costs, p50, p99);
            (parts.iter().find(|p| p.place == Place::Blocked))
                .map(|p| p.share)
                .unwrap()
        };
        // 2 % of requests sleep 30 ms: the sleep is nearly all of p99.
        let some = share(
            vec![
                cost(Place::OnCpu, 0.05, true),
                cost(Place::Blocked, 0.6, false),
            ],
            0.1,
            30.0,
        );
        assert!(some > 0.95, "{some}");
        // Every request waits 43 ms of 44: 43 of p99's 46.
        let all = share(
            vec![
                cost(Place::OnCpu, 0.1, true),
                cost(Place::Blocked, 43.0, false),
            ],
            44.0,
            46.0,
        );
        assert!((all - 43.0 / 46.0).abs() < 1e-9, "{all}");
        // 0.1 % of requests wait 30 ms (0.03 ms a request), and the median has room for it:
        // p99's 1 ms is not that wait's.
        let rare = share(
            vec![
                cost(Place::OnCpu, 0.05, true),
                cost(Place::Blocked, 0.03, false),
            ],
            0.1,
            1.0,
        );
        assert!(rare < 0.05, "{rare}");
    }

    #[test]
    fn a_wait_in_the_tail_is_split_by_time_between_two_waits() {
        let (parts, rest) = allocate(
            vec![
                cost(Place::OnCpu, 0.05, true),
                cost(Place::Blocked, 0.3, false),
                cost(Place::RunQueue, 0.1, false),
            ],
            0.05,
            20.0,
        );
        assert_eq!(parts[0].place, Place::Blocked);
        assert!((parts[0].tail_ms / parts[1].tail_ms - 3.0).abs() < 1e-6);
        assert!(rest < 1e-9, "{rest}");
    }

    #[test]
    fn what_one_part_cannot_take_goes_to_the_others() {
        let out = share_out(10.0, &[1.0, 1.0, 2.0], &[1.0, 100.0, 100.0]);
        assert_eq!(out[0], 1.0);
        assert!(
            (out[1] - 3.0).abs() < 1e-9 && (out[2] - 6.0).abs() < 1e-9,
            "{out:?}"
        );
        // Nobody can take it all: the rest is left over.
        let out = share_out(10.0, &[1.0, 1.0], &[2.0, 3.0]);
        assert_eq!(out, [2.0, 3.0]);
        assert_eq!(share_out(5.0, &[0.0], &[9.0]), [0.0]);
    }

    #[test]
    fn a_wait_too_rare_for_p99_takes_none_of_it_once_its_waits_are_counted() {
        let counted = |ms: f64, affected: f64, mean_wait_ms: f64| Cost {
            affected: Some(affected),
            part: TailPart {
                mean_wait_ms: Some(mean_wait_ms),
                ..cost(Place::Blocked, ms, false).part
            },
            ..cost(Place::Blocked, ms, false)
        };
        // 0.1 % of requests wait 30 ms, and p99 (5 ms) is something else's.
        let (parts, rest) = allocate(
            vec![cost(Place::OnCpu, 0.05, true), counted(0.03, 0.001, 30.0)],
            0.1,
            5.0,
        );
        let wait = parts.iter().find(|p| p.place == Place::Blocked).unwrap();
        assert!(wait.tail_ms < 1e-9, "{parts:?}");
        assert!((rest - 4.95).abs() < 1e-9, "{rest}");
        // 2 % of requests wait 30 ms: a request at p99 carries one wait.
        let (parts, _) = allocate(
            vec![cost(Place::OnCpu, 0.05, true), counted(0.6, 0.02, 30.0)],
            0.1,
            30.0,
        );
        let wait = parts.iter().find(|p| p.place == Place::Blocked).unwrap();
        assert!((wait.tail_ms - 29.9).abs() < 1e-9, "{parts:?}");
    }

    #[test]
    fn a_short_wait_met_by_more_requests_than_p99_leaves_the_tail_to_the_long_one() {
        let counted = |place, ms: f64, affected: f64, mean_wait_ms: f64| Cost {
            affected: Some(affected),
            part: TailPart {
                mean_wait_ms: Some(mean_wait_ms),
                ..cost(place, ms, false).part
            },
            ..Default::default()
        };
        // 1 request in 50 spins 30 ms (0.57 ms of CPU a request, p99 30.1 ms) while a busy
        // client sent 1.6 % of its requests 9.3 ms late: a request at p99 is a spinning one.
        let (parts, _) = allocate(
            vec![
                cost(Place::OnCpu, 0.567, true),
                cost(Place::Client, 0.108, true),
                counted(Place::ClientQueue, 0.1475, 0.0158, 9.31),
                counted(Place::RunQueue, 0.0655, 1.68, 0.039),
            ],
            0.147,
            30.127,
        );
        assert_eq!(parts[0].place, Place::OnCpu, "{parts:?}");
        assert!(parts[0].share > 0.95, "{parts:?}");
        // 2 % of requests wait 30 ms on one thing, 30 % wait 2 ms on another: the same time a
        // request, but p99 is the long wait's.
        let (parts, _) = allocate(
            vec![
                cost(Place::OnCpu, 0.05, true),
                counted(Place::Blocked, 0.6, 0.02, 30.0),
                counted(Place::RunQueue, 0.6, 0.3, 2.0),
            ],
            0.1,
            30.0,
        );
        assert_eq!(parts[0].place, Place::Blocked, "{parts:?}");
        assert!(parts[0].tail_ms > 27.0, "{parts:?}");
    }

    #[test]
    fn rare_long_run_queue_waits_make_the_tail_of_an_event_loop() {
        use srvprof_common::hist::slot_of;
        // An event loop (50 requests in flight) sharing its CPU with a hog: 61,156 waits for a
        // CPU, 1 % of them the hog's 2 ms slices, the rest 6 us; p50 0.87 ms, p99 5.16 ms.
        let mut h = NsHistogram::default();
        h.slots[slot_of(6_000) as usize] = 60_545;
        h.slots[slot_of(2_000_000) as usize] = 611;
        let mean_ms = (60_545.0 * 0.006 + 611.0 * 2.0) / 61_156.0;
        let runq = |lengths| Cost {
            affected: Some(61_156.0 * 49.8 / 199_915.0),
            part: TailPart {
                mean_wait_ms: Some(mean_ms),
                ..cost(
                    Place::RunQueue,
                    mean_ms * 61_156.0 * 49.8 / 199_915.0,
                    false,
                )
                .part
            },
            lengths,
            ..Default::default()
        };
        let share = |lengths| {
            let (parts, _) = allocate(
                vec![
                    cost(Place::OnCpu, 0.0117, true),
                    cost(Place::Client, 0.0159, true),
                    runq(lengths),
                ],
                0.865,
                5.163,
            );
            (parts.iter().find(|p| p.place == Place::RunQueue))
                .map(|p| p.share)
                .unwrap()
        };
        // With the waits' lengths, two of the hog's slices are what the slowest 1 % meet.
        let spread = share(lengths_of(&h, mean_ms));
        assert!(spread > 0.8, "{spread}");
        // Thousands of waits a request (a 1 s tail of a queue 20,000 deep): the sum is normal,
        // about as long for every request, and it is worked out at once.
        let many = Spread::compound(5_000.0, &lengths_of(&h, mean_ms).unwrap());
        let mean: f64 = many.0.iter().map(|(ms, p)| ms * p).sum();
        assert!((mean / (5_000.0 * mean_ms) - 1.0).abs() < 0.01, "{mean}");
        // Every wait its mean length (0.03 ms), the run queue could not make that tail.
        let even = share(None);
        assert!(even < 0.2, "{even}");
    }

    #[test]
    fn the_syscall_of_a_stack_is_its_outermost_entry() {
        let sc = |s: &str| wait_of(&frames(s)).syscall;
        assert_eq!(
            sc(
                "conn;main;read;do_syscall_64_[k];ksys_read_[k];vfs_read_[k];pipe_read_[k];schedule_[k]"
            ),
            Some("read".into())
        );
        assert_eq!(
            sc(
                "a;main;accept;do_syscall_64_[k];__x64_sys_accept_[k];__sys_accept4_[k];inet_csk_accept_[k]"
            ),
            Some("accept".into())
        );
        assert_eq!(
            sc("a;main;touch;exc_page_fault_[k];handle_mm_fault_[k]"),
            None
        );
    }

    /// A thread-per-connection server, as its stacks and the scheduler's counts show it: each
    /// connection thread reads its next request from its socket (idle) and, for some requests,
    /// an answer from a pipe (in a request); a "ticket" thread reads its pipe of asks (never a
    /// request's); a cache refresher sleeps (no request thread).
    fn threaded(socket_us: u64, pipe_us: u64) -> (LoadReport, KernelReport, FoldedStacks) {
        use crate::stacks::LineSet;
        let read = |thread: &str, caller: &str, wait: &str| -> Vec<String> {
            frames(&format!(
                "{thread};conn_main;{caller};read;do_syscall_64_[k];ksys_read_[k];vfs_read_[k];{wait}_[k];schedule_[k]"
            ))
        };
        let mut off = LineSet::default();
        let socket = off.add(
            GROUP_SERVER,
            read("conn", "conn_main", "sk_wait_data"),
            socket_us,
        );
        off.add_periods(socket, 10_000);
        // The drawn periods: 30 ms each.
        let pipe = off.add(
            GROUP_SERVER,
            read("conn", "wait_for_ticket", "pipe_read"),
            pipe_us,
        );
        off.add_periods(pipe, pipe_us / 30_000);
        off.add(
            GROUP_SERVER,
            read("ticket", "ticket_main", "pipe_read"),
            5_000_000,
        );
        off.add(
            GROUP_SERVER,
            frames("cache;refresh;nanosleep;do_syscall_64_[k];__x64_sys_nanosleep_[k];do_nanosleep_[k];schedule_[k]"),
            4_000_000,
        );
        let mut stacks = FoldedStacks::default();
        stacks.set(StackKind::OffCpu, off.finish());
        let load = LoadReport {
            completed: 10_000,
            duration_s: 5.0,
            throughput_rps: 2_000.0,
            latency_us: srvprof_loadgen::LatencySummary {
                p50: 100,
                p99: 30_000,
                mean: 400.0,
                ..Default::default()
            },
            ..Default::default()
        };
        let server = KernelReport {
            threads: vec![crate::kernel_report::ThreadReport {
                comm: "conn".into(),
                oncpu_ns: 1_000_000,
                ..Default::default()
            }],
            // Every sleep in read, counted by the scheduler: 10,000 next requests, 200 answers,
            // and the ticket thread's 200 waits for asks; their exact time.
            syscalls: vec![crate::kernel_report::SyscallReport {
                name: "read".into(),
                blocked: Some(10_400),
                blocked_ns: Some((socket_us + 6_000_000 + 5_000_000) * 1_000),
                ..Default::default()
            }],
            ..Default::default()
        };
        (load, server, stacks)
    }

    #[test]
    fn waits_for_work_and_waits_in_a_request_are_told_apart_and_scaled_to_the_exact_times() {
        // The drawn stacks under-read the pipe: 3.99 s drawn of the 6 s the scheduler counted.
        let (socket_us, pipe_us) = (40_000_000.0, 3_990_000.0);
        let (load, server, stacks) = threaded(socket_us as u64, pipe_us as u64);
        let a = account_of(&load, &server, &KernelReport::default(), &stacks);
        assert_eq!(a.request_threads, ["conn"]);
        let pipe = (a.parts.iter())
            .find(|p| p.resource == Some(Resource::Pipe))
            .expect("the pipe wait");
        // Scaled: read's exact 51 s shared by the drawn ones, the pipe's 3.99 s of them.
        let scale = (socket_us + 11e6) / (socket_us + pipe_us + 5e6);
        let pipe_ms = pipe_us / 1e3 * scale;
        assert!(
            (pipe.per_request_ms - pipe_ms / 10_000.0).abs() < 1e-9,
            "{pipe:?}"
        );
        assert_eq!(pipe.threads, ["conn"]);
        assert_eq!(pipe.function.as_deref(), Some("wait_for_ticket"));
        // Each wait as long as its drawn ones, and as many as its scaled time makes.
        assert!((pipe.mean_wait_ms.unwrap() - 30.0).abs() < 1e-9, "{pipe:?}");
        let waits = pipe.waits.unwrap();
        assert!((waits - pipe_ms / 30.0).abs() < 1e-6, "{waits}");
        // The next requests' reads are idle; the ticket's and the refresher's waits no part.
        assert!((a.idle_per_request_ms - socket_us / 1e3 * scale / 10_000.0).abs() < 1e-9);
        assert!(a.parts.iter().all(|p| p.resource != Some(Resource::Sleep)));
        assert_eq!(
            a.parts.iter().filter(|p| p.place == Place::Blocked).count(),
            1,
            "{a:?}"
        );
        assert!(pipe.share > 0.9, "{a:?}");
    }

    /// A thread per connection that reads its dependency's answer as it reads its client's next
    /// request: the stacks show both as the same wait for work; the kernel's count of the sleeps
    /// on the server's outbound connections takes the service's out of the idle time.
    #[test]
    fn a_dependency_read_like_a_wait_for_work_is_the_services_part_by_the_kernels_count() {
        // 10,000 requests, 200 of which wait 30 ms on 127.0.0.1:9000 (6 s); 40 s of next
        // requests. No pipe wait.
        let (load, mut server, stacks) = threaded(46_000_000, 0);
        let idle_before =
            account_of(&load, &server, &KernelReport::default(), &stacks).idle_per_request_ms;
        server.outbound = vec![crate::record::Outbound {
            remote: "127.0.0.1:9000".into(),
            opened: 200,
            waits: 200,
            wait_ns: 6_000_000_000,
            ..Default::default()
        }];
        let a = account_of(&load, &server, &KernelReport::default(), &stacks);
        let top = &a.parts[0];
        assert_eq!(top.place, Place::Blocked, "{a:?}");
        assert_eq!(top.resource, Some(Resource::Service), "{a:?}");
        assert_eq!(top.held_by.as_deref(), Some("127.0.0.1:9000"));
        assert!((top.mean_wait_ms.unwrap() - 30.0).abs() < 1e-9, "{top:?}");
        assert!(
            (top.per_request_ms - 6_000.0 / 10_000.0).abs() < 1e-9,
            "{top:?}"
        );
        // One request in 50 waits 30 ms: p99 (30 ms) is that wait.
        assert!(top.share > 0.9, "{a:?}");
        assert!(
            (idle_before - a.idle_per_request_ms - 0.6).abs() < 1e-9,
            "{idle_before} -> {}",
            a.idle_per_request_ms
        );
        assert!(
            top.describe()
                .contains("a service it calls, at 127.0.0.1:9000"),
            "{}",
            top.describe()
        );
        // Without the kernel's count, the same stacks leave p99 unaccounted, not misnamed.
        server.outbound[0].waits = 0;
        server.outbound[0].wait_ns = 0;
        let blind = account_of(&load, &server, &KernelReport::default(), &stacks);
        assert!(blind.unaccounted_share > 0.9, "{blind:?}");
    }

    #[test]
    fn how_often_a_wait_is_met_reads_per_request() {
        let part = |waits: f64, mean: f64| TailPart {
            waits: Some(waits),
            mean_wait_ms: Some(mean),
            ..Default::default()
        };
        assert_eq!(
            part(200.0, 30.04).how_often(10_000).as_deref(),
            Some("1 request in 50 waits 30.0 ms")
        );
        assert_eq!(
            part(30_000.0, 0.012).how_often(10_000).as_deref(),
            Some("3.0 waits of 0.01 ms a request")
        );
        assert_eq!(part(0.5, 30.0).how_often(10_000), None);
        assert_eq!(TailPart::default().how_often(10_000), None);
    }

    #[test]
    fn resent_syns_are_the_networks_part_by_the_kernels_timeout() {
        let (load, mut server, stacks) = threaded(40_000_000, 0);
        server.tcp.syn_retransmits = 150;
        let mut load = load;
        load.latency_us.p99 = 1_002_000;
        let a = account_of(&load, &server, &KernelReport::default(), &stacks);
        let net = &a.parts[0];
        assert_eq!(net.place, Place::Network, "{a:?}");
        // 1.5 % of the requests waited 1 s: a request at p99 is one of them.
        assert!((net.per_request_ms - 15.0).abs() < 1e-9, "{net:?}");
        assert!((net.tail_ms - 1000.0).abs() < 1e-9, "{net:?}");
        assert!(
            net.describe()
                .contains("SYNs retransmitted to the server, each resent after 1000 ms")
        );
    }

    #[test]
    fn lost_segments_are_the_networks_part_by_the_connections_own_timeout() {
        let (mut load, mut server, stacks) = threaded(40_000_000, 0);
        load.latency_us.p99 = 205_000;
        // 2 % of responses lost and resent after the connections' 204 ms (tcp_info), the
        // client resending its request for most of them; its SYN retransmits are not segments.
        server.tcp.retransmits = 200;
        server.tcp.rto_ms = Some(204.0);
        let mut client = KernelReport::default();
        client.tcp.retransmits = 153;
        client.tcp.syn_retransmits = 3;
        let a = account_of(&load, &server, &client, &stacks);
        let net = &a.parts[0];
        assert_eq!(net.resource, Some(Resource::Retransmit), "{a:?}");
        assert!((net.per_request_ms - 4.08).abs() < 1e-9, "{net:?}");
        assert!((net.tail_ms - 204.0).abs() < 1e-9, "{net:?}");
        assert_eq!(
            net.describe(),
            "the network: segments retransmitted (200 by the server, 150 by the client), each \
             resent after 204 ms"
        );
        assert_eq!(
            (a.parts.iter())
                .filter(|p| p.place == Place::Network)
                .count(),
            1,
            "{a:?}"
        );
        // Without the connections' timeout, the kernel's floor.
        server.tcp.rto_ms = None;
        let a = account_of(&load, &server, &client, &stacks);
        assert_eq!(a.parts[0].mean_wait_ms, Some(RTO_MIN_MS), "{a:?}");
    }

    #[test]
    fn cpu_beyond_what_the_median_carries_takes_the_tail_and_the_clients_does_not() {
        // 1 request in 50 spins 30 ms: 0.62 ms of CPU a request against a median of 0.14 ms.
        let (parts, rest) = allocate(
            vec![
                cost(Place::OnCpu, 0.62, true),
                cost(Place::Client, 0.11, true),
                cost(Place::RunQueue, 0.01, false),
            ],
            0.14,
            30.0,
        );
        assert_eq!(parts[0].place, Place::OnCpu, "{parts:?}");
        assert!(parts[0].share > 0.95, "{parts:?}");
        let client = parts.iter().find(|p| p.place == Place::Client).unwrap();
        assert_eq!(client.tail_ms, 0.0, "{parts:?}");
        assert!(rest < 1e-9);
    }

    #[test]
    fn the_hottest_function_is_the_servers_own_not_a_librarys() {
        use crate::stacks::Module;
        let module = |path: &str| Module {
            path: path.into(),
            build_id: None,
        };
        let modules = [
            ("slow_path", module("/srv/threaded")),
            ("conn_main", module("/srv/threaded")),
            ("clock_gettime", module("[vdso]")),
            ("memcpy", module("/usr/lib/libc.so.6")),
        ]
        .into_iter()
        .map(|(f, m)| (f.to_string(), m))
        .collect();
        let line = |stack: &str, value| FoldedLine {
            group: GROUP_SERVER,
            frames: frames(stack),
            value,
            periods: 0,
        };
        let lines = [
            line("conn;conn_main;slow_path;clock_gettime", 60),
            line("conn;conn_main;slow_path", 10),
            line("conn;conn_main;memcpy", 80),
            line("conn;conn_main;memcpy;copy_user_[k]", 5),
        ];
        // libc's memcpy is conn_main's time; the vDSO's clock_gettime slow_path's.
        assert_eq!(
            hottest_function(&lines, &modules).as_deref(),
            Some("conn_main")
        );
        let only_own = &lines[..2];
        assert_eq!(
            hottest_function(only_own, &modules).as_deref(),
            Some("slow_path")
        );
        // Without modules, the innermost frame past the wrappers.
        assert_eq!(
            hottest_function(&lines, &Default::default()).as_deref(),
            Some("memcpy")
        );
    }

    #[test]
    fn a_lock_and_a_cpu_are_told_with_who_held_them() {
        use crate::kernel_report::{LockHolder, LockReport, RunqHolderReport};
        let (load, mut server, mut stacks) = threaded(40_000_000, 0);
        let mut lines = stacks.offcpu.clone();
        lines.push(FoldedLine {
            group: GROUP_SERVER,
            frames: frames(
                "conn;conn_main;count_request;___pthread_mutex_lock;__GI___lll_lock_wait;entry_SYSCALL_64_[k];do_syscall_64_[k];__x64_sys_futex_[k];futex_wait_[k];schedule_[k]",
            ),
            value: 3_000_000,
            periods: 0,
        });
        stacks.offcpu = lines;
        server.locks = vec![LockReport {
            address: "0x55d0c0ffee00".into(),
            wait_ns: 3_000_000_000,
            stack: vec!["conn_main".into(), "count_request".into()],
            holders: vec![LockHolder {
                tid: 4242,
                comm: "cache-refresh".into(),
                ..Default::default()
            }],
            ..Default::default()
        }];
        server.runq_holders = vec![
            RunqHolderReport {
                pid: 0,
                comm: "swapper/0".into(),
                wait_ns: 9_000_000,
                share: 0.6,
                ..Default::default()
            },
            RunqHolderReport {
                pid: 77,
                comm: "hog".into(),
                wait_ns: 6_000_000,
                share: 0.4,
                ..Default::default()
            },
        ];
        server.threads[0].runq_ns = 15_000_000;
        server.threads[0].runq_waits = 1_000;
        let a = account_of(&load, &server, &KernelReport::default(), &stacks);
        let lock = (a.parts.iter())
            .find(|p| p.resource == Some(Resource::Lock))
            .expect("the lock");
        assert_eq!(
            lock.describe(),
            "blocked on a lock (futex) in futex_wait, called from count_request, held by \
             cache-refresh (tid 4242) at 0x55d0c0ffee00"
        );
        let runq = (a.parts.iter())
            .find(|p| p.place == Place::RunQueue)
            .expect("the run queue");
        assert_eq!(
            runq.describe(),
            "the server's threads waiting for a CPU (held most by hog (pid 77), 40% of it)"
        );
    }

    #[test]
    fn an_open_loops_late_sends_are_the_clients_queue() {
        let (mut load, server, stacks) = threaded(40_000_000, 0);
        // 2 % of the requests sent 25 ms late on average: 0.5 ms a request.
        load.latency_us.mean = 900.0;
        load.open_loop = Some(srvprof_loadgen::OpenLoopSummary {
            uncorrected_latency_us: srvprof_loadgen::LatencySummary {
                mean: 400.0,
                ..Default::default()
            },
            sends_behind_schedule: 200,
            max_behind_us: 40_000,
        });
        let a = account_of(&load, &server, &KernelReport::default(), &stacks);
        let queue = &a.parts[0];
        assert_eq!(queue.place, Place::ClientQueue, "{a:?}");
        assert!((queue.per_request_ms - 0.5).abs() < 1e-9);
        assert!((queue.mean_wait_ms.unwrap() - 25.0).abs() < 1e-9);
        assert!((queue.tail_ms - 25.0).abs() < 1e-9, "{queue:?}");
    }

    #[test]
    fn an_event_loops_wait_delays_the_requests_in_flight_and_half_those_arriving() {
        // One thread, 400 requests a second of 10 ms on average: 4 in flight; a 30 ms wait
        // delays them and half of the 12 that arrive meanwhile.
        let (mut load, server, stacks) = threaded(40_000_000, 3_990_000);
        load.throughput_rps = 400.0;
        load.latency_us.mean = 10_000.0;
        let a = account_of(&load, &server, &KernelReport::default(), &stacks);
        let pipe = (a.parts.iter())
            .find(|p| p.resource == Some(Resource::Pipe))
            .unwrap();
        assert!((a.requests_per_thread - 4.0).abs() < 1e-9);
        assert!((pipe.requests_delayed - 10.0).abs() < 1e-9, "{pipe:?}");
        let waited_ms = pipe.per_request_ms * 10_000.0 / pipe.requests_delayed;
        assert!(
            (waited_ms - pipe.waits.unwrap() * 30.0).abs() < 1e-6,
            "{pipe:?}"
        );
    }
}
