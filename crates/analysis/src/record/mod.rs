//! What the sampler recorded: plain data read at each interval boundary, the only input of the
//! analysis besides the load generator's report. The profiler fills these from the probes and
//! /proc; tests build them by hand.

mod counters;

use std::collections::BTreeMap;

use serde::{Deserialize, Serialize};

pub use counters::{
    AcceptWaitCount, CountNs, DiskWait, FamilyCounters, KernelCounters, LockWaitRecord,
    NsHistogram, RunqHolder, TcpResetCount, ThreadCounters, WakePair,
};

/// CPU time of one thread or process, from /proc (the kernel's own accounting).
#[derive(Clone, Debug, Default, PartialEq, Eq, Serialize, Deserialize)]
pub struct CpuUse {
    pub pid: u32,
    /// 0 for a whole process.
    pub tid: u32,
    pub group: u32,
    pub comm: String,
    pub user_ns: u64,
    pub sys_ns: u64,
}

/// A control group that limits a watched process's CPU time (cgroup v1 cpu.cfs_quota_us, v2
/// cpu.max), with the kernel's throttling counters (its cpu.stat) at the sample.
#[derive(Clone, Debug, Default, PartialEq, Eq, Serialize, Deserialize)]
pub struct CgroupCpu {
    /// Its path in its hierarchy, as /proc/PID/cgroup names it ("/workloads/web").
    pub path: String,
    /// The hierarchy: 1 (the cpu controller of cgroup v1) or 2 (the unified one).
    pub version: u8,
    /// CPU time its tasks may use per period, and the period, µs.
    pub quota_us: u64,
    pub period_us: u64,
    /// The watched processes under it, and their group (server or client).
    pub pids: Vec<u32>,
    pub group: u32,
    /// Periods in which its tasks were runnable, those that ran out of quota, and the time its
    /// tasks were held back for it (ns): cpu.stat's nr_periods, nr_throttled, throttled_time
    /// (v1, ns) or throttled_usec (v2).
    pub nr_periods: u64,
    pub nr_throttled: u64,
    pub throttled_ns: u64,
}

/// TCP sockets in TIME_WAIT in the server's network namespace at a sample (sock_diag, what
/// `ss -tan state time-wait` lists).
#[derive(Clone, Copy, Debug, Default, PartialEq, Eq, Serialize, Deserialize)]
pub struct TimeWait {
    pub sockets: u64,
    /// Those whose local port is an ephemeral one: ends of connections this host opened, each
    /// keeping connect() from that port to the same peer until it expires (60 s).
    pub holding_ports: u64,
    /// How many ephemeral ports there are (net.ipv4.ip_local_port_range).
    pub ephemeral_ports: u32,
    /// net.ipv4.tcp_tw_reuse: 0 never, 1 always, 2 (the default) for loopback only, connect()
    /// may take the port of a TIME_WAIT socket that is old enough.
    #[serde(default)]
    pub tw_reuse: u8,
}

/// A remote address the server's processes held connections to, other than on their listening
/// ports (a dependency: a backend, a database, a cache), over the samples so far.
#[derive(Clone, Debug, Default, PartialEq, Eq, Serialize, Deserialize)]
pub struct Outbound {
    /// "127.0.0.1:5432".
    pub remote: String,
    /// The most connections to it seen at one sample, and in how many samples it had any.
    pub max_connections: u64,
    pub samples_seen: u64,
    /// Connections to it the server opened while watched (its connect() calls that left).
    #[serde(default)]
    pub opened: u64,
    /// The server's threads' sleeps reading its answers on those connections (a thread per
    /// connection's wait for it), and their time (ns), since the probes attached; a kernel
    /// report's are the span's.
    #[serde(default)]
    pub waits: u64,
    #[serde(default)]
    pub wait_ns: u64,
    /// The server's asks on those connections answered (its send with no answer pending, then
    /// the remote's next data), and the time from ask to answer (ns): the dependency's latency as
    /// the server saw it, an event loop's included; with the answers' lengths (ns, in
    /// srvprof_common::hist slots; shared with the remotes whose entry in the kernel's table is
    /// the same). Since the probes attached; a kernel report's are the span's.
    #[serde(default)]
    pub answers: u64,
    #[serde(default)]
    pub answer_ns: u64,
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub answer_lengths: Option<NsHistogram>,
}

#[derive(Clone, Debug, Default, PartialEq, Serialize, Deserialize)]
pub struct Reading {
    /// When the reading was taken (CLOCK_MONOTONIC): rates are per second of the real time
    /// between two samples, however late either was.
    pub monotonic_ns: u64,
    /// `run`: the grid point this sample was due at (measurement start + k * interval); the
    /// timeline joins kernel intervals to the load's by it. None off the grid (`probe`).
    #[serde(default)]
    pub due_ns: Option<u64>,
    pub kernel: KernelCounters,
    /// Every thread seen so far; an exited thread keeps its last reading.
    pub thread_cpu: Vec<CpuUse>,
    /// Every process seen so far (including its exited threads); an exited one keeps its last reading.
    pub process_cpu: Vec<CpuUse>,
    /// TCP MIB counters of the server's network namespace ("TcpExt:ListenOverflows", ...).
    pub net_mib: BTreeMap<String, u64>,
    /// Drop counter (sk_drops) summed over the server's listening sockets; None when unknown.
    #[serde(default)]
    pub listen_socket_drops: Option<u64>,
    /// Every watched process's parent (pid -> ppid), as /proc/PID/stat gave it.
    #[serde(default)]
    pub parents: BTreeMap<u32, u32>,
    /// Every watched process's major page faults so far (pid -> majflt of /proc/PID/stat: faults
    /// that had to read the page in), from the same reading.
    #[serde(default)]
    pub major_faults: BTreeMap<u32, u64>,
    /// The server's outbound connections by remote address, over the samples so far (None when
    /// not read).
    #[serde(default)]
    pub outbound: Option<Vec<Outbound>>,
    /// Sockets in TIME_WAIT; None when sock_diag could not be asked.
    #[serde(default)]
    pub time_wait: Option<TimeWait>,
    /// The mean retransmission timeout (tcpi_rto, us) of the established connections on the
    /// server's listening ports, from sock_diag; None when not read or there were none.
    #[serde(default)]
    pub rto_us: Option<u32>,
    /// The control groups limiting the watched processes' CPU time (none without a quota).
    #[serde(default)]
    pub cgroups: Vec<CgroupCpu>,
    /// /proc/softirqs: per CPU, per vector (srvprof_common::SOFTIRQ_NAMES order); sampled mode only.
    #[serde(default)]
    pub softirq_counts: Vec<Vec<u64>>,
    /// /proc/interrupts: irq line -> its name, read with the sample (the report names the lines).
    #[serde(default)]
    pub irq_names: BTreeMap<u32, String>,
    /// `run`: responses the load generator has received so far, and how many of them arrived
    /// while the sampled window was open (None for `probe`, or in exact mode).
    #[serde(default)]
    pub responses: Option<u64>,
    #[serde(default)]
    pub traced_responses: Option<u64>,
    /// Sampled mode: each group's context switches while the windows were open, summed over the
    /// closed windows (None in exact mode). Without a load generator, the syscall counts are
    /// scaled by these: syscalls happen as the threads switch, bursts included.
    #[serde(default)]
    pub traced_switches: Option<Vec<u64>>,
    /// Sampled mode: each group's time on a CPU so far (ns, the scheduler's own account, summed
    /// per group by the programs), and the part of it inside the windows.
    #[serde(default)]
    pub oncpu_ns: Option<Vec<u64>>,
    #[serde(default)]
    pub traced_oncpu_ns: Option<Vec<u64>>,
    /// Sampled mode: each group's read- and write-type syscalls so far (the kernel's own per-task
    /// count, /proc/PID/io syscr + syscw), and the ones made inside the windows.
    /// Without a load generator, the syscall counts are scaled by these when the windows saw
    /// enough of them: a server's work, counted exactly and the same whether traced or not.
    #[serde(default)]
    pub io_calls: Option<Vec<u64>>,
    #[serde(default)]
    pub traced_io_calls: Option<Vec<u64>>,
    /// Sampled mode: packets each CPU's NET_RX softirqs processed so far (the kernel's own count,
    /// /proc/net/softnet_stat), and the ones processed inside the windows. NET_RX time is scaled
    /// by these: its time goes with the packets, while one softirq may carry one packet or a
    /// burst's hundred.
    #[serde(default)]
    pub rx_packets: Option<Vec<u64>>,
    #[serde(default)]
    pub traced_rx_packets: Option<Vec<u64>>,
}

/// A watched thread or process that exited during the run.
#[derive(Clone, Debug, PartialEq, Serialize, Deserialize)]
pub struct ExitRecord {
    pub pid: u32,
    pub tid: u32,
    pub group: u32,
    pub comm: String,
    pub exit_code: Option<i32>,
    pub signal: Option<i32>,
    /// Seconds since the run started.
    pub t_s: f64,
    pub monotonic_ns: u64,
}
