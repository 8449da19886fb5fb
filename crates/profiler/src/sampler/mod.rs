//! One reading per interval of everything watched: the probes' counters and the kernel's own
//! CPU-time and TCP accounting in /proc. Analysis works on these readings, never on the kernel.
//! In sampled mode, the syscall and softirq programs run in one trace window an interval
//! (window.rs, placed by placement.rs).

mod placement;
mod send_queues;
mod window;

use std::collections::BTreeMap;

use srvprof_analysis::observer::{ObserverTally, ProgramRuns};
use srvprof_analysis::record::{CpuUse, ExitRecord, Outbound, Reading, TimeWait};

use crate::cli::WINDOWS_PER_INTERVAL;
use crate::error::SrvprofError;
use crate::probes::{Probes, exits::decode_exit_code, sched::comm_string};
use crate::procfs;
use window::{Readings, TraceWindow};

/// The kernel times the programs in one interval of this many, from the second: while it does,
/// every program pays two clock reads a call.
const TIMED_EVERY: u64 = 10;

pub struct Sampler {
    probes: Probes,
    start_ns: u64,
    threads: BTreeMap<u32, CpuUse>,
    /// Each thread's switches and time on a CPU by the programs' count when its /proc stat was
    /// last read.
    thread_activity: std::collections::HashMap<u32, (u64, u64)>,
    processes: BTreeMap<u32, CpuUse>,
    mib_pid: Option<u32>,
    last_mib: BTreeMap<String, u64>,
    listen_ports: Vec<u16>,
    /// The watch of the server's send queues, while the hold programs are not attached.
    send_queues: Option<send_queues::SendQueueWatch>,
    /// The mounted hierarchies with the cpu controller, where CPU quotas are read.
    cpu_hierarchies: Vec<crate::procfs::cgroup::CpuHierarchy>,
    /// The server's outbound connections by remote address.
    outbound: BTreeMap<String, Outbound>,
    /// The programs' count of connections opened to each remote at the last reading.
    outbound_opened: BTreeMap<std::net::SocketAddr, u64>,
    /// net.ipv4.ip_local_port_range, for the TIME_WAIT sockets that hold ephemeral ports.
    ephemeral: Option<(u16, u16)>,
    pub exits: Vec<ExitRecord>,
    /// `run`: the load generator's responses so far.
    responses: Option<Box<dyn Fn() -> u64 + Send>>,
    /// Readings so far, and when the first was taken.
    readings: u64,
    first_ns: Option<u64>,
    /// The timed interval under way: the programs' runs, the responses, the server's CPU time
    /// and the time when it began.
    timing: Option<Timing>,
    observer: ObserverTally,
    /// srvprof's threads (tid, name, ns on a CPU) at the first reading and the latest, and when.
    own_first: Option<OwnReading>,
    own_last: Option<OwnReading>,
    /// Sampled mode: the trace window's state (window.rs).
    window: TraceWindow,
    /// The first reading's socket table, walked before the measured window (walk_before_start).
    walked_before: Option<WalkedSockets>,
}

/// The server's sockets by inode (the process and descriptor holding each), and the socket
/// table.
type WalkedSockets = (
    std::collections::HashMap<u64, (u32, u32)>,
    Option<crate::sockdiag::Connections>,
);

/// When, and srvprof's threads then: (tid, name, ns on a CPU so far).
type OwnReading = (u64, Vec<(u32, String, u64)>);

struct Timing {
    runs: Vec<ProgramRuns>,
    responses: Option<u64>,
    server_cpu_ns: u64,
    start_ns: u64,
}

impl Sampler {
    pub fn new(probes: Probes, start_ns: u64, mib_pid: Option<u32>) -> Self {
        Self {
            probes,
            start_ns,
            threads: BTreeMap::new(),
            thread_activity: Default::default(),
            processes: BTreeMap::new(),
            mib_pid,
            last_mib: BTreeMap::new(),
            listen_ports: Vec::new(),
            send_queues: None,
            cpu_hierarchies: crate::procfs::cgroup::cpu_hierarchies(),
            ephemeral: procfs::ephemeral_port_range(),
            outbound: BTreeMap::new(),
            outbound_opened: BTreeMap::new(),
            exits: Vec::new(),
            responses: None,
            readings: 0,
            first_ns: None,
            timing: None,
            observer: ObserverTally::default(),
            own_first: None,
            own_last: None,
            window: TraceWindow::new(),
            walked_before: None,
        }
    }

    /// The server's listening ports, whose sockets' drop counters are read with every sample.
    pub fn with_listen_ports(mut self, ports: Vec<u16>) -> Self {
        self.listen_ports = ports;
        self
    }

    /// `run`: how many responses the load generator has received so far. In sampled mode the
    /// syscall figures are then scaled by the responses served in the windows, not by their
    /// time: the server runs slower while traced, and fewer requests in a window mean fewer
    /// syscalls, not a lower rate per request.
    pub fn with_responses(mut self, responses: impl Fn() -> u64 + Send + 'static) -> Self {
        self.responses = Some(Box::new(responses));
        self
    }

    /// Exit times (`t_s`) count from here: `run` learns when measurement starts from the load
    /// generator, after the sampler is built.
    pub fn set_start_ns(&mut self, start_ns: u64) {
        self.start_ns = start_ns;
    }

    pub fn probes_mut(&mut self) -> &mut Probes {
        &mut self.probes
    }

    /// Reads everything once; in sampled mode, the interval that starts now gets its window of
    /// the syscall and interrupt programs (opened by wait_until). The host's TIME_WAIT sockets
    /// are read only in the first reading and a `last` one (the run's ends, all that is
    /// reported of them).
    /// Walks the socket table for the first reading now, before the load starts: on a host
    /// holding thousands of TIME_WAIT sockets the walk takes milliseconds in one piece (tens for
    /// 20,000), which at the window's start held back the load generator's first sends on the
    /// CPU srvprof's threads share with it.
    pub fn walk_before_start(&mut self) -> Result<(), SrvprofError> {
        if self.readings == 0 {
            let watched = self.probes.watched_pids()?;
            let seed = !self.listen_ports.is_empty();
            self.walked_before = Some(self.walk_sockets(&watched, seed));
        }
        Ok(())
    }

    /// The socket table, and with `seed` the server's sockets by inode (the process and
    /// descriptor holding each), read right before and right after the table: a connection that
    /// lives a request long (a proxy's to its upstream) is in both reads and the table.
    fn walk_sockets(&self, watched: &[(u32, u32)], seed: bool) -> WalkedSockets {
        let server_sockets = || -> std::collections::HashMap<u64, (u32, u32)> {
            (watched.iter())
                .filter(|(_, g)| *g == srvprof_common::GROUP_SERVER)
                .flat_map(|&(pid, _)| {
                    (procfs::socket_fds(pid).into_iter()).map(move |(fd, inode)| (inode, (pid, fd)))
                })
                .collect()
        };
        let mut server_inodes = if seed {
            server_sockets()
        } else {
            Default::default()
        };
        let connections = crate::sockdiag::connections(self.ephemeral.is_some());
        if seed {
            server_inodes.extend(server_sockets());
            crate::realtime::breathe();
        }
        (server_inodes, connections)
    }

    /// Between readings (a run's warm-up): attaches the programs that time answers held unsent,
    /// or asks, when the namespaces' counters show holds, or datagrams sent, since the last look.
    pub fn look_at_namespace(&mut self) -> Result<(), SrvprofError> {
        match self.mib_pid {
            Some(pid) => {
                let backed_up = self.send_queues_backed_up(pid);
                follow_namespace(&mut self.probes, &procfs::net_mib(pid), backed_up)
            }
            None => Ok(()),
        }
    }

    /// Whether the warm-up's watch of the server's send queues found one backed up: started at
    /// its first look, stopped once the hold programs are attached (or at the first reading).
    fn send_queues_backed_up(&mut self, pid: u32) -> bool {
        if self.probes.holds_followed() || self.listen_ports.is_empty() {
            self.send_queues = None;
            return false;
        }
        let ports = self.listen_ports.clone();
        (self.send_queues)
            .get_or_insert_with(|| send_queues::SendQueueWatch::start(pid, ports))
            .found()
    }

    pub fn take_reading(&mut self, last: bool) -> Result<Reading, SrvprofError> {
        self.close_window();
        let kernel = self.probes.read()?;
        // The kernel's own TCP counters right after the probes' (tests compare the two): the
        // slower readings below (sock_diag dumps, /proc/PID/fd) come after.
        if let Some(pid) = self.mib_pid {
            let mib = procfs::net_mib(pid);
            if !mib.is_empty() {
                self.last_mib = mib;
            }
            // The warm-up's watch of the send queues ends at the first reading.
            let backed_up = self.send_queues.take().is_some_and(|w| w.found());
            follow_namespace(&mut self.probes, &self.last_mib, backed_up)?;
        }
        // The rest (sock_diag walks of every TCP socket, a file per thread in /proc) in pieces,
        // each followed by a breath for the server: together they take 1-2 ms.
        crate::realtime::breathe();
        let listen_socket_drops = if self.listen_ports.is_empty() {
            None
        } else {
            crate::sockdiag::listen_drops(&self.listen_ports)
        };
        // The lines' names, for the report; the kernel's softirq counts stand in for the probes'
        // only in sampled mode (the hardirq programs stay attached in both).
        let irq_names = procfs::interrupts()
            .into_iter()
            .map(|l| (l.irq, l.name))
            .collect();
        let softirq_counts = if kernel.traced_ns.is_some() {
            procfs::softirq_counts()
        } else {
            Vec::new()
        };
        crate::realtime::breathe();
        self.collect_exits();
        let ticks = procfs::clock_ticks_per_sec();
        let watched = self.probes.watched_pids()?;
        // Each watched process's parent, from the same reading of /proc/PID/stat as its CPU time.
        let mut parents: BTreeMap<u32, u32> = BTreeMap::new();
        let mut major_faults: BTreeMap<u32, u64> = BTreeMap::new();
        let mut pace = crate::realtime::Pace::new();
        let active: std::collections::HashMap<u32, (u64, u64)> = (kernel.threads.iter())
            .map(|t| {
                let switches = t.voluntary_switches + t.involuntary_switches;
                (t.tid, (switches, t.oncpu_ns))
            })
            .collect();
        // Every thread the programs know (all those of the watched processes since the first
        // reading), by process: no listing of /proc/PID/task, which takes a server of thousands
        // of threads milliseconds in one piece.
        let mut threads_of: BTreeMap<u32, Vec<u32>> = BTreeMap::new();
        for t in &kernel.threads {
            threads_of.entry(t.pid).or_default().push(t.tid);
        }
        for &(pid, group) in &watched {
            let stat = procfs::stat_text(pid);
            if let Some(ppid) = procfs::parse_stat_ppid(&stat) {
                parents.insert(pid, ppid);
            }
            if let Some(n) = procfs::parse_stat_major_faults(&stat) {
                major_faults.insert(pid, n);
            }
            if let Some(cpu) = procfs::parse_stat_cpu_time(&stat, ticks) {
                let entry = self.processes.entry(pid).or_default();
                *entry = CpuUse {
                    pid,
                    tid: 0,
                    group,
                    comm: procfs::parse_stat_comm(&stat).unwrap_or_default(),
                    user_ns: cpu.user_ns,
                    sys_ns: cpu.sys_ns,
                };
            }
            for tid in threads_of.get(&pid).into_iter().flatten().copied() {
                // A thread the programs saw neither switch nor run since the last reading has the
                // same CPU time: its file is not read again (a server of thousands of threads,
                // most of them idle, took tens of milliseconds here).
                let now_active = active.get(&tid).copied();
                let was_active = self.thread_activity.get(&tid).copied();
                if now_active.is_some()
                    && now_active == was_active
                    && self.threads.contains_key(&tid)
                {
                    continue;
                }
                if let Some(a) = now_active {
                    self.thread_activity.insert(tid, a);
                }
                pace.tick();
                let stat = procfs::thread_stat_text(pid, tid);
                if let Some(cpu) = procfs::parse_stat_cpu_time(&stat, ticks) {
                    let comm = procfs::parse_stat_comm(&stat).unwrap_or_default();
                    self.threads.insert(
                        tid,
                        CpuUse {
                            pid,
                            tid,
                            group,
                            comm,
                            user_ns: cpu.user_ns,
                            sys_ns: cpu.sys_ns,
                        },
                    );
                }
            }
        }
        let responses = self.responses.as_ref().map(|r| r());
        let traced_switches = kernel
            .traced_ns
            .is_some()
            .then(|| self.window.traced_switches.to_vec());
        let sampled = kernel.traced_ns.is_some();
        if sampled {
            self.window.oncpu.add(&self.oncpu());
            self.window.io_calls.add(&self.io_calls());
        }
        let (oncpu_ns, traced_oncpu_ns) = self.window.oncpu.totals(sampled);
        let (io_calls, traced_io_calls) = self.window.io_calls.totals(sampled);
        let (rx_packets, traced_rx_packets) = if sampled {
            (
                Some(procfs::softnet_processed()),
                Some(self.window.rx_packets.traced.clone()),
            )
        } else {
            (None, None)
        };
        let traced_responses = responses
            .filter(|_| kernel.traced_ns.is_some())
            .map(|_| self.window.traced_responses);
        crate::realtime::breathe();
        let cgroups = crate::procfs::cgroup::read(&self.cpu_hierarchies, &watched);
        // The socket table is walked only at the run's ends: on a host that churns connections
        // it holds tens of thousands in TIME_WAIT, and the kernel walks them all without a break
        // (2-9 ms for 20,000-40,000 here), even when it copies none out. The first walk finds
        // the server's outbound connections already open; the programs follow those it opens.
        let first = self.readings == 0;
        let seed = first && !self.listen_ports.is_empty();
        let (server_inodes, connections) = match self.walked_before.take().filter(|_| first) {
            Some(walked) => walked,
            None if first || last => self.walk_sockets(&watched, seed),
            None => Default::default(),
        };
        let outbound = self.read_outbound(&server_inodes, connections.as_ref().filter(|_| seed));
        let time_wait = self.time_wait(connections.as_ref());
        let rto_us = (connections.as_ref()).and_then(|c| c.mean_rto_us(&self.listen_ports));
        self.time_programs(kernel.monotonic_ns, responses);
        // The interval's slots count from the end of this reading, srvprof's own CPU burst.
        if self.probes.window().is_some() {
            self.window.from_ns = Some(crate::clock::monotonic_ns());
            self.window.slots_left = WINDOWS_PER_INTERVAL;
            self.window.due = true;
        }
        Ok(Reading {
            monotonic_ns: kernel.monotonic_ns,
            due_ns: None,
            kernel,
            softirq_counts,
            irq_names,
            responses,
            traced_responses,
            traced_switches,
            oncpu_ns,
            traced_oncpu_ns,
            io_calls,
            traced_io_calls,
            rx_packets,
            traced_rx_packets,
            thread_cpu: self.threads.values().cloned().collect(),
            process_cpu: self.processes.values().cloned().collect(),
            net_mib: self.last_mib.clone(),
            cgroups,
            parents,
            major_faults,
            outbound,
            time_wait,
            rto_us,
            listen_socket_drops,
        })
    }

    /// Ends the timed interval under way, and starts one in every TIMED_EVERY intervals.
    fn time_programs(&mut self, read_ns: u64, responses: Option<u64>) {
        let server_cpu_ns: u64 = (self.processes.values())
            .filter(|p| p.group == srvprof_common::GROUP_SERVER)
            .map(|p| p.user_ns + p.sys_ns)
            .sum();
        let first = *self.first_ns.get_or_insert(read_ns);
        self.observer.watched_ns = read_ns.saturating_sub(first);
        // At every reading, not only the last: a thread that has ended is gone from /proc.
        let own = (read_ns, procfs::threads_oncpu(std::process::id()));
        if self.own_first.is_none() {
            self.own_first = Some(own);
        } else {
            self.own_last = Some(own);
        }
        if let Some(t) = self.timing.take() {
            let runs = self.probes.program_runs();
            self.probes.stop_timing();
            let o = &mut self.observer;
            o.timed_ns += crate::clock::monotonic_ns().saturating_sub(t.start_ns);
            o.add_programs(&t.runs, &runs);
            o.responses = t
                .responses
                .zip(responses)
                .map(|(a, b)| o.responses.unwrap_or(0) + b.saturating_sub(a));
            o.server_cpu_ns += server_cpu_ns.saturating_sub(t.server_cpu_ns);
        }
        if self.readings % TIMED_EVERY == 1 {
            crate::realtime::breathe();
            if self.probes.start_timing() {
                self.timing = Some(Timing {
                    start_ns: crate::clock::monotonic_ns(),
                    runs: self.probes.program_runs(),
                    responses,
                    server_cpu_ns,
                });
            }
        }
        self.readings += 1;
    }

    /// What watching has cost so far (the intervals timed, and every flip).
    pub fn observer(&self) -> ObserverTally {
        let (own, own_span_ns) = match (&self.own_first, &self.own_last) {
            (Some((t0, first)), Some((t1, last))) => (
                srvprof_analysis::observer::own_threads(first, last),
                t1.saturating_sub(*t0),
            ),
            _ => (Vec::new(), 0),
        };
        ObserverTally {
            flips: self.probes.flips(),
            own,
            own_span_ns,
            ..self.observer.clone()
        }
    }

    /// The server's outbound connections, added to those seen so far: per remote address, the
    /// most at one sample and the samples it was seen in. At the first reading, those open then
    /// (`seed`: the server's sockets in the socket table other than on its listening ports);
    /// after it, the programs' count of those the server opened and has not closed, or one if it
    /// opened any in the interval (a connection shorter than an interval). None when the
    /// programs' count cannot be read.
    fn read_outbound(
        &mut self,
        inodes: &std::collections::HashMap<u64, (u32, u32)>,
        seed: Option<&crate::sockdiag::Connections>,
    ) -> Option<Vec<Outbound>> {
        let mut now: BTreeMap<String, u64> = BTreeMap::new();
        let mut open_before = Vec::new();
        for &(inode, local_port, remote) in seed.map_or(&[][..], |c| &c.established) {
            let held = inodes.get(&u64::from(inode));
            if let Some(&(pid, fd)) = held.filter(|_| !self.listen_ports.contains(&local_port)) {
                open_before.push((pid, fd, remote));
                let remote = std::net::SocketAddr::new(remote.ip().to_canonical(), remote.port());
                *now.entry(remote.to_string()).or_default() += 1;
            }
        }
        if !open_before.is_empty() {
            // Not fatal: its waits would read as waits for work, as without the programs.
            let _ = self.probes.add_outbound_fds(&open_before);
        }
        for read in self.probes.outbound().ok()? {
            let (remote, count) = (read.remote, read.count);
            let remote = std::net::SocketAddr::new(remote.ip().to_canonical(), remote.port());
            let before = self
                .outbound_opened
                .insert(remote, count.opened)
                .unwrap_or(0);
            let open = count.opened.saturating_sub(count.closed);
            if open > 0 || count.opened > before {
                let n = now.entry(remote.to_string()).or_default();
                *n = (*n + open).max(1);
            }
            let entry = self.outbound_entry(remote.to_string());
            entry.opened = count.opened;
            (entry.waits, entry.wait_ns) = (count.waits, count.wait_ns);
            (entry.answers, entry.answer_ns) = (count.answers, count.answer_ns);
            entry.answer_lengths = (count.answers > 0).then_some(read.answer_lengths);
        }
        for (remote, n) in now {
            let seen = self.outbound_entry(remote);
            seen.max_connections = seen.max_connections.max(n);
            seen.samples_seen += 1;
        }
        Some(self.outbound.values().cloned().collect())
    }

    fn outbound_entry(&mut self, remote: String) -> &mut Outbound {
        (self.outbound.entry(remote.clone())).or_insert_with(|| Outbound {
            remote,
            ..Default::default()
        })
    }

    /// The host's TIME_WAIT sockets now, for a reading taken outside the grid's last (a run
    /// that stopped early when its server exited).
    pub fn time_wait_now(&self) -> Option<TimeWait> {
        self.ephemeral?;
        self.time_wait(crate::sockdiag::connections(true).as_ref())
    }

    fn time_wait(&self, connections: Option<&crate::sockdiag::Connections>) -> Option<TimeWait> {
        let range = self.ephemeral?;
        let (sockets, holding_ports) = connections?.time_wait(range)?;
        Some(TimeWait {
            sockets,
            holding_ports,
            ephemeral_ports: u32::from(range.1.saturating_sub(range.0)) + 1,
            tw_reuse: procfs::tcp_tw_reuse().unwrap_or(0),
        })
    }

    /// The read- and write-type syscalls of every known process now (pid -> group, value), a
    /// file per process (its threads' sum, those that ended included), not one per thread.
    pub(super) fn io_calls(&self) -> Readings {
        (self.processes.values())
            .filter_map(|p| Some((p.pid, (p.group, procfs::process_io_calls(p.pid)?))))
            .collect()
    }

    /// Each group's time on a CPU now (group -> group, ns), from the programs: one read however
    /// many threads. Empty when it cannot be read.
    pub(super) fn oncpu(&self) -> Readings {
        let groups = self.probes.group_oncpu().unwrap_or_default();
        (0..).zip(groups).map(|(g, ns)| (g, (g, ns))).collect()
    }

    fn collect_exits(&mut self) {
        for e in self.probes.drain_exits() {
            let (exit_code, signal) = decode_exit_code(e.exit_code);
            self.exits.push(ExitRecord {
                pid: e.tgid,
                tid: e.tid,
                group: e.group,
                comm: comm_string(&e.comm),
                exit_code,
                signal,
                t_s: e.ts_ns.saturating_sub(self.start_ns) as f64 / 1e9,
                monotonic_ns: e.ts_ns,
            });
        }
    }

    /// Detaches every probe, returning what was recorded.
    pub fn finish(mut self) -> Vec<ExitRecord> {
        self.close_window();
        self.collect_exits();
        drop(self.probes);
        self.exits
    }
}

/// Hands the probes the server namespace's counters (`mib`) and whether its send queues are
/// `backed_up`, which their late programs attach by.
fn follow_namespace(
    probes: &mut Probes,
    mib: &BTreeMap<String, u64>,
    backed_up: bool,
) -> Result<(), SrvprofError> {
    let datagrams = mib.get("Udp:OutDatagrams").copied().unwrap_or(0);
    probes.follow_namespace(hold_traces(mib), datagrams, backed_up)
}

/// HOLD_TRACES' sum in the server's namespace (`server_mib`) and srvprof's own (its load
/// generator's: a client delaying its ACKs counts them in its own).
fn hold_traces(server_mib: &BTreeMap<String, u64>) -> u64 {
    // Each namespace's counters are a file to parse: the server runs between the two.
    crate::realtime::breathe();
    let own = procfs::net_tcp_ext(std::process::id());
    crate::realtime::breathe();
    (crate::probes::tcp::HOLD_TRACES.iter())
        .map(|k| server_mib.get(*k).unwrap_or(&0) + own.get(*k).unwrap_or(&0))
        .sum()
}
