//! The watched processes' futex waits in a window, per futex word: the locks their threads
//! queued on, who waited and who held them.
//!
//! A futex word two or more threads of a process waited on the way a lock's waiters do (on its
//! "locked, with waiters" value: srvprof_common::futex_lock_protocol), and a thread of the same
//! process released, is taken for a lock. Waits on a condition variable or a parking spot (idle
//! Go threads in notesleep, tokio's workers on their condvar, a JVM thread's parker) are threads
//! waiting for work, not for a lock, and are left out.

use serde::{Deserialize, Serialize};
use std::collections::{BTreeMap, BTreeSet};

use super::ThreadReport;
use crate::record::{LockWaitRecord, Reading};

/// A lock of a watched process: a futex word several of its threads waited on and its own
/// threads released (kernel_report/locks.rs), in a span.
#[derive(Clone, Debug, Default, PartialEq, Serialize, Deserialize)]
pub struct LockReport {
    pub pid: u32,
    /// The futex word's address in the process ("0x7f3a..."), the lock's identity.
    pub address: String,
    /// The threads that waited on it, their waits and the waits' summed length (switch-out to
    /// switch-in).
    pub waiters: u32,
    pub waits: u64,
    pub wait_ns: u64,
    /// Who the waits were charged to, longest first: the thread that released the lock, or,
    /// when a queue of waiters passed it on, the holder at its head.
    pub holders: Vec<LockHolder>,
    /// The thread that waited longest.
    pub waiter_tid: u32,
    pub waiter_comm: String,
    /// Where it waited: the heaviest off-CPU user stack of threads of that name in futex waits,
    /// outermost frame first (empty without stacks).
    #[serde(default)]
    pub stack: Vec<String>,
}

#[derive(Clone, Debug, Default, PartialEq, Serialize, Deserialize)]
pub struct LockHolder {
    pub tid: u32,
    pub comm: String,
    pub waits: u64,
    pub wait_ns: u64,
    /// Share of the lock's wait charged to this thread.
    pub share: f64,
    /// The part of those waits it spent asleep in a syscall (ns), and that syscall: the lock
    /// held across a call that sleeps. Its last sleep before it let go is the one counted.
    #[serde(default, skip_serializing_if = "is_zero")]
    pub slept_ns: u64,
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub slept_in: Option<String>,
    /// What it did while the threads waited, in words: where it slept (lock_stacks.rs), or
    /// that it ran on a CPU, and in which of its functions.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub doing: Option<String>,
}

fn is_zero(n: &u64) -> bool {
    *n == 0
}

impl LockHolder {
    /// The share of the waits charged to it that it slept through.
    pub fn slept_share(&self) -> f64 {
        self.slept_ns as f64 / self.wait_ns.max(1) as f64
    }
}

/// The locks kept in a report, longest waited on first.
pub const TOP_LOCKS: usize = 10;

/// The holders named per lock, longest first.
const TOP_HOLDERS: usize = 3;

/// `group`'s locks between `start` and `end`, longest waited on first. `threads` names the
/// threads (the window's report of them).
pub fn lock_deltas(
    start: &Reading,
    end: &Reading,
    group: u32,
    threads: &[ThreadReport],
) -> Vec<LockReport> {
    type Key = (u32, u64, u32, u32);
    let mine = |s: &Reading| -> BTreeMap<Key, LockWaitRecord> {
        (s.kernel.lock_waits.iter())
            .filter(|w| w.group == group && w.lock_protocol)
            .map(|w| ((w.pid, w.uaddr, w.waiter_tid, w.holder_tid), w.clone()))
            .collect()
    };
    let before = mine(start);
    // (pid, word) -> the window's waits on it by its own process's threads.
    let mut words: BTreeMap<(u32, u64), Vec<LockWaitRecord>> = BTreeMap::new();
    for (key, w) in mine(end) {
        let (w0, ns0, slept0) = before
            .get(&key)
            .map(|b| (b.waits, b.wait_ns, b.holder_slept_ns))
            .unwrap_or_default();
        let waits = w.waits.saturating_sub(w0);
        if waits == 0 || w.holder_pid != w.pid {
            continue;
        }
        let wait_ns = w.wait_ns.saturating_sub(ns0);
        (words.entry((w.pid, w.uaddr)).or_default()).push(LockWaitRecord {
            waits,
            wait_ns,
            holder_slept_ns: w.holder_slept_ns.saturating_sub(slept0),
            ..w
        });
    }
    let comm = |tid: u32| {
        (threads.iter())
            .find(|t| t.tid == tid)
            .map(|t| t.comm.clone())
            .unwrap_or_default()
    };
    let mut out: Vec<LockReport> = words
        .into_iter()
        .filter_map(|((pid, uaddr), rows)| {
            let waiters: BTreeSet<u32> = rows.iter().map(|r| r.waiter_tid).collect();
            if waiters.len() < 2 {
                return None;
            }
            let sum_by = |f: fn(&LockWaitRecord) -> u32| {
                let mut by: BTreeMap<u32, (u64, u64)> = BTreeMap::new();
                for r in &rows {
                    let e = by.entry(f(r)).or_default();
                    e.0 += r.waits;
                    e.1 += r.wait_ns;
                }
                let mut v: Vec<(u32, u64, u64)> =
                    by.into_iter().map(|(tid, (n, ns))| (tid, n, ns)).collect();
                v.sort_by(|a, b| b.2.cmp(&a.2).then(a.0.cmp(&b.0)));
                v
            };
            let waits: u64 = rows.iter().map(|r| r.waits).sum();
            let wait_ns: u64 = rows.iter().map(|r| r.wait_ns).sum();
            // A holder's sleeps under the lock: their time, and the syscall that slept most.
            let slept = |tid: u32| {
                let mine = rows.iter().filter(|r| r.holder_tid == tid);
                let ns: u64 = mine.clone().map(|r| r.holder_slept_ns).sum();
                let nr = (mine.filter(|r| r.holder_slept_nr != 0))
                    .max_by_key(|r| r.holder_slept_ns)
                    .map(|r| crate::names::syscall_name(r.holder_slept_nr - 1));
                (ns, nr.filter(|_| ns > 0))
            };
            let holders = sum_by(|r| r.holder_tid)
                .into_iter()
                .take(TOP_HOLDERS)
                .map(|(tid, n, ns)| {
                    let (slept_ns, slept_in) = slept(tid);
                    LockHolder {
                        tid,
                        comm: comm(tid),
                        waits: n,
                        wait_ns: ns,
                        share: ns as f64 / wait_ns.max(1) as f64,
                        slept_ns: slept_ns.min(ns),
                        slept_in,
                        doing: None,
                    }
                })
                .collect();
            let top_waiter = sum_by(|r| r.waiter_tid)[0].0;
            Some(LockReport {
                pid,
                address: format!("{uaddr:#x}"),
                waiters: waiters.len() as u32,
                waits,
                wait_ns,
                holders,
                waiter_tid: top_waiter,
                waiter_comm: comm(top_waiter),
                stack: Vec::new(),
            })
        })
        .collect();
    out.sort_by(|a, b| b.wait_ns.cmp(&a.wait_ns).then(a.pid.cmp(&b.pid)));
    out.truncate(TOP_LOCKS);
    out
}

#[cfg(test)]
mod tests {
    use super::*;

    fn wait(
        uaddr: u64,
        waiter: u32,
        holder: u32,
        holder_pid: u32,
        n: u64,
        ms: u64,
    ) -> LockWaitRecord {
        LockWaitRecord {
            pid: 7,
            group: 0,
            uaddr,
            waiter_tid: waiter,
            holder_tid: holder,
            holder_pid,
            lock_protocol: true,
            waits: n,
            wait_ns: ms * 1_000_000,
            ..Default::default()
        }
    }

    fn at(waits: Vec<LockWaitRecord>) -> Reading {
        let mut s = Reading::default();
        s.kernel.lock_waits = waits;
        s
    }

    fn thread(tid: u32, comm: &str) -> ThreadReport {
        ThreadReport {
            tid,
            pid: 7,
            comm: comm.into(),
            ..Default::default()
        }
    }

    #[test]
    fn a_lock_is_a_word_several_threads_waited_on_and_its_own_threads_released() {
        let lock = 0x5000;
        let start = at(vec![LockWaitRecord {
            holder_slept_nr: 1,
            holder_slept_ns: 60_000_000,
            ..wait(lock, 11, 10, 7, 5, 50)
        }]);
        let end = at(vec![
            // The refresher (10) held it while 11 and 12 waited, asleep in read for 300 ms
            // of those waits (60 before the window); 12 also waited behind 11.
            LockWaitRecord {
                holder_slept_nr: 1,
                holder_slept_ns: 360_000_000,
                ..wait(lock, 11, 10, 7, 25, 450)
            },
            wait(lock, 12, 10, 7, 10, 300),
            wait(lock, 12, 11, 7, 4, 8),
            // A thread's own parking spot, woken by another: waiting for work, not a lock.
            wait(0x6000, 13, 11, 7, 100, 900),
            // A condition variable several threads wait on for work.
            LockWaitRecord {
                lock_protocol: false,
                ..wait(0x8000, 11, 13, 7, 50, 500)
            },
            LockWaitRecord {
                lock_protocol: false,
                ..wait(0x8000, 12, 13, 7, 50, 500)
            },
            // Woken by another process (or an interrupt that ran in one): not this lock's holder.
            wait(0x7000, 11, 99, 99, 3, 30),
            wait(0x7000, 12, 99, 99, 3, 30),
        ]);
        let threads = [
            thread(10, "cache-refresh"),
            thread(11, "conn"),
            thread(12, "conn"),
        ];
        let locks = lock_deltas(&start, &end, 0, &threads);
        assert_eq!(locks.len(), 1, "{locks:?}");
        let l = &locks[0];
        assert_eq!((l.address.as_str(), l.waiters, l.waits), ("0x5000", 2, 34));
        assert_eq!(l.wait_ns, 708_000_000);
        assert_eq!(
            (l.holders[0].tid, l.holders[0].comm.as_str()),
            (10, "cache-refresh")
        );
        assert_eq!(l.holders[0].waits, 30);
        assert!((l.holders[0].share - 700.0 / 708.0).abs() < 1e-9);
        assert_eq!(l.holders[0].slept_ns, 300_000_000);
        assert_eq!(l.holders[0].slept_in.as_deref(), Some("read"));
        assert!((l.holders[0].slept_share() - 300.0 / 700.0).abs() < 1e-9);
        assert_eq!(
            (l.holders[1].slept_ns, l.holders[1].slept_in.as_ref()),
            (0, None)
        );
        assert_eq!((l.waiter_tid, l.waiter_comm.as_str()), (11, "conn"));
        assert!(lock_deltas(&start, &end, 1, &threads).is_empty());
    }
}
