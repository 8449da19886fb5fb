//! Reads the TCP probes: retransmits and resets by side, resets by state and reason, the
//! server's outbound connections and the waits on them, its new connections' waits to be taken.

use aya::{
    Ebpf,
    maps::{Array, HashMap, MapData, PerCpuArray, PerCpuHashMap},
    programs::tp_btf::BtfTracePointLinkId,
};
use srvprof_common::{
    AcceptCount, CountTime, FdKey, OutboundCount, OutboundFd, OutboundKey, TcpResetKey, maps, tcp,
};

use super::btf_offsets::TcpNames;
use super::family::{Attaching, FamilyReader, OwnPrograms};
use super::{Family, attach_loaded, btf_program, map_error, map_mut, map_ref, read_histograms};
use crate::error::SrvprofError;
use srvprof_analysis::record::NsHistogram;
use srvprof_analysis::record::{AcceptWaitCount, CountNs, KernelCounters, TcpResetCount};

/// The programs attached by the probes' loop, each to the BTF tracepoint of its name
/// (ACCEPT_PROGRAM by AcceptTiming).
pub const PROGRAMS: &[&str] = &[
    "tcp_retransmit_skb",
    "tcp_retransmit_synack",
    "tcp_send_reset",
    "tcp_receive_reset",
    ACCEPT_PROGRAM,
    "inet_sock_set_state",
    ANSWER_PROGRAMS[0],
    ANSWER_PROGRAMS[1],
    HOLD_PROGRAMS[1],
];

/// The programs that time the server's asks to its dependencies until answered: they run at
/// every socket send and every arrival of data on the host (about 70 ns a call each, two of each
/// a request on loopback), so they are attached only once the server has an outbound
/// connection (LateTiming); sock_send_length begins asks only once sk_data_ready is attached.
pub const ANSWER_PROGRAMS: [&str; 2] = ["sock_send_length", "sk_data_ready"];

/// The programs that time the server's answers held unsent: they run at every socket send and
/// every arriving segment on the host (about 230 and 80 ns a call), so they are attached only
/// once the kernel's counters show a hold's trace (LateTiming::follow_holds).
pub const HOLD_PROGRAMS: [&str; 2] = ["sock_send_length", "tcp_probe"];

/// ANSWER_PROGRAMS and HOLD_PROGRAMS, each once: loaded with the others, attached later.
pub const LATE_PROGRAMS: [&str; 3] = [ANSWER_PROGRAMS[0], ANSWER_PROGRAMS[1], HOLD_PROGRAMS[1]];

/// The namespace counters whose growth attaches HOLD_PROGRAMS: ACKs sent late by the delayed-ACK
/// timer (what Nagle's algorithm waits for), window probes sent to a closed window, and closed
/// windows advertised. A host's other connections (an interactive ssh) make a few a second.
pub const HOLD_TRACES: [&str; 3] = [
    "TcpExt:DelayedACKs",
    "TcpExt:TCPWinProbe",
    "TcpExt:TCPToZeroWindowAdv",
];
/// Bytes written and not yet acknowledged on one server connection at a look that attach
/// HOLD_PROGRAMS: more than an ordinary answer leaves in flight for a round trip on a fast path
/// (ten 1448-byte segments of initial window), what a transfer the path paces keeps queued.
pub const SEND_QUEUE_BACKED_UP: u32 = 64 << 10;
/// ... and that take this long or longer to deliver at the connection's delivery rate (ms): a
/// transfer the path paces, not one a fast path carries at once (1 MiB answers on loopback drain
/// in 0.3 ms, and timing them cost nginx 9 % of its CPU for nothing to tell).
pub const SEND_QUEUE_DRAIN_MS: f64 = 1.0;
/// The least time between two walks of the server's connections' send queues in a run's warm-up
/// (ns), and the sockets of the table the walks may go over in a second: on a host that churns
/// connections the walks are as much rarer as its table is larger (sampler/send_queues.rs).
pub const SEND_QUEUE_LOOK_NS: u64 = 100_000_000;
pub const SOCKETS_WALKED_PER_S: u64 = 20_000;
/// HOLD_TRACES' growth a second that attaches HOLD_PROGRAMS: more than a host's other
/// connections make, less than one answer in 50 held at 250 requests a second.
pub const HOLD_TRACES_PER_S: f64 = 5.0;

/// The program that ends a new connection's wait to be taken, at its first read (attached as
/// ProbeTargets::accept_waits says).
pub const ACCEPT_PROGRAM: &str = "tcp_rcv_space_adjust";

/// The program loaded for `tracepoint`: a kernel whose tcp_send_reset has no reason argument
/// (before 6.10, no enum sk_rst_reason in its BTF) gets the one that does not read it.
pub fn program_for<'a>(tracepoint: &'a str, names: &TcpNames) -> &'a str {
    match tracepoint {
        "tcp_send_reset" if names.reasons.is_empty() => RESET_PROGRAM_WITHOUT_REASON,
        _ => tracepoint,
    }
}

/// tcp_send_reset's program for kernels without the reason argument.
pub const RESET_PROGRAM_WITHOUT_REASON: &str = "tcp_send_reset_without_reason";

/// Marks the server's listening ports, the server's side of every TCP figure, in both maps
/// (the hash for the counters, the bitmap for the accept programs' per-packet test).
pub fn watch_ports(ebpf: &mut Ebpf, ports: &[u16]) -> Result<(), SrvprofError> {
    let mut hash: HashMap<&mut MapData, u16, u8> = map_mut(ebpf, maps::TCP_PORTS)?;
    for port in ports {
        hash.insert(port, 1, 0)
            .map_err(|e| map_error(maps::TCP_PORTS, e))?;
    }
    let mut bits: Array<&mut MapData, u64> = map_mut(ebpf, maps::TCP_PORT_BITS)?;
    for word in ports.iter().map(|p| u32::from(*p) / 64) {
        let set = (ports.iter())
            .filter(|p| u32::from(**p) / 64 == word)
            .fold(0u64, |w, p| w | 1 << (p % 64));
        bits.set(word, set, 0)
            .map_err(|e| map_error(maps::TCP_PORT_BITS, e))?;
    }
    Ok(())
}

/// Reads the family's maps at each reading, and follows the accept program's attachment.
pub struct Reader {
    /// The kernel's names of TCP states and reset reasons.
    pub names: TcpNames,
    pub accept: AcceptTiming,
    pub late: LateTiming,
}

impl FamilyReader for Reader {
    const PROGRAMS: &'static [&'static str] = PROGRAMS;
    /// The loader's pick for kernels whose tcp_send_reset has no reason argument.
    const OWN_PROGRAMS: OwnPrograms = &[(RESET_PROGRAM_WITHOUT_REASON, "tp_btf/tcp_send_reset")];
    const SKIP: Option<Family> = Some(Family::Tcp);

    fn attach(at: &mut Attaching<'_>) -> Result<Self, SrvprofError> {
        // Left detached with the rest of its family (skipped by the loop, so not loaded either).
        let accept_waits = match at.skips(Family::Tcp) {
            true => AcceptWaits::Off,
            false => at.targets.accept_waits,
        };
        let mut accept = AcceptTiming::new(accept_waits);
        if accept_waits == AcceptWaits::Always {
            accept.attach(at.ebpf)?;
        }
        Ok(Self {
            names: at.tcp_names.clone(),
            accept,
            late: LateTiming::new(!at.skips(Family::Tcp)),
        })
    }

    fn read(&mut self, ebpf: &mut Ebpf, counters: &mut KernelCounters) -> Result<(), SrvprofError> {
        // Before the outbound connections are read: what the reading counts is from here on.
        self.late.follow_answers(ebpf)?;
        read(ebpf, &self.names, counters)?;
        read_accepts(ebpf, counters)?;
        read_send_holds(ebpf, counters)?;
        let handshakes = tcp::index(tcp::SIDE_SERVER, tcp::HANDSHAKES);
        (self.accept).follow(ebpf, counters.tcp[handshakes as usize])
    }
}

/// The programs attached after the others, each once and left attached: ANSWER_PROGRAMS at the
/// first reading (or look) that finds the server opened or holds an outbound connection (an ask
/// begun before is not counted: its answer finds none pending), HOLD_PROGRAMS at the first
/// reading that finds HOLD_TRACES grown (holds before are not counted).
pub struct LateTiming {
    /// Loaded (the tcp family was not left out).
    pub loaded: bool,
    links: Vec<(&'static str, BtfTracePointLinkId)>,
    /// HOLD_TRACES' sum at the last look, and when (CLOCK_MONOTONIC ns).
    hold_traces: Option<(u64, u64)>,
    /// The server namespace's datagrams sent at the last look, and when.
    datagrams: Option<(u64, u64)>,
}

impl LateTiming {
    pub fn new(loaded: bool) -> Self {
        Self {
            loaded,
            links: Vec::new(),
            hold_traces: None,
            datagrams: None,
        }
    }

    /// Attaches those of `programs` not attached yet.
    fn attach(&mut self, ebpf: &mut Ebpf, programs: &[&'static str]) -> Result<(), SrvprofError> {
        for &program in programs {
            if !self.loaded || self.links.iter().any(|(p, _)| *p == program) {
                continue;
            }
            let prog = btf_program(ebpf, program)?;
            self.links
                .push((program, attach_loaded(prog, program, program)?));
        }
        Ok(())
    }

    /// Whether HOLD_PROGRAMS are attached.
    pub fn holds_attached(&self) -> bool {
        self.links.iter().any(|(p, _)| *p == HOLD_PROGRAMS[1])
    }

    pub fn answers_attached(&self) -> bool {
        self.links.iter().any(|(p, _)| *p == ANSWER_PROGRAMS[1])
    }

    pub fn attach_answers(&mut self, ebpf: &mut Ebpf) -> Result<(), SrvprofError> {
        if !self.loaded || self.answers_attached() {
            return Ok(());
        }
        self.attach(ebpf, &ANSWER_PROGRAMS)?;
        watch(ebpf, tcp::WATCH_ANSWERS)
    }

    /// ANSWER_PROGRAMS attached once the kernel says the server has an outbound connection
    /// (OUTBOUND_WATCH).
    pub fn follow_answers(&mut self, ebpf: &mut Ebpf) -> Result<(), SrvprofError> {
        if !self.loaded || self.answers_attached() {
            return Ok(());
        }
        let watch: Array<&MapData, u64> = map_ref(ebpf, maps::OUTBOUND_WATCH)?;
        if watch.get(&0, 0).unwrap_or(0) & tcp::WATCH_OPENED != 0 {
            self.attach_answers(ebpf)?;
        }
        Ok(())
    }

    /// HOLD_PROGRAMS attached once HOLD_TRACES' sum (`traces`, from the namespaces' counters at
    /// `now_ns`) grew HOLD_TRACES_PER_S since the last look, or once `backed_up`: a walk of the
    /// server's connections found one with SEND_QUEUE_BACKED_UP bytes unacknowledged that take
    /// SEND_QUEUE_DRAIN_MS to deliver (answers paced by the path or a slow reader raise no
    /// counter).
    pub fn follow_holds(
        &mut self,
        ebpf: &mut Ebpf,
        traces: u64,
        now_ns: u64,
        backed_up: bool,
    ) -> Result<(), SrvprofError> {
        let grew = grew_by(self.hold_traces, (traces, now_ns), HOLD_TRACES_PER_S);
        self.hold_traces = Some((traces, now_ns));
        let attached = self.links.iter().any(|(p, _)| *p == HOLD_PROGRAMS[1]);
        if !self.loaded || attached {
            return Ok(());
        }
        if !(grew || backed_up) {
            return Ok(());
        }
        self.attach(ebpf, &HOLD_PROGRAMS)?;
        watch(ebpf, tcp::WATCH_HOLDS)
    }

    /// ANSWER_PROGRAMS attached once the server's namespace sent DATAGRAMS_PER_S datagrams a
    /// second since the last look (`sent`, Udp:OutDatagrams): a datagram service's asks (a DNS
    /// server's) open no TCP connection.
    pub fn follow_datagrams(
        &mut self,
        ebpf: &mut Ebpf,
        sent: u64,
        now_ns: u64,
    ) -> Result<(), SrvprofError> {
        let grew = grew_by(self.datagrams, (sent, now_ns), DATAGRAMS_PER_S);
        self.datagrams = Some((sent, now_ns));
        match grew {
            true => self.attach_answers(ebpf),
            false => Ok(()),
        }
    }
}

/// Datagrams a second sent in the server's namespace that attach ANSWER_PROGRAMS: more than a
/// host's own lookups and clock make, one request in 100 asking at 500 requests a second.
pub const DATAGRAMS_PER_S: f64 = 5.0;

/// Whether a counter read `now` (value, CLOCK_MONOTONIC ns) grew `per_s` a second or more
/// since `before` (over at least 0.1 s).
fn grew_by(before: Option<(u64, u64)>, now: (u64, u64), per_s: f64) -> bool {
    before.is_some_and(|(then_value, then_ns)| {
        let secs = now.1.saturating_sub(then_ns) as f64 / 1e9;
        now.0.saturating_sub(then_value) as f64 >= per_s * secs.max(0.1)
    })
}

/// Sets a bit of OUTBOUND_WATCH.
fn watch(ebpf: &mut Ebpf, bit: u64) -> Result<(), SrvprofError> {
    let mut watch: Array<&mut MapData, u64> = map_mut(ebpf, maps::OUTBOUND_WATCH)?;
    let bits = watch.get(&0, 0).unwrap_or(0) | bit;
    (watch.set(0, bits, 0)).map_err(|e| map_error(maps::OUTBOUND_WATCH, e))
}

/// When new connections' waits to be taken are timed: ACCEPT_PROGRAM runs at every TCP read on the
/// host, so it is attached only where it has waits to time.
#[derive(Clone, Copy, Debug, Default, PartialEq, Eq)]
pub enum AcceptWaits {
    /// Not timed.
    #[default]
    Off,
    /// All along: the load opens a connection per request.
    Always,
    /// While the server takes new connections: attached at a reading that finds handshakes since
    /// the one before, detached at one that finds none.
    WhileConnecting,
}

/// ACCEPT_PROGRAM's attachment (loaded with the others, attached by `follow` or `attach`).
#[derive(Default)]
pub struct AcceptTiming {
    mode: AcceptWaits,
    link: Option<BtfTracePointLinkId>,
    /// The server's handshakes at the last reading.
    handshakes: u64,
}

impl AcceptTiming {
    pub fn new(mode: AcceptWaits) -> Self {
        Self {
            mode,
            ..Default::default()
        }
    }

    /// Attaches the program; only connections pending from now on have their waits counted.
    pub fn attach(&mut self, ebpf: &mut Ebpf) -> Result<(), SrvprofError> {
        if self.link.is_some() {
            return Ok(());
        }
        let mut since: Array<&mut MapData, u64> = map_mut(ebpf, maps::ACCEPT_TIMED_SINCE)?;
        since
            .set(0, crate::clock::monotonic_ns(), 0)
            .map_err(|e| map_error(maps::ACCEPT_TIMED_SINCE, e))?;
        let prog = btf_program(ebpf, ACCEPT_PROGRAM)?;
        self.link = Some(attach_loaded(prog, ACCEPT_PROGRAM, ACCEPT_PROGRAM)?);
        Ok(())
    }

    /// At each reading, with the server's handshakes so far: attached while they grow.
    pub fn follow(&mut self, ebpf: &mut Ebpf, handshakes: u64) -> Result<(), SrvprofError> {
        let connecting = handshakes > self.handshakes;
        self.handshakes = handshakes;
        match (self.mode, self.link.is_some(), connecting) {
            (AcceptWaits::WhileConnecting, false, true) => self.attach(ebpf),
            (AcceptWaits::WhileConnecting, true, false) => {
                if let Some(link) = self.link.take() {
                    let _ = btf_program(ebpf, ACCEPT_PROGRAM)?.detach(link);
                }
                Ok(())
            }
            _ => Ok(()),
        }
    }
}

/// The server's new connections and their waits to be taken so far (the accept queue, then until
/// their first read), by port, and the waits' lengths.
fn read_accepts(ebpf: &Ebpf, counters: &mut KernelCounters) -> Result<(), SrvprofError> {
    let map: PerCpuHashMap<&MapData, u16, AcceptCount> = map_ref(ebpf, maps::ACCEPT_QUEUE)?;
    counters.accept_waits = map
        .iter()
        .filter_map(Result::ok)
        .map(|(port, per_cpu)| AcceptWaitCount {
            port,
            accepts: per_cpu.iter().map(|c| c.accepts).sum(),
            wait_ns: per_cpu.iter().map(|c| c.wait_ns).sum(),
        })
        .collect();
    counters.accept_waits.sort_by_key(|a| a.port);
    let lengths = read_histograms(ebpf, maps::ACCEPT_HIST, 1)?;
    counters.accept_hist = lengths.into_iter().next().unwrap_or_default();
    Ok(())
}

/// The server's bytes held unsent so far, and their waits' lengths, by why they waited.
fn read_send_holds(ebpf: &Ebpf, counters: &mut KernelCounters) -> Result<(), SrvprofError> {
    let map: PerCpuArray<&MapData, CountTime> = map_ref(ebpf, maps::SEND_HOLDS)?;
    counters.send_holds = (0..tcp::HOLD_KINDS)
        .map(|kind| {
            let per_cpu = map
                .get(&kind, 0)
                .map_err(|e| map_error(maps::SEND_HOLDS, e))?;
            Ok(CountNs {
                count: per_cpu.iter().map(|c| c.count).sum(),
                total_ns: per_cpu.iter().map(|c| c.total_ns).sum(),
            })
        })
        .collect::<Result<_, SrvprofError>>()?;
    counters.send_hold_hist = read_histograms(ebpf, maps::SEND_HOLD_HIST, tcp::HOLD_KINDS)?;
    Ok(())
}

fn read(ebpf: &Ebpf, names: &TcpNames, counters: &mut KernelCounters) -> Result<(), SrvprofError> {
    let map: PerCpuArray<&MapData, u64> = map_ref(ebpf, maps::TCP_COUNTERS)?;
    let n = tcp::SIDES * tcp::COUNT;
    counters.tcp = vec![0; n as usize];
    for i in 0..n {
        let per_cpu = map
            .get(&i, 0)
            .map_err(|e| map_error(maps::TCP_COUNTERS, e))?;
        counters.tcp[i as usize] = per_cpu.iter().sum();
    }
    let resets: PerCpuHashMap<&MapData, TcpResetKey, u64> = map_ref(ebpf, maps::TCP_RESETS)?;
    counters.tcp_resets = resets
        .iter()
        .filter_map(Result::ok)
        .map(|(key, per_cpu)| reset_count(names, &key, per_cpu.iter().sum()))
        .collect();
    counters.tcp_resets.sort_by(|a, b| {
        (a.side, a.sent, &a.state, &a.reason).cmp(&(b.side, b.sent, &b.state, &b.reason))
    });
    Ok(())
}

/// The server's outbound connections since the programs attached, by remote address: opened,
/// closed, waited on and answered, summed over the CPUs, with the lengths of the answers' entry
/// in ANSWER_HIST (shared by the remotes that hash alike).
pub fn outbound(ebpf: &Ebpf) -> Result<Vec<OutboundRead>, SrvprofError> {
    let map: PerCpuHashMap<&MapData, OutboundKey, OutboundCount> = map_ref(ebpf, maps::OUTBOUND)?;
    let lengths = read_histograms(ebpf, maps::ANSWER_HIST, tcp::ANSWER_HIST_SLOTS)?;
    Ok(map
        .iter()
        .filter_map(Result::ok)
        .map(|(key, per_cpu)| {
            let sum = (per_cpu.iter()).fold(OutboundCount::default(), |s, n| OutboundCount {
                opened: s.opened + n.opened,
                closed: s.closed + n.closed,
                waits: s.waits + n.waits,
                wait_ns: s.wait_ns + n.wait_ns,
                answers: s.answers + n.answers,
                answer_ns: s.answer_ns + n.answer_ns,
            });
            let answer_lengths = lengths[tcp::answer_slot(&key) as usize].clone();
            OutboundRead {
                remote: remote_address(&key),
                count: sum,
                answer_lengths,
            }
        })
        .collect())
}

/// One remote address's outbound figures.
pub struct OutboundRead {
    pub remote: std::net::SocketAddr,
    pub count: OutboundCount,
    pub answer_lengths: NsHistogram,
}

/// Adds the server's connections open before the programs attached, by (process, file
/// descriptor, remote address): sleeps reading them are waits for a dependency too.
pub fn add_outbound_fds(
    ebpf: &mut Ebpf,
    open: &[(u32, u32, std::net::SocketAddr)],
) -> Result<(), SrvprofError> {
    let mut map: HashMap<&mut MapData, FdKey, OutboundFd> = map_mut(ebpf, maps::OUTBOUND_FDS)?;
    for &(tgid, fd, remote) in open {
        let on_fd = OutboundFd {
            sk: 0,
            remote: outbound_key(&remote),
            _pad: 0,
        };
        map.insert(FdKey { tgid, fd }, on_fd, 0)
            .map_err(|e| map_error(maps::OUTBOUND_FDS, e))?;
    }
    if !open.is_empty() {
        // Their sockets are found at the server's first send on each.
        watch(ebpf, tcp::WATCH_OPEN_BEFORE)?;
    }
    Ok(())
}

/// The kernel's key for a remote address (remote_address's inverse).
fn outbound_key(remote: &std::net::SocketAddr) -> OutboundKey {
    let mut key = OutboundKey {
        family: tcp::AF_INET,
        port: remote.port(),
        addr: [0; 16],
    };
    match remote.ip() {
        std::net::IpAddr::V4(ip) => key.addr[..4].copy_from_slice(&ip.octets()),
        std::net::IpAddr::V6(ip) => {
            key.family = tcp::AF_INET6;
            key.addr = ip.octets();
        }
    }
    key
}

fn remote_address(key: &OutboundKey) -> std::net::SocketAddr {
    let ip = if key.family == tcp::AF_INET6 {
        std::net::IpAddr::V6(std::net::Ipv6Addr::from(key.addr))
    } else {
        let [a, b, c, d, ..] = key.addr;
        std::net::IpAddr::V4(std::net::Ipv4Addr::new(a, b, c, d))
    };
    std::net::SocketAddr::new(ip, key.port)
}

/// A key with the kernel's numbers named.
pub fn reset_count(names: &TcpNames, key: &TcpResetKey, count: u64) -> TcpResetCount {
    let state = if key.state == tcp::STATE_NO_SOCKET {
        "NO_SOCKET".to_string()
    } else {
        names
            .states
            .get(&u32::from(key.state))
            .cloned()
            .unwrap_or_else(|| format!("state_{}", key.state))
    };
    let reason = (key.direction == tcp::SENT).then(|| {
        names
            .reasons
            .get(&key.reason)
            .cloned()
            .unwrap_or_else(|| format!("reason_{}", key.reason))
    });
    TcpResetCount {
        side: u32::from(key.side),
        sent: key.direction == tcp::SENT,
        state,
        reason,
        count,
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn a_remote_address_and_the_kernels_key_for_it_agree() {
        for remote in ["127.0.0.1:5432", "[::1]:6379", "[::ffff:10.0.0.7]:80"] {
            let remote: std::net::SocketAddr = remote.parse().unwrap();
            assert_eq!(remote_address(&outbound_key(&remote)), remote);
        }
    }

    /// The late programs attach when a counter grew its rate a second since the last look (over
    /// at least a tenth of a second), never at the first look.
    #[test]
    fn a_counter_grew_by_its_rate_a_second_since_the_last_look() {
        let s = 1_000_000_000;
        assert!(!grew_by(None, (1_000, s), 5.0));
        assert!(grew_by(Some((100, s)), (105, 2 * s), 5.0));
        assert!(!grew_by(Some((100, s)), (104, 2 * s), 5.0));
        // 50 ms apart: counted as 0.1 s, so half a datagram is not enough.
        assert!(!grew_by(Some((100, s)), (100, s + s / 20), 5.0));
        assert!(grew_by(Some((100, s)), (101, s + s / 20), 5.0));
        assert!(
            !grew_by(Some((100, s)), (90, 2 * s), 5.0),
            "a counter that went back"
        );
    }
}
