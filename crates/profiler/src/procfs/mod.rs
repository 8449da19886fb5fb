//! srvprof's one edge to /proc and /sys: every read of them is here, and the rest of srvprof
//! takes these types. This file: facts about processes and threads (alive, kernel thread, name,
//! threads, CPU time, read/write calls, sockets, cgroups); the kernel's counters and settings
//! are in counters.rs, a process's memory map in maps.rs, the control groups that limit its CPU
//! in cgroup.rs, the files srvprof opens through a process's view (its executable, its root,
//! its memory, perf maps) in files.rs.
//! Where tests check srvprof's figures against /proc they read it with their own code
//! (tests/support), so the truth does not share these parsers.

pub mod caps;
pub mod cgroup;
mod counters;
pub mod files;
pub mod maps;

pub use counters::*;

use std::fs;

use crate::error::SrvprofError;

/// Clock ticks per second for /proc/*/stat times.
pub fn clock_ticks_per_sec() -> u64 {
    // SAFETY: sysconf has no preconditions.
    let hz = unsafe { libc::sysconf(libc::_SC_CLK_TCK) };
    if hz > 0 { hz as u64 } else { 100 }
}

/// user and sys CPU time (ns) from a /proc/.../stat line.
#[derive(Clone, Copy, Debug, Default, PartialEq, Eq)]
pub struct CpuTime {
    pub user_ns: u64,
    pub sys_ns: u64,
}

/// The parent's pid from the text of /proc/PID/stat (field 4).
pub fn parse_stat_ppid(stat: &str) -> Option<u32> {
    stat_field(stat, 4)?.parse().ok()
}

/// Field `n` (1-based, as proc(5) numbers them) of /proc/PID/stat text, read past the "(comm)",
/// which may hold spaces and parentheses.
fn stat_field(stat: &str, n: usize) -> Option<&str> {
    stat[stat.rfind(')')? + 2..]
        .split_whitespace()
        .nth(n.checked_sub(3)?)
}

/// The major page faults (field 12, majflt) from the text of /proc/PID/stat.
pub fn parse_stat_major_faults(stat: &str) -> Option<u64> {
    stat_field(stat, 12)?.parse().ok()
}

/// utime and stime from /proc/PID/stat text (fields 14 and 15, after the "(comm)").
/// The command name in a stat line (field 2, in parentheses; it may hold spaces and
/// parentheses itself): the same as /proc/PID/task/TID/comm, without reading a second file.
pub fn parse_stat_comm(stat: &str) -> Option<String> {
    let (open, close) = (stat.find('(')?, stat.rfind(')')?);
    Some(stat.get(open + 1..close)?.to_string())
}

pub fn parse_stat_cpu_time(stat: &str, ticks_per_sec: u64) -> Option<CpuTime> {
    let after_comm = &stat[stat.rfind(')')? + 2..];
    let fields: Vec<&str> = after_comm.split_whitespace().collect();
    // after_comm starts at field 3 (state); utime is field 14, stime 15.
    let utime: u64 = fields.get(11)?.parse().ok()?;
    let stime: u64 = fields.get(12)?.parse().ok()?;
    let ns_per_tick = 1_000_000_000 / ticks_per_sec;
    Some(CpuTime {
        user_ns: utime * ns_per_tick,
        sys_ns: stime * ns_per_tick,
    })
}

/// A process's /proc/PID/stat text, empty when it is gone.
pub fn stat_text(pid: u32) -> String {
    fs::read_to_string(format!("/proc/{pid}/stat")).unwrap_or_default()
}

/// A thread's /proc/PID/task/TID/stat text, empty when it is gone.
pub fn thread_stat_text(pid: u32, tid: u32) -> String {
    fs::read_to_string(format!("/proc/{pid}/task/{tid}/stat")).unwrap_or_default()
}

/// Every process now and its parent: (pid, ppid).
pub fn parents() -> Vec<(u32, u32)> {
    (fs::read_dir("/proc").into_iter().flatten())
        .filter_map(|e| e.ok()?.file_name().to_str()?.parse::<u32>().ok())
        .filter_map(|pid| Some((pid, parse_stat_ppid(&stat_text(pid))?)))
        .collect()
}

/// What a process's descriptor refers to now (a path, `socket:[N]`...); None once closed.
pub fn fd_target(pid: u32, fd: i32) -> Option<String> {
    let link = fs::read_link(format!("/proc/{pid}/fd/{fd}")).ok()?;
    Some(link.to_string_lossy().into_owned())
}

/// A file of /proc/PID/net (`tcp`, `tcp6`...): the process's network namespace's; empty when
/// the process is gone.
pub fn net_file(pid: u32, file: &str) -> String {
    fs::read_to_string(format!("/proc/{pid}/net/{file}")).unwrap_or_default()
}

/// srvprof's own mount table (/proc/self/mountinfo), empty if unreadable.
pub fn own_mountinfo() -> String {
    fs::read_to_string("/proc/self/mountinfo").unwrap_or_default()
}

/// The cgroups a process is in (/proc/PID/cgroup); None when it is gone.
pub fn cgroups_of(pid: u32) -> Option<String> {
    fs::read_to_string(format!("/proc/{pid}/cgroup")).ok()
}

/// A process's CPU time (all its threads, live and exited).
pub fn process_cpu_time(pid: u32) -> Option<CpuTime> {
    let stat = fs::read_to_string(format!("/proc/{pid}/stat")).ok()?;
    parse_stat_cpu_time(&stat, clock_ticks_per_sec())
}

/// A thread's time on a CPU so far (ns): the first field of /proc/PID/task/TID/schedstat, the
/// scheduler's sum_exec_runtime (brought up to date at every tick and switch).
pub fn thread_oncpu_ns(pid: u32, tid: u32) -> Option<u64> {
    fs::read_to_string(format!("/proc/{pid}/task/{tid}/schedstat"))
        .ok()?
        .split_whitespace()
        .next()?
        .parse()
        .ok()
}

/// A process's read- and write-type syscalls so far, all its threads', those that ended
/// included (/proc/PID/io: syscr + syscw, the kernel's exact count of read, readv, pread, write,
/// writev, pwrite, sendfile and their kin; recvfrom, sendto, recvmsg and sendmsg are not among
/// them).
pub fn process_io_calls(pid: u32) -> Option<u64> {
    parse_io_calls(&fs::read_to_string(format!("/proc/{pid}/io")).ok()?)
}

fn parse_io_calls(io: &str) -> Option<u64> {
    let field = |name: &str| -> Option<u64> {
        io.lines()
            .find_map(|l| l.strip_prefix(name)?.trim().parse().ok())
    };
    Some(field("syscr:")? + field("syscw:")?)
}

/// The thread ids of a process.
pub fn thread_ids(pid: u32) -> Vec<u32> {
    let Ok(dir) = fs::read_dir(format!("/proc/{pid}/task")) else {
        return Vec::new();
    };
    let mut tids: Vec<u32> = dir
        .filter_map(|e| e.ok()?.file_name().to_str()?.parse().ok())
        .collect();
    tids.sort_unstable();
    tids
}

/// Each live thread of a process: (tid, name, time on a CPU so far in ns).
pub fn threads_oncpu(pid: u32) -> Vec<(u32, String, u64)> {
    thread_ids(pid)
        .into_iter()
        .filter_map(|tid| Some((tid, comm(pid, tid)?, thread_oncpu_ns(pid, tid)?)))
        .collect()
}

pub fn process_exists(pid: u32) -> bool {
    fs::metadata(format!("/proc/{pid}")).is_ok()
}

/// Exists and is not a zombie waiting to be reaped (a dead server whose parent has not waited yet).
pub fn process_alive(pid: u32) -> bool {
    let Ok(stat) = fs::read_to_string(format!("/proc/{pid}/stat")) else {
        return false;
    };
    let state = stat.rfind(')').and_then(|i| stat[i + 2..].chars().next());
    !matches!(state, Some('Z') | Some('X') | None)
}

/// A kernel thread has no memory map: /proc/PID/cmdline is empty and it is a child of kthreadd.
pub fn is_kernel_thread(pid: u32) -> bool {
    let Ok(stat) = fs::read_to_string(format!("/proc/{pid}/stat")) else {
        return false;
    };
    let Some(after_comm) = stat.rfind(')').map(|i| &stat[i + 2..]) else {
        return false;
    };
    // field 9 (flags), PF_KTHREAD = 0x00200000
    let flags: u64 = after_comm
        .split_whitespace()
        .nth(6)
        .and_then(|f| f.parse().ok())
        .unwrap_or(0);
    flags & 0x0020_0000 != 0
}

pub fn comm(pid: u32, tid: u32) -> Option<String> {
    fs::read_to_string(format!("/proc/{pid}/task/{tid}/comm"))
        .ok()
        .map(|s| s.trim_end().to_string())
}

/// The sockets a process holds open: (file descriptor, inode) from /proc/PID/fd links
/// `socket:[N]`.
pub fn socket_fds(pid: u32) -> Vec<(u32, u64)> {
    std::fs::read_dir(format!("/proc/{pid}/fd"))
        .into_iter()
        .flatten()
        .filter_map(|e| {
            let e = e.ok()?;
            let fd = e.file_name().to_str()?.parse().ok()?;
            let link = std::fs::read_link(e.path()).ok()?;
            let link = link.to_str()?;
            let inode = link
                .strip_prefix("socket:[")?
                .strip_suffix(']')?
                .parse()
                .ok()?;
            Some((fd, inode))
        })
        .collect()
}

/// Validates a target PID: it exists and is a user-space process.
pub fn check_target(pid: u32) -> Result<(), SrvprofError> {
    if !process_exists(pid) {
        return Err(SrvprofError::NoSuchPid(pid));
    }
    if is_kernel_thread(pid) {
        return Err(SrvprofError::KernelThread(pid));
    }
    Ok(())
}

/// Whether we may load and attach BPF programs: the capabilities in effect, not the uid (root in
/// a container may have dropped them).
pub fn has_bpf_privileges() -> bool {
    caps::Caps::of_self().missing_for_probes().is_empty()
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn the_parent_is_read_past_a_name_with_spaces_and_parentheses() {
        let stat = "42 (a (b) c) S 7 42 42 0 -1 4194560 100 0 0 0 5 3 0 0 20 0 1 0 9";
        assert_eq!(parse_stat_ppid(stat), Some(7));
        assert_eq!(parse_stat_ppid("garbage"), None);
        assert_eq!(parse_stat_comm(stat).as_deref(), Some("a (b) c"));
        assert_eq!(parse_stat_comm("garbage"), None);
    }

    #[test]
    fn major_faults_are_field_12() {
        // minflt 100, cminflt 1, majflt 7, cmajflt 2, utime 5.
        let stat = "42 (a (b) c) S 7 42 42 0 -1 4194560 100 1 7 2 5 3 0 0 20 0 1 0 9";
        assert_eq!(parse_stat_major_faults(stat), Some(7));
        let here = fs::read_to_string("/proc/self/stat").unwrap();
        assert!(parse_stat_major_faults(&here).is_some());
    }

    #[test]
    fn io_calls_are_reads_plus_writes() {
        let io = "rchar: 4096\nwchar: 12\nsyscr: 7\nsyscw: 3\nread_bytes: 0\nwrite_bytes: 0\ncancelled_write_bytes: 0\n";
        assert_eq!(parse_io_calls(io), Some(10));
        assert_eq!(parse_io_calls("rchar: 1\n"), None);
    }

    #[test]
    fn stat_times_survive_a_comm_with_spaces_and_parens() {
        let stat =
            "1234 (my (odd) proc) S 1 1234 1234 0 -1 4194560 100 0 0 0 250 75 0 0 20 0 3 0 100 0 0";
        let t = parse_stat_cpu_time(stat, 100).unwrap();
        assert_eq!(t.user_ns, 2_500_000_000);
        assert_eq!(t.sys_ns, 750_000_000);
    }
}
