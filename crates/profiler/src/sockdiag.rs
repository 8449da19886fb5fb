//! Per-socket counters of listening sockets, from the kernel's sock_diag netlink interface (what
//! `ss -ltm` shows): a listening socket's drop counter (`sk_drops`) counts every connection it
//! dropped, accept-queue overflows included, so an overflow can be attributed to the server's own
//! socket rather than to the whole network namespace.

use netlink_packet_core::{
    NLM_F_DUMP, NLM_F_REQUEST, NetlinkHeader, NetlinkMessage, NetlinkPayload,
};
use netlink_packet_sock_diag::{
    SockDiagMessage,
    constants::{AF_INET, AF_INET6, IPPROTO_TCP, TCP_TIME_WAIT},
    inet::{ExtensionFlags, InetRequest, InetResponse, SocketId, StateFlags, nlas::Nla},
};
use netlink_sys::{Socket, SocketAddr, protocols::NETLINK_SOCK_DIAG};

/// Sum of the drop counters of the TCP sockets listening on `ports` (IPv4 and IPv6), in this
/// network namespace. None when sock_diag cannot be asked.
pub fn listen_drops(ports: &[u16]) -> Option<u64> {
    let mut total = 0u64;
    for_each_socket(StateFlags::LISTEN, ExtensionFlags::SKMEMINFO, |r| {
        if ports.contains(&r.header.socket_id.source_port) {
            for nla in &r.nlas {
                if let Nla::MemInfo(mem) = nla {
                    total += u64::from(mem.drops);
                }
            }
        }
    })?;
    Some(total)
}

/// This network namespace's established TCP sockets (IPv4 and IPv6), and its TIME_WAIT ones
/// when asked, read in one walk of the kernel's socket table per family.
#[derive(Debug, Default)]
pub struct Connections {
    /// (inode, local port, remote address).
    pub established: Vec<(u32, u16, std::net::SocketAddr)>,
    /// The local port of each socket in TIME_WAIT; None when they were not asked for.
    pub time_wait_ports: Option<Vec<u16>>,
    /// Each established socket's ports (local, remote) and retransmission timeout (tcpi_rto, us).
    pub rto_us: Vec<(u16, u16, u32)>,
}

impl Connections {
    /// TIME_WAIT sockets: all of them, and those whose local port is in `ephemeral` (connections
    /// this host opened, each keeping connect() from reusing its port for the same peer until it
    /// expires). None when they were not asked for.
    pub fn time_wait(&self, ephemeral: (u16, u16)) -> Option<(u64, u64)> {
        let ports = self.time_wait_ports.as_ref()?;
        let holding = (ports.iter())
            .filter(|&&port| ephemeral.0 <= port && port <= ephemeral.1)
            .count();
        Some((ports.len() as u64, holding as u64))
    }

    /// The mean retransmission timeout (us) of the established connections to or from `ports`:
    /// how long a lost segment on them waits before the kernel sends it again. None without one.
    pub fn mean_rto_us(&self, ports: &[u16]) -> Option<u32> {
        let rtos: Vec<u64> = (self.rto_us.iter())
            .filter(|(local, remote, rto)| {
                *rto > 0 && (ports.contains(local) || ports.contains(remote))
            })
            .map(|r| u64::from(r.2))
            .collect();
        let n = rtos.len() as u64;
        (n > 0).then(|| (rtos.iter().sum::<u64>() / n) as u32)
    }
}

/// tcpi_rto's offset in struct tcp_info (linux/tcp.h): after eight one-byte fields.
const TCPI_RTO_OFFSET: usize = 8;

/// The established sockets, and the TIME_WAIT ones if `time_wait`: a host that churns
/// connections holds tens of thousands of those (28,552 took 13 ms to read here), so they are
/// worth reading only at a run's ends.
pub fn connections(time_wait: bool) -> Option<Connections> {
    let mut out = Connections {
        time_wait_ports: time_wait.then(Vec::new),
        ..Default::default()
    };
    let mut states = StateFlags::ESTABLISHED;
    if time_wait {
        states |= StateFlags::TIME_WAIT;
    }
    for_each_socket(states, ExtensionFlags::INFO, |r| {
        let id = &r.header.socket_id;
        match (r.header.state, out.time_wait_ports.as_mut()) {
            (TCP_TIME_WAIT, Some(ports)) => ports.push(id.source_port),
            (TCP_TIME_WAIT, None) => {}
            _ => {
                out.established.push((
                    r.header.inode,
                    id.source_port,
                    std::net::SocketAddr::new(id.destination_address, id.destination_port),
                ));
                let rto = r.nlas.iter().find_map(|nla| match nla {
                    Nla::TcpInfo(info) => info
                        .get(TCPI_RTO_OFFSET..TCPI_RTO_OFFSET + 4)
                        .map(|b| u32::from_ne_bytes([b[0], b[1], b[2], b[3]])),
                    _ => None,
                });
                if let Some(rto) = rto {
                    out.rto_us.push((id.source_port, id.destination_port, rto));
                }
            }
        }
    })?;
    Some(out)
}

/// tcpi_delivery_rate's offset in struct tcp_info (linux/tcp.h): the connection's recent
/// delivery rate, bytes a second.
const TCPI_DELIVERY_RATE_OFFSET: usize = 160;

/// Whether an established TCP connection on a local port of `ports`, in the calling thread's
/// network namespace, holds `bytes` or more written and not yet acknowledged (its send queue)
/// that take `drain_ms` or more to deliver at the connection's own delivery rate: an answer
/// going out slower than it was written (a fast path drains a megabyte in a fraction of a
/// millisecond). None when sock_diag cannot be asked.
pub fn send_queue_backed_up(ports: &[u16], bytes: u32, drain_ms: f64) -> Option<bool> {
    let mut found = false;
    for_each_socket(StateFlags::ESTABLISHED, ExtensionFlags::INFO, |r| {
        let queued = r.header.send_queue;
        if found || queued < bytes || !ports.contains(&r.header.socket_id.source_port) {
            return;
        }
        let rate = r.nlas.iter().find_map(|nla| match nla {
            Nla::TcpInfo(info) => info
                .get(TCPI_DELIVERY_RATE_OFFSET..TCPI_DELIVERY_RATE_OFFSET + 8)
                .and_then(|b| b.try_into().ok())
                .map(u64::from_ne_bytes),
            _ => None,
        });
        // No rate measured yet: the queue alone says.
        found = rate.is_none_or(|r| r == 0 || f64::from(queued) / r as f64 * 1e3 >= drain_ms);
    })?;
    Some(found)
}

/// Moves the calling thread alone into the network namespace of `pid`, when it is not srvprof's
/// (a netlink socket answers for the namespace it was made in): false when it could not.
pub fn enter_net_namespace_of(pid: u32) -> bool {
    use std::os::fd::AsRawFd;
    match crate::procfs::files::other_net_namespace(pid) {
        // SAFETY: setns on the calling thread, with a namespace file it holds open.
        Some(ns) => unsafe { libc::setns(ns.as_raw_fd(), libc::CLONE_NEWNET) == 0 },
        None => true,
    }
}

/// Calls `each` with every TCP socket in `states`, IPv4 then IPv6.
fn for_each_socket(
    states: StateFlags,
    extensions: ExtensionFlags,
    mut each: impl FnMut(&InetResponse),
) -> Option<()> {
    for (family, id) in [
        (AF_INET, SocketId::new_v4()),
        (AF_INET6, SocketId::new_v6()),
    ] {
        dump(family, id, states.clone(), extensions.clone(), &mut each)?;
    }
    Some(())
}

fn dump(
    family: u8,
    socket_id: SocketId,
    states: StateFlags,
    extensions: ExtensionFlags,
    each: &mut impl FnMut(&InetResponse),
) -> Option<()> {
    let mut socket = Socket::new(NETLINK_SOCK_DIAG).ok()?;
    socket.bind_auto().ok()?;
    socket.connect(&SocketAddr::new(0, 0)).ok()?;
    let mut header = NetlinkHeader::default();
    header.flags = NLM_F_REQUEST | NLM_F_DUMP;
    let mut request = NetlinkMessage::new(
        header,
        SockDiagMessage::InetRequest(InetRequest {
            family,
            protocol: IPPROTO_TCP,
            extensions,
            states,
            socket_id,
        })
        .into(),
    );
    request.finalize();
    let mut buf = vec![0; request.buffer_len()];
    request.serialize(&mut buf);
    socket.send(&buf, 0).ok()?;

    let mut receive = vec![0u8; 64 * 1024];
    loop {
        // Each batch (a few hundred sockets) takes the real-time sampler's CPU for a few hundred
        // microseconds; the server runs between two, however many sockets the host holds.
        crate::realtime::breathe();
        let size = socket.recv(&mut &mut receive[..], 0).ok()?;
        let mut offset = 0;
        while offset < size {
            let message =
                NetlinkMessage::<SockDiagMessage>::deserialize(&receive[offset..size]).ok()?;
            let length = message.header.length as usize;
            match message.payload {
                NetlinkPayload::InnerMessage(SockDiagMessage::InetResponse(response)) => {
                    each(&response)
                }
                NetlinkPayload::Done(_) => return Some(()),
                NetlinkPayload::Error(_) => return None,
                _ => {}
            }
            if length == 0 {
                break;
            }
            offset += length;
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn a_fresh_listener_has_no_drops_and_is_found() {
        let l = std::net::TcpListener::bind("127.0.0.1:0").unwrap();
        let port = l.local_addr().unwrap().port();
        assert_eq!(listen_drops(&[port]), Some(0));
    }

    #[test]
    fn a_connection_closed_first_here_is_counted_in_time_wait() {
        let l = std::net::TcpListener::bind("127.0.0.1:0").unwrap();
        let c = std::net::TcpStream::connect(l.local_addr().unwrap()).unwrap();
        let local = c.local_addr().unwrap().port();
        let (s, _) = l.accept().unwrap();
        // The client closes first: its end goes to TIME_WAIT once the server's FIN arrives,
        // which a loaded machine may take a while to process. Another TIME_WAIT socket may hold
        // the same local port towards another peer (one left by an earlier run of these tests
        // within the last minute), so at least one.
        drop(c);
        drop(s);
        let deadline = std::time::Instant::now() + std::time::Duration::from_secs(5);
        let (all, holding) = loop {
            let (all, holding) = connections(true)
                .unwrap()
                .time_wait((local, local))
                .unwrap();
            if holding >= 1 || std::time::Instant::now() > deadline {
                break (all, holding);
            }
            std::thread::sleep(std::time::Duration::from_millis(20));
        };
        assert!(all >= holding && holding >= 1, "{all} {holding}");
        let without = connections(false).unwrap();
        assert_eq!(without.time_wait((local, local)), None);
    }

    #[test]
    fn an_open_connection_is_established_from_both_ends() {
        let l = std::net::TcpListener::bind("127.0.0.1:0").unwrap();
        let c = std::net::TcpStream::connect(l.local_addr().unwrap()).unwrap();
        let (s, _) = l.accept().unwrap();
        let ports = [c.local_addr().unwrap(), s.local_addr().unwrap()].map(|a| a.port());
        let seen = connections(false).unwrap();
        for (port, peer) in ports.iter().zip([s.local_addr(), c.local_addr()]) {
            let peer = peer.unwrap();
            assert!(
                (seen.established.iter())
                    .any(|&(_, local, remote)| local == *port && remote == peer),
                "{port} -> {peer} not among {:?}",
                seen.established
            );
        }
    }
}
