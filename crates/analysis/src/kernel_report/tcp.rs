//! Each side's TCP figures (by the probes' socket sides and the listening sockets' drops) and the
//! host's (the kernel's MIB counters) between two samples.

use std::collections::BTreeMap;

use srvprof_common::{GROUP_SERVER, tcp};

use super::{HostTcpReport, ResetReport, TcpReport};
use crate::record::Reading;

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
        resets_sent: tcp_delta(start, end, side, tcp::RESETS_SENT),
        resets_received: tcp_delta(start, end, side, tcp::RESETS_RECEIVED),
        resets,
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
