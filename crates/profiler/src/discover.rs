//! Finding what to profile: a server's whole process tree, the address it listens on, or a
//! server started from `--cmd` and stopped afterwards.

use std::collections::BTreeSet;
use std::net::{Ipv4Addr, Ipv6Addr, SocketAddr};
use std::os::unix::process::CommandExt;
use std::process::{Child, Command, Stdio};
use std::time::{Duration, Instant};

use crate::error::SrvprofError;
use crate::procfs;

/// Keeps the PIDs that can be watched; says why the others cannot.
pub fn live_targets(pids: &[u32], notes: &mut Vec<String>) -> Result<Vec<u32>, SrvprofError> {
    if pids.is_empty() {
        return Err(SrvprofError::NoPids);
    }
    let mut live = Vec::new();
    for &pid in pids {
        match procfs::check_target(pid) {
            Ok(()) => live.push(pid),
            Err(SrvprofError::NoSuchPid(_)) if pids.len() > 1 => {
                notes.push(format!("PID {pid} does not exist; watching the other PIDs"));
            }
            Err(e) => return Err(e),
        }
    }
    if live.is_empty() {
        let list = pids
            .iter()
            .map(|p| p.to_string())
            .collect::<Vec<_>>()
            .join(", ");
        return Err(SrvprofError::NoLivePids(list));
    }
    live.sort_unstable();
    live.dedup();
    Ok(live)
}

/// The given processes and every descendant alive now (nginx master -> workers).
pub fn with_descendants(pids: &[u32]) -> Vec<u32> {
    let mut set: BTreeSet<u32> = pids.iter().copied().collect();
    let parents = crate::procfs::parents();
    loop {
        let before = set.len();
        for (pid, ppid) in &parents {
            if set.contains(ppid) {
                set.insert(*pid);
            }
        }
        if set.len() == before {
            break;
        }
    }
    set.into_iter().collect()
}

/// Listening sockets in /proc/net/tcp or tcp6 text: (address, inode).
pub fn parse_listeners(text: &str, v6: bool) -> Vec<(SocketAddr, u64)> {
    let mut out = Vec::new();
    for line in text.lines().skip(1) {
        let f: Vec<&str> = line.split_whitespace().collect();
        if f.len() < 10 || f[3] != "0A" {
            continue;
        }
        let Some((addr_hex, port_hex)) = f[1].split_once(':') else {
            continue;
        };
        let Ok(port) = u16::from_str_radix(port_hex, 16) else {
            continue;
        };
        let Ok(inode) = f[9].parse::<u64>() else {
            continue;
        };
        let ip = if v6 {
            // Four little-endian 32-bit words.
            let mut bytes = [0u8; 16];
            for (i, word) in (0..4)
                .filter_map(|i| addr_hex.get(i * 8..i * 8 + 8))
                .enumerate()
            {
                let Ok(w) = u32::from_str_radix(word, 16) else {
                    continue;
                };
                bytes[i * 4..i * 4 + 4].copy_from_slice(&w.to_le_bytes());
            }
            std::net::IpAddr::V6(Ipv6Addr::from(bytes))
        } else {
            let Ok(w) = u32::from_str_radix(addr_hex, 16) else {
                continue;
            };
            std::net::IpAddr::V4(Ipv4Addr::from(w.to_le_bytes()))
        };
        out.push((SocketAddr::new(ip, port), inode));
    }
    out
}

/// TCP addresses the processes listen on, sorted by port.
pub fn listening_addrs(pids: &[u32]) -> Vec<SocketAddr> {
    let mut addrs = BTreeSet::new();
    for &pid in pids {
        let inodes: BTreeSet<u64> = (crate::procfs::socket_fds(pid).into_iter())
            .map(|(_, inode)| inode)
            .collect();
        if inodes.is_empty() {
            continue;
        }
        for (file, v6) in [("tcp", false), ("tcp6", true)] {
            let text = crate::procfs::net_file(pid, file);
            for (addr, inode) in parse_listeners(&text, v6) {
                if inodes.contains(&inode) {
                    addrs.insert((addr.port(), addr));
                }
            }
        }
    }
    addrs.into_iter().map(|(_, a)| a).collect()
}

/// The URL to load: the listening address, a wildcard turned into loopback.
pub fn url_for(addr: SocketAddr) -> String {
    match addr {
        SocketAddr::V4(a) if a.ip().is_unspecified() => format!("http://127.0.0.1:{}/", a.port()),
        SocketAddr::V6(a) if a.ip().is_unspecified() => format!("http://127.0.0.1:{}/", a.port()),
        SocketAddr::V6(a) if a.ip().to_ipv4_mapped().is_some() => {
            format!(
                "http://{}:{}/",
                a.ip().to_ipv4_mapped().expect("mapped"),
                a.port()
            )
        }
        SocketAddr::V6(a) => format!("http://[{}]:{}/", a.ip(), a.port()),
        SocketAddr::V4(a) => format!("http://{}:{}/", a.ip(), a.port()),
    }
}

/// Chooses the URL among the targets' listening sockets, saying which when there are several.
pub fn discover_url(pids: &[u32], notes: &mut Vec<String>) -> Result<String, SrvprofError> {
    let addrs = listening_addrs(pids);
    let mut ports: Vec<u16> = addrs.iter().map(|a| a.port()).collect();
    ports.dedup();
    let Some(first) = addrs.first() else {
        return Err(SrvprofError::Usage(format!(
            "none of the target processes ({}) listens on a TCP port; pass the address to load with --url",
            pids.iter()
                .map(|p| p.to_string())
                .collect::<Vec<_>>()
                .join(", ")
        )));
    };
    let url = url_for(*first);
    if ports.len() > 1 {
        notes.push(format!(
            "the targets listen on ports {}; using {url} (pick another with --url)",
            ports
                .iter()
                .map(|p| p.to_string())
                .collect::<Vec<_>>()
                .join(", ")
        ));
    }
    Ok(url)
}

/// The port an http(s) URL's connections go to: its own, or its scheme's.
pub fn url_port(url: &str) -> Option<u16> {
    srvprof_loadgen::http_url::HttpUrl::parse(url)
        .ok()
        .map(|u| u.port)
}

/// A server srvprof started with `--cmd`, in its own process group, stopped on drop.
pub struct ServerProcess {
    child: Child,
    pub pid: u32,
}

impl ServerProcess {
    /// Starts `sh -c cmd` (as `user`, when given) and waits until it (or a child) listens on a
    /// TCP port.
    pub fn start(
        cmd: &str,
        user: Option<&crate::privilege::Account>,
        timeout: Duration,
    ) -> Result<Self, SrvprofError> {
        let mut command = Command::new("sh");
        command
            .args(["-c", &format!("exec {cmd}")])
            .stdin(Stdio::null());
        if let Some(user) = user {
            // std drops root's supplementary groups with the uid.
            command.uid(user.uid).gid(user.gid);
            for (var, value) in [
                ("HOME", &user.home),
                ("USER", &user.name),
                ("LOGNAME", &user.name),
            ] {
                if let Some(value) = value {
                    command.env(var, value);
                }
            }
        }
        // SAFETY: setsid is async-signal-safe; a group of its own lets us stop every process it starts.
        unsafe {
            command.pre_exec(|| {
                libc::setsid();
                Ok(())
            });
        }
        let child = command.spawn().map_err(|e| {
            SrvprofError::Usage(format!(
                "could not start --cmd \"{cmd}\": {e}; check the command"
            ))
        })?;
        let pid = child.id();
        let mut server = Self { child, pid };
        let deadline = Instant::now() + timeout;
        loop {
            if let Ok(Some(status)) = server.child.try_wait() {
                return Err(SrvprofError::Usage(format!(
                    "the --cmd server exited ({status}) before it listened on a port; run the command by hand to see why"
                )));
            }
            if !listening_addrs(&with_descendants(&[pid])).is_empty() {
                return Ok(server);
            }
            if Instant::now() > deadline {
                return Err(SrvprofError::Usage(format!(
                    "the --cmd server did not listen on any TCP port within {} s; check the command, or start it yourself and pass --pid",
                    timeout.as_secs()
                )));
            }
            std::thread::sleep(Duration::from_millis(100));
        }
    }

    /// SIGTERM to the whole group, SIGKILL after 5 s.
    pub fn stop(&mut self) {
        let group = -(self.pid as i32);
        // SAFETY: signalling the process group we created.
        unsafe { libc::kill(group, libc::SIGTERM) };
        let deadline = Instant::now() + Duration::from_secs(5);
        while Instant::now() < deadline {
            if let Ok(Some(_)) = self.child.try_wait()
                && !procfs::process_alive(self.pid)
            {
                // Members of the group may outlive the leader (nginx workers): make sure.
                unsafe { libc::kill(group, libc::SIGKILL) };
                return;
            }
            std::thread::sleep(Duration::from_millis(50));
        }
        unsafe { libc::kill(group, libc::SIGKILL) };
        let _ = self.child.wait();
    }
}

impl Drop for ServerProcess {
    fn drop(&mut self) {
        self.stop();
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn listeners_from_proc_net_tcp() {
        let text = "  sl  local_address rem_address   st tx_queue rx_queue tr tm->when retrnsmt   uid  timeout inode\n   0: 0100007F:1F90 00000000:0000 0A 00000000:00000000 00:00000000 00000000     0        0 12345 1 0000000000000000 100 0 0 10 0\n   1: 0100007F:1F90 0100007F:C350 01 00000000:00000000 00:00000000 00000000     0        0 999 1 0000000000000000 100 0 0 10 0\n";
        let l = parse_listeners(text, false);
        assert_eq!(l, vec![("127.0.0.1:8080".parse().unwrap(), 12345)]);
        let text6 = "  sl  local_address                         remote_address                        st tx_queue rx_queue tr tm->when retrnsmt   uid  timeout inode\n   0: 00000000000000000000000000000000:0050 00000000000000000000000000000000:0000 0A 00000000:00000000 00:00000000 00000000     0        0 777 1 0000000000000000 100 0 0 10 0\n";
        let l = parse_listeners(text6, true);
        assert_eq!(l, vec![("[::]:80".parse().unwrap(), 777)]);
        assert_eq!(url_for(l[0].0), "http://127.0.0.1:80/");
    }

    #[test]
    fn ports_of_urls() {
        assert_eq!(url_port("http://127.0.0.1:8080/x"), Some(8080));
        assert_eq!(url_port("http://[::1]:9000/"), Some(9000));
        assert_eq!(url_port("http://localhost/"), Some(80));
        assert_eq!(url_port("https://user:pw@localhost/"), Some(443));
        assert_eq!(url_port("http://localhost:99999/"), None);
    }

    #[test]
    fn finds_its_own_listener_and_descendants() {
        let l = std::net::TcpListener::bind("127.0.0.1:0").unwrap();
        let port = l.local_addr().unwrap().port();
        let me = std::process::id();
        assert!(listening_addrs(&[me]).iter().any(|a| a.port() == port));
        let mut child = Command::new("sleep").arg("5").spawn().unwrap();
        assert!(with_descendants(&[me]).contains(&child.id()));
        child.kill().unwrap();
        child.wait().unwrap();
    }
}
