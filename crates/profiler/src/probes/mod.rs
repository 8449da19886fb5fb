//! Loading, attaching and reading srvprof's BPF programs. One submodule per probe family, named
//! as its files on the other layers (crates/ebpf/src, crates/common/src), declared by build.rs.

pub mod btf_offsets;
pub mod cost;
mod family;
#[cfg(test)]
mod object_names;
// Every family's module, and `Readers` joining up those with a Reader (build.rs).
include!(concat!(env!("OUT_DIR"), "/probe_families.rs"));

use aya::{
    Btf, Ebpf, EbpfLoader,
    maps::{HashMap, MapData, PerCpuArray, RingBuf},
    programs::{BtfTracePoint, tp_btf::BtfTracePointLinkId},
};
use srvprof_common::{HistSlots, globals, maps};

use crate::error::{Cause, SrvprofError};
pub use btf_offsets::{KernelOffsets, TcpNames};
use family::{Attaching, FamilyReader, OwnPrograms};
use srvprof_analysis::record::{KernelCounters, NsHistogram};
use window::Window;

/// The compiled BPF object, built by build.rs.
static BPF_OBJECT: &[u8] = aya::include_bytes_aligned!(concat!(env!("OUT_DIR"), "/srvprof-ebpf"));

/// Each family's programs attached by Probes::attach's loop, each to the BTF tracepoint of its
/// own name, with the switch that leaves them detached (None: the scheduler's, which track the
/// targets, and the syscalls', which have their own). Stacks attach their own way.
const FAMILIES: &[(Option<Family>, &[&str])] = Readers::FAMILIES;

/// Every program in FAMILIES, in attach order.
pub const PROGRAMS: &[&str] = &concat::<{ count(FAMILIES) }>(FAMILIES);

const fn count(families: &[(Option<Family>, &[&str])]) -> usize {
    let (mut n, mut f) = (0, 0);
    while f < families.len() {
        n += families[f].1.len();
        f += 1;
    }
    n
}

const fn concat<const N: usize>(
    families: &[(Option<Family>, &[&'static str])],
) -> [&'static str; N] {
    let mut out = [""; N];
    let (mut i, mut f) = (0, 0);
    while f < families.len() {
        let mut p = 0;
        while p < families[f].1.len() {
            out[i] = families[f].1[p];
            i += 1;
            p += 1;
        }
        f += 1;
    }
    out
}

/// What to watch.
#[derive(Clone, Debug, Default)]
pub struct ProbeTargets {
    /// Server processes (all their threads, and processes they fork).
    pub server_pids: Vec<u32>,
    /// Load-generator processes, accounted separately.
    pub client_pids: Vec<u32>,
    /// The server's listening ports: a socket on one of them is the server's side of TCP
    /// figures, a socket whose peer is on one a client's; the rest count as neither (`host_tcp`).
    pub tcp_ports: Vec<u16>,
    /// Sample on-CPU stacks at this frequency (Hz) and record off-CPU stacks; None: no stacks.
    pub stack_sample_hz: Option<u64>,
    /// The clients' stacks too, not only the server's. In `run` the client is srvprof's own load
    /// generator, on a CPU it keeps busy: taking its stacks costs its requests' latency.
    pub client_stacks: bool,
    /// Leave the syscall tracepoints alone. While any program is attached to them, every syscall
    /// of every process on the machine takes the kernel's slower traced path (65-160 ns on this
    /// project's VMs, 65 for an empty program), so this is the cheapest setting for a busy server.
    pub skip_syscalls: bool,
    /// Sampled mode: attach the syscall and interrupt programs only for this long in the middle
    /// of each interval (the Sampler opens and closes the window). None: attached all along,
    /// every syscall and interrupt counted and timed (exact mode).
    pub sampled_window: Option<std::time::Duration>,
    /// Families left detached, to measure what each costs (their figures read zero).
    pub skip: Vec<Family>,
    /// The windowed syscall and softirq programs return at once, to measure what the kernel's
    /// traced path and the dispatch to them cost alone (their figures read zero).
    pub empty_window_programs: bool,
    /// When new connections' waits to be taken are timed (ACCEPT_PROGRAM).
    pub accept_waits: tcp::AcceptWaits,
}

impl ProbeTargets {
    /// The groups whose stacks the programs take, a bit per group.
    fn stack_groups(&self) -> u64 {
        (1 << srvprof_common::GROUP_SERVER)
            | (u64::from(self.client_stacks) << srvprof_common::GROUP_CLIENT)
    }
}

/// The families of programs that can be left detached one by one; the scheduler's programs,
/// which track the targets, always attach, and syscalls and stacks have their own switches.
#[derive(Clone, Copy, Debug, PartialEq, Eq, clap::ValueEnum)]
pub enum Family {
    /// softirq_* and irq_handler_*
    Irq,
    /// tcp_*, inet_sock_set_state, sock_send_length and sk_data_ready
    Tcp,
    /// sched_process_exit
    Exits,
    /// mm_vmscan_*
    Reclaim,
    /// the on-CPU stack sampler
    Oncpu,
    /// the off-CPU stack copy at each switch
    Offcpu,
    /// the stop-the-world uprobes
    Pauses,
}

impl Family {
    /// What it attaches, in words.
    pub fn programs(self) -> &'static str {
        match self {
            Family::Irq => "the interrupt programs",
            Family::Tcp => "the TCP programs",
            Family::Exits => "the exit program",
            Family::Reclaim => "the memory-reclaim programs",
            Family::Oncpu => "the on-CPU stack sampler",
            Family::Offcpu => "the off-CPU stack program",
            Family::Pauses => "the stop-the-world uprobes",
        }
    }

    /// The family of a program in PROGRAMS, None for the scheduler's and the syscalls'.
    pub fn of(program: &str) -> Option<Family> {
        match program {
            stacks::ONCPU_PROGRAM => Some(Family::Oncpu),
            stacks::OFFCPU_PROGRAM => Some(Family::Offcpu),
            _ => (FAMILIES.iter())
                .find(|(_, programs)| programs.contains(&program))
                .map(|(family, _)| *family)
                .or_else(|| {
                    (Readers::OWN_PROGRAMS.iter())
                        .find(|(_, own)| own.iter().any(|(p, _)| *p == program))
                        .map(|(family, _)| *family)
                })
                .flatten(),
        }
    }
}

/// Loaded and attached probes. Dropping it detaches every program and frees every map.
pub struct Probes {
    ebpf: Ebpf,
    /// Each family's userspace half.
    families: Readers,
    stack_sample_hz: Option<u64>,
    /// On-CPU samples unwound from CFI in user space, when stacks are recorded.
    user_stacks: Option<crate::stacks::unwind::UserStacks>,
    syscalls_off: bool,
    /// The syscall and interrupt programs' window, in sampled mode.
    window: Option<Window>,
    /// The kernel's accounting of the programs' run time, on for some intervals.
    accounting: cost::Accounting,
    /// The kernel's off-CPU totals when the stacks' grid started (set_stack_grid).
    offcpu_at_grid: Option<stacks::OffcpuTotals>,
    /// The kernel's jiffy (ns), read once: what its timeouts in jiffies are in time.
    jiffy_ns: Option<u64>,
}

impl Probes {
    /// Loads the object, attaches every program. `on_attach` hears each attached program (for `check`).
    pub fn attach(
        targets: &ProbeTargets,
        mut on_attach: impl FnMut(&str, Result<(), &SrvprofError>),
    ) -> Result<Self, SrvprofError> {
        let vmlinux = btf_offsets::open_vmlinux()?;
        let offsets = KernelOffsets::from_btf(&vmlinux)?;
        let tcp_names = TcpNames::from_btf(&vmlinux)?;
        drop(vmlinux);
        let state = |name: &str| {
            (tcp_names.state(name).map(u64::from)).ok_or_else(|| SrvprofError::BtfField {
                field: format!("TCP_{name}"),
                source: "not in the enum of TCP states".into(),
            })
        };
        let (syn_sent, close) = (state("SYN_SENT")?, state("CLOSE")?);
        let (established, syn_recv) = (state("ESTABLISHED")?, state("SYN_RECV")?);
        let sample_period_ns = targets.stack_sample_hz.map_or(0, stacks::period_ns);
        let mut ebpf = EbpfLoader::new()
            .override_global(globals::TASK_PID_OFFSET, &offsets.task_pid, true)
            .override_global(globals::TASK_TGID_OFFSET, &offsets.task_tgid, true)
            .override_global(globals::TASK_COMM_OFFSET, &offsets.task_comm, true)
            .override_global(
                globals::TASK_EXIT_CODE_OFFSET,
                &offsets.task_exit_code,
                true,
            )
            .override_global(
                globals::TASK_EXEC_RUNTIME_OFFSET,
                &offsets.task_exec_runtime,
                true,
            )
            .override_global(
                globals::PERF_CTX_EVENT_OFFSET,
                &offsets.perf_ctx_event,
                true,
            )
            .override_global(
                globals::PERF_EVENT_EXPIRES_OFFSET,
                &offsets.perf_event_expires,
                true,
            )
            .override_global(globals::SAMPLE_PERIOD_NS, &sample_period_ns, true)
            .override_global(globals::REGS_ORIG_AX_OFFSET, &offsets.regs_orig_ax, true)
            .override_global(globals::SOCK_STATE_OFFSET, &offsets.sock_state, true)
            .override_global(globals::SOCK_NUM_OFFSET, &offsets.sock_num, true)
            .override_global(globals::SOCK_DPORT_OFFSET, &offsets.sock_dport, true)
            .override_global(globals::INET_SPORT_OFFSET, &offsets.inet_sport, true)
            .override_global(globals::SKB_DATA_OFFSET, &offsets.skb_data, true)
            .override_global(globals::SKB_CB_OFFSET, &offsets.skb_cb, true)
            .override_global(
                globals::SOCK_USERLOCKS_OFFSET,
                &offsets.sock_userlocks,
                true,
            )
            .override_global(globals::TCP_STATE_SYN_SENT, &syn_sent, true)
            .override_global(globals::TCP_STATE_CLOSE, &close, true)
            .override_global(globals::TCP_STATE_ESTABLISHED, &established, true)
            .override_global(globals::TCP_STATE_SYN_RECV, &syn_recv, true)
            .override_global(globals::SOCK_FAMILY_OFFSET, &offsets.sock_family, true)
            .override_global(globals::SOCK_PROTOCOL_OFFSET, &offsets.sock_protocol, true)
            .override_global(globals::ICSK_RTO_OFFSET, &offsets.icsk_rto, true)
            .override_global(globals::TCP_WRITE_SEQ_OFFSET, &offsets.tcp_write_seq, true)
            .override_global(globals::TCP_SND_NXT_OFFSET, &offsets.tcp_snd_nxt, true)
            .override_global(globals::TCP_SND_UNA_OFFSET, &offsets.tcp_snd_una, true)
            .override_global(globals::TCP_SND_WND_OFFSET, &offsets.tcp_snd_wnd, true)
            .override_global(globals::TCP_MSS_CACHE_OFFSET, &offsets.tcp_mss_cache, true)
            .override_global(globals::SOCK_DADDR_OFFSET, &offsets.sock_daddr, true)
            .override_global(globals::SOCK_V6_DADDR_OFFSET, &offsets.sock_v6_daddr, true)
            .override_global(globals::TASK_FILES_OFFSET, &offsets.task_files, true)
            .override_global(globals::FILES_FDT_OFFSET, &offsets.files_fdt, true)
            .override_global(
                globals::FDTABLE_MAX_FDS_OFFSET,
                &offsets.fdtable_max_fds,
                true,
            )
            .override_global(globals::FDTABLE_FD_OFFSET, &offsets.fdtable_fd, true)
            .override_global(globals::FILE_INODE_OFFSET, &offsets.file_inode, true)
            .override_global(globals::INODE_MODE_OFFSET, &offsets.inode_mode, true)
            .override_global(
                globals::FILE_PRIVATE_DATA_OFFSET,
                &offsets.file_private_data,
                true,
            )
            .override_global(globals::SOCKET_SK_OFFSET, &offsets.socket_sk, true)
            .override_global(globals::STACK_GROUPS, &targets.stack_groups(), true)
            .override_global(
                globals::WINDOW_PROGRAMS_EMPTY,
                &u64::from(targets.empty_window_programs),
                true,
            )
            .load(BPF_OBJECT)
            .map_err(classify_load_error)?;

        // Targets go in before any program runs, so no early event is missed.
        target::add(
            &mut ebpf,
            &targets.server_pids,
            srvprof_common::GROUP_SERVER,
        )?;
        target::add(
            &mut ebpf,
            &targets.client_pids,
            srvprof_common::GROUP_CLIENT,
        )?;
        tcp::watch_ports(&mut ebpf, &targets.tcp_ports)?;
        let btf = Btf::from_sys_fs().map_err(|_| SrvprofError::NoKernelBtf)?;
        // Sampled mode: the softirq programs, then the syscall programs (sys_exit, which counts,
        // last) are attached for one window an interval.
        let mut windowed_programs = Vec::new();
        if !targets.skip.contains(&Family::Irq) {
            windowed_programs.extend(irq::SOFTIRQ_PROGRAMS);
        }
        if !targets.skip_syscalls {
            windowed_programs.extend(syscalls::PROGRAMS);
        }
        let window =
            (targets.sampled_window).map(|length| Window::new(windowed_programs.clone(), length));
        for &tracepoint in PROGRAMS {
            let program = tcp::program_for(tracepoint, &tcp_names);
            let syscall = syscalls::PROGRAMS.contains(&program);
            if targets.skip_syscalls && syscall {
                continue;
            }
            if program == tcp::ACCEPT_PROGRAM && targets.accept_waits == tcp::AcceptWaits::Off {
                continue;
            }
            if Family::of(program).is_some_and(|f| targets.skip.contains(&f)) {
                continue;
            }
            // Attached by AcceptTiming, at once or while the server takes new connections; the
            // answer and hold programs by LateTiming, once they have something to time.
            let windowed = (window.is_some() && windowed_programs.contains(&program))
                || program == tcp::ACCEPT_PROGRAM
                || tcp::LATE_PROGRAMS.contains(&program);
            let result = load_one(&mut ebpf, &btf, program, tracepoint).and_then(|prog| {
                if windowed {
                    Ok(())
                } else {
                    attach_loaded(prog, program, tracepoint).map(|_| ())
                }
            });
            on_attach(program, result.as_ref().map(|_| ()));
            result?;
        }
        // The thread that unwinds the samples, ready (its targets' modules read) before the
        // programs that send them attach.
        let user_stacks = match targets.stack_sample_hz {
            Some(_) => {
                let ring = take_ring(&mut ebpf, maps::USER_STACK_SAMPLES)?;
                let hints = ebpf
                    .take_map(maps::STACK_COPY_HINTS)
                    .ok_or_else(|| map_error(maps::STACK_COPY_HINTS, "not in the BPF object"))?;
                let hints =
                    HashMap::try_from(hints).map_err(|e| map_error(maps::STACK_COPY_HINTS, e))?;
                let pids: Vec<u32> = (targets.server_pids.iter())
                    .chain(&targets.client_pids)
                    .copied()
                    .collect();
                Some(crate::stacks::unwind::UserStacks::start(ring, hints, &pids))
            }
            None => None,
        };
        if let Some(hz) = targets.stack_sample_hz {
            if !targets.skip.contains(&Family::Offcpu) {
                let result = stacks::attach_offcpu(&mut ebpf, &btf);
                on_attach(stacks::OFFCPU_PROGRAM, result.as_ref().map(|_| ()));
                result?;
            }
            if !targets.skip.contains(&Family::Oncpu) {
                let result = stacks::attach_sampler(&mut ebpf, hz);
                on_attach(stacks::ONCPU_PROGRAM, result.as_ref().map(|_| ()));
                result?;
            }
        }
        let families = Readers::attach(&mut Attaching {
            ebpf: &mut ebpf,
            targets,
            tcp_names: &tcp_names,
            on_attach: &mut on_attach,
        })?;
        Ok(Self {
            ebpf,
            families,
            stack_sample_hz: targets.stack_sample_hz,
            user_stacks,
            syscalls_off: targets.skip_syscalls,
            window,
            accounting: Default::default(),
            offcpu_at_grid: None,
            jiffy_ns: crate::clock::jiffy_ns(),
        })
    }

    /// Sampled mode: attaches the softirq and syscall programs for a window of `len` ns. No-op
    /// in exact mode.
    pub fn open_window(&mut self, len: u64) -> Result<(), SrvprofError> {
        match self.window.as_mut() {
            Some(window) => window.open(&mut self.ebpf, len),
            None => Ok(()),
        }
    }

    /// Sampled mode: the syscalls are counted from now on (call right before reading what they
    /// are scaled by); see Window.
    pub fn count_syscalls_from_now(&mut self) -> Result<(), SrvprofError> {
        match self.window.as_mut() {
            Some(w) => w.count_syscalls_from_now(&mut self.ebpf),
            None => Ok(()),
        }
    }

    /// Sampled mode: the softirqs are timed from now on (call after reading the packets at the
    /// window's start); see Window.
    pub fn time_softirqs_from_now(&mut self) -> Result<(), SrvprofError> {
        match self.window.as_mut() {
            Some(w) => w.softirq_span_from_now(&mut self.ebpf),
            None => Ok(()),
        }
    }

    /// Sampled mode: the softirqs are no longer timed (call before reading the packets at the
    /// window's end).
    pub fn time_softirqs_until_now(&mut self) -> Result<(), SrvprofError> {
        match self.window.as_mut() {
            Some(w) => w.softirq_span_until_now(&mut self.ebpf),
            None => Ok(()),
        }
    }

    /// Sampled mode: detaches them until the next window.
    pub fn close_window(&mut self) {
        if let Some(window) = self.window.as_mut() {
            window.close(&mut self.ebpf);
        }
    }

    /// The window's length in sampled mode; None in exact mode.
    pub fn window(&self) -> Option<std::time::Duration> {
        self.window.as_ref().map(Window::length)
    }

    /// Adds processes to watch while running (a restarted worker, a late client).
    pub fn watch(&mut self, pid: u32, group: u32) -> Result<(), SrvprofError> {
        target::add(&mut self.ebpf, &[pid], group)
    }

    /// The processes watched now, children forked during the run included.
    pub fn watched_pids(&self) -> Result<Vec<(u32, u32)>, SrvprofError> {
        target::watched(&self.ebpf)
    }

    /// The server's outbound connections since the programs attached, by remote address.
    pub fn outbound(&self) -> Result<Vec<tcp::OutboundRead>, SrvprofError> {
        tcp::outbound(&self.ebpf)
    }

    /// The server's connections open before the programs attached, by (process, file
    /// descriptor, remote address): sleeps reading them are then waits for a dependency too.
    pub fn add_outbound_fds(
        &mut self,
        open: &[(u32, u32, std::net::SocketAddr)],
    ) -> Result<(), SrvprofError> {
        tcp::add_outbound_fds(&mut self.ebpf, open)?;
        // Their asks are timed from now.
        self.families.tcp.late.attach_answers(&mut self.ebpf)
    }

    /// The namespaces' counters at a reading: HOLD_TRACES' sum (the programs that time answers
    /// held unsent attach once it grows, or once a walk found a server connection's send queue
    /// `backed_up`) and the server's datagrams sent (the programs that time asks, once they
    /// grow).
    pub fn follow_namespace(
        &mut self,
        traces: u64,
        datagrams: u64,
        backed_up: bool,
    ) -> Result<(), SrvprofError> {
        let now = crate::clock::monotonic_ns();
        self.families
            .tcp
            .late
            .follow_holds(&mut self.ebpf, traces, now, backed_up)?;
        self.families
            .tcp
            .late
            .follow_datagrams(&mut self.ebpf, datagrams, now)
    }

    /// Whether the programs that time answers held unsent are attached (or were left out).
    pub fn holds_followed(&self) -> bool {
        let late = &self.families.tcp.late;
        !late.loaded || late.holds_attached()
    }

    /// Reads every cumulative counter once. Cost: one map walk per measurement.
    pub fn read(&mut self) -> Result<KernelCounters, SrvprofError> {
        let watched: Vec<u32> = self
            .watched_pids()?
            .into_iter()
            .map(|(pid, _)| pid)
            .collect();
        target::set_bits(&mut self.ebpf, &watched)?;
        let ncpus = aya::util::nr_cpus().unwrap_or(1);
        let mut counters = KernelCounters {
            monotonic_ns: crate::clock::monotonic_ns(),
            jiffy_ns: self.jiffy_ns,
            syscalls_off: self.syscalls_off,
            traced_ns: self.window.as_ref().map(Window::traced_ns),
            ..KernelCounters::empty(ncpus)
        };
        self.families.read(&mut self.ebpf, &mut counters)?;
        counters.lost = target::lost(&self.ebpf)?;
        Ok(counters)
    }

    /// Each group's context switches so far (server, client).
    pub fn group_switches(
        &self,
    ) -> Result<[u64; srvprof_common::NUM_GROUPS as usize], SrvprofError> {
        sched::group_switches(&self.ebpf)
    }

    /// Each group's time on a CPU so far (GROUP_ONCPU and RUNNING): one read, however many
    /// threads.
    pub fn group_oncpu(&self) -> Result<[u64; srvprof_common::NUM_GROUPS as usize], SrvprofError> {
        sched::group_oncpu(&self.ebpf)
    }

    /// The on- and off-CPU stack counts so far; None when stacks were not attached.
    /// Call once, at the end: the unwinding thread is stopped by it.
    pub fn read_stacks(&mut self) -> Result<Option<stacks::RawStacks>, SrvprofError> {
        let (unwound, grid) = self
            .user_stacks
            .as_mut()
            .map(crate::stacks::unwind::UserStacks::finish)
            .unwrap_or_default();
        let at_grid = self.offcpu_at_grid.as_ref();
        self.stack_sample_hz
            .map(|hz| stacks::read(&self.ebpf, hz, unwound, grid, at_grid))
            .transpose()
    }

    /// The run's interval grid, which stacks are timed on: interval 0 starts at `origin_ns`
    /// (CLOCK_MONOTONIC). The kernel's off-CPU totals are read now, to scale the draws before
    /// and after it each to its own.
    pub fn set_stack_grid(&mut self, origin_ns: u64, interval_ns: u64) {
        if let Some(u) = &self.user_stacks {
            u.set_grid(origin_ns, interval_ns);
            // Without them, the draws are scaled to the whole run's totals, as before a grid.
            self.offcpu_at_grid = stacks::offcpu_totals(&self.ebpf).ok();
        }
    }

    /// Exits recorded since the last call.
    pub fn drain_exits(&mut self) -> Vec<srvprof_common::ExitEvent> {
        self.families.exits.drain()
    }
}

pub(crate) fn attach_one(
    ebpf: &mut Ebpf,
    btf: &Btf,
    program: &str,
    tracepoint: &str,
) -> Result<(), SrvprofError> {
    let prog = load_one(ebpf, btf, program, tracepoint)?;
    attach_loaded(prog, program, tracepoint).map(|_| ())
}

fn load_one<'a>(
    ebpf: &'a mut Ebpf,
    btf: &Btf,
    program: &str,
    tracepoint: &str,
) -> Result<&'a mut BtfTracePoint, SrvprofError> {
    let prog = btf_program(ebpf, program)?;
    prog.load(tracepoint, btf)
        .map_err(|e| SrvprofError::ProgramLoad {
            program: program.into(),
            source: e.into(),
        })?;
    Ok(prog)
}

/// The object's BTF tracepoint program `name` (loaded or not).
pub(crate) fn btf_program<'a>(
    ebpf: &'a mut Ebpf,
    name: &str,
) -> Result<&'a mut BtfTracePoint, SrvprofError> {
    ebpf.program_mut(name)
        .ok_or_else(|| SrvprofError::ProgramLoad {
            program: name.into(),
            source: "not in the BPF object".into(),
        })?
        .try_into()
        .map_err(|e: aya::programs::ProgramError| SrvprofError::ProgramLoad {
            program: name.into(),
            source: e.into(),
        })
}

/// Attaches a loaded program; the link lives until detached or the object is dropped.
pub(crate) fn attach_loaded(
    prog: &mut BtfTracePoint,
    program: &str,
    tracepoint: &str,
) -> Result<BtfTracePointLinkId, SrvprofError> {
    prog.attach().map_err(|e| SrvprofError::ProgramAttach {
        program: program.into(),
        tracepoint: tracepoint.into(),
        source: e.into(),
    })
}

/// NotRoot when the loader's message says EPERM, otherwise Load with the loader's error.
pub(crate) fn classify_load_error(e: aya::EbpfError) -> SrvprofError {
    let message = e.to_string();
    if message.contains("EPERM") || message.contains("Operation not permitted") {
        SrvprofError::NotRoot
    } else {
        SrvprofError::Load(e.into())
    }
}

/// `e`: aya's MapError, or our own reason ("not in the BPF object").
/// Takes a ring buffer out of the object, for a reader that owns it.
pub(crate) fn take_ring(ebpf: &mut Ebpf, name: &str) -> Result<RingBuf<MapData>, SrvprofError> {
    let map = ebpf
        .take_map(name)
        .ok_or_else(|| map_error(name, "not in the BPF object"))?;
    RingBuf::try_from(map).map_err(|e| map_error(name, e))
}

pub(crate) fn map_error(map: &str, e: impl Into<Cause>) -> SrvprofError {
    SrvprofError::Map {
        map: map.into(),
        source: e.into(),
    }
}

/// A histogram map's first `entries` entries (one per group, or the only one), each summed over
/// the CPUs.
pub(crate) fn read_histograms(
    ebpf: &Ebpf,
    name: &str,
    entries: u32,
) -> Result<Vec<NsHistogram>, SrvprofError> {
    let map: PerCpuArray<&MapData, HistSlots> = map_ref(ebpf, name)?;
    (0..entries)
        .map(|i| {
            let per_cpu = map.get(&i, 0).map_err(|e| map_error(name, e))?;
            let mut sum = NsHistogram::default();
            for cpu in per_cpu.iter() {
                for (s, n) in sum.slots.iter_mut().zip(&cpu.slots) {
                    *s += n;
                }
            }
            Ok(sum)
        })
        .collect()
}

/// A typed read-only handle on a map of the object.
pub(crate) fn map_ref<'a, M>(ebpf: &'a Ebpf, name: &str) -> Result<M, SrvprofError>
where
    M: TryFrom<&'a aya::maps::Map, Error = aya::maps::MapError>,
{
    let map = ebpf
        .map(name)
        .ok_or_else(|| map_error(name, "not in the BPF object"))?;
    M::try_from(map).map_err(|e| map_error(name, e))
}

/// A typed writable handle on a map of the object.
pub(crate) fn map_mut<'a, M>(ebpf: &'a mut Ebpf, name: &str) -> Result<M, SrvprofError>
where
    M: TryFrom<&'a mut aya::maps::Map, Error = aya::maps::MapError>,
{
    let map = ebpf
        .map_mut(name)
        .ok_or_else(|| map_error(name, "not in the BPF object"))?;
    M::try_from(map).map_err(|e| map_error(name, e))
}
