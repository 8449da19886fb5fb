//! TCP retransmits (SYN, SYN-ACK, data) and resets, optionally only on the watched ports.

use aya_ebpf::{
    macros::{btf_tracepoint, map},
    maps::{HashMap, PerCpuArray},
    programs::BtfTracePointContext,
};
use srvprof_common::{MAX_PORTS, tcp};

use crate::target::{global, read_field};

#[map]
static TCP_COUNTERS: PerCpuArray<u64> = PerCpuArray::with_max_entries(tcp::COUNT, 0);

/// Local or remote ports whose sockets count, when TCP_FILTER_PORTS is 1.
#[map]
static TCP_PORTS: HashMap<u16, u8> = HashMap::with_max_entries(MAX_PORTS, 0);

#[unsafe(no_mangle)]
static SOCK_STATE_OFFSET: u64 = 0;
#[unsafe(no_mangle)]
static SOCK_NUM_OFFSET: u64 = 0;
#[unsafe(no_mangle)]
static SOCK_DPORT_OFFSET: u64 = 0;
#[unsafe(no_mangle)]
static TCP_FILTER_PORTS: u64 = 0;

const TCP_SYN_SENT: u8 = 2;

#[inline(always)]
fn bump(counter: u32) {
    if let Some(n) = TCP_COUNTERS.get_ptr_mut(counter) {
        unsafe { *n += 1 };
    }
}

/// Whether a socket's ports are watched. A missing socket counts only when nothing is filtered.
#[inline(always)]
fn watched(sk: *const u8) -> bool {
    if global(&TCP_FILTER_PORTS) == 0 {
        return true;
    }
    if sk.is_null() {
        return false;
    }
    let local: u16 = read_field(sk, global(&SOCK_NUM_OFFSET)).unwrap_or(0);
    let remote_be: u16 = read_field(sk, global(&SOCK_DPORT_OFFSET)).unwrap_or(0);
    let remote = u16::from_be(remote_be);
    unsafe { TCP_PORTS.get(&local).is_some() || TCP_PORTS.get(&remote).is_some() }
}

/// tcp_retransmit_skb(const struct sock *sk, const struct sk_buff *skb, int err)
#[btf_tracepoint(function = "tcp_retransmit_skb")]
pub fn tcp_retransmit_skb(ctx: BtfTracePointContext) -> i32 {
    let sk: *const u8 = ctx.arg(0);
    if !watched(sk) {
        return 0;
    }
    let state: u8 = read_field(sk, global(&SOCK_STATE_OFFSET)).unwrap_or(0);
    bump(tcp::RETRANSMITS);
    if state == TCP_SYN_SENT {
        bump(tcp::SYN_RETRANSMITS);
    }
    0
}

/// tcp_retransmit_synack(const struct sock *sk, const struct request_sock *req)
#[btf_tracepoint(function = "tcp_retransmit_synack")]
pub fn tcp_retransmit_synack(ctx: BtfTracePointContext) -> i32 {
    let sk: *const u8 = ctx.arg(0);
    if watched(sk) {
        bump(tcp::SYNACK_RETRANSMITS);
    }
    0
}

/// tcp_send_reset(const struct sock *sk, const struct sk_buff *skb, ...)
#[btf_tracepoint(function = "tcp_send_reset")]
pub fn tcp_send_reset(ctx: BtfTracePointContext) -> i32 {
    let sk: *const u8 = ctx.arg(0);
    if watched(sk) {
        bump(tcp::RESETS_SENT);
    }
    0
}

/// tcp_receive_reset(struct sock *sk)
#[btf_tracepoint(function = "tcp_receive_reset")]
pub fn tcp_receive_reset(ctx: BtfTracePointContext) -> i32 {
    let sk: *const u8 = ctx.arg(0);
    if watched(sk) {
        bump(tcp::RESETS_RECEIVED);
    }
    0
}
