//! Each side's TCP figures (by the probes' socket sides and the listening sockets' drops) and the
//! host's (the kernel's MIB counters) between two samples.

use serde::{Deserialize, Serialize};
use std::collections::BTreeMap;

use srvprof_common::{GROUP_SERVER, tcp};

use crate::record::{Reading, TimeWait};

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
    /// How long a segment lost on this side's connections waited before it was sent again (ms):
    /// the mean retransmission timeout that ended at each of its data retransmits (icsk_rto),
    /// else the mean one of the connections on the server's port at the measured span's end or
    /// start (tcpi_rto, sock_diag). None when neither was read.
    #[serde(default)]
    pub rto_ms: Option<f64>,
    /// The mean timeout a retransmitted SYN waited (ms; 1 s, then twice as long each time):
    /// the client's, for the server too. None without SYN retransmits.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub syn_timeout_ms: Option<f64>,
    /// RSTs this side's sockets sent (tcp_send_reset), with a socket or answering a segment
    /// addressed to this side's port with none.
    pub resets_sent: u64,
    /// RSTs this side's sockets received (tcp_receive_reset). The kernel also fires it when it
    /// kills a socket for data arriving after close (reason TCP_ABORT_ON_DATA), whose RST it sends.
    pub resets_received: u64,
    /// resets_sent and resets_received by TCP state and (sent) the kernel's reason, most first.
    #[serde(default)]
    pub resets: Vec<ResetReport>,
    /// The server's new connections' waits to be taken: from the handshake's end to the server's
    /// first read of the connection (its listener's accept queue, then until the accepted
    /// connection is read); None for the client, or when not timed.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub accept_queue: Option<AcceptQueueReport>,
    /// The server's answers written but held in its sockets until an ACK let them go; None for
    /// the client, or when none was held.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub send_holds: Option<SendHoldReport>,
}

/// The server's written bytes that waited in its sockets, unsent, in the span: a send left them
/// there (tcp_sock's write_seq past snd_nxt) until an arriving ACK let them go.
#[derive(Clone, Debug, Default, PartialEq, Serialize, Deserialize)]
pub struct SendHoldReport {
    /// By why they waited, most waited first.
    pub by_kind: Vec<SendHoldKind>,
    /// TcpExt:DelayedACKs: ACKs the host sent late, by the delayed-ACK timer (a client on this
    /// host delaying its ACK of an answer's first part is what Nagle's algorithm waits for).
    pub delayed_acks: u64,
}

impl SendHoldReport {
    pub fn holds(&self) -> u64 {
        self.by_kind.iter().map(|k| k.holds).sum()
    }

    pub fn wait_ns(&self) -> u64 {
        self.by_kind.iter().map(|k| k.wait_ns).sum()
    }
}

/// The server's bytes held for one reason, and their waits.
#[derive(Clone, Debug, Default, PartialEq, Serialize, Deserialize)]
pub struct SendHoldKind {
    /// "partial_segment": less than a segment held while earlier data was unacknowledged
    /// (Nagle's algorithm) or still in the host's queue, until the next ACK; "full_segments": a
    /// segment or more unsent, or two or more unacknowledged (the congestion window, the peer's
    /// window), until the client acknowledged all but the last segment: the answer's transfer;
    /// "zero_window": the same, the peer's window closed meanwhile.
    pub kind: String,
    pub holds: u64,
    pub wait_ns: u64,
    /// The waits' 99th percentile and longest (ms), from their histogram.
    pub p99_ms: f64,
    pub max_ms: f64,
}

/// Each tcp::HOLD_* kind's name in run.json.
pub const HOLD_KIND_NAMES: [&str; tcp::HOLD_KINDS as usize] =
    ["partial_segment", "full_segments", "zero_window"];

/// Each tcp::HOLD_* kind in words: what held the bytes.
const HOLD_KIND_WORDS: [&str; tcp::HOLD_KINDS as usize] = [
    "less than a segment, held until the client acknowledged the answer's first part (Nagle's algorithm) or the host's queue let earlier segments go",
    "whole segments, sent only as fast as the path and the client took them (the congestion window, the client's receive window) until the client acknowledged them",
    "whole segments, held while the client's receive window was closed (it read slowly) until it acknowledged them",
];

impl SendHoldKind {
    /// What held its bytes, in words.
    pub fn why(&self) -> &'static str {
        let at = HOLD_KIND_NAMES.iter().position(|n| *n == self.kind);
        HOLD_KIND_WORDS[at.unwrap_or(tcp::HOLD_FULL as usize)]
    }
}

/// The server's bytes held unsent between two readings, by why; None when none was.
fn send_holds(start: &Reading, end: &Reading) -> Option<SendHoldReport> {
    let ms = |ns: Option<u64>| ns.map_or(0.0, |ns| ns as f64 / 1e6);
    let mut by_kind: Vec<SendHoldKind> = (HOLD_KIND_NAMES.iter().enumerate())
        .filter_map(|(i, name)| {
            let e = end.kernel.send_holds.get(i)?;
            let s = start.kernel.send_holds.get(i).copied().unwrap_or_default();
            let hist = match (
                end.kernel.send_hold_hist.get(i),
                start.kernel.send_hold_hist.get(i),
            ) {
                (Some(e), Some(s)) => e.minus(s),
                (Some(e), None) => e.clone(),
                _ => Default::default(),
            };
            Some(SendHoldKind {
                kind: name.to_string(),
                holds: e.count.saturating_sub(s.count),
                wait_ns: e.total_ns.saturating_sub(s.total_ns),
                p99_ms: ms(hist.quantile_ns(0.99)),
                max_ms: ms(hist.max_ns()),
            })
        })
        .filter(|k| k.holds > 0)
        .collect();
    by_kind.sort_by(|a, b| b.wait_ns.cmp(&a.wait_ns).then(a.kind.cmp(&b.kind)));
    (!by_kind.is_empty()).then(|| SendHoldReport {
        by_kind,
        delayed_acks: mib_delta(end, start, "TcpExt:DelayedACKs"),
    })
}

/// New connections the server took in the span and their waits to be taken.
#[derive(Clone, Debug, Default, PartialEq, Serialize, Deserialize)]
pub struct AcceptQueueReport {
    pub accepts: u64,
    pub wait_ns: u64,
    /// The waits' 99th percentile and longest (ms), from their histogram (the upper bound of a
    /// slot: at most a quarter above the true value).
    pub p99_ms: f64,
    pub max_ms: f64,
    /// By listening port, most waited first.
    pub by_port: Vec<AcceptQueuePort>,
}

/// One listening port's new connections in the span and their waits to be taken.
#[derive(Clone, Debug, Default, PartialEq, Serialize, Deserialize)]
pub struct AcceptQueuePort {
    pub port: u16,
    pub accepts: u64,
    pub wait_ns: u64,
}

/// The server's new connections and their waits to be taken between two readings; None when
/// none was timed.
fn accept_queue(start: &Reading, end: &Reading) -> Option<AcceptQueueReport> {
    let mut by_port: Vec<AcceptQueuePort> = (end.kernel.accept_waits.iter())
        .map(|e| {
            let before = (start.kernel.accept_waits.iter()).find(|s| s.port == e.port);
            AcceptQueuePort {
                port: e.port,
                accepts: e.accepts - before.map_or(0, |b| b.accepts.min(e.accepts)),
                wait_ns: e.wait_ns - before.map_or(0, |b| b.wait_ns.min(e.wait_ns)),
            }
        })
        .filter(|p| p.accepts > 0)
        .collect();
    by_port.sort_by(|a, b| b.wait_ns.cmp(&a.wait_ns).then(a.port.cmp(&b.port)));
    let hist = end.kernel.accept_hist.minus(&start.kernel.accept_hist);
    let ms = |ns: Option<u64>| ns.map_or(0.0, |ns| ns as f64 / 1e6);
    (!by_port.is_empty()).then(|| AcceptQueueReport {
        accepts: by_port.iter().map(|p| p.accepts).sum(),
        wait_ns: by_port.iter().map(|p| p.wait_ns).sum(),
        p99_ms: ms(hist.quantile_ns(0.99)),
        max_ms: ms(hist.max_ns()),
        by_port,
    })
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
    /// TcpExt:SyncookiesSent: SYNs answered with a cookie because a listener's SYN queue was full
    /// (net.ipv4.tcp_syncookies), the connection kept in no queue until the client's ACK.
    #[serde(default)]
    pub syn_cookies_sent: u64,
    /// Sockets in TIME_WAIT at the span's first reading and at its last; None when not read.
    #[serde(default)]
    pub time_wait_at_start: Option<TimeWait>,
    #[serde(default)]
    pub time_wait_at_end: Option<TimeWait>,
    /// The probes' counts for sockets on neither side (every socket when no port was watched),
    /// resets sent with no socket and no readable segment included.
    pub other_retransmits: u64,
    pub other_resets_sent: u64,
    pub other_resets_received: u64,
}

fn mib_delta(end: &Reading, start: &Reading, name: &str) -> u64 {
    let e = end.net_mib.get(name).copied().unwrap_or(0);
    let s = start.net_mib.get(name).copied().unwrap_or(e);
    e.saturating_sub(s)
}

/// Delta of a TCP counter of one side between two samples.
fn tcp_delta(start: &Reading, end: &Reading, side: u32, counter: u32) -> u64 {
    let i = tcp::index(side, counter) as usize;
    let at = |s: &Reading| s.kernel.tcp.get(i).copied().unwrap_or(0);
    at(end).saturating_sub(at(start))
}

/// The mean timeout (ms) that ended at each of a side's retransmits of one kind: data segments
/// (RTO_JIFFIES) or SYNs (SYN_RTO_JIFFIES). None without such retransmits or the kernel's jiffy.
fn timeout_ms(start: &Reading, end: &Reading, side: u32, jiffies: u32) -> Option<f64> {
    let syns = tcp_delta(start, end, side, tcp::SYN_RETRANSMITS);
    let resent = match jiffies {
        tcp::SYN_RTO_JIFFIES => syns,
        _ => tcp_delta(start, end, side, tcp::RETRANSMITS).saturating_sub(syns),
    };
    let jiffy_ns = end.kernel.jiffy_ns?;
    let total = tcp_delta(start, end, side, jiffies);
    (resent > 0 && total > 0).then(|| (total * jiffy_ns) as f64 / 1e6 / resent as f64)
}

/// The group's side of TCP in the window.
pub(super) fn tcp_report(start: &Reading, end: &Reading, group: u32) -> TcpReport {
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
        rto_ms: timeout_ms(start, end, side, tcp::RTO_JIFFIES)
            .or_else(|| end.rto_us.or(start.rto_us).map(|us| f64::from(us) / 1e3)),
        syn_timeout_ms: timeout_ms(start, end, tcp::SIDE_CLIENT, tcp::SYN_RTO_JIFFIES),
        resets_sent: tcp_delta(start, end, side, tcp::RESETS_SENT),
        resets_received: tcp_delta(start, end, side, tcp::RESETS_RECEIVED),
        resets,
        accept_queue: (group == GROUP_SERVER)
            .then(|| accept_queue(start, end))
            .flatten(),
        send_holds: (group == GROUP_SERVER)
            .then(|| send_holds(start, end))
            .flatten(),
    }
}

/// The host's TCP figures in the window.
pub(super) fn host_tcp_report(start: &Reading, end: &Reading) -> HostTcpReport {
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
        syn_cookies_sent: mib("TcpExt:SyncookiesSent"),
        other_retransmits: other(tcp::RETRANSMITS),
        other_resets_sent: other(tcp::RESETS_SENT),
        other_resets_received: other(tcp::RESETS_RECEIVED),
        time_wait_at_start: start.time_wait,
        time_wait_at_end: end.time_wait,
    }
}
