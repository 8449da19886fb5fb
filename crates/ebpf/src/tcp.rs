//! TCP retransmits (SYN, SYN-ACK, data) and resets, by side: a socket whose own port is watched
//! is the server's, one whose peer's port is watched a client's (srvprof_common::tcp).

use aya_ebpf::helpers::bpf_get_current_pid_tgid;
use aya_ebpf::{
    bindings::BPF_NOEXIST,
    macros::{btf_tracepoint, map},
    maps::{HashMap, PerCpuArray, PerCpuHashMap},
    programs::BtfTracePointContext,
};
use srvprof_common::{
    GROUP_SERVER, MAX_PORTS, OutboundCount, OutboundKey, TcpResetKey, ends_socket_wait, lost,
    socket_call, tcp,
};

use crate::sched::{current_syscall_args, current_syscall_slot};
use crate::target::{count_lost, global, group_of, read_field, watched_thread_current};

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
static TCP_STATE_SYN_SENT: u64 = 0;
#[unsafe(no_mangle)]
static TCP_STATE_CLOSE: u64 = 0;
#[unsafe(no_mangle)]
static SOCK_FAMILY_OFFSET: u64 = 0;
#[unsafe(no_mangle)]
static SOCK_DADDR_OFFSET: u64 = 0;
#[unsafe(no_mangle)]
static SOCK_V6_DADDR_OFFSET: u64 = 0;

/// The server's outbound connections by remote address: opened and closed, per CPU.
#[map]
static OUTBOUND: PerCpuHashMap<OutboundKey, OutboundCount> =
    PerCpuHashMap::with_max_entries(tcp::MAX_OUTBOUND_REMOTES, 0);

/// Socket -> the remote address of each outbound connection the server's connect() started,
/// until it closes.
#[map]
static OUTBOUND_SOCKETS: HashMap<u64, OutboundKey> =
    HashMap::with_max_entries(tcp::MAX_OUTBOUND_SOCKETS, 0);

/// The remote addresses of the server's connections open before the programs attached (userspace
/// writes them at its first reading): a socket connected to one of them is outbound too.
#[map]
static OUTBOUND_REMOTES: HashMap<OutboundKey, u8> =
    HashMap::with_max_entries(tcp::MAX_OUTBOUND_REMOTES, 0);

#[inline(always)]
fn bump(side: u32, counter: u32) {
    if let Some(n) = TCP_COUNTERS.get_ptr_mut(tcp::index(side, counter)) {
        unsafe { *n += 1 };
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
    if u64::from(sock_state(sk)) == global(&TCP_STATE_SYN_SENT) {
        bump(side, tcp::SYN_RETRANSMITS);
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
    let new: u64 = ctx.arg(2);
    if sk.is_null() {
        return 0;
    }
    let new = new & 0xffff_ffff;
    if new == global(&TCP_STATE_SYN_SENT) {
        outbound_opened(sk);
    } else if new == global(&TCP_STATE_CLOSE) {
        outbound_closed(sk);
    }
    0
}

#[inline(always)]
fn outbound_opened(sk: *const u8) {
    let tgid = (bpf_get_current_pid_tgid() >> 32) as u32;
    if group_of(tgid) != Some(GROUP_SERVER) {
        return;
    }
    let key = remote_of(sk);
    if OUTBOUND_SOCKETS.insert(&(sk as u64), &key, 0).is_err() {
        count_lost(lost::OUTBOUND_MAP_FULL);
        return;
    }
    count_outbound(&key, 1, 0);
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
    let Some(key) = (unsafe { OUTBOUND_SOCKETS.get(&id) }).copied() else {
        return;
    };
    let _ = OUTBOUND_SOCKETS.remove(&id);
    count_outbound(&key, 0, 1);
}

/// sock_recv_length(struct sock *sk, int ret, int flags), at the return of every socket read:
/// a server thread that slept in this read (or in a poll of one descriptor right before it, with
/// no sleep since) waited that long on this socket; when it is one of the server's
/// outbound connections (its connect() seen, or open before the programs attached), that is a
/// wait for a dependency, counted by its remote address (waits
/// in a row on one socket as one call's). A thread per connection reads its dependency's answer the way it reads its client's next
/// request: only the socket tells the two apart.
#[btf_tracepoint(function = "sock_recv_length")]
pub fn sock_recv_length(ctx: BtfTracePointContext) -> i32 {
    let Some(st) = watched_thread_current() else {
        return 0;
    };
    let sk: *const u8 = ctx.arg(0);
    if st.last_waited_sk != sk as u64 {
        st.last_waited_sk = 0;
    }
    if st.socket_wait_ns == 0 {
        return 0;
    }
    let (call, waited) = (st.socket_wait_call, st.socket_wait_ns);
    st.socket_wait_ns = 0;
    if st.group != GROUP_SERVER {
        return 0;
    }
    let (fd, nfds, _) = current_syscall_args();
    let now = socket_call(current_syscall_slot(), fd, nfds).unwrap_or(0);
    if !ends_socket_wait(call, now) {
        return 0;
    }
    let key = match unsafe { OUTBOUND_SOCKETS.get(&(sk as u64)) } {
        Some(key) => Some(*key),
        None => Some(remote_of(sk)).filter(|k| unsafe { OUTBOUND_REMOTES.get(k) }.is_some()),
    };
    if let Some(key) = key {
        let call_goes_on = st.last_waited_sk == sk as u64;
        st.last_waited_sk = sk as u64;
        add_outbound(
            &key,
            OutboundCount {
                waits: u64::from(!call_goes_on),
                wait_ns: waited,
                ..Default::default()
            },
        );
    }
    0
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
