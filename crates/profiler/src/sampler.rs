//! One reading per interval of everything watched: the probes' counters and the kernel's own
//! CPU-time and TCP accounting in /proc. Analysis works on these samples, never on the kernel.

use std::collections::BTreeMap;

use srvprof_analysis::record::{CpuUse, ExitRecord, Outbound, Reading, TimeWait};
use srvprof_common::NUM_GROUPS;

use crate::cli::WINDOWS_PER_INTERVAL;
use crate::error::SrvprofError;
use crate::probes::{Probes, exits::decode_exit_code, sched::comm_string};
use crate::procfs;
use crate::window_placement::{self, Decision, Slot};
use srvprof_analysis::observer::{ObserverTally, ProgramRuns};
use srvprof_analysis::random::SplitMix64;

/// How long after its first poll a server that has made no read/write call yet is taken for
/// idle (its windows wait for the calls) before it is taken for one that makes none (blind
/// windows): the load usually starts within it.
const IO_GRACE_NS: u64 = 2_000_000_000;

/// The kernel times the programs in one interval of this many, from the second: while it does,
/// every program pays two clock reads a call.
const TIMED_EVERY: u64 = 10;

pub struct Sampler {
    probes: Probes,
    start_ns: u64,
    threads: BTreeMap<u32, CpuUse>,
    processes: BTreeMap<u32, CpuUse>,
    mib_pid: Option<u32>,
    last_mib: BTreeMap<String, u64>,
    listen_ports: Vec<u16>,
    /// The mounted hierarchies with the cpu controller, where CPU quotas are read.
    cpu_hierarchies: Vec<crate::procfs::cgroup::CpuHierarchy>,
    /// The server's outbound connections by remote address: (most at one sample, samples seen).
    outbound: BTreeMap<String, (u64, u64)>,
    /// net.ipv4.ip_local_port_range, for the TIME_WAIT sockets that hold ephemeral ports.
    ephemeral: Option<(u16, u16)>,
    pub exits: Vec<ExitRecord>,
    /// Sampled mode: where the current slot of the interval begins (the last sample's time for
    /// the first), until the slot's window of the syscall and interrupt programs has opened.
    window_from_ns: Option<u64>,
    /// Sampled mode: the interval's slots not yet begun or open, the current one included; each
    /// slot of the rest of the interval gets one window.
    slots_left: u32,
    /// Sampled mode: the current slot's plan for its window (window_placement), and when the
    /// slot ends.
    slot: Option<(Slot, u64)>,
    /// Sampled mode: the watched processes' read/write calls at the last poll, and whether they
    /// have risen since srvprof started (a server that makes them gets its windows where they do).
    io_polled: Option<u64>,
    io_seen: bool,
    /// Sampled mode: until when a server not yet seen making read/write calls is taken for idle
    /// rather than for one that makes none (IO_GRACE_NS from the first poll).
    io_unknown_until: Option<u64>,
    draws: SplitMix64,
    /// Sampled mode: when the open window ends.
    window_end_ns: Option<u64>,
    /// Sampled mode: the interval's window is still to come. The softirq and syscall programs are
    /// attached in one window per interval (each attach and detach holds srvprof's CPU for a few
    /// hundred microseconds), in the first slot found busy (or the last), WINDOWS_PER_INTERVAL
    /// slots' windows long (the interval's whole traced share, running on into the next slots).
    syscall_window_due: bool,
    /// `run`: the load generator's responses so far.
    responses: Option<Box<dyn Fn() -> u64 + Send>>,
    /// Responses when the open window opened, and the sum over the closed windows.
    responses_at_open: Option<u64>,
    traced_responses: u64,
    /// Each group's context switches when the open window opened, and their sum over the closed
    /// windows: what the sampled syscall counts are scaled by without a load generator.
    switches_at_open: Option<[u64; NUM_GROUPS as usize]>,
    traced_switches: [u64; NUM_GROUPS as usize],
    /// Sampled mode: each group's time on a CPU, all of it and the part inside the windows.
    oncpu: Traced,
    /// Sampled mode: each group's read- and write-type syscalls by the kernel's own per-task
    /// count (/proc/PID/task/TID/io), all of them and the ones made inside the windows.
    io_calls: Traced,
    /// Sampled mode: packets each CPU's NET_RX processed inside the windows (/proc/net/softnet_stat).
    rx_packets: PerCpuTraced,
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
}

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
            processes: BTreeMap::new(),
            mib_pid,
            last_mib: BTreeMap::new(),
            listen_ports: Vec::new(),
            cpu_hierarchies: crate::procfs::cgroup::cpu_hierarchies(),
            ephemeral: procfs::ephemeral_port_range(),
            outbound: BTreeMap::new(),
            exits: Vec::new(),
            window_from_ns: None,
            window_end_ns: None,
            syscall_window_due: false,
            responses: None,
            responses_at_open: None,
            traced_responses: 0,
            switches_at_open: None,
            traced_switches: [0; NUM_GROUPS as usize],
            slots_left: 0,
            slot: None,
            io_polled: None,
            io_seen: false,
            io_unknown_until: None,
            draws: window_placement::draws(),
            oncpu: Traced::default(),
            io_calls: Traced::default(),
            rx_packets: PerCpuTraced::default(),
            readings: 0,
            first_ns: None,
            timing: None,
            observer: ObserverTally::default(),
            own_first: None,
            own_last: None,
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
    /// the syscall and interrupt programs (opened by wait_until).
    pub fn take_reading(&mut self) -> Result<Reading, SrvprofError> {
        self.close_window();
        let kernel = self.probes.read()?;
        // The kernel's own TCP counters right after the probes' (tests compare the two): the
        // slower readings below (sock_diag dumps, /proc/PID/fd) come after.
        if let Some(pid) = self.mib_pid {
            let mib = procfs::net_mib(pid);
            if !mib.is_empty() {
                self.last_mib = mib;
            }
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
                    comm: procfs::comm(pid, pid).unwrap_or_default(),
                    user_ns: cpu.user_ns,
                    sys_ns: cpu.sys_ns,
                };
            }
            for tid in procfs::thread_ids(pid) {
                let stat = procfs::thread_stat_text(pid, tid);
                if let Some(cpu) = procfs::parse_stat_cpu_time(&stat, ticks) {
                    let comm = procfs::comm(pid, tid).unwrap_or_default();
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
            .then(|| self.traced_switches.to_vec());
        let sampled = kernel.traced_ns.is_some();
        if sampled {
            self.oncpu.add(&self.read(procfs::thread_oncpu_ns));
            self.io_calls.add(&self.read(procfs::thread_io_calls));
        }
        let (oncpu_ns, traced_oncpu_ns) = self.oncpu.totals(sampled);
        let (io_calls, traced_io_calls) = self.io_calls.totals(sampled);
        let (rx_packets, traced_rx_packets) = if sampled {
            (
                Some(procfs::softnet_processed()),
                Some(self.rx_packets.traced.clone()),
            )
        } else {
            (None, None)
        };
        let traced_responses = responses
            .filter(|_| kernel.traced_ns.is_some())
            .map(|_| self.traced_responses);
        crate::realtime::breathe();
        let cgroups = crate::procfs::cgroup::read(&self.cpu_hierarchies, &watched);
        // The server's sockets read right before and right after the socket table: a connection
        // that lives a request long (a proxy's to its upstream) is in both reads and the table.
        let server_sockets = || -> std::collections::HashSet<u64> {
            (watched.iter())
                .filter(|(_, g)| *g == srvprof_common::GROUP_SERVER)
                .flat_map(|(pid, _)| procfs::socket_inodes(*pid))
                .collect()
        };
        let wants_outbound = !self.listen_ports.is_empty();
        let mut server_inodes = if wants_outbound {
            server_sockets()
        } else {
            Default::default()
        };
        let connections = (wants_outbound || self.ephemeral.is_some())
            .then(crate::sockdiag::connections)
            .flatten();
        if wants_outbound {
            server_inodes.extend(server_sockets());
        }
        crate::realtime::breathe();
        let outbound = self.read_outbound(&server_inodes, connections.as_ref());
        let time_wait = self.ephemeral.zip(connections.as_ref()).map(|(range, c)| {
            let (sockets, holding_ports) = c.time_wait(range);
            TimeWait {
                sockets,
                holding_ports,
                ephemeral_ports: u32::from(range.1.saturating_sub(range.0)) + 1,
                tw_reuse: procfs::tcp_tw_reuse().unwrap_or(0),
            }
        });
        self.time_programs(kernel.monotonic_ns, responses);
        // The interval's slots count from the end of this reading, srvprof's own CPU burst.
        if self.probes.window().is_some() {
            self.window_from_ns = Some(crate::clock::monotonic_ns());
            self.slots_left = WINDOWS_PER_INTERVAL;
            self.syscall_window_due = true;
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

    /// The server's connections other than on its listening ports, added to those seen so far:
    /// per remote address, the most at one sample and the samples it was seen in. None when
    /// sock_diag cannot be asked or the listening ports are unknown.
    fn read_outbound(
        &mut self,
        inodes: &std::collections::HashSet<u64>,
        connections: Option<&crate::sockdiag::Connections>,
    ) -> Option<Vec<Outbound>> {
        if self.listen_ports.is_empty() {
            return None;
        }
        let connections = connections?;
        let mut now: BTreeMap<String, u64> = BTreeMap::new();
        for &(inode, local_port, remote) in &connections.established {
            if inodes.contains(&u64::from(inode)) && !self.listen_ports.contains(&local_port) {
                *now.entry(remote.to_string()).or_default() += 1;
            }
        }
        for (remote, n) in now {
            let seen = self.outbound.entry(remote).or_default();
            seen.0 = seen.0.max(n);
            seen.1 += 1;
        }
        Some(
            self.outbound
                .iter()
                .map(|(remote, &(max_connections, samples_seen))| Outbound {
                    remote: remote.clone(),
                    max_connections,
                    samples_seen,
                })
                .collect(),
        )
    }

    /// Sleeps until `due_ns` (monotonic) or until `stop()`. In sampled mode the interval is cut
    /// into WINDOWS_PER_INTERVAL equal slots, each of which would open its window where
    /// window_placement puts it: where the server is busy, at random, and away from the slot's
    /// edges (and so from the reading at each end of the interval, srvprof's own CPU burst, which
    /// would otherwise slow the server in exactly the time measured). The first slot to open on a
    /// busy poll (or the last) gets the interval's one window, so a burst anywhere in the
    /// interval gets it (measured: one blind 50 ms window a second missed every one of ten 70 ms
    /// bursts in 3 runs of 11).
    pub fn wait_until(&mut self, due_ns: u64, stop: impl Fn() -> bool) -> Result<(), SrvprofError> {
        loop {
            let now = crate::clock::monotonic_ns();
            if self.window_end_ns.is_some_and(|end| now >= end) {
                self.close_window();
            }
            let mut wake = due_ns;
            if let (Some(from), Some(window)) = (self.window_from_ns, self.probes.window()) {
                let len = window.as_nanos() as u64;
                let slots = u64::from(self.slots_left.max(1));
                let (slot, _) = *self.slot.get_or_insert_with(|| {
                    // A new slot: its first poll only primes the reading (one older than a poll
                    // would call the server busy for what it did before).
                    self.io_polled = None;
                    let end = from + due_ns.saturating_sub(from) / slots;
                    (Slot::new(from, end, len, self.draws.uniform()), end)
                });
                let busy = if now >= slot.earliest {
                    self.poll_busy()
                } else {
                    None
                };
                match slot.decide(now, busy, self.draws.uniform()) {
                    Decision::Open => {
                        self.window_from_ns = None;
                        // An idle slot leaves the window to a later, busier one, but the last.
                        if self.syscall_window_due && (busy != Some(false) || self.slots_left <= 1)
                        {
                            self.open_window(len)?;
                        } else {
                            self.next_slot();
                        }
                    }
                    Decision::WaitUntil(t) => wake = wake.min(t),
                }
            }
            if now >= due_ns || stop() {
                return Ok(());
            }
            if let Some(end) = self.window_end_ns {
                wake = wake.min(end);
            }
            // An absolute deadline: being preempted here costs no extra sleep. Naps of at most
            // 20 ms keep an eye on stop().
            crate::clock::sleep_until(wake.min(now + 20_000_000));
        }
    }

    /// Attaches the softirq and syscall programs for the interval's window, WINDOWS_PER_INTERVAL
    /// slots' windows long.
    fn open_window(&mut self, len: u64) -> Result<(), SrvprofError> {
        let len = len * u64::from(WINDOWS_PER_INTERVAL);
        self.probes.open_window(len)?;
        self.rx_packets.open(procfs::softnet_processed());
        self.probes.time_softirqs_from_now()?;
        self.syscall_window_due = false;
        // The syscalls are counted from right before the work they are scaled by is read.
        self.probes.count_syscalls_from_now()?;
        self.responses_at_open = self.responses.as_ref().map(|r| r());
        self.io_calls.open(self.read(procfs::thread_io_calls));
        self.switches_at_open = self.probes.group_switches().ok();
        self.oncpu.open(self.read(procfs::thread_oncpu_ns));
        self.window_end_ns = Some(crate::clock::monotonic_ns() + len);
        Ok(())
    }

    /// Whether the server's read/write calls rose since the last poll. Until they first have,
    /// the server is taken for idle for IO_GRACE_NS (its windows wait for its first calls, so
    /// that a burst in the first seconds is not missed by a window spent before it), then for one
    /// that makes none: None, and it gets blind windows. The server's processes only: srvprof's
    /// own (the client group in `run`) reads /proc all the time.
    fn poll_busy(&mut self) -> Option<bool> {
        let now: u64 = self
            .processes
            .values()
            .filter(|p| p.group == srvprof_common::GROUP_SERVER)
            .filter_map(|p| procfs::process_io_calls(p.pid))
            .sum();
        let rose = self.io_polled.is_some_and(|last| now > last);
        self.io_polled = Some(now);
        self.io_seen |= rose;
        let t = crate::clock::monotonic_ns();
        let unknown_until = *self.io_unknown_until.get_or_insert(t + IO_GRACE_NS);
        if self.io_seen {
            Some(rose)
        } else if t < unknown_until {
            Some(false)
        } else {
            None
        }
    }

    fn close_window(&mut self) {
        if let Some(at_open) = self.switches_at_open.take()
            && let Ok(now) = self.probes.group_switches()
        {
            for ((traced, now), open) in self.traced_switches.iter_mut().zip(now).zip(at_open) {
                *traced += now.saturating_sub(open);
            }
        }
        if self.window_end_ns.is_some() {
            // A failed write leaves softirqs timed a little past the packets' span: no reason
            // to lose the window.
            let _ = self.probes.time_softirqs_until_now();
            self.rx_packets.close(procfs::softnet_processed());
        }
        if self.oncpu.is_open() {
            self.oncpu.close(self.read(procfs::thread_oncpu_ns));
            // Last, right before the counting program's detach.
            self.io_calls.close(self.read(procfs::thread_io_calls));
        }
        if let (Some(at_open), Some(r)) = (self.responses_at_open.take(), self.responses.as_ref()) {
            self.traced_responses += r().saturating_sub(at_open);
        }
        self.probes.close_window();
        self.window_end_ns = None;
        self.next_slot();
    }

    /// On to the next slot, if the interval has one left and its window is still to come (the
    /// next sample starts anew): once it has been, the server is not polled until then.
    fn next_slot(&mut self) {
        match self.slot.take() {
            Some((_, slot_end)) if self.slots_left > 1 && self.syscall_window_due => {
                self.slots_left -= 1;
                self.window_from_ns = Some(slot_end);
            }
            _ => {
                self.slots_left = 0;
                self.window_from_ns = None;
            }
        }
    }

    /// One per-thread counter of every known thread now (tid -> group, value), from /proc.
    fn read(&self, counter: fn(u32, u32) -> Option<u64>) -> Readings {
        self.threads
            .values()
            .filter_map(|t| Some((t.tid, (t.group, counter(t.pid, t.tid)?))))
            .collect()
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

/// A per-thread counter's readings: tid -> (group, value).
type Readings = BTreeMap<u32, (u32, u64)>;

/// A per-thread counter (time on a CPU, read/write calls) summed per group from its threads'
/// readings (a thread first seen counts from its first reading), and the part inside the windows.
#[derive(Default)]
struct Traced {
    last: BTreeMap<u32, u64>,
    all: [u64; NUM_GROUPS as usize],
    traced: [u64; NUM_GROUPS as usize],
    /// The readings when the open window opened.
    at_open: Option<Readings>,
}

impl Traced {
    fn is_open(&self) -> bool {
        self.at_open.is_some()
    }

    fn open(&mut self, now: Readings) {
        self.add(&now);
        self.at_open = Some(now);
    }

    /// Adds what each thread counted since the window opened to its group's traced total.
    fn close(&mut self, now: Readings) {
        if let Some(at_open) = self.at_open.take() {
            for (tid, (group, value)) in &now {
                if let (Some((_, open)), Some(traced)) =
                    (at_open.get(tid), self.traced.get_mut(*group as usize))
                {
                    *traced += value.saturating_sub(*open);
                }
            }
        }
        self.add(&now);
    }

    /// The totals a sample carries: all, and inside the windows (None outside sampled mode).
    fn totals(&self, sampled: bool) -> (Option<Vec<u64>>, Option<Vec<u64>>) {
        if sampled {
            (Some(self.all.to_vec()), Some(self.traced.to_vec()))
        } else {
            (None, None)
        }
    }

    fn add(&mut self, now: &Readings) {
        for (tid, (group, ns)) in now {
            if let Some(last) = self.last.insert(*tid, *ns)
                && let Some(all) = self.all.get_mut(*group as usize)
            {
                *all += ns.saturating_sub(last);
            }
        }
    }
}

/// A per-CPU cumulative kernel counter (packets processed): its growth inside the windows.
#[derive(Default)]
struct PerCpuTraced {
    at_open: Option<Vec<u64>>,
    traced: Vec<u64>,
}

impl PerCpuTraced {
    fn open(&mut self, now: Vec<u64>) {
        self.at_open = Some(now);
    }

    fn close(&mut self, now: Vec<u64>) {
        let Some(at_open) = self.at_open.take() else {
            return;
        };
        if self.traced.len() < now.len() {
            self.traced.resize(now.len(), 0);
        }
        for (cpu, (traced, now)) in self.traced.iter_mut().zip(&now).enumerate() {
            *traced += now.saturating_sub(at_open.get(cpu).copied().unwrap_or(*now));
        }
    }
}
