//! A group's major page faults and the time its threads waited in them, in a window (its
//! reclaims are summed with the threads, in compose.rs).

use serde::{Deserialize, Serialize};
use std::collections::BTreeSet;

use crate::record::Reading;

/// Memory pressure on a group's threads in a span: pages they had to read back in, and memory
/// they had to reclaim themselves before they could allocate.
#[derive(Clone, Debug, Default, PartialEq, Serialize, Deserialize)]
pub struct MemoryReport {
    /// Major page faults of the group's processes (/proc/PID/stat majflt: faults that read the
    /// page in from its file or swap).
    pub major_faults: u64,
    /// Uninterruptible sleeps outside a syscall (a page fault waiting for its page to be read),
    /// and their time, switch-out to switch-in.
    pub fault_waits: u64,
    pub fault_wait_ns: u64,
    /// Direct and memcg reclaim in the group's threads (vmscan tracepoints), and its time.
    pub reclaims: u64,
    pub reclaim_ns: u64,
}

/// Adds `group`'s major faults (its processes' /proc counters) and its uninterruptible sleeps
/// outside a syscall (page faults reading a page in) between `start` and `end` to `m`.
pub fn fault_deltas(start: &Reading, end: &Reading, group: u32, m: &mut MemoryReport) {
    let pids: BTreeSet<u32> = (end.process_cpu.iter())
        .filter(|c| c.group == group)
        .map(|c| c.pid)
        .collect();
    for pid in &pids {
        let at = |s: &Reading| s.major_faults.get(pid).copied();
        if let Some(n) = at(end) {
            m.major_faults += n.saturating_sub(at(start).unwrap_or(0));
        }
    }
    let faults = |s: &Reading| -> (u64, u64) {
        (s.kernel.disk_waits.iter())
            .filter(|d| d.group == group && d.nr_slot == 0)
            .fold((0, 0), |(n, ns), d| (n + d.count, ns + d.total_ns))
    };
    let ((n0, ns0), (n1, ns1)) = (faults(start), faults(end));
    m.fault_waits += n1.saturating_sub(n0);
    m.fault_wait_ns += ns1.saturating_sub(ns0);
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::record::{CpuUse, DiskWait};

    fn at(majflt: u64, waits: u64, ms: u64) -> Reading {
        let mut s = Reading {
            process_cpu: vec![CpuUse {
                pid: 7,
                group: 0,
                ..Default::default()
            }],
            ..Default::default()
        };
        s.major_faults.insert(7, majflt);
        // Another group's process: not counted.
        s.major_faults.insert(8, majflt * 10);
        s.kernel.disk_waits = vec![
            DiskWait {
                pid: 7,
                nr_slot: 0,
                fd: -1,
                count: waits,
                total_ns: ms * 1_000_000,
                ..Default::default()
            },
            // A read's wait is blocking I/O, not a fault.
            DiskWait {
                pid: 7,
                nr_slot: 1,
                fd: 3,
                count: 99,
                total_ns: 99_000_000,
                ..Default::default()
            },
        ];
        s
    }

    #[test]
    fn faults_and_their_waits_are_the_windows_growth() {
        let mut m = MemoryReport::default();
        fault_deltas(&at(10, 5, 50), &at(110, 85, 850), 0, &mut m);
        assert_eq!(
            (m.major_faults, m.fault_waits, m.fault_wait_ns),
            (100, 80, 800_000_000)
        );
        let mut none = MemoryReport::default();
        fault_deltas(&at(10, 5, 50), &at(110, 85, 850), 1, &mut none);
        assert_eq!(none, MemoryReport::default());
    }
}
