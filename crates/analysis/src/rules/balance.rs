//! Work concentrated on one of several like workers: nginx's worker processes, a pool's threads.
//! The busiest one is the server's bottleneck while the others idle.

use std::collections::BTreeMap;

use crate::finding::{Finding, FindingKind, Severity};
use crate::run_report::RunReport;

/// The busiest worker did at least this many times its fair share (1/N) of the workers' CPU...
pub const IMBALANCE_FACTOR: f64 = 1.5;
/// ...and was on a CPU at least this share of the time (it is the bottleneck).
pub const BUSY_WORKER: f64 = 0.5;

/// One worker: (pid, tid, name, share of the window on a CPU).
type Worker = (u32, u32, String, f64);

/// Workers: the server's threads with the same name apart from trailing digits and separators
/// ("nginx" x 4, "netty-worker-1".."-8"), idle ones included, at least two of them. A process
/// whose child has its name is their master (nginx's), not a worker.
fn pools(r: &RunReport, secs: f64) -> Vec<(String, Vec<Worker>)> {
    let stem = |comm: &str| {
        comm.trim_end_matches(|c: char| c.is_ascii_digit() || c == '-' || c == '_' || c == '/')
            .to_string()
    };
    let busy = r.server.threads.iter().map(|t| {
        let on = (t.user_ns + t.sys_ns) as f64 / (secs * 1e9);
        (t.pid, t.tid, t.comm.clone(), on)
    });
    let quiet = (r.server.quiet_threads.iter()).map(|t| (t.pid, t.tid, t.comm.clone(), 0.0));
    let all: Vec<Worker> = busy.chain(quiet).collect();
    let is_master = |pid: u32, name: &str| {
        all.iter()
            .any(|(p, _, c, _)| r.server.parents.get(p) == Some(&pid) && stem(c) == name)
    };
    let mut by_stem: BTreeMap<String, Vec<Worker>> = BTreeMap::new();
    for w in &all {
        let name = stem(&w.2);
        if !name.is_empty() && !is_master(w.0, &name) {
            by_stem.entry(name).or_default().push(w.clone());
        }
    }
    by_stem.into_iter().filter(|(_, w)| w.len() >= 2).collect()
}

/// One of N like workers did IMBALANCE_FACTOR times its fair share of their CPU and was busy
/// BUSY_WORKER of the time: names it, its share and the others', and the fix.
pub fn worker_imbalance(r: &RunReport) -> Option<Finding> {
    let secs = r.server.duration_s.max(1e-9);
    pools(r, secs)
        .into_iter()
        .filter_map(|(stem, workers)| {
            let total: f64 = workers.iter().map(|w| w.3).sum();
            let top = workers.iter().max_by(|a, b| a.3.total_cmp(&b.3))?.clone();
            let share = top.3 / total.max(1e-12);
            let fair = 1.0 / workers.len() as f64;
            (share >= IMBALANCE_FACTOR * fair && top.3 >= BUSY_WORKER)
                .then_some((stem, workers.len(), top, share, total))
        })
        .max_by(|a, b| a.3.total_cmp(&b.3))
        .map(|(stem, n, (pid, tid, comm, on), share, total)| {
            let others = (total - on) / (n - 1) as f64;
            let keepalive = if r.load.config.keepalive {
                let c = r.load.config.connections;
                let held = if c == 1 {
                    "1 connection could not be".to_string()
                } else {
                    format!("{c} connections were not")
                };
                format!(
                    " With keep-alive a connection stays with the worker that accepted it: the run's {held} spread over the {n} workers."
                )
            } else {
                String::new()
            };
            Finding::new(
                FindingKind::WorkerImbalance,
                Severity::Warning,
                format!(
                    "the server's work is concentrated on one of its {n} {stem} workers: {comm} (pid {pid}, tid {tid}) did {:.0}% of their CPU (a fair share is {:.0}%) and was on a CPU {:.0}% of the time, the others {:.0}% on average.{keepalive} Fix: spread the accepts (nginx: `reuseport` on the listen directive, or `accept_mutex on`), or open more connections",
                    share * 100.0,
                    100.0 / n as f64,
                    on * 100.0,
                    others * 100.0,
                ),
                &[
                    ("workers", n as f64),
                    ("top_share", share),
                    ("top_busy_share", on),
                    ("others_busy_share", others),
                    ("top_tid", tid as f64),
                    ("top_pid", pid as f64),
                ],
            )
            // A request on the busy worker waits behind those of the other connections it
            // serves: its share of them, at the server's CPU cost per request.
            .explaining(
                r.load.config.connections as f64 * share * r.per_request.server.cpu_us / 1e3,
                r.load.latency_us.p99 as f64 / 1e3,
            )
        })
}

#[cfg(test)]
pub(super) mod tests {
    use super::*;
    use crate::record::{CpuUse, ThreadCounters};
    use crate::rules::test_support::*;
    use srvprof_common::GROUP_SERVER;

    tables!(worker_imbalance_table);

    /// A window in which nginx's master (pid 9, idle) had workers (pid = tid = 10, 11, ...) on a
    /// CPU these shares of the time; a worker at 0 did nothing at all (not one switch).
    fn workers(busy: &'static [f64]) -> RunReport {
        Recording::window()
            .each(|s, k| {
                s.kernel.threads.push(ThreadCounters {
                    pid: 9,
                    ..thread(GROUP_SERVER, 9, "nginx", 0, 0)
                });
                s.parents.insert(9, 1);
                for (i, b) in busy.iter().enumerate() {
                    let tid = 10 + i as u32;
                    let ns = ns_of(*b);
                    let idle = *b == 0.0;
                    s.parents.insert(tid, 9);
                    s.kernel.threads.push(ThreadCounters {
                        pid: tid,
                        ..thread(
                            GROUP_SERVER,
                            tid,
                            "nginx",
                            i as u32 % 2,
                            if idle { 0 } else { k },
                        )
                    });
                    s.thread_cpu.push(CpuUse {
                        pid: tid,
                        tid,
                        group: GROUP_SERVER,
                        comm: "nginx".into(),
                        user_ns: grown(ns, k),
                        sys_ns: grown(0, k),
                    });
                }
            })
            .build()
    }

    fn unbalanced(n: f64, share: f64, top: f64) -> Vec<Expected> {
        finds(
            FindingKind::WorkerImbalance,
            Severity::Warning,
            &[
                ("workers", n),
                ("top_share", share),
                ("top_busy_share", top),
                ("top_tid", 10.0),
            ],
        )
    }

    fn worker_imbalance_table() -> Table {
        #[rustfmt::skip]
        let cases = [
            ("one worker (and its master)", workers(&[0.9]), nothing()),
            ("balanced", workers(&[0.9, 0.9]), nothing()),
            ("all on one of two, the other idle", workers(&[0.9, 0.0]), unbalanced(2.0, 1.0, 0.9)),
            ("at IMBALANCE_FACTOR: 75 % of two", workers(&[0.75, 0.25]), unbalanced(2.0, 0.75, 0.75)),
            ("just under IMBALANCE_FACTOR", workers(&[0.74, 0.26]), nothing()),
            ("the top one under BUSY_WORKER", workers(&[0.49, 0.0]), nothing()),
            ("one of four", workers(&[0.8, 0.1, 0.1, 0.0]), unbalanced(4.0, 0.8, 0.8)),
        ];
        Table::new(worker_imbalance, cases)
    }

    #[test]
    fn the_finding_names_the_busy_worker_and_the_fix() {
        let f = worker_imbalance(&workers(&[0.9, 0.0])).unwrap();
        for part in [
            "one of its 2 nginx workers",
            "pid 10, tid 10",
            "100% of their CPU",
            "reuseport",
        ] {
            assert!(f.summary.contains(part), "{part}: {}", f.summary);
        }
    }
}
