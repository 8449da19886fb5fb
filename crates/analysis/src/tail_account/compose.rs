//! The account of a run: its parts from the server's stacks and kernel figures, the client's
//! CPU and queue, the network's resent segments and its accept queue, then split.

use std::collections::HashMap;

use srvprof_common::{GROUP_SERVER, tcp};
use srvprof_loadgen::LoadReport;

use super::pool::{Handoffs, pool_queue};
use super::preempted::{Preempted, cpu_share_at, move_to_run_queue};
use super::split::{Cost, allocate, lengths_of};
use super::waits::{Wait, is_wrapper, kernel_name, wait_of};
use super::{LongWaits, Place, RTO_MIN_MS, Resource, SYN_TIMEOUT_MS, TailAccount, TailPart};
use crate::kernel_report::{HOLD_KIND_NAMES, KernelReport, SendHoldKind};
use crate::record::{NsHistogram, Outbound};
use crate::stacks::{FoldedLine, FoldedStacks, StackKind};

/// The process at the other end of a pipe or UNIX socket `threads` waited on `waits` times (a
/// file lock's holder, a child process): the waker of those threads that woke them about as
/// often as they waited there (half to twice), or a new process of it about as often (a helper started per wait, which wakes its parent at
/// its start and at its end), other than their siblings, the load generator and the kernel's
/// own (an idle CPU's interrupt, a worker thread): "ticket (pid 812), which woke them 48 times".
fn other_end(
    server: &KernelReport,
    client_pids: &[u32],
    threads: &[String],
    waits: f64,
) -> Option<String> {
    const KERNEL: [&str; 4] = ["swapper", "ksoftirqd", "kworker", "rcu"];
    // By the waker's name: (the pid that woke them most, processes, wakeups).
    let mut by: HashMap<&str, (u32, u64, u64)> = HashMap::new();
    let wakers = (server.wakers.iter()).filter(|w| {
        threads.contains(&w.wakee_comm)
            && w.waker_pid != 0
            && !client_pids.contains(&w.waker_pid)
            && !KERNEL.iter().any(|k| w.waker_comm.starts_with(k))
    });
    for w in wakers {
        let e = by.entry(&w.waker_comm).or_default();
        *e = (w.waker_pid, e.1.max(w.processes), e.2 + w.count);
    }
    let about = |k: u64| (0.5 * waits..=2.0 * waits).contains(&(k as f64));
    (by.into_iter())
        .filter(|(_, (_, processes, n))| about(*n) || (*processes > 1 && about(*processes)))
        .max_by_key(|(comm, (.., n))| (*n, std::cmp::Reverse(*comm)))
        // A child is named by the program it ran: the name it exited with (it woke its parent
        // first under the parent's own, before its exec).
        .map(|(comm, (pid, processes, n))| {
            let exited = (server.exits.iter()).find(|e| e.pid == pid && e.tid == pid);
            (
                exited.map_or(comm, |e| e.comm.as_str()),
                (pid, processes, n),
            )
        })
        .map(|(comm, (pid, processes, n))| match processes {
            0 | 1 => format!("{comm} (pid {pid}), which woke them {n} times"),
            k => format!("{comm} ({k} processes), which woke them {n} times"),
        })
}

/// The threads the request threads hand work to and that hand it back (a worker pool behind
/// the threads that read the requests): by name, among those seen `parked` idle between jobs,
/// woken by request threads at least MIN_HANDOFF_SHARE times a request and waking them back
/// at least half as often. A busy pool's workers find the next job queued without parking, so
/// they hand back far more work than they are woken for. A thread handed work it never hands
/// back (a logger) serves no request; nor does one that waits for its work on a pipe or a
/// socket (a helper answering asks: its waits would read as the requests').
fn handed_work(
    server: &KernelReport,
    request_threads: &[String],
    parked: &[String],
    requests: u64,
) -> Vec<String> {
    // By name: (woken by the request threads, waking them).
    let mut by: HashMap<&str, (u64, u64)> = HashMap::new();
    for w in &server.wakers {
        let from = request_threads.contains(&w.waker_comm);
        let to = request_threads.contains(&w.wakee_comm);
        match (from, to) {
            (true, false) => by.entry(&w.wakee_comm).or_default().0 += w.count,
            (false, true) => by.entry(&w.waker_comm).or_default().1 += w.count,
            _ => {}
        }
    }
    let mut out: Vec<String> = (by.into_iter())
        .filter(|(name, (handed, back))| {
            parked.iter().any(|p| p == name)
                && *handed as f64 >= MIN_HANDOFF_SHARE * requests as f64
                && *back as f64 >= 0.5 * *handed as f64
        })
        .map(|(name, _)| name.to_string())
        .collect();
    out.sort();
    out
}

/// The server's own function with the most on-CPU samples: the innermost frame of its code, not
/// the kernel's, a library wrapper's nor a shared library's (`modules` says where each frame was
/// found; a JIT's frames have none and count as the server's).
pub(crate) fn hottest_function(
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

/// The threads that take connections from the accept queue and serve none of their requests (an
/// acceptor beside threads per connection): those seen waiting for work only in an accept, when
/// some other thread serves requests. An event loop that accepts and serves is none (its accepts
/// do not block, and its waits delay the requests it holds, counted with them).
fn acceptors(waits: &[(&FoldedLine, Wait)], request_threads: &[String]) -> Vec<String> {
    let thread = |l: &FoldedLine| l.frames.first().cloned().unwrap_or_default();
    let is_accept =
        |w: &Wait| (w.kernel.as_deref()).is_some_and(|k| k.ends_with("inet_csk_accept"));
    let work = || (waits.iter()).filter(|(_, w)| w.resource == Resource::Work);
    let mut only_accept: Vec<String> = work()
        .filter(|(_, w)| is_accept(w))
        .map(|(l, _)| thread(l))
        .collect();
    only_accept.sort();
    only_accept.dedup();
    only_accept.retain(|t| !work().any(|(l, w)| thread(l) == *t && !is_accept(w)));
    match request_threads.iter().any(|t| !only_accept.contains(t)) {
        true => only_accept,
        false => Vec::new(),
    }
}

/// New connections' waits to be taken (the accept queue, then until their first read), when a
/// thread only accepts them: each delays its connection's first request. Held by what the
/// acceptor did meanwhile: its longest own wait.
fn accept_queue(
    server: &KernelReport,
    acceptors: &[String],
    acceptor_waits: &[(Wait, f64, String)],
    lengths: Option<&NsHistogram>,
    n: u64,
) -> Option<Cost> {
    let queue = server.tcp.accept_queue.as_ref()?;
    let (accepts, wait_ns) = (queue.accepts, queue.wait_ns);
    if acceptors.is_empty() || accepts == 0 || wait_ns == 0 {
        return None;
    }
    let mean_wait_ms = wait_ns as f64 / 1e6 / accepts as f64;
    let lengths = lengths.and_then(|h| lengths_of(h, mean_wait_ms));
    let busiest = (acceptor_waits.iter()).max_by(|a, b| a.1.total_cmp(&b.1));
    // Told as the waits of LONG_ACCEPT_WAIT_MS or more ("1 request in 10 waits 51 ms"), when
    // their lengths are known: the rest are a new connection's ordinary start. No more of them
    // than arrived while the acceptor was away in its longest wait (the arrival rate times that
    // wait's time): on a busy host an ordinary start can take a millisecond too. Their mean is
    // the longest waits'.
    let away_s = busiest.map_or(f64::INFINITY, |(_, us, _)| us / 1e6);
    let arrived = accepts as f64 * (away_s / server.duration_s.max(1e-9)).min(1.0);
    let long = (lengths.as_ref())
        .and_then(|l| {
            let share: f64 = (l.iter().filter(|(ms, _)| *ms >= LONG_ACCEPT_WAIT_MS))
                .map(|(_, p)| p)
                .sum();
            let count = (share * accepts as f64).min(arrived);
            Some((count, longest_of(l, count / accepts as f64)?))
        })
        .filter(|(count, _)| *count >= 1.0);
    // Without long ones every connection's wait was an ordinary start: the acceptor held none.
    let held = long.and(busiest);
    let (waits, mean) = long.unwrap_or((accepts as f64, mean_wait_ms));
    let held_by = held.map(|(w, _, thread)| {
        let called = w
            .function
            .as_deref()
            .map_or(String::new(), |f| format!(" in {f}"));
        format!("{thread} waited on {}{called}", w.resource.label())
    });
    Some(Cost {
        part: TailPart {
            place: Place::Network,
            resource: Some(Resource::AcceptQueue),
            kernel: queue.by_port.first().map(|p| format!("port {}", p.port)),
            function: held.and_then(|(w, ..)| w.function.clone()),
            waits: Some(waits),
            mean_wait_ms: Some(mean),
            threads: acceptors.to_vec(),
            requests_delayed: 1.0,
            held_by,
            per_request_ms: wait_ns as f64 / 1e6 / n as f64,
            ..Default::default()
        },
        uniform: false,
        affected: Some((accepts as f64 / n as f64).min(1.0)),
        each_ms: None,
        pinned_ms: None,
        lengths,
    })
}

/// A runtime's stop-the-world pauses (uprobes at its own functions): every thread of the process
/// stops, so a request that arrives in one waits out its rest. Requests arriving at any time meet
/// one for the share of the span they last, a long one as much more often as it is longer, and
/// wait anything from none to all of it (PAUSE_STEPS even steps): the lengths from the kernel's
/// histogram of them, else every pause the mean one.
fn pauses(
    server: &KernelReport,
    lengths: Option<&NsHistogram>,
    threads: Vec<String>,
    n: u64,
) -> Option<Cost> {
    let p = server
        .families
        .pauses
        .pauses
        .iter()
        .max_by_key(|p| p.total_ns)?;
    let span_ms = server.duration_s * 1e3;
    if p.pauses == 0 || p.total_ns == 0 || span_ms <= 0.0 {
        return None;
    }
    let mean_ms = p.total_ns as f64 / 1e6 / p.pauses as f64;
    let met = (p.total_ns as f64 / 1e6 / span_ms).min(1.0);
    let pauses = lengths
        .and_then(|h| lengths_of(h, mean_ms))
        .unwrap_or_else(|| vec![(mean_ms, 1.0)]);
    let biased: f64 = pauses.iter().map(|(ms, share)| ms * share).sum();
    let steps = PAUSE_STEPS as f64;
    let rest: Vec<(f64, f64)> = (pauses.iter())
        .flat_map(|&(ms, share)| {
            (0..PAUSE_STEPS)
                .map(move |i| (ms * (i as f64 + 0.5) / steps, ms * share / biased / steps))
        })
        .collect();
    let mean_rest_ms: f64 = rest.iter().map(|(ms, share)| ms * share).sum();
    Some(Cost {
        part: TailPart {
            place: Place::Blocked,
            resource: Some(Resource::Pause),
            held_by: Some(format!("{} (pid {})", p.runtime_name(), p.pid)),
            waits: Some(met * n as f64),
            mean_wait_ms: Some(mean_rest_ms),
            threads,
            requests_delayed: 1.0,
            per_request_ms: met * mean_rest_ms,
            ..Default::default()
        },
        uniform: false,
        affected: Some(met),
        each_ms: None,
        pinned_ms: None,
        lengths: Some(rest),
    })
}

/// The server's answers written but held in its sockets until an ACK let them go (less than a
/// segment: Nagle's algorithm, the host's queue), and its answers' transfers until the client
/// acknowledged them (whole segments: the path's pace, a slow reader): each such answer's
/// request waited that long with no thread involved (its thread already back at its next
/// read). A part each, named by the kinds that held a tenth of its time or more, most first.
fn held_sends(
    server: &KernelReport,
    lengths: Option<&NsHistogram>,
    transfer_lengths: Option<&NsHistogram>,
    n: u64,
) -> Vec<Cost> {
    let Some(holds) = server.tcp.send_holds.as_ref() else {
        return Vec::new();
    };
    let partial = HOLD_KIND_NAMES[tcp::HOLD_PARTIAL as usize];
    // The partial holds' lengths: every hold's less the transfers'.
    let partial_lengths = match (lengths, transfer_lengths) {
        (Some(all), Some(t)) => Some(all.minus(t)),
        (all, _) => all.cloned(),
    };
    let delayed = match holds.delayed_acks {
        0 => String::new(),
        k => format!("; the host's delayed-ACK timer sent {k} ACKs late (TcpExt:DelayedACKs)"),
    };
    [
        (Resource::HeldSend, true, partial_lengths.as_ref(), delayed),
        (Resource::Transfer, false, transfer_lengths, String::new()),
    ]
    .into_iter()
    .filter_map(|(resource, is_partial, lengths, also)| {
        let kinds: Vec<&SendHoldKind> = (holds.by_kind.iter())
            .filter(|k| (k.kind == partial) == is_partial)
            .collect();
        let count: u64 = kinds.iter().map(|k| k.holds).sum();
        let wait_ns: u64 = kinds.iter().map(|k| k.wait_ns).sum();
        if count == 0 || wait_ns == 0 {
            return None;
        }
        let mean_wait_ms = wait_ns as f64 / 1e6 / count as f64;
        // Each kind that held a tenth of the time or more, most first, with its count and mean.
        let named: Vec<&&SendHoldKind> = (kinds.iter())
            .filter(|k| k.wait_ns as f64 >= MIN_HOLD_KIND_SHARE * wait_ns as f64)
            .collect();
        let why = match named.as_slice() {
            [one] => one.why().to_string(),
            several => (several.iter())
                .map(|k| {
                    let each_ms = k.wait_ns as f64 / 1e6 / k.holds.max(1) as f64;
                    format!("{} ({} of {each_ms:.1} ms)", k.why(), k.holds)
                })
                .collect::<Vec<_>>()
                .join("; "),
        };
        Some(Cost {
            part: TailPart {
                place: Place::Network,
                resource: Some(resource),
                kernel: Some(format!("{why}{also}")),
                waits: Some(count as f64),
                mean_wait_ms: Some(mean_wait_ms),
                requests_delayed: 1.0,
                per_request_ms: wait_ns as f64 / 1e6 / n as f64,
                ..Default::default()
            },
            uniform: false,
            affected: Some((count as f64 / n as f64).min(1.0)),
            each_ms: None,
            pinned_ms: None,
            lengths: lengths.and_then(|h| lengths_of(h, mean_wait_ms)),
        })
    })
    .collect()
}

/// Retransmits are timeouts a request waited only when the slowest request took at least this
/// share of the timeout (a timer's jitter, a connection's own RTO below the mean).
pub const TIMEOUT_WAITED: f64 = 0.75;

/// A kind of hold with this share of the holds' time or more is named in their part.
pub const MIN_HOLD_KIND_SHARE: f64 = 0.1;

/// Steps of a pause's rest a request waits (from none to a whole mean pause).
pub const PAUSE_STEPS: usize = 10;

/// One wait's time over the span (us), and the request threads seen in it.
struct Waited {
    wait: Wait,
    us: f64,
    /// Its stacks' whole-run time (us) and the periods it is the time of (0: not known).
    length: (u64, u64),
    threads: Vec<String>,
}

/// A process or quota that held the CPUs the server waited for is named from this share of the
/// wait (less is the ordinary sharing of a CPU, not a holder).
pub const MIN_HOLDER_SHARE: f64 = 0.1;

/// The parts kept at most: smaller waits beyond them are left in what is not accounted for.
pub const MAX_PARTS: usize = 8;
/// A new connection's wait to be taken this long or longer (ms) is told apart from the others
/// (a thread's start, an event loop's turn).
pub const LONG_ACCEPT_WAIT_MS: f64 = 1.0;
/// A wait with at least this share of its syscall's sleeping time (the scheduler's) is counted
/// by the syscall's sleeps.
pub const MIN_SYSCALL_SHARE: f64 = 0.9;
/// A thread the request threads hand work to at least this many times a request (and that
/// hands it back) serves requests: a worker pool's.
pub const MIN_HANDOFF_SHARE: f64 = 0.01;
/// A wait this many times the median one or longer is a long one, told apart when fewer than
/// half the waits are (TailPart::long_waits); beyond the widest gap in their lengths when there
/// is one.
pub const LONG_WAIT_RATIO: f64 = 10.0;
/// The server's on-CPU runs are counted per group, not per thread: they stand for the request
/// threads' when those hold at least this share of the group's CPU (not a JIT compiler's).
pub const MIN_RUNS_SHARE: f64 = 0.9;

/// What the account is made from: the load's latencies, the server's threads, each side's CPU
/// per request (µs), and the stacks.
pub struct Inputs<'a> {
    pub load: &'a LoadReport,
    pub server: &'a KernelReport,
    pub client: &'a KernelReport,
    /// The server's run-queue waits in the measured span (srvprof_common::hist slots, ns).
    pub runq_lengths: Option<&'a NsHistogram>,
    /// The server's on-CPU runs, wakeup to sleep, in the measured span (hist slots, ns).
    pub oncpu_run_lengths: Option<&'a NsHistogram>,
    /// The same runs by the wall clock, and the run-queue waits after a preemption (hist slots,
    /// ns): empty in recordings made before they were counted.
    pub run_wall_lengths: Option<&'a NsHistogram>,
    pub runq_preempted_lengths: Option<&'a NsHistogram>,
    /// The server's connections' accept-queue waits in the measured span (hist slots, ns).
    pub accept_lengths: Option<&'a NsHistogram>,
    /// The server's stop-the-world pauses in the measured span (hist slots, ns).
    pub pause_lengths: Option<&'a NsHistogram>,
    /// The server's answers' waits held unsent in its sockets in the measured span (hist slots,
    /// ns), and those of them that were answers' transfers.
    pub send_hold_lengths: Option<&'a NsHistogram>,
    pub transfer_lengths: Option<&'a NsHistogram>,
    pub server_cpu_us: f64,
    pub client_cpu_us: f64,
    pub stacks: &'a FoldedStacks,
}

/// A part's long waits, from its waits' lengths: those LONG_WAIT_RATIO times the median wait or
/// longer, when they are fewer than half and at least one. The accept queue's part is already
/// told by its long waits.
pub(super) fn long_waits(c: &Cost) -> Option<LongWaits> {
    let (waits, lengths) = (c.part.waits?, c.lengths.as_ref()?);
    if c.part.resource == Some(Resource::AcceptQueue) {
        return None;
    }
    long_of(lengths, waits)
}

/// The long ones among `count` waits whose lengths are spread as `lengths` (ms, share): those
/// beyond the widest gap between lengths above LONG_WAIT_RATIO times the median's half (an
/// octave at least, where no wait lies, so a little more or less of a busy host's delay does not
/// move the count) that leaves at least half the time of the waits from LONG_WAIT_RATIO times
/// the median beyond it (a rare timeout beyond the slow answers does not take their place), or
/// LONG_WAIT_RATIO times the median or longer when the lengths leave no such gap.
fn long_of(lengths: &[(f64, f64)], count: f64) -> Option<LongWaits> {
    let waits = count;
    let mut sorted: Vec<(f64, f64)> = lengths.iter().copied().filter(|l| l.1 > 0.0).collect();
    sorted.sort_by(|a, b| a.0.total_cmp(&b.0));
    let mut below = 0.0;
    let median = sorted.iter().find(|(_, p)| {
        below += p;
        below >= 0.5
    })?;
    let ratio_from = LONG_WAIT_RATIO * median.0;
    let time_from = |from: f64| -> f64 {
        (sorted.iter())
            .filter(|(ms, _)| *ms >= from)
            .map(|(ms, p)| ms * p)
            .sum()
    };
    let long_time = time_from(ratio_from);
    // The widest gap, as the ratio of one length to the next, among those past half the ratio.
    let gap = (sorted.windows(2))
        .filter(|w| w[1].0 >= ratio_from && w[0].0 >= ratio_from / 2.0)
        .map(|w| (w[1].0 / w[0].0.max(f64::MIN_POSITIVE), w[1].0))
        .filter(|(widest, next)| *widest >= 2.0 && time_from(*next) >= 0.5 * long_time)
        .max_by(|a, b| a.0.total_cmp(&b.0));
    let from = gap.map_or(ratio_from, |(_, next)| next);
    let long = sorted.iter().filter(|(ms, _)| *ms >= from);
    let share: f64 = long.clone().map(|(_, p)| p).sum();
    let ms: f64 = long.map(|(ms, p)| ms * p).sum();
    (share > 0.0 && share < 0.5 && waits * share >= 1.0).then(|| LongWaits {
        waits: waits * share,
        mean_ms: ms / share,
    })
}

/// A service's slow answers, among its answers at their own lengths (the kernel timed each ask
/// to its answer). Not its sleeps: those are one per answer only where a thread sleeps through
/// each answer once; an event loop sleeps between an answer's reads, or not at all, so counting
/// the sleeps put 148 long waits against 47 slow answers.
pub(super) fn slow_answers(o: &Outbound) -> Option<LongWaits> {
    let mean_ms = o.answer_ns as f64 / 1e6 / o.answers.max(1) as f64;
    let lengths = lengths_of(o.answer_lengths.as_ref()?, mean_ms)?;
    long_of(&lengths, o.answers as f64)
}

/// The mean length (ms) of the longest `share` of waits spread as `lengths` (ms, share).
fn longest_of(lengths: &[(f64, f64)], share: f64) -> Option<f64> {
    let mut sorted = lengths.to_vec();
    sorted.sort_by(|a, b| b.0.total_cmp(&a.0));
    let (mut left, mut ms) = (share, 0.0);
    for (len, p) in sorted {
        let taken = p.min(left);
        ms += len * taken;
        left -= taken;
        if left <= 0.0 {
            break;
        }
    }
    (share > 0.0).then(|| ms / (share - left.max(0.0)).max(f64::MIN_POSITIVE))
}

/// A Go program's stop-the-world is one run on a CPU of the thread that holds it (the collector,
/// or a loop the stop waits for), as long as the pause or longer: the pause's, not a request's.
/// Each pause takes the shortest run at least as long as it out of the runs.
pub(super) fn without_pauses(runs: &NsHistogram, pauses: &NsHistogram) -> NsHistogram {
    let mut left = runs.clone();
    for (slot, &count) in pauses.slots.iter().enumerate() {
        let mut count = count;
        for n in left.slots.iter_mut().skip(slot) {
            let taken = count.min(*n);
            *n -= taken;
            count -= taken;
            if count == 0 {
                break;
            }
        }
    }
    left
}

/// The account of a run's p99 from its server's stacks; None without stacks, requests or p99.
pub fn account(input: Inputs) -> Option<TailAccount> {
    let Inputs {
        load,
        server,
        client,
        stacks,
        runq_lengths,
        oncpu_run_lengths,
        run_wall_lengths,
        runq_preempted_lengths,
        accept_lengths,
        pause_lengths,
        send_hold_lengths,
        transfer_lengths,
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
    // The server's time in each syscall on lines no window holds (short-lived processes: a
    // popen's shell), which the scheduler's exact counts include.
    let mut untimed_us: HashMap<String, u64> = HashMap::new();
    if stacks.is_timed() {
        for l in (stacks.untimed(StackKind::OffCpu)).filter(|l| l.group == GROUP_SERVER) {
            let w = wait_of(&l.frames);
            if let (Some(sc), false) = (w.syscall, w.resource == Resource::Preempted) {
                *untimed_us.entry(sc).or_default() += l.value;
            }
        }
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
    // A pool's workers park between jobs (a condition variable, a runtime's park).
    let parked: Vec<String> = (waits.iter())
        .filter(|(_, w)| w.resource == Resource::Idle)
        .map(|(l, _)| thread(l))
        .collect();
    let workers = handed_work(server, &request_threads, &parked, n);
    request_threads.extend(workers.iter().cloned());
    request_threads.sort();
    request_threads.dedup();
    let serves =
        |name: &str| request_threads.is_empty() || request_threads.iter().any(|t| t == name);
    // Without the kernel's figures of the queue, an acceptor's waits stay where they were seen.
    let acceptors = match &server.tcp.accept_queue {
        Some(_) => acceptors(&waits, &request_threads),
        None => Vec::new(),
    };
    // Little's law: the requests in flight, over the request threads that ran.
    let in_flight = load.throughput_rps * load.latency_us.mean / 1e6;
    let running = effective_threads(server, &serves);
    let per_thread = (in_flight / running).max(1.0);
    let per_request = |us: f64| us / 1e3 / n as f64;

    // The stacks are a draw of the off-CPU periods, shared out per thread name; the scheduler
    // times every sleep inside each syscall exactly (a rare long wait of a busy event loop is
    // drawn a few times at most). Each syscall's stacks are scaled to its exact time, which
    // the lines no window holds share.
    let exact: HashMap<&str, (u64, u64)> = (server.syscalls.iter())
        .filter_map(|s| Some((s.name.as_str(), (s.blocked?, s.blocked_ns?))))
        .collect();
    let mut drawn_us: HashMap<&str, u64> = HashMap::new();
    for (l, w) in &waits {
        if let (Some(sc), false) = (&w.syscall, w.resource == Resource::Preempted) {
            *drawn_us.entry(sc.as_str()).or_default() += l.value;
        }
    }
    for (sc, us) in &untimed_us {
        *drawn_us.entry(sc.as_str()).or_default() += us;
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
    // Requests handed to a pool: the handing threads' waits for the work, against the workers'
    // time on it.
    let mut handoffs = Handoffs::new(workers, load.duration_s, &server.threads);
    for (l, w) in &waits {
        let name = thread(l);
        if !serves(&name) {
            continue;
        }
        let us = calibrated(l, w);
        handoffs.add_wait(name.as_str(), w.resource, us);
        let length = lengths
            .get(l.frames.as_slice())
            .copied()
            .unwrap_or_default();
        match w.resource {
            Resource::Work | Resource::Idle => idle_us += us,
            // The run queue's part, from the scheduler's own count.
            Resource::Preempted => {}
            // The accept queue's cause, not a request's wait.
            _ if acceptors.contains(&name) => {}
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
    let queued = pool_queue(&handoffs, n);
    if let Some(q) = &queued {
        idle_us = (idle_us - q.part.per_request_ms * 1e3 * n as f64).max(0.0);
    }

    let part = |place, per_request_ms| TailPart {
        place,
        per_request_ms,
        ..Default::default()
    };
    let reach = |waits: f64| waits * per_thread / n as f64;
    let arrivals_per_thread = load.throughput_rps / running;
    let mut costs = Vec::new();
    // The request threads' CPU: a background thread's (a refresher, a collector) is no
    // request's.
    let cpu_ns: u64 = (server.threads.iter())
        .filter(|t| serves(&t.comm))
        .map(|t| t.oncpu_ns.max(t.user_ns + t.sys_ns))
        .sum();
    // A Go program's thread that holds the world stopped (the collector, or a goroutine that has
    // not reached a safepoint) is one of its request threads, all named alike: its CPU meanwhile
    // is the pause's, not a request's (a JVM's runs in threads of their own names).
    let stopped_ms = (server.families.pauses.pauses.iter())
        .filter(|p| p.runtime == "go")
        .map(|p| p.total_ns as f64 / 1e6 / n as f64)
        .sum::<f64>();
    let cpu_ms = match cpu_ns {
        0 => input.server_cpu_us / 1e3,
        ns => ns as f64 / 1e6 / n as f64,
    };
    let cpu_ms = (cpu_ms - stopped_ms).max(0.0);
    let oncpu: Vec<FoldedLine> = (stacks.of_group(StackKind::OnCpu, GROUP_SERVER).into_iter())
        .filter(|l| l.frames.first().is_some_and(|t| serves(t)))
        .collect();
    // A request served in one run of its thread on a CPU (wakeup to sleep) waits that run out:
    // the runs' lengths say how the CPU's time falls on the slowest requests (a spin in one
    // request in fifty is that one's, not a fiftieth of each).
    let group_ns: u64 = server.threads.iter().map(|t| t.oncpu_ns).sum();
    let go_pauses = server
        .families
        .pauses
        .pauses
        .iter()
        .any(|p| p.runtime == "go");
    // Their waits for a CPU after a preemption go with them (preempted.rs): the runs are timed
    // by the wall clock, and what they carry of those waits at p99 moves to the run queue's part.
    let preempted = Preempted::of(&server.threads, serves);
    let walls = run_wall_lengths
        .zip(oncpu_run_lengths)
        .filter(|(w, _)| w.total() > 0 && preempted.ns > 0 && runq_preempted_lengths.is_some());
    // Counted as the run queue's part counts its waits: each delays the requests in flight on
    // its thread.
    let (run_lengths, preempted_ms) = match walls {
        Some((w, _)) => (Some(w), per_request(preempted.ns as f64 / 1e3) * per_thread),
        None => (oncpu_run_lengths, 0.0),
    };
    let runs = run_lengths
        .filter(|h| h.total() > 0 && cpu_ns as f64 >= MIN_RUNS_SHARE * group_ns as f64)
        .map(|h| match pause_lengths.filter(|_| go_pauses) {
            Some(pauses) => without_pauses(h, pauses),
            None => h.clone(),
        })
        .filter(|h| h.total() > 0)
        .and_then(|h| {
            let ns = (group_ns + walls.map_or(0, |_| preempted.group_ns)) as f64
                - stopped_ms * 1e6 * n as f64;
            let mean_ms = ns.max(0.0) / 1e6 / h.total() as f64;
            Some((h.total() as f64, mean_ms, lengths_of(&h, mean_ms)?))
        });
    costs.push(Cost {
        part: TailPart {
            function: hottest_function(&oncpu, &input.stacks.modules),
            threads: request_threads.clone(),
            ..part(Place::OnCpu, cpu_ms + preempted_ms)
        },
        uniform: true,
        affected: runs.as_ref().map(|(k, _, _)| reach(*k)),
        each_ms: runs.as_ref().map(|(_, mean, _)| *mean),
        pinned_ms: None,
        lengths: runs.map(|(_, _, l)| l),
    });
    costs.push(Cost {
        part: part(Place::Client, input.client_cpu_us / 1e3),
        uniform: true,
        affected: None,
        each_ms: None,
        pinned_ms: None,
        lengths: None,
    });
    let (runq_ns, runq_waits) = (server.threads.iter())
        .filter(|t| serves(&t.comm))
        .fold((0, 0), |(ns, k), t| (ns + t.runq_ns, k + t.runq_waits));
    let runq_total = (per_request(runq_ns as f64 / 1e3) * per_thread, runq_waits);
    let runq_total_mean = (runq_waits > 0).then(|| runq_ns as f64 / 1e6 / runq_waits as f64);
    // With the runs by the wall clock, the run queue's own part is the waits after a wakeup.
    let wakeup_lengths = walls
        .and(runq_preempted_lengths)
        .zip(runq_lengths)
        .map(|(preempted, all)| all.minus(preempted));
    let (runq_ns, runq_waits, runq_lengths) = match walls {
        Some(_) => (
            runq_ns.saturating_sub(preempted.ns),
            runq_waits.saturating_sub(preempted.waits),
            wakeup_lengths.as_ref(),
        ),
        None => (runq_ns, runq_waits, runq_lengths),
    };
    // Who held the CPUs the server waited for: the process that held them longest (an idle CPU,
    // the wake-up's own latency, or the time before the last holder's slice is no one's), or a
    // CPU quota that held the server's threads back, whichever held the larger share of the wait,
    // from MIN_HOLDER_SHARE of it.
    let process = (server.runq_holders.iter())
        .filter(|h| h.is_a_process())
        .max_by_key(|h| h.wait_ns)
        .map(|h| (h.share, format!("{} (pid {})", h.comm, h.pid)));
    let quota = (server.cpu_limits.iter())
        .map(|q| (q.share_of_wait(&server.threads), q))
        .max_by(|a, b| a.0.total_cmp(&b.0))
        .map(|(share, q)| {
            let named = format!("the CPU quota of {} ({:.2} CPUs)", q.cgroup, q.cpus());
            (share, named)
        });
    let cpu_holder = [process, quota]
        .into_iter()
        .flatten()
        .filter(|(share, _)| *share >= MIN_HOLDER_SHARE)
        .max_by(|a, b| a.0.total_cmp(&b.0))
        .map(|(share, who)| format!("{who}, {:.0}% of it", share * 100.0));
    let runq_mean_ms = (runq_waits > 0).then(|| runq_ns as f64 / 1e6 / runq_waits as f64);
    let runq_part = TailPart {
        requests_delayed: per_thread,
        held_by: cpu_holder,
        waits: Some(runq_waits as f64),
        mean_wait_ms: runq_mean_ms,
        ..part(
            Place::RunQueue,
            per_request(runq_ns as f64 / 1e3) * per_thread,
        )
    };
    costs.push(Cost {
        part: runq_part.clone(),
        uniform: false,
        affected: (runq_waits > 0).then(|| reach(runq_waits as f64)),
        each_ms: None,
        pinned_ms: None,
        lengths: runq_lengths
            .zip(runq_mean_ms)
            .and_then(|(h, mean)| lengths_of(h, mean)),
    });
    if let Some(cost) = pauses(server, pause_lengths, request_threads.clone(), n) {
        costs.push(cost);
    }
    // Open loop: the time from a request's intended send to its actual one, the corrected
    // latency's mean less the uncorrected's, on the requests sent behind schedule. The load
    // generator timed it in each request: in those at p99 it is what it measured there, not a
    // share the split infers (late sends need not be the slow ones).
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
            each_ms: None,
            pinned_ms: o.late_at_p99_us.map(|us| us / 1e3),
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
    // The timeout of the side whose count is the losses.
    let (lost, other) = match by_server >= by_client {
        true => (server.tcp.rto_ms, client.tcp.rto_ms),
        false => (client.tcp.rto_ms, server.tcp.rto_ms),
    };
    let rto_ms = lost.or(other).unwrap_or(RTO_MIN_MS);
    // A timeout no request waited out (none took TIMEOUT_WAITED of it) was not how those were
    // recovered: a deep queue's early probes and fast retransmits resend before any timeout,
    // and their requests waited no timeout.
    let slowest_ms = (load.latency_us.max > 0).then(|| load.latency_us.max as f64 / 1e3);
    for (what, resource, resent, wait_ms) in [
        (
            "SYNs retransmitted to the server",
            Resource::SynRetransmit,
            server.tcp.syn_retransmits,
            server.tcp.syn_timeout_ms.unwrap_or(SYN_TIMEOUT_MS),
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
        let waited = slowest_ms.is_none_or(|slowest| slowest >= TIMEOUT_WAITED * wait_ms);
        if resent > 0 && waited {
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
                each_ms: None,
                pinned_ms: None,
                lengths: None,
            });
        }
    }
    costs.extend(held_sends(server, send_hold_lengths, transfer_lengths, n));
    // A thread asleep reading a connection the server opened waits for that service's answer, in
    // a request: the kernel timed each such sleep (a thread per connection's read looks like
    // one for its client's next request in the stacks, so that time is out of the idle time).
    // The kernel also timed each ask on those connections until its answer: the answers'
    // lengths shape the sleeps' (a rare slow answer among fast ones).
    let mut service_us = 0.0;
    let slept_on = |o: &&Outbound| o.waits > 0 && 2 * o.wait_ns >= o.answer_ns;
    for o in server.outbound.iter().filter(slept_on) {
        let us = o.wait_ns as f64 / 1e3;
        service_us += us;
        let mean_wait_ms = us / 1e3 / o.waits as f64;
        let delayed = match per_thread > 1.0 {
            true => per_thread + arrivals_per_thread * mean_wait_ms / 1e3 / 2.0,
            false => per_thread,
        };
        // The slow answers are counted among the answers, at their own lengths: the sleeps on
        // the connection are as many as the answers only where each answer is one sleep (an
        // event loop sleeps on it between the reads of one answer, or not at all).
        costs.push(Cost {
            affected: Some(o.waits as f64 * delayed / n as f64),
            each_ms: None,
            pinned_ms: None,
            lengths: (o.answer_lengths.as_ref()).and_then(|h| lengths_of(h, mean_wait_ms)),
            part: TailPart {
                requests_delayed: delayed,
                resource: Some(Resource::Service),
                waits: Some(o.waits as f64),
                mean_wait_ms: Some(mean_wait_ms),
                held_by: Some(o.remote.clone()),
                long_waits: slow_answers(o),
                ..part(Place::Blocked, per_request(us) * delayed)
            },
            uniform: false,
        });
    }
    // A service no thread slept on for most of its answers' time (an event loop's, a runtime's
    // netpoller's): each answer delayed its own request alone, by its length.
    for o in (server.outbound.iter()).filter(|o| o.answers > 0 && !slept_on(o)) {
        let us = o.answer_ns as f64 / 1e3;
        let mean_wait_ms = us / 1e3 / o.answers as f64;
        costs.push(Cost {
            affected: Some(o.answers as f64 / n as f64),
            each_ms: None,
            pinned_ms: None,
            lengths: (o.answer_lengths.as_ref()).and_then(|h| lengths_of(h, mean_wait_ms)),
            part: TailPart {
                requests_delayed: 1.0,
                resource: Some(Resource::Service),
                waits: Some(o.answers as f64),
                mean_wait_ms: Some(mean_wait_ms),
                held_by: Some(o.remote.clone()),
                long_waits: slow_answers(o),
                ..part(Place::Blocked, per_request(us))
            },
            uniform: false,
        });
    }
    idle_us = (idle_us - service_us).max(0.0);
    // What the acceptors did: their waits over the whole run, a rare long one with no stack drawn
    // (its syscall alone, outside the timed window) included.
    let mut acceptor_waits: Vec<(Wait, f64, String)> = Vec::new();
    for l in (input.stacks.offcpu.iter()).filter(|l| l.group == GROUP_SERVER) {
        let (name, w) = (thread(l), wait_of(&l.frames));
        // A wait nothing names is no holder: new threads carry the acceptor's name until they
        // rename themselves, and their first switch-outs, undrawn, land there.
        if !acceptors.contains(&name)
            || matches!(
                w.resource,
                Resource::Work | Resource::Idle | Resource::Preempted | Resource::Unknown
            )
        {
            continue;
        }
        match (acceptor_waits.iter_mut()).find(|(aw, _, t)| *aw == w && *t == name) {
            Some(a) => a.1 += l.value as f64,
            None => acceptor_waits.push((w, l.value as f64, name)),
        }
    }
    if let Some(cost) = accept_queue(server, &acceptors, &acceptor_waits, accept_lengths, n) {
        costs.push(cost);
    }
    costs.extend(queued);
    let shown = MAX_PARTS.saturating_sub(costs.len());
    for b in blocked.into_iter().take(shown) {
        let (drawn_us, periods) = b.length;
        let drawn_mean_ms = (periods > 0).then(|| drawn_us as f64 / 1e3 / periods as f64);
        // The scheduler counted every sleep in the syscall: a wait that holds nearly all of its
        // time takes that count (a few drawn periods make a noisy mean), others the drawn mean.
        let counted = (b.wait.syscall.as_deref())
            .and_then(|sc| exact.get(sc))
            .filter(|(k, ns)| *k > 0 && b.us * 1e3 >= MIN_SYSCALL_SHARE * *ns as f64)
            .map(|(k, ns)| *k as f64 * (b.us * 1e3 / *ns as f64).min(1.0));
        let (count, mean_wait_ms) = match counted {
            Some(k) => (Some(k), Some(b.us / 1e3 / k)),
            None => (
                drawn_mean_ms.filter(|m| *m > 0.0).map(|m| b.us / 1e3 / m),
                drawn_mean_ms,
            ),
        };
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
                        let doing =
                            (h.doing.as_deref()).map_or(String::new(), |d| format!(", {d}"));
                        Some(format!(
                            "{} (tid {}) at {}{doing}",
                            h.comm, h.tid, l.address
                        ))
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
            each_ms: None,
            pinned_ms: None,
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
    for c in &mut costs {
        let p = &mut c.part;
        let ended_by_another = matches!(
            p.resource,
            Some(Resource::Pipe | Resource::UnixSocket | Resource::FileLock | Resource::Child)
        );
        if ended_by_another {
            p.held_by = (p.waits).and_then(|w| other_end(server, &client.pids, &p.threads, w));
        }
    }
    // A service's long waits are its slow answers, counted where its part is made.
    for c in (costs.iter_mut()).filter(|c| c.part.resource != Some(Resource::Service)) {
        c.part.long_waits = long_waits(c);
    }
    let (mut parts, unaccounted_ms) = allocate(costs, p50_ms, p99_ms);
    if let Some((wall, cpu)) = walls {
        let tail_ms = (parts.iter().find(|p| p.place == Place::OnCpu)).map_or(0.0, |p| p.tail_ms);
        let cpu_share = cpu_share_at(cpu, wall, tail_ms);
        let all = TailPart {
            per_request_ms: runq_total.0,
            waits: Some(runq_total.1 as f64),
            mean_wait_ms: runq_total_mean,
            ..runq_part
        };
        move_to_run_queue(&mut parts, cpu_share, cpu_ms, all, p99_ms);
    }
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

/// How many request threads shared the work, each counted by its share of their CPU time (the
/// inverse Simpson index): an nginx master that woke once, or a child forked by a worker that
/// ran a moment under its name, counts for next to nothing, where a count of every thread that
/// ran made one worker two and halved the requests each wait delays.
fn effective_threads(server: &KernelReport, serves: &dyn Fn(&str) -> bool) -> f64 {
    let cpu: Vec<f64> = (server.threads.iter())
        .filter(|t| serves(&t.comm))
        .map(|t| t.oncpu_ns.max(t.user_ns + t.sys_ns) as f64)
        .filter(|&ns| ns > 0.0)
        .collect();
    let sum: f64 = cpu.iter().sum();
    let squares: f64 = cpu.iter().map(|ns| ns * ns).sum();
    match squares > 0.0 {
        true => (sum * sum / squares).max(1.0),
        false => 1.0,
    }
}
