//! The kernel's counters and settings read from /proc: softirqs, interrupts, packets per CPU
//! (softnet_stat), a network namespace's TCP MIB, and the network settings a run depends on.

use std::collections::BTreeMap;
use std::fs;

/// /proc/softirqs: vector name -> per-CPU counts.
pub fn parse_softirqs(text: &str) -> BTreeMap<String, Vec<u64>> {
    let mut out = BTreeMap::new();
    for line in text.lines().skip(1) {
        let mut parts = line.split_whitespace();
        let Some(name) = parts.next() else { continue };
        let counts = parts.filter_map(|p| p.parse().ok()).collect();
        out.insert(name.trim_end_matches(':').to_string(), counts);
    }
    out
}

pub fn softirqs() -> BTreeMap<String, Vec<u64>> {
    fs::read_to_string("/proc/softirqs")
        .map(|t| parse_softirqs(&t))
        .unwrap_or_default()
}

/// One numbered line of /proc/interrupts.
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct InterruptLine {
    pub irq: u32,
    /// The device or handler name (the last column).
    pub name: String,
}

/// /proc/interrupts' numbered lines (NMI, LOC and the other named rows are not IRQ lines).
pub fn parse_interrupts(text: &str) -> Vec<InterruptLine> {
    let mut lines = text.lines();
    let ncpus = lines
        .next()
        .map(|h| h.split_whitespace().count())
        .unwrap_or(0);
    let mut out = Vec::new();
    for line in lines {
        let mut parts = line.split_whitespace();
        let Some(label) = parts.next() else { continue };
        let Ok(irq) = label.trim_end_matches(':').parse::<u32>() else {
            continue;
        };
        let fields: Vec<&str> = parts.collect();
        // e.g. "IO-APIC 2-edge timer" or "PCI-MSIX-0000:00:03.0 0-edge virtio0-input.0": the last word is the handler.
        let name = fields
            .iter()
            .skip(ncpus)
            .last()
            .map(|s| s.to_string())
            .unwrap_or_default();
        out.push(InterruptLine { irq, name });
    }
    out
}

/// /proc/interrupts now: each numbered line's name.
pub fn interrupts() -> Vec<InterruptLine> {
    fs::read_to_string("/proc/interrupts")
        .map(|t| parse_interrupts(&t))
        .unwrap_or_default()
}

/// Packets each CPU's NET_RX softirqs processed so far (/proc/net/softnet_stat, first column:
/// every packet __netif_receive_skb_core took, loopback's included), indexed by CPU.
pub fn softnet_processed() -> Vec<u64> {
    fs::read_to_string("/proc/net/softnet_stat")
        .map(|text| parse_softnet_processed(&text))
        .unwrap_or_default()
}

/// One line per online CPU, hex columns; since Linux 6.0 the 13th is the CPU's number (a line
/// per online CPU only, so an offline one would shift the rest), before that the line's place.
fn parse_softnet_processed(text: &str) -> Vec<u64> {
    let mut out: Vec<u64> = Vec::new();
    for (line_no, line) in text.lines().enumerate() {
        let cols: Vec<&str> = line.split_whitespace().collect();
        let hex = |i: usize| cols.get(i).and_then(|c| u64::from_str_radix(c, 16).ok());
        let Some(processed) = hex(0) else { continue };
        let cpu = if cols.len() >= 13 {
            hex(12).map_or(line_no, |c| c as usize)
        } else {
            line_no
        };
        if cpu >= out.len() {
            out.resize(cpu + 1, 0);
        }
        out[cpu] = processed;
    }
    out
}

/// /proc/softirqs as [cpu][vector], vectors in srvprof_common::SOFTIRQ_NAMES order.
pub fn softirq_counts() -> Vec<Vec<u64>> {
    let by_name = softirqs();
    let ncpus = by_name.values().map(Vec::len).max().unwrap_or(0);
    (0..ncpus)
        .map(|cpu| {
            srvprof_common::SOFTIRQ_NAMES
                .iter()
                .map(|v| {
                    by_name
                        .get(*v)
                        .and_then(|c| c.get(cpu))
                        .copied()
                        .unwrap_or(0)
                })
                .collect()
        })
        .collect()
}

/// TCP counters of the network namespace `pid` lives in (/proc/PID/net/netstat and snmp),
/// e.g. "TcpExt:ListenOverflows", "Tcp:RetransSegs".
pub fn parse_mib(text: &str) -> BTreeMap<String, u64> {
    let mut out = BTreeMap::new();
    let lines: Vec<&str> = text.lines().collect();
    for pair in lines.chunks(2) {
        let [names, values] = pair else { continue };
        let mut n = names.split_whitespace();
        let mut v = values.split_whitespace();
        let (Some(prefix), Some(_)) = (n.next(), v.next()) else {
            continue;
        };
        for (name, value) in n.zip(v) {
            if let Ok(value) = value.parse::<u64>() {
                out.insert(format!("{}{}", prefix, name), value);
            }
        }
    }
    out
}

/// The TCP sockets in `pid`'s network namespace's table, open and in TIME_WAIT (its
/// /proc/PID/net/sockstat `TCP: inuse N ... tw N`): what a walk of the table goes over. None
/// when it cannot be read.
pub fn tcp_sockets(pid: u32) -> Option<u64> {
    parse_tcp_sockets(&fs::read_to_string(format!("/proc/{pid}/net/sockstat")).ok()?)
}

fn parse_tcp_sockets(text: &str) -> Option<u64> {
    let line = text.lines().find(|l| l.starts_with("TCP:"))?;
    let words: Vec<&str> = line.split_whitespace().collect();
    let field = |name: &str| -> Option<u64> {
        let at = words.iter().position(|w| *w == name)?;
        words.get(at + 1)?.parse().ok()
    };
    Some(field("inuse")? + field("tw")?)
}

/// The TcpExt counters alone of `pid`'s network namespace (/proc/PID/net/netstat): half the
/// text of net_mib.
pub fn net_tcp_ext(pid: u32) -> BTreeMap<String, u64> {
    fs::read_to_string(format!("/proc/{pid}/net/netstat"))
        .map(|text| parse_mib(&text))
        .unwrap_or_default()
}

pub fn net_mib(pid: u32) -> BTreeMap<String, u64> {
    let mut out = BTreeMap::new();
    for file in ["netstat", "snmp"] {
        if let Ok(text) = fs::read_to_string(format!("/proc/{pid}/net/{file}")) {
            out.extend(parse_mib(&text));
        }
    }
    out
}

/// The ports connect() picks from when no port is asked for (net.ipv4.ip_local_port_range, which
/// IPv6 shares), as the first and last port.
pub fn ephemeral_port_range() -> Option<(u16, u16)> {
    let text = std::fs::read_to_string("/proc/sys/net/ipv4/ip_local_port_range").ok()?;
    let mut f = text.split_whitespace().map(|x| x.parse::<u16>().ok());
    Some((f.next()??, f.next()??))
}

/// The running kernel's release, as `uname -r` prints it (/proc/sys/kernel/osrelease).
pub fn kernel_release() -> String {
    fs::read_to_string("/proc/sys/kernel/osrelease")
        .map(|r| r.trim().to_string())
        .unwrap_or_default()
}

/// net.ipv4.tcp_tw_reuse (0, 1, or 2: loopback only, the default).
pub fn tcp_tw_reuse() -> Option<u8> {
    std::fs::read_to_string("/proc/sys/net/ipv4/tcp_tw_reuse")
        .ok()?
        .trim()
        .parse()
        .ok()
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn tcp_sockets_are_sockstats_open_and_time_wait_ones() {
        let text = "sockets: used 301\nTCP: inuse 12 orphan 0 tw 20000 alloc 14 mem 37\nUDP: inuse 2 mem 4\n";
        assert_eq!(parse_tcp_sockets(text), Some(20_012));
        assert_eq!(parse_tcp_sockets("sockets: used 3\n"), None);
    }

    #[test]
    fn softnet_processed_is_indexed_by_the_cpu_column_when_there_is_one() {
        let new = "1e975f75 0000372f 0000003a 00000000 00000000 00000000 00000000 00000000 00000000 00000000 00000000 00000000 00000000 00000000 00000000\n\
                   000000ff 00000000 00000000 00000000 00000000 00000000 00000000 00000000 00000000 00000000 00000000 00000000 00000003 00000000 00000000\n";
        assert_eq!(parse_softnet_processed(new), vec![0x1e975f75, 0, 0, 0xff]);
        let old = "00000010 00000000 00000000\n00000020 00000000 00000000\n";
        assert_eq!(parse_softnet_processed(old), vec![16, 32]);
        assert!(parse_softnet_processed("").is_empty());
    }

    #[test]
    fn softirqs_table() {
        let text = "                    CPU0       CPU1\n          HI:          1          0\n      NET_RX:        100        250\n";
        let s = parse_softirqs(text);
        assert_eq!(s["NET_RX"], vec![100, 250]);
        assert_eq!(s["HI"], vec![1, 0]);
    }

    #[test]
    fn interrupt_lines_take_the_handler_past_the_counts() {
        let text = "           CPU0       CPU1\n  0:         48          0   IO-APIC   2-edge      timer\n 24:          0        933  PCI-MSIX-0000:00:03.0   0-edge      virtio0-input.0\nNMI:          0          0   Non-maskable interrupts\n";
        let n = parse_interrupts(text);
        assert_eq!(n.len(), 2);
        assert_eq!((n[0].irq, n[0].name.as_str()), (0, "timer"));
        assert_eq!((n[1].irq, n[1].name.as_str()), (24, "virtio0-input.0"));
    }

    #[test]
    fn mib_pairs() {
        let text = "TcpExt: SyncookiesSent ListenOverflows ListenDrops\nTcpExt: 0 412 415\nIpExt: InNoRoutes\nIpExt: 3\n";
        let m = parse_mib(text);
        assert_eq!(m["TcpExt:ListenOverflows"], 412);
        assert_eq!(m["TcpExt:ListenDrops"], 415);
        assert_eq!(m["IpExt:InNoRoutes"], 3);
    }
}
