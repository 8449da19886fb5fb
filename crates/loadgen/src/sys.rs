//! The few OS calls the generator needs: open-file limit, CPU pinning, CPU time, monotonic clock.

use std::time::Duration;

use crate::LoadError;

/// File descriptors the process uses besides one per connection (runtime, stdio, test servers).
pub const FD_OVERHEAD: u64 = 64;

/// Raise the soft open-file limit to the hard limit, then refuse `connections` that cannot fit.
pub fn ensure_fd_limit(connections: usize) -> Result<(), LoadError> {
    let needed = (connections as u64).saturating_add(FD_OVERHEAD);
    let mut lim = libc::rlimit {
        rlim_cur: 0,
        rlim_max: 0,
    };
    // SAFETY: getrlimit writes into the struct we own.
    if unsafe { libc::getrlimit(libc::RLIMIT_NOFILE, &mut lim) } != 0 {
        return Ok(()); // Cannot know; let connect errors speak.
    }
    if lim.rlim_cur < lim.rlim_max {
        let raised = libc::rlimit {
            rlim_cur: lim.rlim_max,
            rlim_max: lim.rlim_max,
        };
        // SAFETY: setrlimit only reads the struct.
        if unsafe { libc::setrlimit(libc::RLIMIT_NOFILE, &raised) } == 0 {
            lim.rlim_cur = lim.rlim_max;
        }
    }
    let limit = lim.rlim_cur;
    if needed > limit {
        return Err(LoadError::FdLimit {
            connections,
            needed,
            limit,
            hard_limit: lim.rlim_max,
        });
    }
    Ok(())
}

/// Pin the calling thread to one CPU. Errors are returned so the caller can say which CPU failed.
pub fn pin_current_thread(cpu: usize) -> std::io::Result<()> {
    pin_current_thread_to(&[cpu])
}

/// Restrict the calling thread, and the threads it starts from then on, to `cpus`.
pub fn pin_current_thread_to(cpus: &[usize]) -> std::io::Result<()> {
    // SAFETY: cpu_set_t is plain data; CPU_SET is given indexes checked against its size.
    unsafe {
        let mut set: libc::cpu_set_t = std::mem::zeroed();
        for &cpu in cpus {
            if cpu >= libc::CPU_SETSIZE as usize {
                return Err(std::io::Error::from_raw_os_error(libc::EINVAL));
            }
            libc::CPU_SET(cpu, &mut set);
        }
        if libc::sched_setaffinity(0, std::mem::size_of::<libc::cpu_set_t>(), &set) != 0 {
            return Err(std::io::Error::last_os_error());
        }
    }
    Ok(())
}

/// CPUs this process may run on (its affinity mask, e.g. as set by taskset).
pub fn allowed_cpus() -> Vec<usize> {
    // SAFETY: cpu_set_t is plain data; sched_getaffinity fills it.
    unsafe {
        let mut set: libc::cpu_set_t = std::mem::zeroed();
        if libc::sched_getaffinity(0, std::mem::size_of::<libc::cpu_set_t>(), &mut set) != 0 {
            return Vec::new();
        }
        (0..libc::CPU_SETSIZE as usize)
            .filter(|&cpu| libc::CPU_ISSET(cpu, &set))
            .collect()
    }
}

/// User and system CPU time of the calling thread, and its context switches (the kernel's own
/// counts: voluntary, a sleep; involuntary, preempted).
#[derive(Clone, Copy, Debug, Default, PartialEq, Eq)]
pub struct CpuTime {
    pub user: Duration,
    pub sys: Duration,
    pub voluntary_switches: u64,
    pub involuntary_switches: u64,
}

impl CpuTime {
    pub fn of_current_thread() -> CpuTime {
        // SAFETY: getrusage writes into the struct we own.
        let mut ru: libc::rusage = unsafe { std::mem::zeroed() };
        if unsafe { libc::getrusage(libc::RUSAGE_THREAD, &mut ru) } != 0 {
            return CpuTime::default();
        }
        let tv = |t: libc::timeval| {
            Duration::from_secs(t.tv_sec as u64) + Duration::from_micros(t.tv_usec as u64)
        };
        CpuTime {
            user: tv(ru.ru_utime),
            sys: tv(ru.ru_stime),
            voluntary_switches: ru.ru_nvcsw as u64,
            involuntary_switches: ru.ru_nivcsw as u64,
        }
    }

    pub fn since(self, earlier: CpuTime) -> CpuTime {
        CpuTime {
            user: self.user.saturating_sub(earlier.user),
            sys: self.sys.saturating_sub(earlier.sys),
            voluntary_switches: (self.voluntary_switches)
                .saturating_sub(earlier.voluntary_switches),
            involuntary_switches: (self.involuntary_switches)
                .saturating_sub(earlier.involuntary_switches),
        }
    }
}

/// CLOCK_MONOTONIC now, in ns: the clock `std::time::Instant` and `bpf_ktime_get_ns` both read.
pub fn monotonic_ns() -> u64 {
    let mut ts = libc::timespec {
        tv_sec: 0,
        tv_nsec: 0,
    };
    // SAFETY: clock_gettime writes into the struct we own.
    unsafe { libc::clock_gettime(libc::CLOCK_MONOTONIC, &mut ts) };
    ts.tv_sec as u64 * 1_000_000_000 + ts.tv_nsec as u64
}

/// CPUs this process may run on (respects taskset).
pub fn available_cpus() -> usize {
    std::thread::available_parallelism()
        .map(|n| n.get())
        .unwrap_or(1)
}

/// Start a non-blocking TCP connect: one `socket` and one `connect` call, nothing else (no
/// SO_ERROR check, no socket options). `EINPROGRESS` is not an error: the caller learns how the
/// connect went from its first send, or from writability and SO_ERROR when that would block.
pub(crate) fn start_connect(addr: &std::net::SocketAddr) -> std::io::Result<std::net::TcpStream> {
    use std::os::fd::FromRawFd;
    let domain = match addr {
        std::net::SocketAddr::V4(_) => libc::AF_INET,
        std::net::SocketAddr::V6(_) => libc::AF_INET6,
    };
    // SAFETY: plain socket(2); the descriptor is owned by the TcpStream right after.
    let fd = unsafe {
        libc::socket(
            domain,
            libc::SOCK_STREAM | libc::SOCK_NONBLOCK | libc::SOCK_CLOEXEC,
            libc::IPPROTO_TCP,
        )
    };
    if fd < 0 {
        return Err(std::io::Error::last_os_error());
    }
    // SAFETY: fd is a fresh socket nobody else owns; the stream closes it on drop.
    let stream = unsafe { std::net::TcpStream::from_raw_fd(fd) };
    let (storage, len) = sockaddr_of(addr);
    // SAFETY: storage holds a sockaddr_in/sockaddr_in6 of `len` bytes.
    let rc = unsafe { libc::connect(fd, (&raw const storage).cast::<libc::sockaddr>(), len) };
    if rc != 0 {
        let err = std::io::Error::last_os_error();
        if err.raw_os_error() != Some(libc::EINPROGRESS) {
            return Err(err);
        }
    }
    Ok(stream)
}

/// `send` with MSG_NOSIGNAL (a reset peer is an error to count, never a SIGPIPE).
pub(crate) fn send_nosignal(stream: &std::net::TcpStream, bytes: &[u8]) -> std::io::Result<usize> {
    use std::os::fd::AsRawFd;
    // SAFETY: bytes is a valid slice for the whole call.
    let n = unsafe {
        libc::send(
            stream.as_raw_fd(),
            bytes.as_ptr().cast(),
            bytes.len(),
            libc::MSG_NOSIGNAL,
        )
    };
    if n < 0 {
        Err(std::io::Error::last_os_error())
    } else {
        Ok(n as usize)
    }
}

fn sockaddr_of(addr: &std::net::SocketAddr) -> (libc::sockaddr_storage, libc::socklen_t) {
    // SAFETY: sockaddr_storage is plain data, valid when zeroed.
    let mut storage: libc::sockaddr_storage = unsafe { std::mem::zeroed() };
    let len = match addr {
        std::net::SocketAddr::V4(a) => {
            let sin = libc::sockaddr_in {
                sin_family: libc::AF_INET as libc::sa_family_t,
                sin_port: a.port().to_be(),
                sin_addr: libc::in_addr {
                    s_addr: u32::from_ne_bytes(a.ip().octets()),
                },
                sin_zero: [0; 8],
            };
            // SAFETY: sockaddr_storage is larger than and aligned for sockaddr_in.
            unsafe { std::ptr::write((&raw mut storage).cast::<libc::sockaddr_in>(), sin) };
            std::mem::size_of::<libc::sockaddr_in>()
        }
        std::net::SocketAddr::V6(a) => {
            let sin6 = libc::sockaddr_in6 {
                sin6_family: libc::AF_INET6 as libc::sa_family_t,
                sin6_port: a.port().to_be(),
                sin6_flowinfo: a.flowinfo(),
                sin6_addr: libc::in6_addr {
                    s6_addr: a.ip().octets(),
                },
                sin6_scope_id: a.scope_id(),
            };
            // SAFETY: sockaddr_storage is larger than and aligned for sockaddr_in6.
            unsafe { std::ptr::write((&raw mut storage).cast::<libc::sockaddr_in6>(), sin6) };
            std::mem::size_of::<libc::sockaddr_in6>()
        }
    };
    (storage, len as libc::socklen_t)
}
