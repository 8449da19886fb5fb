//! Who held the CPUs the watched threads waited for: per holder process, the waits that ended
//! with it giving a CPU up, and the part of them it ran for, in a window.

use serde::{Deserialize, Serialize};
use std::collections::BTreeMap;

use crate::record::Reading;

/// A task that held a CPU when this group's threads' waits for it ended, per process.
#[derive(Clone, Debug, Default, PartialEq, Serialize, Deserialize)]
pub struct RunqHolderReport {
    /// The holder's process (0: the CPU was idle: the wait was the wake-up's own latency;
    /// HOLDER_BEFORE: the waits' time before their last holder's slice, such as a CPU quota's
    /// throttle), and the name of its thread that held CPUs longest.
    pub pid: u32,
    pub comm: String,
    pub waits: u64,
    pub wait_ns: u64,
    /// Share of all the group's waits' time in the span.
    pub share: f64,
}

impl RunqHolderReport {
    /// Whether a process held the CPU, rather than an idle CPU or the time before the holder.
    pub fn is_a_process(&self) -> bool {
        self.pid != 0 && self.pid != srvprof_common::HOLDER_BEFORE
    }
}

/// The holders kept in a report, longest first.
pub const TOP_RUNQ_HOLDERS: usize = 10;

/// `group`'s waits between `start` and `end`, per holder process, longest first.
pub fn holder_deltas(start: &Reading, end: &Reading, group: u32) -> Vec<RunqHolderReport> {
    let before: BTreeMap<u32, (u64, u64)> = start
        .kernel
        .runq_holders
        .iter()
        .filter(|h| h.group == group)
        .map(|h| (h.holder_tid, (h.waits, h.wait_ns)))
        .collect();
    // Per process: waits, time, and its threads' time by name (the longest names it).
    let mut by_pid: BTreeMap<u32, (u64, u64, BTreeMap<String, u64>)> = BTreeMap::new();
    for h in end.kernel.runq_holders.iter().filter(|h| h.group == group) {
        let (w0, ns0) = before.get(&h.holder_tid).copied().unwrap_or((0, 0));
        let (waits, ns) = (h.waits.saturating_sub(w0), h.wait_ns.saturating_sub(ns0));
        if waits == 0 {
            continue;
        }
        let e = by_pid.entry(h.holder_pid).or_default();
        e.0 += waits;
        e.1 += ns;
        *e.2.entry(h.holder_comm.clone()).or_default() += ns;
    }
    let total: u64 = by_pid.values().map(|(_, ns, _)| ns).sum();
    let mut out: Vec<RunqHolderReport> = by_pid
        .into_iter()
        .map(|(pid, (waits, wait_ns, names))| RunqHolderReport {
            pid,
            comm: names
                .into_iter()
                .max_by_key(|(_, ns)| *ns)
                .map(|(n, _)| n)
                .unwrap_or_default(),
            waits,
            wait_ns,
            share: wait_ns as f64 / total.max(1) as f64,
        })
        .collect();
    out.sort_by(|a, b| b.wait_ns.cmp(&a.wait_ns).then(a.pid.cmp(&b.pid)));
    out.truncate(TOP_RUNQ_HOLDERS);
    out
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::record::RunqHolder;

    fn holder(pid: u32, tid: u32, comm: &str, group: u32, waits: u64, ms: u64) -> RunqHolder {
        RunqHolder {
            holder_pid: pid,
            holder_tid: tid,
            holder_comm: comm.into(),
            group,
            waits,
            wait_ns: ms * 1_000_000,
        }
    }

    fn at(holders: Vec<RunqHolder>) -> Reading {
        let mut s = Reading::default();
        s.kernel.runq_holders = holders;
        s
    }

    #[test]
    fn holders_are_the_windows_growth_per_process_longest_first() {
        let start = at(vec![holder(50, 50, "hog", 0, 10, 100)]);
        let end = at(vec![
            holder(50, 50, "hog", 0, 40, 400),
            holder(50, 51, "hog-2", 0, 5, 20),
            holder(0, 0, "swapper/1", 0, 100, 80),
            holder(9, 9, "kworker/1:0", 0, 3, 0),
            holder(50, 50, "hog", 1, 7, 700),
        ]);
        let r = holder_deltas(&start, &end, 0);
        assert_eq!(r.len(), 3);
        assert_eq!((r[0].pid, r[0].comm.as_str(), r[0].waits), (50, "hog", 35));
        assert_eq!(r[0].wait_ns, 320_000_000);
        assert!((r[0].share - 320.0 / 400.0).abs() < 1e-12);
        assert_eq!((r[1].pid, r[1].wait_ns), (0, 80_000_000));
        assert_eq!((r[2].pid, r[2].wait_ns, r[2].share), (9, 0, 0.0));
    }
}
