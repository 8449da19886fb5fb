//! Reads the TCP probes: retransmits and resets by side, resets by state and reason.

use aya::{
    Ebpf,
    maps::{MapData, PerCpuArray, PerCpuHashMap},
};
use srvprof_common::{OutboundCount, OutboundKey, TcpResetKey, maps, tcp};

use super::btf_offsets::TcpNames;
use super::{map_error, map_ref};
use crate::error::SrvprofError;
use srvprof_analysis::record::{KernelCounters, TcpResetCount};

pub fn read(
    ebpf: &Ebpf,
    names: &TcpNames,
    counters: &mut KernelCounters,
) -> Result<(), SrvprofError> {
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

/// The server's outbound connections since the programs attached, by remote address: (opened,
/// closed), summed over the CPUs.
pub fn outbound(ebpf: &Ebpf) -> Result<Vec<(std::net::SocketAddr, u64, u64)>, SrvprofError> {
    let map: PerCpuHashMap<&MapData, OutboundKey, OutboundCount> = map_ref(ebpf, maps::OUTBOUND)?;
    Ok(map
        .iter()
        .filter_map(Result::ok)
        .map(|(key, per_cpu)| {
            let (opened, closed) =
                (per_cpu.iter()).fold((0, 0), |(o, c), n| (o + n.opened, c + n.closed));
            (remote_address(&key), opened, closed)
        })
        .collect())
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
