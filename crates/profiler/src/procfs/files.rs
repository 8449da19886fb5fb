//! The files srvprof opens through a process's own view: its executable, a path in its mount
//! namespace (a container's root), a mapping's file and its memory, and a JIT's perf map; and
//! the kernel's own ELF notes.

use std::fs::File;
use std::path::{Path, PathBuf};

/// The process's executable (/proc/PID/exe: readable while it runs, even once replaced on disk).
pub fn exe(pid: u32) -> PathBuf {
    PathBuf::from(format!("/proc/{pid}/exe"))
}

/// The path the process's executable was started from.
pub fn exe_path(pid: u32) -> Option<PathBuf> {
    std::fs::read_link(exe(pid)).ok()
}

/// `path` as the process sees it, through its root (a container's file, not the host's).
pub fn in_root(pid: u32, path: &str) -> PathBuf {
    PathBuf::from(format!("/proc/{pid}/root{path}"))
}

/// The file a mapping maps, by the mapping's own link (the file even once deleted or replaced
/// on disk), else by its path through the process's root.
pub fn mapped_file(pid: u32, start: u64, end: u64, path: &str) -> Option<File> {
    File::open(format!("/proc/{pid}/map_files/{start:x}-{end:x}"))
        .or_else(|_| File::open(in_root(pid, path)))
        .ok()
}

/// The process's memory from `start` to `end`.
pub fn memory(pid: u32, start: u64, end: u64) -> Option<Vec<u8>> {
    use std::os::unix::fs::FileExt;
    let mem = File::open(format!("/proc/{pid}/mem")).ok()?;
    let mut buf = vec![0u8; end.checked_sub(start)? as usize];
    mem.read_exact_at(&mut buf, start).ok()?;
    Some(buf)
}

/// The process's pid in its own pid namespace (the last NSpid of /proc/PID/status).
pub fn ns_pid(pid: u32) -> Option<u32> {
    let status = std::fs::read_to_string(format!("/proc/{pid}/status")).ok()?;
    parse_ns_pid(&status)
}

fn parse_ns_pid(status: &str) -> Option<u32> {
    status
        .lines()
        .find_map(|l| l.strip_prefix("NSpid:"))?
        .split_whitespace()
        .last()?
        .parse()
        .ok()
}

/// The perf map a JIT writes for the process (`/tmp/perf-NSPID.map` in its own root, else the
/// host's `/tmp/perf-PID.map`).
pub fn perf_map_text(pid: u32) -> Option<String> {
    let nspid = ns_pid(pid).unwrap_or(pid);
    std::fs::read_to_string(in_root(pid, &format!("/tmp/perf-{nspid}.map")))
        .or_else(|_| std::fs::read_to_string(format!("/tmp/perf-{pid}.map")))
        .ok()
}

/// The running kernel's ELF notes (its build-id among them).
pub fn kernel_notes() -> Option<Vec<u8>> {
    std::fs::read("/sys/kernel/notes").ok()
}

/// The kernel's BTF, which srvprof's programs and offsets are resolved against.
pub const VMLINUX_BTF: &str = "/sys/kernel/btf/vmlinux";

/// Whether the kernel has BTF (CONFIG_DEBUG_INFO_BTF).
pub fn has_kernel_btf() -> bool {
    Path::new(VMLINUX_BTF).exists()
}

/// The network namespace of `pid` (its /proc/PID/ns/net, open), when it is not srvprof's own;
/// None when it is, or when it cannot be read.
pub fn other_net_namespace(pid: u32) -> Option<File> {
    let theirs = std::fs::read_link(format!("/proc/{pid}/ns/net")).ok()?;
    let ours = std::fs::read_link("/proc/self/ns/net").ok()?;
    (theirs != ours)
        .then(|| File::open(format!("/proc/{pid}/ns/net")).ok())
        .flatten()
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn the_innermost_namespace_pid_is_the_last() {
        assert_eq!(
            parse_ns_pid("Name:\tx\nNSpid:\t4242\t7\nVmRSS: 1 kB\n"),
            Some(7)
        );
        assert_eq!(parse_ns_pid("NSpid:\t4242\n"), Some(4242));
        assert_eq!(parse_ns_pid("Name:\tx\n"), None);
    }

    #[test]
    fn this_process_is_seen_through_its_own_view() {
        let me = std::process::id();
        assert_eq!(exe_path(me), std::env::current_exe().ok());
        let text = std::fs::read_to_string(in_root(me, "/proc/self/comm"));
        assert!(text.is_ok());
    }
}
