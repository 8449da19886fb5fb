//! The watched processes' uninterruptible sleeps in a window, by syscall and file: where a thread
//! waited for the disk (or a page fault's read, or a kernel lock) instead of serving.

use serde::{Deserialize, Serialize};
use std::collections::BTreeMap;

use super::PAGE_FAULT;
use crate::names::syscall_name;
use crate::record::Reading;

/// One process's uninterruptible sleeps in one syscall on one file, in a span.
#[derive(Clone, Debug, Default, PartialEq, Serialize, Deserialize)]
pub struct DiskWaitReport {
    pub pid: u32,
    /// The syscall's name, or "page fault" when the sleep was not in a syscall.
    pub syscall: String,
    /// The file the syscall was given ("" when it takes none or was closed before it was read).
    pub fd: i32,
    pub file: String,
    pub waits: u64,
    pub wait_ns: u64,
}

/// The disk waits kept in a report, longest first.
pub const TOP_DISK_WAITS: usize = 10;

/// Syscalls whose fd argument (sendfile's source) names the file they waited on.
const FD_SYSCALLS: &[&str] = &[
    "read",
    "pread64",
    "readv",
    "preadv",
    "preadv2",
    "write",
    "pwrite64",
    "writev",
    "pwritev",
    "pwritev2",
    "sendfile",
    "fsync",
    "fdatasync",
    "sync_file_range",
    "fallocate",
    "ftruncate",
    "getdents64",
    "copy_file_range",
    "splice",
];

/// `group`'s uninterruptible sleeps between `start` and `end`, longest first.
pub fn disk_wait_deltas(start: &Reading, end: &Reading, group: u32) -> Vec<DiskWaitReport> {
    type Key = (u32, u32, i32);
    let mine = |s: &Reading| -> BTreeMap<Key, (u64, u64, String)> {
        s.kernel
            .disk_waits
            .iter()
            .filter(|d| d.group == group)
            .map(|d| {
                (
                    (d.pid, d.nr_slot, d.fd),
                    (d.count, d.total_ns, d.path.clone()),
                )
            })
            .collect()
    };
    let before = mine(start);
    let out: Vec<DiskWaitReport> = mine(end)
        .into_iter()
        .filter_map(|((pid, nr_slot, fd), (count, ns, path))| {
            let (c0, ns0, path0) = before.get(&(pid, nr_slot, fd)).cloned().unwrap_or_default();
            let waits = count.saturating_sub(c0);
            let syscall = match nr_slot {
                0 => PAGE_FAULT.to_string(),
                n => syscall_name(n - 1),
            };
            let names_file = FD_SYSCALLS.contains(&syscall.as_str());
            let file = if !names_file {
                String::new()
            } else if path.is_empty() {
                path0
            } else {
                path
            };
            (waits > 0).then(|| DiskWaitReport {
                pid,
                fd: if names_file { fd } else { -1 },
                syscall,
                file,
                waits,
                wait_ns: ns.saturating_sub(ns0),
            })
        })
        .collect();
    // One file read through several descriptors (one per request, say) is one line.
    let mut merged: Vec<DiskWaitReport> = Vec::new();
    for d in out {
        let same = |m: &DiskWaitReport| {
            m.pid == d.pid && m.syscall == d.syscall && !d.file.is_empty() && m.file == d.file
        };
        match merged.iter_mut().find(|m| same(m)) {
            Some(m) => {
                m.waits += d.waits;
                m.wait_ns += d.wait_ns;
            }
            None => merged.push(d),
        }
    }
    let mut out = merged;
    out.sort_by(|a, b| b.wait_ns.cmp(&a.wait_ns).then(a.pid.cmp(&b.pid)));
    out.truncate(TOP_DISK_WAITS);
    out
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::record::DiskWait;

    fn wait(nr: Option<u32>, fd: i32, path: &str, count: u64, ms: u64) -> DiskWait {
        DiskWait {
            pid: 7,
            group: 0,
            nr_slot: nr.map(|n| n + 1).unwrap_or(0),
            fd,
            path: path.into(),
            count,
            total_ns: ms * 1_000_000,
        }
    }

    fn at(waits: Vec<DiskWait>) -> Reading {
        let mut s = Reading::default();
        s.kernel.disk_waits = waits;
        s
    }

    #[test]
    fn waits_are_the_windows_growth_named_by_syscall_and_file() {
        let sendfile = 40;
        let openat = 257;
        let start = at(vec![wait(Some(sendfile), 9, "/srv/big", 10, 100)]);
        let end = at(vec![
            // Closed before the end's reading: the start's name stays.
            wait(Some(sendfile), 9, "", 50, 900),
            // The same file through another descriptor: the same line.
            wait(Some(sendfile), 11, "/srv/big", 5, 50),
            wait(None, -1, "", 5, 20),
            // openat's first argument is a directory fd, not the file it waited on.
            wait(Some(openat), -100, "/proc/7/cwd", 3, 30),
        ]);
        let r = disk_wait_deltas(&start, &end, 0);
        assert_eq!(r.len(), 3);
        assert_eq!(
            (
                r[0].syscall.as_str(),
                r[0].file.as_str(),
                r[0].waits,
                r[0].wait_ns
            ),
            ("sendfile", "/srv/big", 45, 850_000_000)
        );
        assert_eq!(
            (r[1].syscall.as_str(), r[1].file.as_str(), r[1].fd),
            ("openat", "", -1)
        );
        assert_eq!((r[2].syscall.as_str(), r[2].waits), ("page fault", 5));
        assert!(disk_wait_deltas(&start, &end, 1).is_empty());
    }
}
