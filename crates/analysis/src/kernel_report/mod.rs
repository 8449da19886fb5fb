//! What the probes saw over a span between two readings, for one group (server or client): the `srvprof probe`
//! JSON contract, also the `server` and `client` parts of run.json.
//!
//! This file holds the report and its parts common to every family (threads, totals, syscalls);
//! each family's part is typed beside the code that computes it (irq.rs, tcp.rs, locks.rs,
//! memory.rs, pauses.rs, disk_waits.rs, runq_holders.rs, cpu_limits.rs). compose.rs builds a
//! report from two readings, sampling.rs scales the sampled-mode figures and uncertainty.rs
//! states how closely they are known.

mod compose;
mod cpu_limits;
mod deltas;
mod disk_waits;
mod locks;
mod runq_holders;
pub mod sampling;
pub mod uncertainty;
// The families' modules here, and their figures joined up (build.rs).
include!(concat!(env!("OUT_DIR"), "/report_families.rs"));

use std::collections::BTreeMap;

use serde::{Deserialize, Serialize};

use crate::record::{ExitRecord, NsHistogram, Outbound};

pub use compose::kernel_report;
pub use cpu_limits::CpuLimitReport;
pub use disk_waits::{DiskWaitReport, TOP_DISK_WAITS};
pub use irq::{HardirqReport, SoftirqReport, hardirq_deltas, softirq_deltas};
pub use locks::{LockHolder, LockReport, TOP_LOCKS};
pub use memory::MemoryReport;
pub use pauses::PauseReport;
pub use runq_holders::{RunqHolderReport, TOP_RUNQ_HOLDERS};
pub use sampling::{Basis, traced_fraction, traced_share, traced_share_by};
pub use tcp::{
    AcceptQueuePort, AcceptQueueReport, HOLD_KIND_NAMES, HostTcpReport, ResetReport, SendHoldKind,
    SendHoldReport, TcpReport,
};

/// How often one thread woke a watched thread in the span.
#[derive(Clone, Debug, Default, PartialEq, Serialize, Deserialize)]
pub struct WakeupReport {
    pub waker_pid: u32,
    pub waker_tid: u32,
    /// The waker's name; an interrupt's wakeup names the task it interrupted (swapper/N: idle).
    pub waker_comm: String,
    pub wakee_tid: u32,
    pub wakee_comm: String,
    pub count: u64,
}

/// How often threads of one name woke the group's threads of one name in the span: who is at
/// the other end of what they wait on (a pipe's writer, a lock's holder). `processes` is how
/// many processes they were in (a helper started per request is a new one each time), and
/// `waker_pid` the one that woke them most.
#[derive(Clone, Debug, Default, PartialEq, Serialize, Deserialize)]
pub struct WakerReport {
    pub waker_pid: u32,
    pub waker_comm: String,
    pub wakee_comm: String,
    pub count: u64,
    #[serde(default)]
    pub processes: u64,
}

/// A thread of the group that did nothing in the span.
#[derive(Clone, Debug, Default, PartialEq, Serialize, Deserialize)]
pub struct QuietThread {
    pub tid: u32,
    pub pid: u32,
    pub comm: String,
}

/// DiskWaitReport::syscall of a sleep outside a syscall: a page fault waiting for its page.
pub const PAGE_FAULT: &str = "page fault";

/// The pairs kept in a report, most frequent first.
pub const TOP_WAKEUPS: usize = 20;
/// The wakers kept, by thread name.
pub const TOP_WAKERS: usize = 50;

#[derive(Clone, Debug, Default, PartialEq, Serialize, Deserialize)]
pub struct ThreadReport {
    pub tid: u32,
    pub pid: u32,
    pub comm: String,
    pub voluntary_switches: u64,
    pub involuntary_switches: u64,
    pub oncpu_ns: u64,
    /// Of oncpu_ns, what the scheduler charged before the thread's switch-ins: woken on an idle
    /// CPU, it is charged from the wakeup, while the CPU still leaves idle; no timer samples it.
    #[serde(default)]
    pub precharged_ns: u64,
    pub offcpu_ns: u64,
    pub user_ns: u64,
    pub sys_ns: u64,
    pub runq_ns: u64,
    /// How many times the thread waited in a run queue (runq_ns is their sum).
    pub runq_waits: u64,
    /// Those of its waits that began with a preemption, mid-run (a wakeup began the others).
    #[serde(default)]
    pub runq_preempted_ns: u64,
    #[serde(default)]
    pub runq_preempted_waits: u64,
    pub migrations: u64,
    pub syscalls: u64,
    pub syscall_ns: u64,
    pub cpus: Vec<u32>,
}

#[derive(Clone, Debug, Default, PartialEq, Serialize, Deserialize)]
pub struct Totals {
    pub voluntary_switches: u64,
    pub involuntary_switches: u64,
    pub migrations: u64,
    pub syscalls: u64,
    pub user_ns: u64,
    pub sys_ns: u64,
    pub oncpu_ns: u64,
    /// Of oncpu_ns, the part charged before switch-ins (ThreadReport::precharged_ns).
    #[serde(default)]
    pub precharged_ns: u64,
    pub offcpu_ns: u64,
    pub threads: usize,
    pub processes: usize,
}

#[derive(Clone, Debug, Default, PartialEq, Serialize, Deserialize)]
pub struct LatencyUs {
    pub count: u64,
    pub p50: f64,
    pub p90: f64,
    pub p99: f64,
    pub max: f64,
}

impl LatencyUs {
    pub fn from_hist(h: &NsHistogram) -> Self {
        let us = |v: Option<u64>| v.map(|ns| ns as f64 / 1000.0).unwrap_or(0.0);
        Self {
            count: h.total(),
            p50: us(h.quantile_ns(0.50)),
            p90: us(h.quantile_ns(0.90)),
            p99: us(h.quantile_ns(0.99)),
            max: us(h.max_ns()),
        }
    }
}

#[derive(Clone, Debug, Default, PartialEq, Serialize, Deserialize)]
pub struct SyscallReport {
    pub name: String,
    pub nr: u32,
    pub count: u64,
    pub total_ns: u64,
    /// Sampled mode: the 95 % uncertainty of count, as a share of it (sampling::state_errors).
    /// Absent in exact mode, or when the trace windows were too few to tell.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub count_error: Option<f64>,
    /// Sampled mode: the 95 % uncertainty of total_ns, as a share of it (sampling::state_errors).
    /// Absent in exact mode, or when the trace windows were too few to tell.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub time_error: Option<f64>,
    /// Sampled mode: the part of count and total_ns counted exactly, not scaled: the calls'
    /// sleeps (voluntary off-CPU periods inside this syscall, one per blocking call, and their
    /// time from switch-out to switch-in), which the scheduler programs count all along. The
    /// rest (calls that did not block, and every call's time awake) is scaled from the windows,
    /// and count_error and time_error are that part's uncertainty as a share of the whole.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub blocked: Option<u64>,
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub blocked_ns: Option<u64>,
}

#[derive(Clone, Debug, Default, PartialEq, Serialize, Deserialize)]
pub struct KernelReport {
    pub duration_s: f64,
    pub pids: Vec<u32>,
    pub threads: Vec<ThreadReport>,
    pub totals: Totals,
    pub runq_latency_us: LatencyUs,
    pub offcpu_us: LatencyUs,
    pub syscalls: Vec<SyscallReport>,
    /// True when the run was made with --syscalls off: `syscalls` and every syscall total are
    /// then not measured (their 0 means nothing), rather than "no syscalls".
    #[serde(default)]
    pub syscalls_off: bool,
    /// None: syscalls and softirqs were traced all the time (--exact), every figure counted.
    /// Otherwise the share of the span their programs were attached (sampled mode, the
    /// default): syscall counts and times are scaled up from those windows, softirq counts are
    /// the kernel's own (/proc/softirqs) and their times the windows' mean per event (NET_RX's:
    /// per packet) times those counts. Hardirqs are counted and timed all along in both modes.
    #[serde(default)]
    pub traced_fraction: Option<f64>,
    /// What the syscall figures were divided by: with a load generator (`run`), the share of
    /// its responses that arrived while the programs were attached (the server is slower then,
    /// so time would undercount); else the share of the group's read/write calls made then (the
    /// kernel's exact per-task count: a burst a window catches or misses counts as what it is);
    /// else traced_fraction. None in exact mode.
    #[serde(default)]
    pub traced_share: Option<f64>,
    /// What traced_share is a share of: "responses" (the load generator's), "io_calls" (the
    /// group's read- and write-type syscalls, /proc/PID/io) or "time"; "oncpu" and
    /// "switches" are understood but not chosen. None in exact mode.
    #[serde(default)]
    pub scaled_by: Option<String>,
    /// Sampled mode: how far off the syscall totals may be, as a share of them (95 %, from how
    /// much the windows differ: the jackknife of sampling::relative_error). None in exact mode,
    /// or with too few windows to tell.
    #[serde(default)]
    pub syscalls_error: Option<f64>,
    /// Sampled mode: the same for the syscalls' summed time (each syscall's figures carry their
    /// own: SyscallReport::count_error, time_error).
    #[serde(default)]
    pub syscall_time_error: Option<f64>,
    /// Sampled mode: the part of the syscall totals counted exactly (SyscallReport::blocked,
    /// blocked_ns, summed): the syscalls' sleeps and their time.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub syscalls_blocked: Option<u64>,
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub syscall_blocked_ns: Option<u64>,
    /// Sampled mode: the group was busy but no window caught it (no syscall, and too little time
    /// on a CPU or too few switches in the windows to scale by): its syscall figures are unknown,
    /// not zero.
    #[serde(default)]
    pub syscalls_missed: bool,
    pub softirqs: Vec<SoftirqReport>,
    /// The most frequent waker -> woken-thread pairs (woken thread in this group).
    #[serde(default)]
    pub wakeups: Vec<WakeupReport>,
    /// Every waker of the group's threads, by thread name, the most wakeups first (TOP_WAKERS
    /// of them); a thread's siblings of its own name left out.
    #[serde(default, skip_serializing_if = "Vec::is_empty")]
    pub wakers: Vec<WakerReport>,
    /// Who held the CPU when this group's threads' waits for one ended, longest first.
    #[serde(default)]
    pub runq_holders: Vec<RunqHolderReport>,
    /// The group's threads that did nothing in the span (not one switch, syscall or tick):
    /// not in `threads`, but still there (an idle worker).
    #[serde(default)]
    pub quiet_threads: Vec<QuietThread>,
    /// The group's processes' parents (pid -> ppid): nginx's master is its workers' parent.
    #[serde(default)]
    pub parents: BTreeMap<u32, u32>,
    /// The server's connections to remote addresses other than its clients (its dependencies),
    /// as seen in the samples up to the span's end; empty for the load generator's side.
    #[serde(default)]
    pub outbound: Vec<Outbound>,
    /// This group's uninterruptible sleeps (disk I/O, page faults' reads, kernel locks) by
    /// process, syscall and file, longest first.
    #[serde(default)]
    pub disk_waits: Vec<DiskWaitReport>,
    /// Locks its threads queued on (futex words several waited on), longest waited on first.
    #[serde(default)]
    pub locks: Vec<LockReport>,
    /// Page faults that read pages in, and memory reclaimed by its threads.
    #[serde(default)]
    pub memory: MemoryReport,
    /// The figures of the families that declare their own (`pauses`, ...), each field named
    /// as in its family's file.
    #[serde(flatten)]
    pub families: FamilyFigures,
    pub hardirqs: Vec<HardirqReport>,
    pub exits: Vec<ExitRecord>,
    /// The control groups limiting this group's CPU time, and how often they held it back.
    #[serde(default)]
    pub cpu_limits: Vec<CpuLimitReport>,
    pub tcp: TcpReport,
    /// The host's TCP figures (not this group's): the kernel's MIB counters and what the probes
    /// saw on sockets on neither side.
    #[serde(default)]
    pub host_tcp: HostTcpReport,
    /// Records the kernel side could not keep, by reason; all must be 0 for a complete run.
    pub lost_events: BTreeMap<String, u64>,
    /// Times a watched thread ran with no sched_switch naming it as next (machine-wide, in the
    /// span). Not a loss: its on/off-CPU split came from the scheduler's sum_exec_runtime.
    #[serde(default)]
    pub switch_ins_unseen: u64,
    /// Stacks (machine-wide, in the span) whose bucket in the fixed-size stack map held another
    /// stack: the sample or off-CPU time is kept, under a frame saying its stack was lost. Only
    /// off-CPU stacks and on-CPU samples the ring had no room for use that map; not a lost record.
    #[serde(default)]
    pub stack_ids_collided: u64,
    /// Stacks (machine-wide, in the span) the user-stack ring had no room for, because the
    /// unwinding thread fell behind: they carry the kernel's frame-pointer walk instead of an
    /// unwinding from CFI (shallow through code without frame pointers; the unwind quality's
    /// `frame_pointers` share). Not a lost record: the sample or off-CPU time is kept.
    #[serde(default)]
    pub user_stack_ring_full: u64,
    /// This group's on-CPU samples in the span that found that ring full: kept in the kernel
    /// under their stacks without a time, so the measured span's sample count adds them.
    #[serde(default)]
    pub oncpu_untimed_samples: u64,
    /// The on-CPU sampler's late ticks (machine-wide, in the span), for its samples to add up
    /// to the sampled threads' CPU time: see OncpuTicks.
    #[serde(default)]
    pub oncpu_ticks: OncpuTicks,
}

/// Where the on-CPU sampler's ticks went that did not arrive while the thread they were due in
/// still ran. The timer's interrupt comes late (tens of microseconds on a VM) and never while
/// interrupts are off, as through a context switch, so a tick due as a thread went to sleep
/// would land on the next task (the idle one, mostly): 12-28 % of a busy nginx worker's samples
/// before these were kept.
#[derive(Clone, Copy, Debug, Default, PartialEq, Eq, Serialize, Deserialize)]
pub struct OncpuTicks {
    /// Ticks due while a watched thread ran and still pending when it switched out: taken then,
    /// for it, with its stacks at the switch-out. In the flamegraphs.
    pub at_switch: u64,
    /// Late ticks that arrived in a watched thread switched in after they were due: another
    /// task's, so not this thread's samples. Not in the flamegraphs.
    pub not_theirs: u64,
    /// Ticks the timer skipped while a watched thread ran (its interrupt held off a whole period
    /// or more, a stolen vCPU): samples that thread's flamegraph lacks.
    pub skipped: u64,
    /// Ticks, on any CPU, off the timer's grid: the kernel stopped and restarted it, as another
    /// profiler's control-group events do at each switch into or out of their group. Every
    /// per-CPU sampler then leans toward the group's threads (perf's too).
    #[serde(default)]
    pub restarted: u64,
}

impl KernelReport {
    /// Whether the syscall figures mean anything: not with --syscalls off, nor in a sampled
    /// window where the syscall programs were never attached.
    pub fn syscalls_recorded(&self) -> bool {
        !self.syscalls_off && self.traced_fraction != Some(0.0) && !self.syscalls_missed
    }

    /// In sampled mode, one sentence saying which figures are estimates and from how much time.
    pub fn sampling_note(&self) -> Option<String> {
        let f = self.traced_fraction?;
        if self.syscalls_missed && !self.syscalls_off {
            return Some(format!(
                "no sampled window caught the server busy ({}% of the time was traced), so its syscall figures are unknown, not zero; run longer or use --exact",
                percent(f)
            ));
        }
        let softirqs = "softirq times per event from the same windows";
        if self.syscalls_off {
            return Some(format!(
                "{softirqs} are estimates (sampled mode; softirq counts are the kernel's own, \
                 hardirqs are traced all along); --exact traces them all the time"
            ));
        }
        // Windows are placed where the server is busy, so the share of its work they saw, which
        // the counts are scaled by, can be several times their share of the time.
        let work = match (self.scaled_by.as_deref(), self.traced_share) {
            (Some("responses"), Some(share)) => {
                format!(
                    ", which saw {}% of the responses to the load",
                    percent(share)
                )
            }
            (Some("io_calls"), Some(share)) => {
                format!(
                    ", which saw {}% of the server's read/write calls",
                    percent(share)
                )
            }
            _ => String::new(),
        };
        Some(format!(
            "syscall counts and times are estimates from the {}% of the time their programs \
             were attached{work}, and {softirqs} (sampled mode; softirq counts are the kernel's \
             own, hardirqs are traced all along); --exact traces them all the time",
            percent(f)
        ))
    }
}

/// A share as a percentage a reader can tell from zero: one decimal below 10 %.
fn percent(share: f64) -> String {
    let p = share * 100.0;
    if p < 10.0 {
        format!("{p:.1}")
    } else {
        format!("{p:.0}")
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::record::{CountNs, KernelCounters, Reading};
    use srvprof_common::{GROUP_SERVER, SOFTIRQ_NAMES, tcp};

    /// A sample at `t_ns` whose probes saw `probe` NET_RX softirqs on CPU 0 taking `probe_ns`,
    /// while /proc/softirqs said `kernel`, and whose syscall programs were attached `traced_ns`.
    fn sample(t_ns: u64, traced_ns: Option<u64>, probe: CountNs, kernel: u64) -> Reading {
        let mut k = KernelCounters::empty(1);
        k.monotonic_ns = t_ns;
        k.traced_ns = traced_ns;
        k.softirqs[0][3] = probe;
        k.syscalls.push((
            0,
            39,
            CountNs {
                count: probe.count,
                total_ns: probe.total_ns,
            },
        ));
        let mut counts = vec![vec![0; SOFTIRQ_NAMES.len()]];
        counts[0][3] = kernel;
        Reading {
            monotonic_ns: t_ns,
            kernel: k,
            softirq_counts: counts,
            ..Default::default()
        }
    }

    fn ct(count: u64, total_ns: u64) -> CountNs {
        CountNs { count, total_ns }
    }

    #[test]
    fn a_cpu_whose_windows_saw_none_is_timed_at_the_other_cpus_mean_not_zero() {
        // Two CPUs: the windows saw 100 NET_RX of 2 us on CPU 0 and none on CPU 1, where the
        // kernel counted 500 (a burst between the windows).
        let two = |t_ns: u64, traced_ns: u64, probe: CountNs, kernel: [u64; 2]| {
            let mut s = sample(t_ns, Some(traced_ns), probe, kernel[0]);
            s.kernel
                .softirqs
                .push(vec![CountNs::default(); SOFTIRQ_NAMES.len()]);
            let mut cpu1 = vec![0; SOFTIRQ_NAMES.len()];
            cpu1[3] = kernel[1];
            s.softirq_counts.push(cpu1);
            s
        };
        let start = two(0, 0, ct(0, 0), [0, 0]);
        let end = two(1_000_000_000, 100_000_000, ct(100, 200_000), [1_000, 500]);
        let s = softirq_deltas(&start, &end);
        let on = |cpu: u32| {
            s.iter()
                .find(|x| x.cpu == cpu)
                .map(|x| (x.count, x.total_ns))
        };
        assert_eq!(on(0), Some((1_000, 2_000_000)));
        assert_eq!(on(1), Some((500, 1_000_000)));
    }

    #[test]
    fn softirqs_no_window_saw_have_an_unknown_time_not_a_zero_one() {
        // The kernel counted 1,000 NET_RX; no window saw any, on any CPU.
        let start = sample(0, Some(0), ct(0, 0), 5_000);
        let end = sample(1_000_000_000, Some(100_000_000), ct(0, 0), 6_000);
        let s = softirq_deltas(&start, &end);
        assert_eq!(
            (s[0].count, s[0].total_ns, s[0].time_unknown),
            (1_000, 0, true)
        );
        // Seen: known. Exact mode: counted and timed by the probes, never unknown.
        let seen = sample(1_000_000_000, Some(100_000_000), ct(100, 200_000), 6_000);
        assert!(!softirq_deltas(&start, &seen)[0].time_unknown);
        let exact = |t, probe| sample(t, None, probe, 0);
        let s = softirq_deltas(&exact(0, ct(0, 0)), &exact(1, ct(7, 700)));
        assert_eq!((s[0].count, s[0].time_unknown), (7, false));
    }

    #[test]
    fn sampled_softirqs_count_as_the_kernel_and_time_at_the_windows_mean() {
        // 1 s, attached 100 ms: the probes saw 100 softirqs of 2 us; the kernel counted 1,000.
        let start = sample(0, Some(0), ct(0, 0), 5_000);
        let end = sample(1_000_000_000, Some(100_000_000), ct(100, 200_000), 6_000);
        let s = softirq_deltas(&start, &end);
        assert_eq!(s.len(), 1);
        assert_eq!(
            (s[0].vector.as_str(), s[0].count, s[0].total_ns),
            ("NET_RX", 1_000, 2_000_000)
        );
        let r = kernel_report(&start, &end, 0, &[]);
        assert_eq!(r.traced_fraction, Some(0.1));
        // Syscalls are scaled up from the windows: 100 seen in a tenth of the time.
        assert_eq!(
            (r.syscalls[0].count, r.syscalls[0].total_ns),
            (1_000, 2_000_000)
        );
        assert!(r.sampling_note().unwrap().contains("10%"));
    }

    #[test]
    fn the_sampling_note_says_what_share_of_the_work_the_windows_saw() {
        let placed = KernelReport {
            traced_fraction: Some(0.005),
            traced_share: Some(0.14),
            scaled_by: Some("io_calls".into()),
            ..Default::default()
        };
        let note = placed.sampling_note().unwrap();
        assert!(
            note.contains("0.5% of the time")
                && note.contains("saw 14% of the server's read/write calls"),
            "{note}"
        );
        let by_time = KernelReport {
            traced_share: Some(0.05),
            scaled_by: Some("time".into()),
            ..placed
        };
        assert!(!by_time.sampling_note().unwrap().contains("saw"));
    }

    #[test]
    fn sampled_net_rx_is_timed_per_packet_when_the_windows_saw_enough_packets() {
        // The windows timed 100 NET_RX softirqs, 2 ms in all, carrying 1,000 packets; over the
        // interval the kernel counted 1,000 softirqs and 50,000 packets (a burst: 50 a softirq,
        // where the windows saw 10). Per packet: 2 us x 50,000 = 100 ms; per softirq it would be
        // 20 us x 1,000 = 20 ms.
        let with_packets = |s: Reading, all: u64, traced: u64| Reading {
            rx_packets: Some(vec![all]),
            traced_rx_packets: Some(vec![traced]),
            ..s
        };
        let start = with_packets(sample(0, Some(0), ct(0, 0), 5_000), 7, 0);
        let end = with_packets(
            sample(1_000_000_000, Some(50_000_000), ct(100, 2_000_000), 6_000),
            50_007,
            1_000,
        );
        let s = softirq_deltas(&start, &end);
        assert_eq!(
            (s[0].count, s[0].total_ns, s[0].timed_per_packet),
            (1_000, 100_000_000, true)
        );
        // Too few packets in the windows: the mean per softirq, as before.
        let few = with_packets(
            sample(1_000_000_000, Some(50_000_000), ct(100, 2_000_000), 6_000),
            50_007,
            99,
        );
        let s = softirq_deltas(&start, &few);
        assert_eq!((s[0].total_ns, s[0].timed_per_packet), (20_000_000, false));
    }

    #[test]
    fn exact_softirqs_are_the_probes_own_and_nothing_is_scaled() {
        let start = sample(0, None, ct(0, 0), 5_000);
        let end = sample(1_000_000_000, None, ct(100, 200_000), 6_000);
        let s = softirq_deltas(&start, &end);
        assert_eq!((s[0].count, s[0].total_ns), (100, 200_000));
        let r = kernel_report(&start, &end, 0, &[]);
        assert_eq!(r.traced_fraction, None);
        assert_eq!(r.syscalls[0].count, 100);
        assert!(r.sampling_note().is_none());
    }

    #[test]
    fn with_a_load_generator_syscalls_scale_by_the_responses_served_while_traced() {
        // Traced a tenth of the time, but the server, slower while traced, answered only 300 of
        // the 4,000 responses then: the 100 syscalls seen stand for 100 / 0.075.
        let mut start = sample(0, Some(0), ct(0, 0), 0);
        let mut end = sample(1_000_000_000, Some(100_000_000), ct(100, 200_000), 0);
        (start.responses, start.traced_responses) = (Some(1_000), Some(0));
        (end.responses, end.traced_responses) = (Some(5_000), Some(300));
        let r = kernel_report(&start, &end, 0, &[]);
        assert_eq!(r.traced_fraction, Some(0.1));
        assert_eq!(r.traced_share, Some(0.075));
        assert_eq!(r.syscalls[0].count, 1_333);
        // Too few responses in the windows to scale by: time it is.
        end.traced_responses = Some(50);
        let r = kernel_report(&start, &end, 0, &[]);
        assert_eq!(r.traced_share, Some(0.1));
        assert_eq!(r.syscalls[0].count, 1_000);
    }

    #[test]
    fn a_window_where_nothing_was_traced_records_no_syscalls() {
        let start = sample(0, Some(100), ct(0, 0), 0);
        let end = sample(1_000_000_000, Some(100), ct(0, 0), 0);
        let r = kernel_report(&start, &end, 0, &[]);
        assert!(!r.syscalls_recorded());
    }

    /// A retransmit waits the timeout that ended before it: the client's two SYNs resent after
    /// 1 s and then 2 s, and its three data segments after 250, 250 and 500 jiffies of 4 ms,
    /// wait 1.5 s and 1.33 s on average; the walk's backed-off timeout of the connections still
    /// open is used only without them, and a side with none has none.
    #[test]
    fn a_retransmit_waits_the_timeout_that_ended_before_it() {
        let at = |side, counter| tcp::index(side, counter) as usize;
        let start = sample(0, None, ct(0, 0), 0);
        let mut end = sample(1_000_000_000, None, ct(0, 0), 0);
        end.kernel.jiffy_ns = Some(4_000_000);
        end.rto_us = Some(4_000_000);
        end.kernel.tcp[at(tcp::SIDE_CLIENT, tcp::RETRANSMITS)] = 5;
        end.kernel.tcp[at(tcp::SIDE_CLIENT, tcp::SYN_RETRANSMITS)] = 2;
        end.kernel.tcp[at(tcp::SIDE_CLIENT, tcp::SYN_RTO_JIFFIES)] = 250 + 500;
        end.kernel.tcp[at(tcp::SIDE_CLIENT, tcp::RTO_JIFFIES)] = 250 + 250 + 500;
        let client = kernel_report(&start, &end, srvprof_common::GROUP_CLIENT, &[]);
        assert_eq!(client.tcp.syn_timeout_ms, Some(1_500.0));
        assert!((client.tcp.rto_ms.unwrap() - 4_000.0 / 3.0).abs() < 1e-9);
        let server = kernel_report(&start, &end, GROUP_SERVER, &[]);
        assert_eq!(
            server.tcp.syn_timeout_ms,
            Some(1_500.0),
            "the SYNs sent to it"
        );
        assert_eq!(server.tcp.rto_ms, Some(4_000.0), "none resent: the walk's");
        end.kernel.jiffy_ns = None;
        let client = kernel_report(&start, &end, srvprof_common::GROUP_CLIENT, &[]);
        assert_eq!(
            (client.tcp.syn_timeout_ms, client.tcp.rto_ms),
            (None, Some(4_000.0))
        );
    }

    /// The server's answers held unsent between two readings, by why, most waited first, with the
    /// host's delayed ACKs beside them; a kind with none is left out, the client has none, and a
    /// span with no hold has no figure.
    #[test]
    fn answers_held_unsent_are_counted_by_why_with_the_hosts_delayed_acks() {
        use crate::record::{CountNs, NsHistogram};
        let mut start = sample(0, None, ct(0, 0), 0);
        let mut end = sample(1_000_000_000, None, ct(0, 0), 0);
        let held = |count, total_ns| CountNs { count, total_ns };
        start.kernel.send_holds = vec![held(10, 400_000_000), held(0, 0), held(1, 5)];
        end.kernel.send_holds = vec![held(110, 4_400_000_000), held(3, 300_000), held(1, 5)];
        let mut lengths = NsHistogram::default();
        lengths.slots[srvprof_common::hist::slot_of(40_000_000) as usize] = 100;
        start.kernel.send_hold_hist = vec![NsHistogram::default(); 3];
        end.kernel.send_hold_hist = vec![lengths, NsHistogram::default(), NsHistogram::default()];
        start.net_mib.insert("TcpExt:DelayedACKs".into(), 7);
        end.net_mib.insert("TcpExt:DelayedACKs".into(), 107);
        let holds = kernel_report(&start, &end, GROUP_SERVER, &[])
            .tcp
            .send_holds;
        let holds = holds.expect("held answers");
        let kinds: Vec<(&str, u64, u64)> = (holds.by_kind.iter())
            .map(|k| (k.kind.as_str(), k.holds, k.wait_ns))
            .collect();
        assert_eq!(
            kinds,
            [
                ("partial_segment", 100, 4_000_000_000),
                ("full_segments", 3, 300_000)
            ]
        );
        assert_eq!((holds.holds(), holds.wait_ns()), (103, 4_000_300_000));
        assert_eq!(holds.delayed_acks, 100);
        let p99 = holds.by_kind[0].p99_ms;
        assert!((40.0..=50.0).contains(&p99), "{p99}");
        let client = kernel_report(&start, &end, srvprof_common::GROUP_CLIENT, &[]);
        assert_eq!(client.tcp.send_holds, None);
        assert_eq!(
            kernel_report(&start, &start, GROUP_SERVER, &[])
                .tcp
                .send_holds,
            None
        );
    }

    #[test]
    fn each_side_gets_its_own_tcp_figures_and_the_host_its_own() {
        use crate::record::TcpResetCount;
        let reset = |side, sent, state: &str, reason: Option<&str>, count| TcpResetCount {
            side,
            sent,
            state: state.into(),
            reason: reason.map(Into::into),
            count,
        };
        let mut start = sample(0, None, ct(0, 0), 0);
        let mut end = sample(1_000_000_000, None, ct(0, 0), 0);
        start.kernel.tcp_resets = vec![reset(0, true, "CLOSE", Some("TCP_STATE"), 5)];
        end.kernel.tcp_resets = vec![
            reset(0, true, "CLOSE", Some("TCP_STATE"), 305),
            reset(1, false, "ESTABLISHED", None, 300),
        ];
        end.kernel.tcp[tcp::index(tcp::SIDE_SERVER, tcp::RESETS_SENT) as usize] = 300;
        end.kernel.tcp[tcp::index(tcp::SIDE_CLIENT, tcp::RESETS_RECEIVED) as usize] = 300;
        end.kernel.tcp[tcp::index(tcp::SIDE_OTHER, tcp::RESETS_SENT) as usize] = 7;
        start.net_mib.insert("Tcp:OutRsts".into(), 1_000);
        end.net_mib.insert("Tcp:OutRsts".into(), 1_307);
        start.net_mib.insert("TcpExt:ListenOverflows".into(), 0);
        end.net_mib.insert("TcpExt:ListenOverflows".into(), 4);

        let server = kernel_report(&start, &end, GROUP_SERVER, &[]);
        assert_eq!(
            (server.tcp.resets_sent, server.tcp.resets_received),
            (300, 0)
        );
        assert_eq!(server.tcp.resets.len(), 1);
        assert_eq!(server.tcp.resets[0].count, 300);
        assert_eq!(server.tcp.resets[0].reason.as_deref(), Some("TCP_STATE"));
        assert_eq!(server.tcp.listen_overflows, 4);

        let client = kernel_report(&start, &end, srvprof_common::GROUP_CLIENT, &[]);
        assert_eq!(
            (client.tcp.resets_sent, client.tcp.resets_received),
            (0, 300)
        );
        assert_eq!(client.tcp.resets[0].direction, "received");
        assert_eq!(client.tcp.listen_overflows, 0, "the client does not listen");

        for r in [&server, &client] {
            assert_eq!(r.host_tcp.resets_sent, 307);
            assert_eq!(r.host_tcp.other_resets_sent, 7);
            assert_eq!(r.host_tcp.listen_overflows, 4);
        }
    }

    #[test]
    fn sampled_syscall_sleeps_are_counted_exactly_and_only_the_rest_is_scaled() {
        use super::sampling::WindowUnit;
        use super::uncertainty::state_errors;
        // 1 s, attached 100 ms. epoll_wait (232) slept 40 times for 900 ms in all (the
        // scheduler's count, always on); the windows saw 50 calls that did not block and
        // 1 ms awake in calls. read (0) never slept: 300 seen, 3 ms.
        let at = |t_ns: u64, traced: u64, k: u64| {
            let mut s = sample(t_ns, Some(traced), ct(0, 0), 0);
            s.kernel.syscalls = vec![
                (0, 0, ct(300 * k, 3_000_000 * k)),
                (0, 232, ct(55 * k, 90_000_000 * k)),
            ];
            s.kernel.unblocked_syscalls = Some(vec![
                (0, 0, ct(300 * k, 3_000_000 * k)),
                (0, 232, ct(50 * k, 1_000_000 * k)),
            ]);
            s.kernel.blocked_syscalls = Some(vec![(0, 232, ct(40 * k, 900_000_000 * k))]);
            s
        };
        let (start, end) = (at(0, 0, 0), at(1_000_000_000, 100_000_000, 1));
        let r = kernel_report(&start, &end, 0, &[]);
        let row = |nr: u32| r.syscalls.iter().find(|s| s.nr == nr).unwrap().clone();
        // Sleeps as counted, plus the rest scaled by ten.
        let epoll = row(232);
        assert_eq!(
            (epoll.count, epoll.total_ns),
            (40 + 500, 900_000_000 + 10_000_000)
        );
        assert_eq!(
            (epoll.blocked, epoll.blocked_ns),
            (Some(40), Some(900_000_000))
        );
        assert_eq!((row(0).count, row(0).total_ns), (3_000, 30_000_000));
        assert_eq!(
            (r.syscalls_blocked, r.syscall_blocked_ns),
            (Some(40), Some(900_000_000))
        );
        // A syscall that only slept while no window was open still counts.
        let mut slept = end.clone();
        slept.kernel.blocked_syscalls = Some(vec![
            (0, 232, ct(40, 900_000_000)),
            (0, 7, ct(3, 5_000_000)),
        ]);
        let r2 = kernel_report(&start, &slept, 0, &[]);
        let poll = r2.syscalls.iter().find(|s| s.nr == 7).unwrap();
        assert_eq!((poll.count, poll.total_ns), (3, 5_000_000));
        // Older recordings (no split): everything scaled, as before.
        let old = |s: &Reading| {
            let mut s = s.clone();
            s.kernel.blocked_syscalls = None;
            s.kernel.unblocked_syscalls = None;
            s
        };
        let r3 = kernel_report(&old(&start), &old(&end), 0, &[]);
        let epoll3 = r3.syscalls.iter().find(|s| s.nr == 232).unwrap();
        assert_eq!(
            (epoll3.count, epoll3.total_ns, epoll3.blocked),
            (550, 900_000_000, None)
        );

        // The stated uncertainty is the scaled part's, as a share of the whole: four windows
        // whose awake epoll_wait time differs, the same basis in each.
        let mut r = r;
        r.scaled_by = Some("time".into());
        let units: Vec<WindowUnit> = [0.5, 1.5, 0.5, 1.5]
            .iter()
            .map(|f| WindowUnit {
                syscalls: 350.0,
                syscall_ns: 4e6,
                by_name: [(0, (300.0, 3e6)), (232, (50.0, 250_000.0 * f))].into(),
                traced_ns: 25e6,
                ..Default::default()
            })
            .collect();
        let whole = units.clone();
        state_errors(&mut r, &whole);
        let e = r
            .syscalls
            .iter()
            .find(|s| s.nr == 232)
            .unwrap()
            .time_error
            .unwrap();
        let scaled_alone = super::uncertainty::ratio_error(
            &units
                .iter()
                .map(|u| (u.by_name[&232].1, u.traced_ns))
                .collect::<Vec<_>>(),
        )
        .unwrap();
        let share = 10_000_000.0 / 910_000_000.0;
        assert!(
            (e - scaled_alone * share).abs() < 1e-12,
            "{e} vs {scaled_alone} x {share}"
        );
        assert!(e < 0.02, "the exact sleeps leave little to doubt: {e}");
    }
}
