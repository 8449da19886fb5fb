//! TCP retransmits (SYN, SYN-ACK, data) and resets, by side: a socket whose own port is watched
//! is the server's, one whose peer's port is watched a client's (srvprof_common::tcp). The
//! server's outbound connections, the waits on them and the time their asks took to be
//! answered, and its new connections' waits to be taken (the accept queue, then until their
//! first read).

use aya_ebpf::helpers::{bpf_get_current_pid_tgid, bpf_ktime_get_ns, bpf_probe_read_user};
use aya_ebpf::{
    bindings::{BPF_EXIST, BPF_NOEXIST},
    macros::{btf_tracepoint, map},
    maps::{Array, HashMap, PerCpuArray, PerCpuHashMap},
    programs::BtfTracePointContext,
};
use srvprof_common::{
    AcceptCount, CountTime, FdKey, GROUP_SERVER, HeldSend, HistSlots, MAX_PORTS, OutboundCount,
    OutboundFd, OutboundKey, OutboundSocket, TcpResetKey, ThreadStats, lost, tcp,
};

use crate::regs::{current_send_destination, current_syscall_args, current_syscall_slot};

/// connect(2)'s number on x86-64, plus one (current_syscall_slot's encoding).
const CONNECT_SLOT: u64 = 42 + 1;

use crate::target::{count_lost, global, group_of, read_field, record};

#[map]
static TCP_COUNTERS: PerCpuArray<u64> = PerCpuArray::with_max_entries(tcp::SIDES * tcp::COUNT, 0);

/// Resets of the server and client sides by direction, TCP state and the kernel's reason.
#[map]
static TCP_RESETS: PerCpuHashMap<TcpResetKey, u64> =
    PerCpuHashMap::with_max_entries(tcp::MAX_RESET_KEYS, 0);

/// The server's listening ports.
#[map]
static TCP_PORTS: HashMap<u16, u8> = HashMap::with_max_entries(MAX_PORTS, 0);

#[unsafe(no_mangle)]
static SOCK_STATE_OFFSET: u64 = 0;
#[unsafe(no_mangle)]
static SOCK_NUM_OFFSET: u64 = 0;
#[unsafe(no_mangle)]
static SOCK_DPORT_OFFSET: u64 = 0;
#[unsafe(no_mangle)]
static INET_SPORT_OFFSET: u64 = 0;
#[unsafe(no_mangle)]
static SKB_DATA_OFFSET: u64 = 0;
#[unsafe(no_mangle)]
static SKB_CB_OFFSET: u64 = 0;
#[unsafe(no_mangle)]
static SOCK_USERLOCKS_OFFSET: u64 = 0;
#[unsafe(no_mangle)]
static TCP_STATE_SYN_SENT: u64 = 0;
#[unsafe(no_mangle)]
static TCP_STATE_CLOSE: u64 = 0;
#[unsafe(no_mangle)]
static TCP_STATE_ESTABLISHED: u64 = 0;
#[unsafe(no_mangle)]
static TCP_STATE_SYN_RECV: u64 = 0;
#[unsafe(no_mangle)]
static SOCK_FAMILY_OFFSET: u64 = 0;
#[unsafe(no_mangle)]
static SOCK_PROTOCOL_OFFSET: u64 = 0;
#[unsafe(no_mangle)]
static ICSK_RTO_OFFSET: u64 = 0;
#[unsafe(no_mangle)]
static TCP_WRITE_SEQ_OFFSET: u64 = 0;
#[unsafe(no_mangle)]
static TCP_SND_NXT_OFFSET: u64 = 0;
#[unsafe(no_mangle)]
static TCP_SND_UNA_OFFSET: u64 = 0;
#[unsafe(no_mangle)]
static TCP_SND_WND_OFFSET: u64 = 0;
#[unsafe(no_mangle)]
static TCP_MSS_CACHE_OFFSET: u64 = 0;
#[unsafe(no_mangle)]
static SOCK_DADDR_OFFSET: u64 = 0;
#[unsafe(no_mangle)]
static SOCK_V6_DADDR_OFFSET: u64 = 0;
/// The walk from a task's file descriptor to its socket (socket_sleep_ended).
#[unsafe(no_mangle)]
static TASK_FILES_OFFSET: u64 = 0;
#[unsafe(no_mangle)]
static FILES_FDT_OFFSET: u64 = 0;
#[unsafe(no_mangle)]
static FDTABLE_MAX_FDS_OFFSET: u64 = 0;
#[unsafe(no_mangle)]
static FDTABLE_FD_OFFSET: u64 = 0;
#[unsafe(no_mangle)]
static FILE_INODE_OFFSET: u64 = 0;
#[unsafe(no_mangle)]
static INODE_MODE_OFFSET: u64 = 0;
#[unsafe(no_mangle)]
static FILE_PRIVATE_DATA_OFFSET: u64 = 0;
#[unsafe(no_mangle)]
static SOCKET_SK_OFFSET: u64 = 0;

/// The server's outbound connections by remote address: opened and closed, per CPU.
#[map]
static OUTBOUND: PerCpuHashMap<OutboundKey, OutboundCount> =
    PerCpuHashMap::with_max_entries(tcp::MAX_OUTBOUND_REMOTES, 0);

/// Socket -> the remote address of each outbound connection the server's connect() started,
/// and its file descriptor, until it closes.
#[map]
static OUTBOUND_SOCKETS: HashMap<u64, OutboundSocket> =
    HashMap::with_max_entries(tcp::MAX_OUTBOUND_SOCKETS, 0);

/// (process, file descriptor) -> the outbound connection on it: those the server's connect()
/// opened, and those open before the programs attached (userspace writes them at its first
/// reading). A sleep on any other descriptor costs one lookup here.
#[map]
static OUTBOUND_FDS: HashMap<FdKey, OutboundFd> =
    HashMap::with_max_entries(tcp::MAX_OUTBOUND_SOCKETS, 0);

/// The server's new connections and their waits to be taken (the accept queue, then until their
/// first read), by port.
#[map]
static ACCEPT_QUEUE: PerCpuHashMap<u16, AcceptCount> =
    PerCpuHashMap::with_max_entries(MAX_PORTS, 0);

/// Socket -> when its handshake ended, for the server's connections not yet read (an entry
/// leaves at the first read or the close).
#[map]
static ACCEPT_PENDING: HashMap<u64, u64> = HashMap::with_max_entries(tcp::MAX_PENDING_ACCEPTS, 0);

/// The server's listening ports, a bit each (TCP_PORTS as a bitmap: one load, no hash lookup, for
/// a test made at every TCP read on the host).
#[map]
static TCP_PORT_BITS: Array<u64> = Array::with_max_entries(tcp::PORT_BITS_WORDS, 0);

#[inline(always)]
fn server_port(port: u16) -> bool {
    TCP_PORT_BITS
        .get(u32::from(port) / 64)
        .is_some_and(|w| w & (1 << (port % 64)) != 0)
}

/// How many connections ACCEPT_PENDING holds: at 0, as on a server whose connections stay open, a
/// read costs one load, not a hash lookup.
#[map]
static ACCEPT_PENDING_COUNT: Array<u64> = Array::with_max_entries(1, 0);

/// Whether a one-entry count (ACCEPT_PENDING_COUNT, SEND_HELD_COUNT) is above 0.
#[inline(always)]
fn nonzero(counter: &Array<u64>) -> bool {
    counter
        .get(0)
        .is_some_and(|n| unsafe { core::ptr::read_volatile(n) } != 0)
}

/// Adds `delta` (wrapping: u64::MAX takes one) to a one-entry count, atomically (core's atomic
/// types have no read-modify-write on this target; the BPF instruction does).
#[inline(always)]
fn add_to(counter: &Array<u64>, delta: u64) {
    use core::intrinsics::{AtomicOrdering, atomic_xadd};
    if let Some(n) = counter.get_ptr_mut(0) {
        unsafe { atomic_xadd::<u64, u64, { AtomicOrdering::Relaxed }>(n, delta) };
    }
}

/// Forgets a pending connection: taken, or closed first.
#[inline(always)]
fn pending_removed(sk: u64) {
    if ACCEPT_PENDING.remove(&sk).is_ok() {
        add_to(&ACCEPT_PENDING_COUNT, u64::MAX);
    }
}

/// When userspace last attached the program that ends those waits (bpf_ktime_get_ns): a
/// connection pending from before was not followed all along, and its wait is not counted.
#[map]
static ACCEPT_TIMED_SINCE: Array<u64> = Array::with_max_entries(1, 0);

/// Those waits' lengths (ns, hist slots), every port's.
#[map]
static ACCEPT_HIST: PerCpuArray<HistSlots> = PerCpuArray::with_max_entries(1, 0);

#[inline(always)]
fn bump(side: u32, counter: u32) {
    add(side, counter, 1);
}

#[inline(always)]
fn add(side: u32, counter: u32, value: u64) {
    if let Some(n) = TCP_COUNTERS.get_ptr_mut(tcp::index(side, counter)) {
        unsafe { *n += value };
    }
}

#[inline(always)]
fn side_of_ports(local: u16, remote: u16) -> u32 {
    unsafe {
        if TCP_PORTS.get(&local).is_some() {
            tcp::SIDE_SERVER
        } else if TCP_PORTS.get(&remote).is_some() {
            tcp::SIDE_CLIENT
        } else {
            tcp::SIDE_OTHER
        }
    }
}

/// The side of a socket. A TIME_WAIT (inet_timewait_sock) or request socket starts with the
/// same sock_common, so its ports and state are at the same offsets.
#[inline(always)]
fn sock_side(sk: *const u8) -> u32 {
    let mut local: u16 = read_field(sk, global(&SOCK_NUM_OFFSET)).unwrap_or(0);
    if local == 0 {
        // A full socket moved to CLOSE (an active reset is sent after that) has released its
        // port: skc_num is 0, inet_sport still holds it. TIME_WAIT and request sockets, which
        // have no inet_sport, keep skc_num.
        let sport_be: u16 = read_field(sk, global(&INET_SPORT_OFFSET)).unwrap_or(0);
        local = u16::from_be(sport_be);
    }
    let remote_be: u16 = read_field(sk, global(&SOCK_DPORT_OFFSET)).unwrap_or(0);
    side_of_ports(local, u16::from_be(remote_be))
}

#[inline(always)]
fn sock_state(sk: *const u8) -> u8 {
    read_field(sk, global(&SOCK_STATE_OFFSET)).unwrap_or(0)
}

/// The side of a received segment answered by a reset with no socket: its TCP header (at
/// skb->data, as the kernel's own tracepoint reads it) has the peer's port first, then ours.
#[inline(always)]
fn segment_side(skb: *const u8) -> u32 {
    if skb.is_null() {
        return tcp::SIDE_OTHER;
    }
    let Some(th) = read_field::<*const u8>(skb, global(&SKB_DATA_OFFSET)) else {
        return tcp::SIDE_OTHER;
    };
    let ports: u32 = read_field(th, 0).unwrap_or(0);
    // Network order in memory: source (the peer's) port, then destination (ours).
    let bytes = ports.to_ne_bytes();
    let remote = u16::from_be_bytes([bytes[0], bytes[1]]);
    let local = u16::from_be_bytes([bytes[2], bytes[3]]);
    if local == 0 {
        return tcp::SIDE_OTHER;
    }
    side_of_ports(local, remote)
}

/// Counts a reset in its side's total and, for the server and client sides, by state and reason.
#[inline(always)]
fn count_reset(side: u32, direction: u8, state: u8, reason: u32) {
    bump(
        side,
        if direction == tcp::SENT {
            tcp::RESETS_SENT
        } else {
            tcp::RESETS_RECEIVED
        },
    );
    if side == tcp::SIDE_OTHER {
        return;
    }
    let key = TcpResetKey {
        side: side as u8,
        direction,
        state,
        pad: 0,
        reason,
    };
    if let Some(n) = TCP_RESETS.get_ptr_mut(&key) {
        unsafe { *n += 1 };
        return;
    }
    // Per-CPU values: a key another CPU inserted first has a zeroed slot for this CPU.
    if TCP_RESETS.insert(&key, &1, BPF_NOEXIST as u64).is_err() {
        match TCP_RESETS.get_ptr_mut(&key) {
            Some(n) => unsafe { *n += 1 },
            None => count_lost(lost::TCP_RESETS_MAP_FULL),
        }
    }
}

/// tcp_retransmit_skb(const struct sock *sk, const struct sk_buff *skb, int err)
#[btf_tracepoint(function = "tcp_retransmit_skb")]
pub fn tcp_retransmit_skb(ctx: BtfTracePointContext) -> i32 {
    let sk: *const u8 = ctx.arg(0);
    if sk.is_null() {
        return 0;
    }
    let side = sock_side(sk);
    bump(side, tcp::RETRANSMITS);
    // The timer doubles icsk_rto only after this retransmit: here it is the timeout that ended.
    let rto: u32 = read_field(sk, global(&ICSK_RTO_OFFSET)).unwrap_or(0);
    if u64::from(sock_state(sk)) == global(&TCP_STATE_SYN_SENT) {
        bump(side, tcp::SYN_RETRANSMITS);
        add(side, tcp::SYN_RTO_JIFFIES, u64::from(rto));
    } else {
        add(side, tcp::RTO_JIFFIES, u64::from(rto));
    }
    0
}

/// tcp_retransmit_synack(const struct sock *sk, const struct request_sock *req): sk is the listener.
#[btf_tracepoint(function = "tcp_retransmit_synack")]
pub fn tcp_retransmit_synack(ctx: BtfTracePointContext) -> i32 {
    let sk: *const u8 = ctx.arg(0);
    if !sk.is_null() {
        bump(sock_side(sk), tcp::SYNACK_RETRANSMITS);
    }
    0
}

/// tcp_send_reset(const struct sock *sk, const struct sk_buff *skb, enum sk_rst_reason reason)
/// (6.10 and newer). sk may be a full, TIME_WAIT or request socket, or NULL (no socket: the side
/// comes from the segment's ports, the state is STATE_NO_SOCKET); skb is NULL for an active
/// reset (close, abort).
#[btf_tracepoint(function = "tcp_send_reset")]
pub fn tcp_send_reset(ctx: BtfTracePointContext) -> i32 {
    let reason: u64 = ctx.arg(2);
    send_reset(&ctx, reason as u32);
    0
}

/// tcp_send_reset(const struct sock *sk, const struct sk_buff *skb) before 6.10: no reason (the
/// verifier refuses a read of a third argument there), so userspace loads this one instead.
#[btf_tracepoint(function = "tcp_send_reset")]
pub fn tcp_send_reset_without_reason(ctx: BtfTracePointContext) -> i32 {
    send_reset(&ctx, tcp::REASON_NONE);
    0
}

#[inline(always)]
fn send_reset(ctx: &BtfTracePointContext, reason: u32) {
    let sk: *const u8 = ctx.arg(0);
    let skb: *const u8 = ctx.arg(1);
    let (side, state) = if sk.is_null() {
        (segment_side(skb), tcp::STATE_NO_SOCKET)
    } else {
        (sock_side(sk), sock_state(sk))
    };
    count_reset(side, tcp::SENT, state, reason);
}

/// tcp_receive_reset(struct sock *sk)
#[btf_tracepoint(function = "tcp_receive_reset")]
pub fn tcp_receive_reset(ctx: BtfTracePointContext) -> i32 {
    let sk: *const u8 = ctx.arg(0);
    if sk.is_null() {
        return 0;
    }
    count_reset(
        sock_side(sk),
        tcp::RECEIVED,
        sock_state(sk),
        tcp::REASON_NONE,
    );
    0
}

/// inet_sock_set_state(const struct sock *sk, int oldstate, int newstate): a watched server's
/// connect() moves its socket to SYN_SENT in the server's own context, which names it; every
/// socket ends in CLOSE, in whatever context. Kept in the kernel, a reading costs what the
/// server's own connections number, not a walk of every socket on the host.
#[btf_tracepoint(function = "inet_sock_set_state")]
pub fn inet_sock_set_state(ctx: BtfTracePointContext) -> i32 {
    let sk: *const u8 = ctx.arg(0);
    let old: u64 = ctx.arg(1);
    let new: u64 = ctx.arg(2);
    if sk.is_null() {
        return 0;
    }
    let new = new & 0xffff_ffff;
    if new == global(&TCP_STATE_SYN_SENT) {
        outbound_opened(sk);
    } else if new == global(&TCP_STATE_CLOSE) {
        outbound_closed(sk);
        // Closed before the server read it: its memory may be another socket's next.
        if nonzero(&ACCEPT_PENDING_COUNT) {
            pending_removed(sk as u64);
        }
        // A transfer the client acknowledged before closing is counted; other holds are not.
        if nonzero(&SEND_HELD_COUNT)
            && let Some(held) = unsafe { SEND_HELD.get(&(sk as u64)) }.copied()
        {
            match held.acked_ns {
                0 => {
                    if SEND_HELD.remove(&(sk as u64)).is_ok() {
                        add_to(&SEND_HELD_COUNT, u64::MAX);
                    }
                }
                acked => hold_ended(sk as u64, acked),
            }
        }
    } else if new == global(&TCP_STATE_ESTABLISHED)
        && old & 0xffff_ffff == global(&TCP_STATE_SYN_RECV)
    {
        handshake_ended(sk);
    }
    0
}

/// A passive open on a server port completed its handshake: the connection is in its
/// listener's accept queue from now until an accept takes it.
#[inline(always)]
fn handshake_ended(sk: *const u8) {
    let local: u16 = read_field(sk, global(&SOCK_NUM_OFFSET)).unwrap_or(0);
    if !server_port(local) {
        return;
    }
    bump(tcp::SIDE_SERVER, tcp::HANDSHAKES);
    let now = unsafe { bpf_ktime_get_ns() };
    let id = sk as u64;
    if ACCEPT_PENDING.insert(&id, &now, BPF_NOEXIST as u64).is_ok() {
        add_to(&ACCEPT_PENDING_COUNT, 1);
    } else if ACCEPT_PENDING.insert(&id, &now, BPF_EXIST as u64).is_err() {
        count_lost(lost::ACCEPT_MAP_FULL);
    }
}

/// tcp_rcv_space_adjust(struct sock *sk): the server read data from a connection. The first such
/// read of a connection in ACCEPT_PENDING ends its wait to be taken (the accept queue, then
/// until the accepted connection is first read), counted by port.
/// Every TCP read on the host pays one lookup here (no hook at accept itself is open to BPF
/// without a trampoline, which hosts may refuse).
#[btf_tracepoint(function = "tcp_rcv_space_adjust")]
pub fn tcp_rcv_space_adjust(ctx: BtfTracePointContext) -> i32 {
    let sk: u64 = ctx.arg(0);
    if sk == 0 || !nonzero(&ACCEPT_PENDING_COUNT) {
        return 0;
    }
    let port: u16 = read_field(sk as *const u8, global(&SOCK_NUM_OFFSET)).unwrap_or(0);
    if !server_port(port) {
        return 0;
    }
    let Some(since) = (unsafe { ACCEPT_PENDING.get(&sk) }).copied() else {
        return 0;
    };
    pending_removed(sk);
    if ACCEPT_TIMED_SINCE.get(0).is_none_or(|t| since < *t) {
        return 0;
    }
    let waited = unsafe { bpf_ktime_get_ns() }.saturating_sub(since);
    let key = port;
    let add = |c: *mut AcceptCount| unsafe {
        (*c).accepts += 1;
        (*c).wait_ns += waited;
    };
    match ACCEPT_QUEUE.get_ptr_mut(&key) {
        Some(c) => add(c),
        None => {
            let first = AcceptCount {
                accepts: 1,
                wait_ns: waited,
            };
            // Per-CPU values: a key another CPU inserted first has a zeroed slot for this CPU.
            if ACCEPT_QUEUE
                .insert(&key, &first, BPF_NOEXIST as u64)
                .is_err()
            {
                match ACCEPT_QUEUE.get_ptr_mut(&key) {
                    Some(c) => add(c),
                    None => count_lost(lost::ACCEPT_MAP_FULL),
                }
            }
        }
    }
    record(&ACCEPT_HIST, 0, waited);
    0
}

#[inline(always)]
fn outbound_opened(sk: *const u8) {
    let tgid = (bpf_get_current_pid_tgid() >> 32) as u32;
    if group_of(tgid) != Some(GROUP_SERVER) {
        return;
    }
    let key = remote_of(sk);
    // In connect(2)'s context: its first argument is the descriptor.
    let fd = match current_syscall_slot() {
        CONNECT_SLOT => current_syscall_args().0 as u32,
        _ => u32::MAX,
    };
    let socket = OutboundSocket {
        remote: key,
        fd: FdKey { tgid, fd },
        flags: 0,
        asked_ns: 0,
    };
    if OUTBOUND_SOCKETS.insert(&(sk as u64), &socket, 0).is_err() {
        count_lost(lost::OUTBOUND_MAP_FULL);
        return;
    }
    watch(tcp::WATCH_OPENED);
    if fd != u32::MAX {
        let on_fd = OutboundFd {
            sk: sk as u64,
            remote: key,
            _pad: 0,
        };
        if OUTBOUND_FDS.insert(&socket.fd, &on_fd, 0).is_err() {
            count_lost(lost::OUTBOUND_MAP_FULL);
        }
    }
    count_outbound(&key, 1, 0);
}

/// Compared field by field: a derived comparison of the address bytes may call memcmp, which a
/// BPF program cannot.
#[inline(always)]
fn same_remote(a: &OutboundKey, b: &OutboundKey) -> bool {
    let mut same = a.family == b.family && a.port == b.port;
    for i in 0..16 {
        same &= a.addr[i] == b.addr[i];
    }
    same
}

/// The address a socket is connected to.
#[inline(always)]
fn remote_of(sk: *const u8) -> OutboundKey {
    let family: u16 = read_field(sk, global(&SOCK_FAMILY_OFFSET)).unwrap_or(0);
    let port_be: u16 = read_field(sk, global(&SOCK_DPORT_OFFSET)).unwrap_or(0);
    let mut key = OutboundKey {
        family,
        port: u16::from_be(port_be),
        addr: [0; 16],
    };
    if family == tcp::AF_INET6 {
        key.addr = read_field(sk, global(&SOCK_V6_DADDR_OFFSET)).unwrap_or([0; 16]);
    } else {
        let v4: [u8; 4] = read_field(sk, global(&SOCK_DADDR_OFFSET)).unwrap_or([0; 4]);
        key.addr[..4].copy_from_slice(&v4);
    }
    key
}

#[inline(always)]
fn outbound_closed(sk: *const u8) {
    let id = sk as u64;
    let Some(socket) = (unsafe { OUTBOUND_SOCKETS.get(&id) }).copied() else {
        return;
    };
    let _ = OUTBOUND_SOCKETS.remove(&id);
    if unsafe { OUTBOUND_FDS.get(&socket.fd) }.is_some_and(|f| f.sk == id) {
        let _ = OUTBOUND_FDS.remove(&socket.fd);
    }
    count_outbound(&socket.remote, 0, 1);
}

/// The server's outbound connections to look at (tcp::WATCH_* bits; 0: none, and a send or
/// arriving data costs this one load).
#[map]
static OUTBOUND_WATCH: Array<u64> = Array::with_max_entries(1, 0);

/// The lengths of the server's asks to its dependencies until answered, in entries by
/// tcp::answer_slot of the remote address.
#[map]
static ANSWER_HIST: PerCpuArray<HistSlots> =
    PerCpuArray::with_max_entries(tcp::ANSWER_HIST_SLOTS, 0);

#[inline(always)]
fn watching() -> u64 {
    OUTBOUND_WATCH.get(0).copied().unwrap_or(0)
}

#[inline(always)]
fn watch(bit: u64) {
    if let Some(w) = OUTBOUND_WATCH.get_ptr_mut(0) {
        unsafe { *w |= bit };
    }
}

/// sock_send_length(struct sock *sk, int ret, int flags): a socket's send(2), write(2) or
/// sendmsg(2) returned. On the server's connections, bytes it left unsent begin a hold. On one of
/// the server's outbound connections with no answer pending, an ask begins. A connection open
/// before the programs attached is found by its descriptor at the server's first send on it (in
/// the sending syscall's context).
#[btf_tracepoint(function = "sock_send_length")]
pub fn sock_send_length(ctx: BtfTracePointContext) -> i32 {
    let sk: u64 = ctx.arg(0);
    let sent: i32 = ctx.arg(1);
    if sk == 0 || sent <= 0 {
        return 0;
    }
    let watched = watching();
    if watched & tcp::WATCH_HOLDS != 0 {
        server_sent(sk as *const u8);
    }
    if watched & tcp::WATCH_ANSWERS == 0 {
        return 0;
    }
    let now = unsafe { bpf_ktime_get_ns() };
    if let Some(socket) = OUTBOUND_SOCKETS.get_ptr_mut(&sk) {
        let socket = unsafe { &mut *socket };
        if socket.asked_ns == 0 {
            socket.asked_ns = now;
        }
        return 0;
    }
    if watched & tcp::WATCH_OPEN_BEFORE != 0 && found_open_before(sk, now) {
        return 0;
    }
    datagram_asked(sk, now);
    0
}

/// A send on a UDP socket of the server's, not followed: an ask of a datagram service (a DNS
/// server), followed until its answer. A connected socket's remote is its own; an unconnected
/// one's is where the syscall sent (sendto's address, sendmsg's msg_name), and its descriptor
/// is noted with it, so that the thread's sleep waiting for the answer is timed as the ask's.
#[inline(always)]
fn datagram_asked(sk: u64, now: u64) {
    let connected = connected_udp(sk as *const u8);
    if !connected && !is_udp(sk as *const u8) {
        return;
    }
    let tgid = (bpf_get_current_pid_tgid() >> 32) as u32;
    if group_of(tgid) != Some(GROUP_SERVER) {
        return;
    }
    // A socket bound to a port of its choosing is a datagram server's: its sends answer asks.
    const SOCK_BINDPORT_LOCK: u8 = 8;
    let bound: u8 = read_field(sk as *const u8, global(&SOCK_USERLOCKS_OFFSET)).unwrap_or(0);
    let remote = match (connected, sent_to()) {
        (true, _) => remote_of(sk as *const u8),
        (false, Some(remote)) if bound & SOCK_BINDPORT_LOCK == 0 => remote,
        _ => return,
    };
    let socket = OutboundSocket {
        remote,
        fd: FdKey {
            tgid,
            fd: current_syscall_args().0 as u32,
        },
        flags: tcp::OUTBOUND_DATAGRAM,
        asked_ns: now,
    };
    // Counted by its answer (a datagram service holds no connection open).
    if OUTBOUND_SOCKETS.insert(&sk, &socket, 0).is_err() {
        count_lost(lost::OUTBOUND_MAP_FULL);
    }
    if !connected {
        let on_fd = OutboundFd {
            sk,
            remote,
            _pad: 0,
        };
        if OUTBOUND_FDS.insert(&socket.fd, &on_fd, 0).is_err() {
            count_lost(lost::OUTBOUND_MAP_FULL);
        }
    }
}

/// The address the current syscall sent a datagram to (an IPv4 or IPv6 struct sockaddr in the
/// task's memory); None without one.
#[inline(always)]
fn sent_to() -> Option<OutboundKey> {
    const AF_INET: u16 = 2;
    let at = current_send_destination();
    if at == 0 {
        return None;
    }
    // SAFETY: reads of the task's own memory through the helper, which checks the address.
    let family: u16 = unsafe { bpf_probe_read_user(at as *const u16) }.ok()?;
    let port: u16 = unsafe { bpf_probe_read_user((at + 2) as *const u16) }.ok()?;
    let mut key = OutboundKey {
        family,
        port: u16::from_be(port),
        addr: [0; 16],
    };
    if family == tcp::AF_INET6 {
        key.addr = unsafe { bpf_probe_read_user((at + 8) as *const [u8; 16]) }.ok()?;
    } else if family == AF_INET {
        let v4: [u8; 4] = unsafe { bpf_probe_read_user((at + 4) as *const [u8; 4]) }.ok()?;
        key.addr[..4].copy_from_slice(&v4);
    } else {
        return None;
    }
    Some(key)
}

/// Sockets with bytes held (SEND_HELD) and how long each waited, by why (tcp::HOLD_*).
#[map]
static SEND_HELD: HashMap<u64, HeldSend> = HashMap::with_max_entries(tcp::MAX_HELD_SENDS, 0);
#[map]
static SEND_HOLDS: PerCpuArray<CountTime> = PerCpuArray::with_max_entries(tcp::HOLD_KINDS, 0);
#[map]
static SEND_HOLD_HIST: PerCpuArray<HistSlots> = PerCpuArray::with_max_entries(tcp::HOLD_KINDS, 0);

/// How many sockets SEND_HELD holds: at 0, as on a server whose answers leave at once, an arriving
/// segment costs one load, not a hash lookup.
#[map]
static SEND_HELD_COUNT: Array<u64> = Array::with_max_entries(1, 0);

/// A send on one of the server's TCP connections that leaves bytes held: less than a segment
/// unsent (write_seq past snd_nxt; Nagle's algorithm, or corked behind earlier segments still in
/// the host's queue), let go by the next ACK of new data (tcp_probe) or a send that leaves none
/// (a cork released); or whole segments unsent, or two or more unacknowledged, the answer's
/// transfer, timed until the client acknowledged all but its last part (whose ACK a client
/// may delay) of the bytes written meanwhile.
#[inline(always)]
fn server_sent(sk: *const u8) {
    const IPPROTO_TCP: u16 = 6;
    let local: u16 = read_field(sk, global(&SOCK_NUM_OFFSET)).unwrap_or(0);
    if !server_port(local) {
        return;
    }
    let protocol: u16 = read_field(sk, global(&SOCK_PROTOCOL_OFFSET)).unwrap_or(0);
    if protocol != IPPROTO_TCP {
        return;
    }
    let write_seq: u32 = read_field(sk, global(&TCP_WRITE_SEQ_OFFSET)).unwrap_or(0);
    let snd_nxt: u32 = read_field(sk, global(&TCP_SND_NXT_OFFSET)).unwrap_or(0);
    let snd_una: u32 = read_field(sk, global(&TCP_SND_UNA_OFFSET)).unwrap_or(write_seq);
    let mss: u32 = read_field(sk, global(&TCP_MSS_CACHE_OFFSET)).unwrap_or(0);
    let unsent = write_seq.wrapping_sub(snd_nxt);
    let whole = mss > 0 && (unsent >= mss || write_seq.wrapping_sub(snd_una) >= 2 * mss);
    let id = sk as u64;
    if nonzero(&SEND_HELD_COUNT)
        && let Some(held) = SEND_HELD.get_ptr_mut(&id)
    {
        // SAFETY: a value of SEND_HELD, whose entries live until removed.
        let held = unsafe { &mut *held };
        if held.kind == tcp::HOLD_PARTIAL && unsent == 0 {
            hold_ended(id, unsafe { bpf_ktime_get_ns() });
            return;
        }
        // The rest of an answer whose first part was held: its transfer from then on. More of
        // an answer written after the client acknowledged the rest, before it spoke again: the
        // same answer's transfer goes on.
        if held.kind == tcp::HOLD_PARTIAL && whole {
            held.kind = tcp::HOLD_FULL;
        }
        held.acked_ns = 0;
        held.until_seq = write_seq;
        return;
    }
    if unsent == 0 && !whole {
        return;
    }
    let snd_wnd: u32 = read_field(sk, global(&TCP_SND_WND_OFFSET)).unwrap_or(1);
    let kind = if snd_wnd == 0 {
        tcp::HOLD_ZERO_WINDOW
    } else if whole {
        tcp::HOLD_FULL
    } else {
        tcp::HOLD_PARTIAL
    };
    let held = HeldSend {
        since_ns: unsafe { bpf_ktime_get_ns() },
        acked_ns: 0,
        kind,
        until_seq: write_seq,
    };
    if SEND_HELD.insert(&id, &held, BPF_NOEXIST as u64).is_ok() {
        add_to(&SEND_HELD_COUNT, 1);
    } else if unsafe { SEND_HELD.get(&id) }.is_none() {
        count_lost(lost::SEND_HELD_MAP_FULL);
    }
}

/// The bytes held on a socket went out: counted with their wait, by why they waited.
#[inline(always)]
fn hold_ended(id: u64, now: u64) {
    let Some(held) = (unsafe { SEND_HELD.get(&id) }).copied() else {
        return;
    };
    if SEND_HELD.remove(&id).is_err() {
        return;
    }
    add_to(&SEND_HELD_COUNT, u64::MAX);
    let waited = now.saturating_sub(held.since_ns);
    let kind = match held.kind < tcp::HOLD_KINDS {
        true => held.kind,
        false => tcp::HOLD_FULL,
    };
    if let Some(c) = SEND_HOLDS.get_ptr_mut(kind) {
        unsafe {
            (*c).count += 1;
            (*c).total_ns += waited;
        }
    }
    record(&SEND_HOLD_HIST, kind, waited);
}

/// tcp_probe(const struct sock *sk, const struct sk_buff *skb): a segment arrived on an
/// established connection, before TCP takes it in (its header at skb->data). On a server socket
/// with bytes held: less than a segment is let go by an ACK of new data; whole segments are
/// delivered when the ACK leaves less than a segment of the bytes written unacknowledged (a
/// closed window meanwhile names the hold's why: the client stopped reading), and the transfer
/// is counted, ended then, when the client next sends data.
#[btf_tracepoint(function = "tcp_probe")]
pub fn tcp_probe(ctx: BtfTracePointContext) -> i32 {
    if !nonzero(&SEND_HELD_COUNT) {
        return 0;
    }
    let sk: u64 = ctx.arg(0);
    let skb: *const u8 = ctx.arg(1);
    let Some(held) = SEND_HELD.get_ptr_mut(&sk) else {
        return 0;
    };
    // SAFETY: a value of SEND_HELD, whose entries live until removed.
    let held = unsafe { &mut *held };
    if held.acked_ns != 0 {
        let cb = global(&SKB_CB_OFFSET);
        let seq: u32 = read_field(skb, cb).unwrap_or(0);
        let end_seq: u32 = read_field(skb, cb + 4).unwrap_or(0);
        if end_seq != seq {
            hold_ended(sk, held.acked_ns);
        }
        return 0;
    }
    let Some(th) = read_field::<*const u8>(skb, global(&SKB_DATA_OFFSET)) else {
        return 0;
    };
    let ack = u32::from_be(read_field::<u32>(th, 8).unwrap_or(0));
    let now = unsafe { bpf_ktime_get_ns() };
    if held.kind == tcp::HOLD_PARTIAL {
        let una: u32 = read_field(sk as *const u8, global(&TCP_SND_UNA_OFFSET)).unwrap_or(ack);
        if ack.wrapping_sub(una) as i32 > 0 {
            hold_ended(sk, now);
        }
        return 0;
    }
    if read_field::<u16>(th, 14) == Some(0) {
        held.kind = tcp::HOLD_ZERO_WINDOW;
    }
    let mss: u32 = read_field(sk as *const u8, global(&TCP_MSS_CACHE_OFFSET)).unwrap_or(0);
    if (held.until_seq.wrapping_sub(ack) as i32) < mss as i32 {
        held.acked_ns = now;
    }
    0
}

/// A send on a socket not followed: when it is the server's and its descriptor holds a
/// connection open before the programs attached (by the same remote address), the socket is
/// followed from now on, this send its first ask (true).
#[inline(always)]
fn found_open_before(sk: u64, now: u64) -> bool {
    let tgid = (bpf_get_current_pid_tgid() >> 32) as u32;
    if group_of(tgid) != Some(GROUP_SERVER) {
        return false;
    }
    let fd = current_syscall_args().0 as u32;
    let id = FdKey { tgid, fd };
    let Some(on_fd) = OUTBOUND_FDS.get_ptr_mut(&id) else {
        return false;
    };
    let on_fd = unsafe { &mut *on_fd };
    let remote = remote_of(sk as *const u8);
    if on_fd.sk != 0 || !same_remote(&remote, &on_fd.remote) {
        return false;
    }
    on_fd.sk = sk;
    let socket = OutboundSocket {
        remote,
        fd: id,
        flags: 0,
        asked_ns: now,
    };
    if OUTBOUND_SOCKETS.insert(&sk, &socket, 0).is_err() {
        count_lost(lost::OUTBOUND_MAP_FULL);
    }
    true
}

/// sk_data_ready(const struct sock *sk): data arrived on a socket (in the softirq that queued
/// it). On one of the server's outbound connections with an ask pending, that ask is answered:
/// counted with its time by the remote address.
#[btf_tracepoint(function = "sk_data_ready")]
pub fn sk_data_ready(ctx: BtfTracePointContext) -> i32 {
    if watching() == 0 {
        return 0;
    }
    let sk: u64 = ctx.arg(0);
    let Some(socket) = OUTBOUND_SOCKETS.get_ptr_mut(&sk) else {
        return 0;
    };
    let socket = unsafe { &mut *socket };
    if socket.asked_ns == 0 {
        return 0;
    }
    let waited = unsafe { bpf_ktime_get_ns() }.saturating_sub(socket.asked_ns);
    socket.asked_ns = 0;
    let remote = socket.remote;
    // A datagram service's ask is followed until its answer only.
    let datagram = socket.flags & tcp::OUTBOUND_DATAGRAM != 0;
    if datagram {
        let _ = OUTBOUND_SOCKETS.remove(&sk);
    }
    record(&ANSWER_HIST, tcp::answer_slot(&remote), waited);
    add_outbound(
        &remote,
        OutboundCount {
            answers: 1,
            answer_ns: waited,
            ..Default::default()
        },
    );
    0
}

/// A server thread woke from a sleep reading one socket (`fd` of `task`, the thread switching in):
/// when that descriptor holds one of the server's outbound connections, it waited that long for
/// a dependency, counted by the remote address; sleeps in a row on one socket as one call's. A
/// thread per connection reads its dependency's answer the way it reads its client's next
/// request: only the descriptor tells the two apart. Only sleeps pay for this (an event loop
/// sleeps in its poll), and a sleep on a client's connection one lookup. A sleep that may be on
/// a datagram socket (`datagram`: a poll of one descriptor, a recv*) on a descriptor not noted
/// looks at its socket: a connected UDP one is a datagram service's (a DNS server's), noted from
/// then on like a connection.
#[inline(always)]
pub fn socket_sleep_ended(
    st: &mut ThreadStats,
    task: *const u8,
    fd: u32,
    slept: u64,
    datagram: bool,
) {
    let id = FdKey { tgid: st.tgid, fd };
    let noted = OUTBOUND_FDS.get_ptr(&id);
    if noted.is_none() && !datagram {
        st.last_waited_sk = 0;
        return;
    }
    // The descriptor may have been closed and reused since: the socket behind it says.
    let sk = fd_socket(task, fd).map_or(0, |sk| sk as u64);
    let same = noted.filter(|on_fd| {
        let on_fd = unsafe { &**on_fd };
        match on_fd.sk {
            0 => sk != 0 && same_remote(&remote_of(sk as *const u8), &on_fd.remote),
            known => known == sk,
        }
    });
    // The remote address as noted, read in place (this program's stack is nearly full).
    let on_fd = match same {
        Some(on_fd) => on_fd,
        None => {
            if noted.is_some() {
                let _ = OUTBOUND_FDS.remove(&id);
            }
            let datagram_service = datagram && sk != 0 && connected_udp(sk as *const u8);
            let noted_now = datagram_service.then(|| note_datagram(&id, sk)).flatten();
            let Some(on_fd) = noted_now else {
                st.last_waited_sk = 0;
                return;
            };
            on_fd
        }
    };
    let call_goes_on = st.last_waited_sk == sk;
    st.last_waited_sk = sk;
    add_outbound(
        unsafe { &(*on_fd).remote },
        OutboundCount {
            waits: u64::from(!call_goes_on),
            wait_ns: slept,
            ..Default::default()
        },
    );
}

/// Notes a connected UDP socket's descriptor as a connection's, with its remote address: the
/// entry noted, None when the map had no room.
#[inline(always)]
fn note_datagram(id: &FdKey, sk: u64) -> Option<*const OutboundFd> {
    let on_fd = OutboundFd {
        sk,
        remote: remote_of(sk as *const u8),
        _pad: 0,
    };
    if OUTBOUND_FDS.insert(id, &on_fd, 0).is_err() {
        count_lost(lost::OUTBOUND_MAP_FULL);
        return None;
    }
    OUTBOUND_FDS.get_ptr(id)
}

/// A UDP socket connected to a remote address (a datagram client's: it sends with send(2)).
#[inline(always)]
fn connected_udp(sk: *const u8) -> bool {
    is_udp(sk) && read_field::<u16>(sk, global(&SOCK_DPORT_OFFSET)).unwrap_or(0) != 0
}

#[inline(always)]
fn is_udp(sk: *const u8) -> bool {
    const IPPROTO_UDP: u16 = 17;
    read_field::<u16>(sk, global(&SOCK_PROTOCOL_OFFSET)) == Some(IPPROTO_UDP)
}

/// The socket behind a task's file descriptor: task->files->fdt->fd[fd], when its inode is a
/// socket's, then file->private_data (a struct socket) ->sk.
#[inline(always)]
fn fd_socket(task: *const u8, fd: u32) -> Option<*const u8> {
    const S_IFMT: u16 = 0o170000;
    const S_IFSOCK: u16 = 0o140000;
    let files: *const u8 = read_field(task, global(&TASK_FILES_OFFSET))?;
    let fdt: *const u8 = read_field(files, global(&FILES_FDT_OFFSET))?;
    let max_fds: u32 = read_field(fdt, global(&FDTABLE_MAX_FDS_OFFSET))?;
    if fd >= max_fds {
        return None;
    }
    let fds: *const u8 = read_field(fdt, global(&FDTABLE_FD_OFFSET))?;
    let file: *const u8 = read_field(fds, u64::from(fd) * 8)?;
    let inode: *const u8 = read_field(file, global(&FILE_INODE_OFFSET))?;
    let mode: u16 = read_field(inode, global(&INODE_MODE_OFFSET))?;
    if mode & S_IFMT != S_IFSOCK {
        return None;
    }
    let socket: *const u8 = read_field(file, global(&FILE_PRIVATE_DATA_OFFSET))?;
    read_field(socket, global(&SOCKET_SK_OFFSET)).filter(|sk: &*const u8| !sk.is_null())
}

#[inline(always)]
fn count_outbound(key: &OutboundKey, opened: u64, closed: u64) {
    add_outbound(
        key,
        OutboundCount {
            opened,
            closed,
            ..Default::default()
        },
    );
}

#[inline(always)]
fn add_outbound(key: &OutboundKey, n: OutboundCount) {
    let add = |c: *mut OutboundCount| unsafe {
        (*c).opened += n.opened;
        (*c).closed += n.closed;
        (*c).waits += n.waits;
        (*c).wait_ns += n.wait_ns;
        (*c).answers += n.answers;
        (*c).answer_ns += n.answer_ns;
    };
    if let Some(c) = OUTBOUND.get_ptr_mut(key) {
        add(c);
        return;
    }
    // Per-CPU values: a key another CPU inserted first has a zeroed slot for this CPU.
    if OUTBOUND.insert(key, &n, BPF_NOEXIST as u64).is_err() {
        match OUTBOUND.get_ptr_mut(key) {
            Some(c) => add(c),
            None => count_lost(lost::OUTBOUND_MAP_FULL),
        }
    }
}
