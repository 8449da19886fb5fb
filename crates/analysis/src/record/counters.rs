//! Cumulative kernel counters read at one instant from the probes' maps: plain data.

use serde::{Deserialize, Serialize};
use srvprof_common::{NR_SOFTIRQS, NUM_GROUPS, hist, lost, tcp};

/// One watched thread's cumulative figures from the scheduler and syscall probes.
#[derive(Clone, Debug, Default, PartialEq, Eq, Serialize, Deserialize)]
pub struct ThreadCounters {
    pub tid: u32,
    pub pid: u32,
    pub group: u32,
    pub comm: String,
    pub voluntary_switches: u64,
    pub involuntary_switches: u64,
    pub oncpu_ns: u64,
    /// On-CPU time by the programs' own switch stamps (ThreadStats::stamped_oncpu_ns); oncpu_ns
    /// is the scheduler's charge, which may start before the switch-in.
    #[serde(default)]
    pub stamped_oncpu_ns: u64,
    pub offcpu_ns: u64,
    pub runq_ns: u64,
    pub runq_count: u64,
    pub migrations: u64,
    pub syscalls: u64,
    pub syscall_ns: u64,
    pub cpu_mask: u64,
    /// Voluntary off-CPU periods inside syscalls and their time (always counted), and the
    /// syscalls the sampled windows timed that did not block and their time outside blocked
    /// periods (see KernelCounters::blocked_syscalls).
    #[serde(default)]
    pub syscalls_blocked: u64,
    #[serde(default)]
    pub syscall_blocked_ns: u64,
    #[serde(default)]
    pub syscalls_unblocked: u64,
    #[serde(default)]
    pub syscall_rest_ns: u64,
    /// Memory the thread reclaimed itself (direct or memcg reclaim): how often and how long.
    #[serde(default)]
    pub reclaims: u64,
    #[serde(default)]
    pub reclaim_ns: u64,
    /// The run-queue waits that began with a preemption (part of runq_ns and runq_count).
    #[serde(default)]
    pub runq_preempted_ns: u64,
    #[serde(default)]
    pub runq_preempted_count: u64,
}

/// Cumulative wakeups of one watched thread by one waker.
#[derive(Clone, Debug, Default, PartialEq, Eq, Serialize, Deserialize)]
pub struct WakePair {
    pub waker_pid: u32,
    pub waker_tid: u32,
    pub waker_comm: String,
    pub wakee_tid: u32,
    pub wakee_group: u32,
    pub count: u64,
}

/// Cumulative waits of one group's watched threads for a CPU that ended with this task giving
/// the CPU up (the task that held it when the wait ended).
#[derive(Clone, Debug, Default, PartialEq, Eq, Serialize, Deserialize)]
pub struct RunqHolder {
    pub holder_pid: u32,
    pub holder_tid: u32,
    pub holder_comm: String,
    pub group: u32,
    pub waits: u64,
    pub wait_ns: u64,
}

/// Cumulative uninterruptible sleeps (disk I/O, a page fault's read, a kernel lock) of one watched
/// process's threads in one syscall on one file descriptor.
#[derive(Clone, Debug, Default, PartialEq, Eq, Serialize, Deserialize)]
pub struct DiskWait {
    pub pid: u32,
    pub group: u32,
    /// The syscall's number plus one; 0 when not in a syscall (a page fault).
    pub nr_slot: u32,
    /// The descriptor the syscall was given (-1: none), and the file it named when read ("" if
    /// it was closed by then).
    pub fd: i32,
    pub path: String,
    pub count: u64,
    pub total_ns: u64,
}

/// Cumulative futex waits of one watched thread on one futex word, charged to one thread (the
/// one that woke it, or the holder at the head of the queue it waited in).
#[derive(Clone, Debug, Default, PartialEq, Eq, Serialize, Deserialize)]
pub struct LockWaitRecord {
    pub pid: u32,
    pub group: u32,
    /// The futex word's address in the process.
    pub uaddr: u64,
    pub waiter_tid: u32,
    pub holder_tid: u32,
    pub holder_pid: u32,
    /// The waits followed a lock's protocol (srvprof_common::futex_lock_protocol).
    #[serde(default)]
    pub lock_protocol: bool,
    pub waits: u64,
    pub wait_ns: u64,
    /// The syscall (its number plus one) the holder slept in while they waited, most lately,
    /// and the waits' time its sleeps covered: a lock held across a syscall.
    #[serde(default)]
    pub holder_slept_nr: u32,
    #[serde(default)]
    pub holder_slept_ns: u64,
}

#[derive(Clone, Copy, Debug, Default, PartialEq, Eq, Serialize, Deserialize)]
pub struct CountNs {
    pub count: u64,
    pub total_ns: u64,
}

impl CountNs {
    pub fn minus(self, earlier: CountNs) -> CountNs {
        CountNs {
            count: self.count.saturating_sub(earlier.count),
            total_ns: self.total_ns.saturating_sub(earlier.total_ns),
        }
    }
}

/// A log-linear histogram (srvprof_common::hist slots) of nanoseconds.
#[derive(Clone, Debug, PartialEq, Eq, Serialize, Deserialize)]
pub struct NsHistogram {
    pub slots: Vec<u64>,
}

impl Default for NsHistogram {
    fn default() -> Self {
        Self {
            slots: vec![0; hist::SLOTS as usize],
        }
    }
}

impl NsHistogram {
    pub fn total(&self) -> u64 {
        self.slots.iter().sum()
    }

    pub fn minus(&self, earlier: &NsHistogram) -> NsHistogram {
        NsHistogram {
            slots: self
                .slots
                .iter()
                .zip(&earlier.slots)
                .map(|(a, b)| a.saturating_sub(*b))
                .collect(),
        }
    }

    pub fn add(&mut self, other: &NsHistogram) {
        for (a, b) in self.slots.iter_mut().zip(&other.slots) {
            *a += b;
        }
    }

    /// The value (ns) at quantile q in 0..=1, decoded by srvprof_common::hist (the upper bound
    /// of the slot holding it). None when empty.
    pub fn quantile_ns(&self, q: f64) -> Option<u64> {
        hist::quantile(&self.slots, q)
    }

    /// The upper bound of the highest non-empty slot.
    pub fn max_ns(&self) -> Option<u64> {
        hist::max(&self.slots)
    }
}

/// Resets one side (srvprof_common::tcp::SIDE_*) sent or received in one TCP state, for one
/// reason, cumulative. Names are the kernel's, read from its BTF.
#[derive(Clone, Debug, Default, PartialEq, Eq, Serialize, Deserialize)]
pub struct TcpResetCount {
    pub side: u32,
    pub sent: bool,
    /// "ESTABLISHED", "TIME_WAIT", ...; "NO_SOCKET" for a reset sent with no socket.
    pub state: String,
    /// The kernel's sk_rst_reason without its prefix ("TCP_ABORT_ON_CLOSE"); None when received.
    pub reason: Option<String>,
    pub count: u64,
}

/// New connections the server took on one listening port and their waits to be taken (from the
/// handshake's end to the server's first read: the accept queue, then until the accepted
/// connection is read), cumulative.
#[derive(Clone, Debug, Default, PartialEq, Eq, Serialize, Deserialize)]
pub struct AcceptWaitCount {
    pub port: u16,
    pub accepts: u64,
    pub wait_ns: u64,
}

/// Everything the probes count, cumulative since attach, read at `monotonic_ns`.
#[derive(Clone, Debug, Default, PartialEq, Serialize, Deserialize)]
pub struct KernelCounters {
    pub monotonic_ns: u64,
    /// The kernel's jiffy (ns), the unit of its retransmission timeouts.
    #[serde(default)]
    pub jiffy_ns: Option<u64>,
    pub threads: Vec<ThreadCounters>,
    /// Per group (server, client).
    pub offcpu_hist: Vec<NsHistogram>,
    pub runq_hist: Vec<NsHistogram>,
    /// Per group: on-CPU runs, a thread's CPU time from a wakeup to its next sleep (empty in
    /// recordings made before they were counted).
    #[serde(default)]
    pub oncpu_run_hist: Vec<NsHistogram>,
    /// Per group: the same runs by the wall clock (their waits for a CPU after each preemption
    /// added), and the run-queue waits that began with a preemption (empty in recordings made
    /// before they were counted).
    #[serde(default)]
    pub run_wall_hist: Vec<NsHistogram>,
    #[serde(default)]
    pub runq_preempted_hist: Vec<NsHistogram>,
    /// (group, syscall number, count and time).
    pub syscalls: Vec<(u32, u32, CountNs)>,
    /// (group, syscall number, the voluntary off-CPU periods inside that syscall and their
    /// time): counted by the scheduler programs all along, in sampled mode too, so the time
    /// syscalls spend asleep (a blocking epoll_wait's) is exact in every mode. None in
    /// recordings made before it was counted.
    #[serde(default)]
    pub blocked_syscalls: Option<Vec<(u32, u32, CountNs)>>,
    /// (group, syscall number, the calls timed while the syscall programs were attached that did
    /// not block, and every timed call's time outside its blocked periods): what sampled mode
    /// scales up and adds to blocked_syscalls.
    #[serde(default)]
    pub unblocked_syscalls: Option<Vec<(u32, u32, CountNs)>>,
    /// Who woke the watched threads, and how often.
    pub wakeups: Vec<WakePair>,
    /// Who held the CPU when the watched threads' waits for one ended.
    #[serde(default)]
    pub runq_holders: Vec<RunqHolder>,
    /// The watched processes' uninterruptible sleeps, per syscall and file.
    #[serde(default)]
    pub disk_waits: Vec<DiskWait>,
    /// The watched threads' futex waits, per futex word, waiter and holder.
    #[serde(default)]
    pub lock_waits: Vec<LockWaitRecord>,
    /// The parts of the families that declare their own (`pauses`, ...), each field named as
    /// in its family's file.
    #[serde(flatten)]
    pub families: FamilyCounters,
    /// True when the syscall probes were not attached (--syscalls off): no syscall figure is real.
    pub syscalls_off: bool,
    /// Sampled mode: how long the syscall and interrupt programs have been attached so far (their
    /// counts cover only that time). None in exact mode: attached all along.
    #[serde(default)]
    pub traced_ns: Option<u64>,
    /// Per CPU, per softirq vector.
    pub softirqs: Vec<Vec<CountNs>>,
    /// (irq line, per-CPU count and time).
    pub hardirqs: Vec<(u32, Vec<CountNs>)>,
    /// Indexed by srvprof_common::tcp::index(side, counter).
    pub tcp: Vec<u64>,
    /// Resets of the server and client sides by direction, state and reason, cumulative.
    #[serde(default)]
    pub tcp_resets: Vec<TcpResetCount>,
    /// The server's new connections and their waits to be taken, by port.
    #[serde(default)]
    pub accept_waits: Vec<AcceptWaitCount>,
    /// Those waits' lengths (ns), every port's.
    #[serde(default)]
    pub accept_hist: NsHistogram,
    /// The server's written bytes held unsent in its sockets until an ACK let them go, and
    /// their waits' lengths (ns), by why (srvprof_common::tcp::HOLD_*).
    #[serde(default)]
    pub send_holds: Vec<CountNs>,
    #[serde(default)]
    pub send_hold_hist: Vec<NsHistogram>,
    /// Indexed by srvprof_common::lost.
    pub lost: Vec<u64>,
}

impl KernelCounters {
    /// Whether the syscalls' sleeps were counted apart from what the windows saw (recordings
    /// from before that was counted have neither table).
    pub fn sleeps_apart(&self) -> bool {
        self.blocked_syscalls.is_some() && self.unblocked_syscalls.is_some()
    }

    /// What the windows saw that sampled mode scales up: with the sleeps counted apart, the
    /// calls that did not block and the time awake; otherwise every call and its time.
    pub fn scaled_syscalls(&self) -> &Vec<(u32, u32, CountNs)> {
        match &self.unblocked_syscalls {
            Some(rows) if self.sleeps_apart() => rows,
            _ => &self.syscalls,
        }
    }

    pub fn empty(ncpus: usize) -> Self {
        Self {
            monotonic_ns: 0,
            jiffy_ns: None,
            threads: Vec::new(),
            offcpu_hist: vec![NsHistogram::default(); NUM_GROUPS as usize],
            runq_hist: vec![NsHistogram::default(); NUM_GROUPS as usize],
            oncpu_run_hist: vec![NsHistogram::default(); NUM_GROUPS as usize],
            run_wall_hist: vec![NsHistogram::default(); NUM_GROUPS as usize],
            runq_preempted_hist: vec![NsHistogram::default(); NUM_GROUPS as usize],
            syscalls: Vec::new(),
            blocked_syscalls: None,
            unblocked_syscalls: None,
            syscalls_off: false,
            traced_ns: None,
            wakeups: Vec::new(),
            runq_holders: Vec::new(),
            disk_waits: Vec::new(),
            lock_waits: Vec::new(),
            families: FamilyCounters::default(),
            softirqs: vec![vec![CountNs::default(); NR_SOFTIRQS as usize]; ncpus],
            hardirqs: Vec::new(),
            tcp: vec![0; (tcp::SIDES * tcp::COUNT) as usize],
            tcp_resets: Vec::new(),
            accept_waits: Vec::new(),
            accept_hist: NsHistogram::default(),
            send_holds: Vec::new(),
            send_hold_hist: Vec::new(),
            lost: vec![0; lost::COUNT as usize],
        }
    }
}

// FamilyCounters (build.rs).
include!(concat!(env!("OUT_DIR"), "/record_families.rs"));
