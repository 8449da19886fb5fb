//! What the probes saw over a window, for one group (server or client): the `srvprof probe`
//! JSON contract, also the `server` and `client` parts of run.json.

use std::collections::BTreeMap;

use serde::{Deserialize, Serialize};
use srvprof_common::{GROUP_SERVER, SOFTIRQ_NAMES, lost, tcp};

use crate::names::syscall_name;
use crate::record::{CountNs, CpuUse, ExitRecord, NsHistogram, Sample, ThreadCounters};

/// How often one thread woke a watched thread in the window.
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

/// The pairs kept in a report, most frequent first.
pub const TOP_WAKEUPS: usize = 20;

#[derive(Clone, Debug, Default, PartialEq, Serialize, Deserialize)]
pub struct ThreadReport {
    pub tid: u32,
    pub pid: u32,
    pub comm: String,
    pub voluntary_switches: u64,
    pub involuntary_switches: u64,
    pub oncpu_ns: u64,
    pub offcpu_ns: u64,
    pub user_ns: u64,
    pub sys_ns: u64,
    pub runq_ns: u64,
    /// How many times the thread waited in a run queue (runq_ns is their sum).
    pub runq_waits: u64,
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
}

#[derive(Clone, Debug, Default, PartialEq, Serialize, Deserialize)]
pub struct SoftirqReport {
    pub cpu: u32,
    pub vector: String,
    pub count: u64,
    pub total_ns: u64,
}

#[derive(Clone, Debug, Default, PartialEq, Serialize, Deserialize)]
pub struct HardirqReport {
    pub cpu: u32,
    pub irq: u32,
    pub name: String,
    pub count: u64,
    pub total_ns: u64,
}

/// This group's side of TCP: sockets on the server's listening port for the server, sockets
/// whose peer is on that port for the client (srvprof_common::tcp).
#[derive(Clone, Debug, Default, PartialEq, Serialize, Deserialize)]
pub struct TcpReport {
    /// Accept-queue overflows attributed to the server's listening sockets: the namespace's
    /// TcpExt:ListenOverflows, bounded by the drop counter of the server's own sockets (an overflow
    /// there always counts as one of its drops). The namespace figure alone when the sockets are
    /// unknown. 0 for the client, which does not listen.
    pub listen_overflows: u64,
    /// Connections the server's listening sockets dropped (their sk_drops), or the namespace's
    /// TcpExt:ListenDrops when the sockets are unknown. 0 for the client.
    pub listen_drops: u64,
    /// SYNs retransmitted (tcp_retransmit_skb in SYN_SENT). For the client, the SYNs it
    /// retransmitted; for the server, which sends no SYN on its port, the SYNs retransmitted to
    /// it by the connecting sockets on this host (the client side's count: the load generator's
    /// in `run`, any local client in `probe`).
    pub syn_retransmits: u64,
    /// SYN-ACKs the server's listening sockets retransmitted.
    pub synack_retransmits: u64,
    /// Segments this side's sockets retransmitted, SYNs included.
    pub retransmits: u64,
    /// RSTs this side's sockets sent (tcp_send_reset), with a socket or answering a segment
    /// addressed to this side's port with none.
    pub resets_sent: u64,
    /// RSTs this side's sockets received (tcp_receive_reset). The kernel also fires it when it
    /// kills a socket for data arriving after close (reason TCP_ABORT_ON_DATA), whose RST it sends.
    pub resets_received: u64,
    /// resets_sent and resets_received by TCP state and (sent) the kernel's reason, most first.
    #[serde(default)]
    pub resets: Vec<ResetReport>,
}

/// Resets one side sent or received in one TCP state, for one reason.
#[derive(Clone, Debug, Default, PartialEq, Serialize, Deserialize)]
pub struct ResetReport {
    /// "sent" or "received".
    pub direction: String,
    /// The socket's TCP state when the reset was sent or received, by the kernel's name
    /// ("ESTABLISHED", "TIME_WAIT", "CLOSE": an active reset is sent after the socket moved to
    /// CLOSE); "NO_SOCKET" when a segment found no socket.
    pub state: String,
    /// The kernel's enum sk_rst_reason without its SK_RST_REASON_ prefix ("TCP_ABORT_ON_CLOSE");
    /// None for received resets.
    pub reason: Option<String>,
    pub count: u64,
}

/// TCP figures of the whole host (the server's network namespace, the host's unless the server
/// runs in a container): every socket, the server's and the client's included.
#[derive(Clone, Debug, Default, PartialEq, Serialize, Deserialize)]
pub struct HostTcpReport {
    /// TcpExt:ListenOverflows.
    pub listen_overflows: u64,
    /// TcpExt:ListenDrops.
    pub listen_drops: u64,
    /// TcpExt:TCPSynRetrans (SYN and SYN-ACK retransmits).
    pub syn_retransmits: u64,
    /// Tcp:RetransSegs.
    pub retransmits: u64,
    /// Tcp:OutRsts: RSTs sent.
    pub resets_sent: u64,
    /// Tcp:EstabResets: connections reset in ESTABLISHED or CLOSE_WAIT.
    pub established_resets: u64,
    /// TcpExt:TCPAbortOnClose: closed with unread data (an RST instead of a FIN).
    pub abort_on_close: u64,
    /// TcpExt:TCPAbortOnData: data arrived after close.
    pub abort_on_data: u64,
    /// TcpExt:TCPAbortOnLinger, TCPAbortOnMemory, TCPAbortOnTimeout.
    pub abort_on_linger: u64,
    pub abort_on_memory: u64,
    pub abort_on_timeout: u64,
    /// The probes' counts for sockets on neither side (every socket when no port was watched),
    /// resets sent with no socket and no readable segment included.
    pub other_retransmits: u64,
    pub other_resets_sent: u64,
    pub other_resets_received: u64,
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
    /// None: syscalls and interrupts were traced all the time (--exact), every figure counted.
    /// Otherwise the share of the window their programs were attached (sampled mode, the
    /// default): syscall counts and times are scaled up from those windows, interrupt counts are
    /// the kernel's own (/proc/softirqs, /proc/interrupts) and their times are the windows' mean
    /// per event times those counts.
    #[serde(default)]
    pub traced_fraction: Option<f64>,
    /// What the syscall figures were divided by: with a load generator (`run`), the share of
    /// its responses that arrived while the programs were attached (the server is slower then,
    /// so time would undercount); else traced_fraction. None in exact mode.
    #[serde(default)]
    pub traced_share: Option<f64>,
    pub softirqs: Vec<SoftirqReport>,
    /// The most frequent waker -> woken-thread pairs (woken thread in this group).
    #[serde(default)]
    pub wakeups: Vec<WakeupReport>,
    pub hardirqs: Vec<HardirqReport>,
    pub exits: Vec<ExitRecord>,
    pub tcp: TcpReport,
    /// The host's TCP figures (not this group's): the kernel's MIB counters and what the probes
    /// saw on sockets on neither side.
    #[serde(default)]
    pub host_tcp: HostTcpReport,
    /// Records the kernel side could not keep, by reason; all must be 0 for a complete run.
    pub lost_events: BTreeMap<String, u64>,
    /// Times a watched thread ran with no sched_switch naming it as next (machine-wide, in the
    /// window). Not a loss: its on/off-CPU split came from the scheduler's sum_exec_runtime.
    #[serde(default)]
    pub switch_ins_unseen: u64,
    /// Stacks (machine-wide, in the window) whose bucket in the fixed-size stack map held another
    /// stack: the sample or off-CPU time is kept, its frames show as [unknown]. Common when
    /// thousands of distinct stacks are seen; not a lost record.
    #[serde(default)]
    pub stack_ids_collided: u64,
}

impl KernelReport {
    /// Whether the syscall figures mean anything: not with --syscalls off, nor in a sampled
    /// window where the syscall programs were never attached.
    pub fn syscalls_recorded(&self) -> bool {
        !self.syscalls_off && self.traced_fraction != Some(0.0)
    }

    /// In sampled mode, one sentence saying which figures are estimates and from how much time.
    pub fn sampling_note(&self) -> Option<String> {
        let f = self.traced_fraction?;
        let what = if self.syscalls_off {
            "interrupt times are estimates"
        } else {
            "syscall counts and times, and interrupt times, are estimates"
        };
        Some(format!(
            "{what} from the {:.0}% of the time their probes were attached (sampled mode; \
             interrupt counts are the kernel's own); --exact traces them all the time",
            f * 100.0
        ))
    }
}

fn wakeup_deltas(
    start: &Sample,
    end: &Sample,
    group: u32,
    threads: &[ThreadReport],
) -> Vec<WakeupReport> {
    let before: BTreeMap<(u32, u32), u64> = start
        .kernel
        .wakeups
        .iter()
        .map(|w| ((w.waker_tid, w.wakee_tid), w.count))
        .collect();
    let comm_of = |tid: u32| {
        threads
            .iter()
            .find(|t| t.tid == tid)
            .map(|t| t.comm.clone())
            .or_else(|| {
                end.kernel
                    .threads
                    .iter()
                    .find(|t| t.tid == tid)
                    .map(|t| t.comm.clone())
            })
            .unwrap_or_default()
    };
    let mut out: Vec<WakeupReport> = end
        .kernel
        .wakeups
        .iter()
        .filter(|w| w.wakee_group == group)
        .filter_map(|w| {
            let count = w.count.saturating_sub(
                before
                    .get(&(w.waker_tid, w.wakee_tid))
                    .copied()
                    .unwrap_or(0),
            );
            (count > 0).then(|| WakeupReport {
                waker_pid: w.waker_pid,
                waker_tid: w.waker_tid,
                waker_comm: w.waker_comm.clone(),
                wakee_tid: w.wakee_tid,
                wakee_comm: comm_of(w.wakee_tid),
                count,
            })
        })
        .collect();
    out.sort_by(|a, b| {
        b.count
            .cmp(&a.count)
            .then(a.waker_tid.cmp(&b.waker_tid))
            .then(a.wakee_tid.cmp(&b.wakee_tid))
    });
    out.truncate(TOP_WAKEUPS);
    out
}

fn thread_delta(end: &ThreadCounters, start: Option<&ThreadCounters>) -> ThreadCounters {
    let Some(s) = start else { return end.clone() };
    ThreadCounters {
        voluntary_switches: end.voluntary_switches.saturating_sub(s.voluntary_switches),
        involuntary_switches: end
            .involuntary_switches
            .saturating_sub(s.involuntary_switches),
        oncpu_ns: end.oncpu_ns.saturating_sub(s.oncpu_ns),
        offcpu_ns: end.offcpu_ns.saturating_sub(s.offcpu_ns),
        runq_ns: end.runq_ns.saturating_sub(s.runq_ns),
        runq_count: end.runq_count.saturating_sub(s.runq_count),
        migrations: end.migrations.saturating_sub(s.migrations),
        syscalls: end.syscalls.saturating_sub(s.syscalls),
        syscall_ns: end.syscall_ns.saturating_sub(s.syscall_ns),
        ..end.clone()
    }
}

fn cpu_delta(
    end: &[CpuUse],
    start: &[CpuUse],
    key: impl Fn(&CpuUse) -> u32,
    id: u32,
) -> (u64, u64) {
    let e = end.iter().find(|c| key(c) == id);
    let s = start.iter().find(|c| key(c) == id);
    match (e, s) {
        (Some(e), Some(s)) => (
            e.user_ns.saturating_sub(s.user_ns),
            e.sys_ns.saturating_sub(s.sys_ns),
        ),
        (Some(e), None) => (e.user_ns, e.sys_ns),
        _ => (0, 0),
    }
}

fn mib_delta(end: &Sample, start: &Sample, name: &str) -> u64 {
    let e = end.net_mib.get(name).copied().unwrap_or(0);
    let s = start.net_mib.get(name).copied().unwrap_or(e);
    e.saturating_sub(s)
}

/// Sampled mode: the share of the window between two samples the syscall and interrupt programs
/// were attached. None in exact mode (attached all along).
pub fn traced_fraction(start: &Sample, end: &Sample) -> Option<f64> {
    let traced = end
        .kernel
        .traced_ns?
        .saturating_sub(start.kernel.traced_ns.unwrap_or(0));
    let wall = end.monotonic_ns.saturating_sub(start.monotonic_ns);
    Some(if wall == 0 {
        0.0
    } else {
        (traced as f64 / wall as f64).min(1.0)
    })
}

/// Fewer responses than this in the windows: too few to scale by, so time is the measure.
const MIN_TRACED_RESPONSES: u64 = 100;

/// Sampled mode: the share of the window's work the syscall programs saw, which their counts are
/// divided by. With a load generator (`run`), the share of its responses that arrived while they
/// were attached: the server runs slower while traced, so a share of time would undercount a
/// CPU-bound server by the tracing cost. Otherwise the share of time. None in exact mode.
pub fn traced_share(start: &Sample, end: &Sample) -> Option<f64> {
    let time = traced_fraction(start, end)?;
    let delta = |e: Option<u64>, s: Option<u64>| Some(e?.saturating_sub(s.unwrap_or(0)));
    match (
        delta(end.traced_responses, start.traced_responses),
        delta(end.responses, start.responses),
    ) {
        (Some(traced), Some(all)) if traced >= MIN_TRACED_RESPONSES && all >= traced => {
            Some(traced as f64 / all as f64)
        }
        _ => Some(time),
    }
}

/// Scales a count seen while the programs were attached up to the whole window.
fn scaled(n: u64, fraction: Option<f64>) -> u64 {
    match fraction {
        None => n,
        Some(f) if f > 0.0 => (n as f64 / f).round() as u64,
        Some(_) => 0,
    }
}

/// The report for `group` between two samples. Threads and processes first seen after `start`
/// count from zero (they were born in the window).
pub fn kernel_report(
    start: &Sample,
    end: &Sample,
    group: u32,
    exits: &[ExitRecord],
) -> KernelReport {
    let duration_s = end.monotonic_ns.saturating_sub(start.monotonic_ns) as f64 / 1e9;
    let fraction = traced_share(start, end);
    let mut r = KernelReport {
        duration_s,
        syscalls_off: end.kernel.syscalls_off,
        traced_fraction: traced_fraction(start, end),
        traced_share: fraction,
        ..Default::default()
    };

    let start_threads: BTreeMap<u32, &ThreadCounters> =
        start.kernel.threads.iter().map(|t| (t.tid, t)).collect();
    for t in end.kernel.threads.iter().filter(|t| t.group == group) {
        let d = thread_delta(t, start_threads.get(&t.tid).copied());
        let (user_ns, sys_ns) = cpu_delta(&end.thread_cpu, &start.thread_cpu, |c| c.tid, t.tid);
        let comm = end
            .thread_cpu
            .iter()
            .find(|c| c.tid == t.tid)
            .map(|c| c.comm.clone())
            .filter(|c| !c.is_empty())
            .unwrap_or_else(|| d.comm.clone());
        r.threads.push(ThreadReport {
            tid: d.tid,
            pid: d.pid,
            comm,
            voluntary_switches: d.voluntary_switches,
            involuntary_switches: d.involuntary_switches,
            oncpu_ns: d.oncpu_ns,
            offcpu_ns: d.offcpu_ns,
            user_ns,
            sys_ns,
            runq_ns: d.runq_ns,
            runq_waits: d.runq_count,
            migrations: d.migrations,
            syscalls: scaled(d.syscalls, fraction),
            syscall_ns: scaled(d.syscall_ns, fraction),
            cpus: (0..64).filter(|c| d.cpu_mask & (1u64 << c) != 0).collect(),
        });
    }
    // A thread that did nothing in the window is noise in a report about the window.
    r.threads.retain(|t| {
        t.voluntary_switches + t.involuntary_switches + t.syscalls + t.user_ns + t.sys_ns > 0
    });

    let mut pids: Vec<u32> = end
        .process_cpu
        .iter()
        .filter(|p| p.group == group)
        .map(|p| p.pid)
        .collect();
    pids.extend(
        end.kernel
            .threads
            .iter()
            .filter(|t| t.group == group)
            .map(|t| t.pid),
    );
    pids.sort_unstable();
    pids.dedup();
    for t in &r.threads {
        r.totals.voluntary_switches += t.voluntary_switches;
        r.totals.involuntary_switches += t.involuntary_switches;
        r.totals.migrations += t.migrations;
        r.totals.syscalls += t.syscalls;
        r.totals.oncpu_ns += t.oncpu_ns;
        r.totals.offcpu_ns += t.offcpu_ns;
    }
    // Process CPU time from /proc/PID/stat includes threads that exited in the window.
    for pid in &pids {
        let (u, s) = cpu_delta(&end.process_cpu, &start.process_cpu, |c| c.pid, *pid);
        r.totals.user_ns += u;
        r.totals.sys_ns += s;
    }
    r.totals.threads = r.threads.len();
    r.totals.processes = pids.len();
    r.pids = pids;

    let g = group as usize;
    if let (Some(e), Some(s)) = (end.kernel.runq_hist.get(g), start.kernel.runq_hist.get(g)) {
        r.runq_latency_us = LatencyUs::from_hist(&e.minus(s));
    }
    if let (Some(e), Some(s)) = (
        end.kernel.offcpu_hist.get(g),
        start.kernel.offcpu_hist.get(g),
    ) {
        r.offcpu_us = LatencyUs::from_hist(&e.minus(s));
    }

    let start_sys: BTreeMap<(u32, u32), CountNs> = start
        .kernel
        .syscalls
        .iter()
        .map(|(g, nr, c)| ((*g, *nr), *c))
        .collect();
    for (g2, nr, c) in end.kernel.syscalls.iter().filter(|(g2, _, _)| *g2 == group) {
        let d = c.minus(start_sys.get(&(*g2, *nr)).copied().unwrap_or_default());
        if d.count > 0 {
            r.syscalls.push(SyscallReport {
                name: syscall_name(*nr),
                nr: *nr,
                count: scaled(d.count, fraction),
                total_ns: scaled(d.total_ns, fraction),
            });
        }
    }
    r.syscalls
        .sort_by(|a, b| b.count.cmp(&a.count).then(a.nr.cmp(&b.nr)));

    r.wakeups = wakeup_deltas(start, end, group, &r.threads);
    r.softirqs = softirq_deltas(start, end);
    r.hardirqs = hardirq_deltas(start, end);
    r.exits = exits.iter().filter(|e| e.group == group).cloned().collect();

    r.tcp = tcp_report(start, end, group);
    r.host_tcp = host_tcp_report(start, end);
    for (i, name) in [
        (lost::EXIT_RING_FULL, "exit_ring_full"),
        (lost::THREADS_MAP_FULL, "threads_map_full"),
        (lost::STACK_KEYS_FULL, "stack_keys_full"),
        (lost::OFFCPU_START_FULL, "offcpu_start_full"),
        (lost::WAKEUPS_MAP_FULL, "wakeups_map_full"),
        (lost::TCP_RESETS_MAP_FULL, "tcp_resets_map_full"),
    ] {
        r.lost_events.insert(
            name.into(),
            end.kernel.lost.get(i as usize).copied().unwrap_or(0),
        );
    }
    // Counted in the same per-CPU array, but not losses: reported for the window.
    let in_window = |i: u32| {
        let at = |s: &Sample| s.kernel.lost.get(i as usize).copied().unwrap_or(0);
        at(end).saturating_sub(at(start))
    };
    r.switch_ins_unseen = in_window(lost::SWITCH_INS_UNSEEN);
    r.stack_ids_collided = in_window(lost::STACK_TRACES_FULL);
    r
}

/// Delta of a TCP counter of one side between two samples.
fn tcp_delta(start: &Sample, end: &Sample, side: u32, counter: u32) -> u64 {
    let i = tcp::index(side, counter) as usize;
    let at = |s: &Sample| s.kernel.tcp.get(i).copied().unwrap_or(0);
    at(end).saturating_sub(at(start))
}

/// The group's side of TCP in the window.
fn tcp_report(start: &Sample, end: &Sample, group: u32) -> TcpReport {
    let side = group;
    let (listen_overflows, listen_drops) = if group == GROUP_SERVER {
        let netns_overflows = mib_delta(end, start, "TcpExt:ListenOverflows");
        let socket_drops = match (end.listen_socket_drops, start.listen_socket_drops) {
            (Some(e), Some(s)) => Some(e.saturating_sub(s)),
            _ => None,
        };
        (
            socket_drops.map_or(netns_overflows, |d| d.min(netns_overflows)),
            socket_drops.unwrap_or_else(|| mib_delta(end, start, "TcpExt:ListenDrops")),
        )
    } else {
        (0, 0)
    };
    let before: BTreeMap<(bool, &str, Option<&str>), u64> = start
        .kernel
        .tcp_resets
        .iter()
        .filter(|c| c.side == side)
        .map(|c| ((c.sent, c.state.as_str(), c.reason.as_deref()), c.count))
        .collect();
    let mut resets: Vec<ResetReport> = end
        .kernel
        .tcp_resets
        .iter()
        .filter(|c| c.side == side)
        .filter_map(|c| {
            let earlier = before
                .get(&(c.sent, c.state.as_str(), c.reason.as_deref()))
                .copied()
                .unwrap_or(0);
            let count = c.count.saturating_sub(earlier);
            (count > 0).then(|| ResetReport {
                direction: if c.sent { "sent" } else { "received" }.into(),
                state: c.state.clone(),
                reason: c.reason.clone(),
                count,
            })
        })
        .collect();
    resets.sort_by(|a, b| {
        (
            &a.direction,
            std::cmp::Reverse(a.count),
            &a.state,
            &a.reason,
        )
            .cmp(&(
                &b.direction,
                std::cmp::Reverse(b.count),
                &b.state,
                &b.reason,
            ))
    });
    TcpReport {
        listen_overflows,
        listen_drops,
        syn_retransmits: tcp_delta(start, end, tcp::SIDE_CLIENT, tcp::SYN_RETRANSMITS),
        synack_retransmits: tcp_delta(start, end, side, tcp::SYNACK_RETRANSMITS),
        retransmits: tcp_delta(start, end, side, tcp::RETRANSMITS),
        resets_sent: tcp_delta(start, end, side, tcp::RESETS_SENT),
        resets_received: tcp_delta(start, end, side, tcp::RESETS_RECEIVED),
        resets,
    }
}

/// The host's TCP figures in the window.
fn host_tcp_report(start: &Sample, end: &Sample) -> HostTcpReport {
    let mib = |name: &str| mib_delta(end, start, name);
    let other = |counter: u32| tcp_delta(start, end, tcp::SIDE_OTHER, counter);
    HostTcpReport {
        listen_overflows: mib("TcpExt:ListenOverflows"),
        listen_drops: mib("TcpExt:ListenDrops"),
        syn_retransmits: mib("TcpExt:TCPSynRetrans"),
        retransmits: mib("Tcp:RetransSegs"),
        resets_sent: mib("Tcp:OutRsts"),
        established_resets: mib("Tcp:EstabResets"),
        abort_on_close: mib("TcpExt:TCPAbortOnClose"),
        abort_on_data: mib("TcpExt:TCPAbortOnData"),
        abort_on_linger: mib("TcpExt:TCPAbortOnLinger"),
        abort_on_memory: mib("TcpExt:TCPAbortOnMemory"),
        abort_on_timeout: mib("TcpExt:TCPAbortOnTimeout"),
        other_retransmits: other(tcp::RETRANSMITS),
        other_resets_sent: other(tcp::RESETS_SENT),
        other_resets_received: other(tcp::RESETS_RECEIVED),
    }
}

/// The probes' delta of one counter between two samples.
fn probe_delta(end: Option<&CountNs>, start: Option<&CountNs>) -> CountNs {
    end.copied()
        .unwrap_or_default()
        .minus(start.copied().unwrap_or_default())
}

/// Delta of one of the kernel's own counters (entry `index` of a row) between two samples.
fn kernel_delta(end: Option<&Vec<u64>>, start: Option<&Vec<u64>>, index: usize) -> u64 {
    let at = |v: Option<&Vec<u64>>| v.and_then(|c| c.get(index)).copied().unwrap_or(0);
    at(end).saturating_sub(at(start))
}

/// Sampled mode: `count` events (the kernel's own count) at the mean time per event the probes
/// measured in their windows.
fn at_probe_mean(probe: CountNs, count: u64) -> CountNs {
    let total_ns = if probe.count == 0 {
        0
    } else {
        (u128::from(probe.total_ns) * u128::from(count) / u128::from(probe.count)) as u64
    };
    CountNs { count, total_ns }
}

/// Softirqs per CPU and vector in the window (system-wide), vectors with no events left out.
/// Exact mode: as the probes counted them. Sampled mode: the kernel's counts (/proc/softirqs).
pub fn softirq_deltas(start: &Sample, end: &Sample) -> Vec<SoftirqReport> {
    let sampled = end.kernel.traced_ns.is_some();
    let ncpus = end.kernel.softirqs.len().max(end.softirq_counts.len());
    let mut out = Vec::new();
    for cpu in 0..ncpus {
        for (v, vector) in SOFTIRQ_NAMES.iter().enumerate() {
            let probe = probe_delta(
                end.kernel.softirqs.get(cpu).and_then(|x| x.get(v)),
                start.kernel.softirqs.get(cpu).and_then(|x| x.get(v)),
            );
            let d = if sampled {
                let count = kernel_delta(
                    end.softirq_counts.get(cpu),
                    start.softirq_counts.get(cpu),
                    v,
                );
                at_probe_mean(probe, count)
            } else {
                probe
            };
            if d.count > 0 {
                out.push(SoftirqReport {
                    cpu: cpu as u32,
                    vector: (*vector).into(),
                    count: d.count,
                    total_ns: d.total_ns,
                });
            }
        }
    }
    out
}

/// Hardirqs per CPU and line in the window (system-wide). Exact mode: as the probes counted them.
/// Sampled mode: the kernel's counts (/proc/interrupts).
/// Lines are named as /proc/interrupts named them when `end` was read.
pub fn hardirq_deltas(start: &Sample, end: &Sample) -> Vec<HardirqReport> {
    let sampled = end.kernel.traced_ns.is_some();
    let probe_of = |s: &Sample, irq: u32| {
        s.kernel
            .hardirqs
            .iter()
            .find(|(i, _)| *i == irq)
            .map(|(_, v)| v.clone())
    };
    let mut irqs: Vec<u32> = if sampled {
        end.irq_counts.iter().map(|(irq, _)| *irq).collect()
    } else {
        end.kernel.hardirqs.iter().map(|(irq, _)| *irq).collect()
    };
    irqs.sort_unstable();
    irqs.dedup();
    let mut out = Vec::new();
    for irq in irqs {
        let (probe_end, probe_start) = (probe_of(end, irq), probe_of(start, irq));
        let kernel_of = |s: &Sample| {
            s.irq_counts
                .iter()
                .find(|(i, _)| *i == irq)
                .map(|(_, v)| v.clone())
        };
        let (kernel_end, kernel_start) = (kernel_of(end), kernel_of(start));
        let ncpus = probe_end
            .as_ref()
            .map_or(0, Vec::len)
            .max(kernel_end.as_ref().map_or(0, Vec::len));
        for cpu in 0..ncpus {
            let probe = probe_delta(
                probe_end.as_ref().and_then(|v| v.get(cpu)),
                probe_start.as_ref().and_then(|v| v.get(cpu)),
            );
            let d = if sampled {
                at_probe_mean(
                    probe,
                    kernel_delta(kernel_end.as_ref(), kernel_start.as_ref(), cpu),
                )
            } else {
                probe
            };
            if d.count > 0 {
                out.push(HardirqReport {
                    cpu: cpu as u32,
                    irq,
                    name: end.irq_names.get(&irq).cloned().unwrap_or_default(),
                    count: d.count,
                    total_ns: d.total_ns,
                });
            }
        }
    }
    out
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::record::KernelCounters;

    /// A sample at `t_ns` whose probes saw `probe` NET_RX softirqs on CPU 0 taking `probe_ns`,
    /// while /proc/softirqs said `kernel`, and whose syscall programs were attached `traced_ns`.
    fn sample(t_ns: u64, traced_ns: Option<u64>, probe: CountNs, kernel: u64) -> Sample {
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
        Sample {
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
}
