//! The TCP programs (ebpf/src/tcp.rs).
//!
//! TCP counters by side. A socket's side comes from the watched ports (TCP_PORTS, the server's
//! listening ports): its own (local) port watched is the server's side, its peer's (remote) port
//! watched is a client's (the load generator's in `srvprof run`), neither is OTHER.

names! {
    maps: [
        TCP_COUNTERS,
        TCP_PORTS,
        TCP_PORT_BITS,
        TCP_RESETS,
        OUTBOUND,
        OUTBOUND_SOCKETS,
        OUTBOUND_FDS,
        ACCEPT_QUEUE,
        ACCEPT_PENDING,
        ACCEPT_PENDING_COUNT,
        ACCEPT_TIMED_SINCE,
        ACCEPT_HIST,
        OUTBOUND_WATCH,
        ANSWER_HIST,
        SEND_HELD,
        SEND_HELD_COUNT,
        SEND_HOLDS,
        SEND_HOLD_HIST,
    ],
    globals: [
        SOCK_STATE_OFFSET,
        SOCK_NUM_OFFSET,
        SOCK_DPORT_OFFSET,
        /// inet_sock.inet_sport: a full socket's own port, kept after close zeroes skc_num.
        INET_SPORT_OFFSET,
        /// sk_buff.data: where a received segment's TCP header starts when tcp_send_reset has no
        /// socket.
        SKB_DATA_OFFSET,
        /// sk_buff.cb: a received segment's tcp_skb_cb, whose seq and end_seq (its first two
        /// fields) say whether it carries data.
        SKB_CB_OFFSET,
        /// sock.sk_userlocks: SOCK_BINDPORT_LOCK says bind() gave the socket its port (a
        /// datagram server's, whose sends are answers, not asks).
        SOCK_USERLOCKS_OFFSET,
        /// The kernel's TCP_SYN_SENT state number (from its BTF enum of TCP states).
        TCP_STATE_SYN_SENT,
        /// The kernel's TCP_CLOSE state number.
        TCP_STATE_CLOSE,
        /// The kernel's TCP_ESTABLISHED and TCP_SYN_RECV state numbers: a passive open's
        /// handshake ends (its connection joins the accept queue) on that move.
        TCP_STATE_ESTABLISHED,
        TCP_STATE_SYN_RECV,
        /// sock_common's skc_family, skc_daddr and skc_v6_daddr: where a socket connects to.
        SOCK_FAMILY_OFFSET,
        /// sock.sk_protocol: a UDP socket's is IPPROTO_UDP.
        SOCK_PROTOCOL_OFFSET,
        SOCK_DADDR_OFFSET,
        SOCK_V6_DADDR_OFFSET,
        /// task_struct.files, files_struct.fdt, fdtable.max_fds and .fd, file.f_inode and
        /// .private_data, inode.i_mode, socket.sk: from a file descriptor to its socket.
        TASK_FILES_OFFSET,
        FILES_FDT_OFFSET,
        FDTABLE_MAX_FDS_OFFSET,
        FDTABLE_FD_OFFSET,
        FILE_INODE_OFFSET,
        INODE_MODE_OFFSET,
        FILE_PRIVATE_DATA_OFFSET,
        SOCKET_SK_OFFSET,
        /// inet_connection_sock.icsk_rto (jiffies): the timeout a retransmit ended.
        ICSK_RTO_OFFSET,
        /// tcp_sock's write_seq (the end of what the application wrote), snd_nxt (of what was
        /// sent), snd_una (of what was acknowledged), snd_wnd (the peer's window) and mss_cache:
        /// an answer written but not sent, and why.
        TCP_WRITE_SEQ_OFFSET,
        TCP_SND_NXT_OFFSET,
        TCP_SND_UNA_OFFSET,
        TCP_SND_WND_OFFSET,
        TCP_MSS_CACHE_OFFSET,
    ],
}

use super::{GROUP_CLIENT, GROUP_SERVER};

pub const SIDE_SERVER: u32 = GROUP_SERVER;
pub const SIDE_CLIENT: u32 = GROUP_CLIENT;
/// Neither port watched (every socket when no port is), or a reset with no socket.
pub const SIDE_OTHER: u32 = 2;
pub const SIDES: u32 = 3;

/// Counters of one side; TCP_COUNTERS holds them at `index(side, counter)`.
pub const RETRANSMITS: u32 = 0;
pub const SYN_RETRANSMITS: u32 = 1;
pub const SYNACK_RETRANSMITS: u32 = 2;
pub const RESETS_SENT: u32 = 3;
pub const RESETS_RECEIVED: u32 = 4;
/// Passive opens that completed their handshake (SYN_RECV to ESTABLISHED): new connections.
pub const HANDSHAKES: u32 = 5;
/// The retransmission timeouts (icsk_rto, jiffies) that ended before each retransmit, summed:
/// of data segments, and of SYNs. A fast retransmit's wait is shorter: counted as its timeout.
pub const RTO_JIFFIES: u32 = 6;
pub const SYN_RTO_JIFFIES: u32 = 7;
pub const COUNT: u32 = 8;

pub const fn index(side: u32, counter: u32) -> u32 {
    side * COUNT + counter
}

/// TcpResetKey::direction.
pub const SENT: u8 = 0;
pub const RECEIVED: u8 = 1;
/// TcpResetKey::state of a reset sent with no socket (the kernel's states start at 1).
pub const STATE_NO_SOCKET: u8 = 0;
/// TcpResetKey::reason of a received reset (the kernel gives no reason for those).
pub const REASON_NONE: u32 = u32::MAX;
/// Distinct (side, direction, state, reason) keys TCP_RESETS holds (server and client sides).
pub const MAX_RESET_KEYS: u32 = 1024;

pub const MAX_PORTS: u32 = 64;
/// TCP_PORT_BITS: a bit per port.
pub const PORT_BITS_WORDS: u32 = 65536 / 64;

/// A TCP_RESETS key: resets a side sent or received, by the socket's TCP state (the kernel's
/// numbers) and, for sent ones, the kernel's enum sk_rst_reason (numbers named from BTF).
#[repr(C)]
#[derive(Clone, Copy, Debug, Default, PartialEq, Eq, Hash, PartialOrd, Ord)]
pub struct TcpResetKey {
    pub side: u8,
    pub direction: u8,
    pub state: u8,
    pub pad: u8,
    pub reason: u32,
}

/// A remote address a watched server connected to (OUTBOUND's key): `addr` holds an IPv4
/// address in its first four bytes (family AF_INET) or an IPv6 one (AF_INET6); `port` is in
/// host order.
#[repr(C)]
#[derive(Clone, Copy, Debug, Default, PartialEq, Eq, Hash, PartialOrd, Ord)]
pub struct OutboundKey {
    pub family: u16,
    pub port: u16,
    pub addr: [u8; 16],
}

/// A watched process's file descriptor.
#[repr(C)]
#[derive(Clone, Copy, Debug, Default, PartialEq, Eq, Hash)]
pub struct FdKey {
    pub tgid: u32,
    pub fd: u32,
}

/// OUTBOUND_SOCKETS' value: where a socket the server's connect() opened goes, and the file
/// descriptor it was opened on (fd u32::MAX: not known).
#[repr(C)]
#[derive(Clone, Copy, Debug, Default, PartialEq, Eq)]
pub struct OutboundSocket {
    pub remote: OutboundKey,
    pub fd: FdKey,
    /// OUTBOUND_DATAGRAM for a connected UDP socket's ask (followed until its answer: no close
    /// of a UDP socket is traced).
    pub flags: u32,
    /// When the server sent on it with no answer pending (0: none pending): the ask its next
    /// data from the remote answers.
    pub asked_ns: u64,
}

/// OUTBOUND_FDS' value: the socket behind an outbound connection's file descriptor (0: one
/// open before the programs attached, told by its remote address), and where it goes.
#[repr(C)]
#[derive(Clone, Copy, Debug, Default, PartialEq, Eq)]
pub struct OutboundFd {
    pub sk: u64,
    pub remote: OutboundKey,
    pub _pad: u32,
}

/// The server's connections to one remote address, per CPU: those its connect() started and
/// those that closed since the programs attached (a close may count on another CPU than its
/// open; the sums are right).
#[repr(C)]
#[derive(Clone, Copy, Debug, Default, PartialEq, Eq)]
pub struct OutboundCount {
    pub opened: u64,
    pub closed: u64,
    /// The server's threads' sleeps reading from those connections (a socket read, or a poll
    /// of one descriptor before it), and their time: the requests' waits for the dependency.
    pub waits: u64,
    pub wait_ns: u64,
    /// The server's asks on those connections answered (data sent with none pending, then the
    /// remote's next data arriving), and the time from each ask to its answer: the dependency's
    /// latency as the server sees it, whether a thread slept on it or an event loop polled.
    pub answers: u64,
    pub answer_ns: u64,
}

/// OUTBOUND_WATCH's bits: the server opened an outbound connection (sends and arriving data
/// are looked up from then on), connections open before the programs attached await their
/// socket (the server's sends look up their descriptor), the program that ends an ask at its
/// answer is attached (a send begins an ask only then), and the program that ends a hold is (a
/// send begins a hold only then).
pub const WATCH_OPENED: u64 = 1;
pub const WATCH_OPEN_BEFORE: u64 = 2;
pub const WATCH_ANSWERS: u64 = 4;
pub const WATCH_HOLDS: u64 = 8;

/// OutboundSocket::flags: a datagram service's ask.
pub const OUTBOUND_DATAGRAM: u32 = 1;

/// Why the server's written bytes wait in its socket, unsent (SEND_HOLDS' and SEND_HOLD_HIST's
/// entries): less than a segment while earlier data is unacknowledged (Nagle's algorithm, until
/// that ACK), a segment or more (the congestion window, or the peer's window nearly full: until
/// the client acknowledges all of it), the peer's window closed meanwhile (a slow reader).
pub const HOLD_PARTIAL: u32 = 0;
pub const HOLD_FULL: u32 = 1;
pub const HOLD_ZERO_WINDOW: u32 = 2;
pub const HOLD_KINDS: u32 = 3;
/// The server's connections with bytes held at once that SEND_HELD can follow.
pub const MAX_HELD_SENDS: u32 = 16384;

/// SEND_HELD's value: since when a socket's written bytes wait unsent, why (HOLD_*), the
/// sequence number past the last byte written meanwhile, and when the client acknowledged them
/// (0: not yet). A whole-segment hold is an answer's transfer: it ends at that ACK, counted once
/// the client sends again (its next request) with no more of the answer written meanwhile.
#[repr(C)]
#[derive(Clone, Copy, Debug, Default, PartialEq, Eq)]
pub struct HeldSend {
    pub since_ns: u64,
    pub acked_ns: u64,
    pub kind: u32,
    pub until_seq: u32,
}

/// ANSWER_HIST's entries: a remote's answers' lengths go in entry `answer_slot(remote)`, shared
/// by the remotes that hash alike.
pub const ANSWER_HIST_SLOTS: u32 = 16;

/// The ANSWER_HIST entry of a remote address (the same on both sides).
#[inline(always)]
pub fn answer_slot(remote: &OutboundKey) -> u32 {
    let mut h = u32::from(remote.family) ^ (u32::from(remote.port) << 8);
    for i in 0..16 {
        h = (h ^ u32::from(remote.addr[i])).wrapping_mul(16_777_619);
    }
    (h ^ (h >> 16)) & (ANSWER_HIST_SLOTS - 1)
}

/// Remote addresses OUTBOUND holds.
pub const MAX_OUTBOUND_REMOTES: u32 = 1024;
/// The server's outbound connections open at once that OUTBOUND_SOCKETS can follow.
pub const MAX_OUTBOUND_SOCKETS: u32 = 65536;
pub const AF_INET: u16 = 2;
pub const AF_INET6: u16 = 10;

/// ACCEPT_QUEUE's value (its key a listening port, host order), per CPU: new connections taken,
/// and their waits to be taken, from the handshake's end (SYN_RECV to ESTABLISHED) to the
/// server's first read of the connection (the accept queue, then until the accepted connection is
/// read).
#[repr(C)]
#[derive(Clone, Copy, Debug, Default, PartialEq, Eq)]
pub struct AcceptCount {
    pub accepts: u64,
    pub wait_ns: u64,
}

/// New connections not yet read that ACCEPT_PENDING follows at once.
pub const MAX_PENDING_ACCEPTS: u32 = 65536;

pod!(
    OutboundKey,
    OutboundCount,
    FdKey,
    OutboundFd,
    TcpResetKey,
    AcceptCount
);
