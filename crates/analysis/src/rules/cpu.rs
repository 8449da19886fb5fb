//! Who ran out of CPU: the load generator (the run measured the client), a server thread, server
//! threads waiting in the run queue, or a client that could not keep -c connections busy.

use crate::finding::{Finding, FindingKind, Severity};
use crate::kernel_report::ThreadReport;
use crate::run_report::RunReport;

/// A thread this busy (user+sys, or on a CPU or waiting for one, over wall time) has saturated a CPU.
pub const CPU_SATURATED: f64 = 0.90;
/// A server on its CPUs or waiting for them this share of the window had little to spare: a
/// saturated client beside it measured the server's limit within that share, so the finding is
/// a warning naming both, not a claim that only the client was measured.
pub const SERVER_NEAR_LIMIT: f64 = 0.80;
/// Run-queue p99 (µs) from which server threads waiting for a CPU explain a tail.
pub const RUNQ_P99_US: f64 = 1000.0;
/// A process outside the run that held the CPU for this share of the server threads'
/// run-queue wait time is the neighbour taking their CPU.
pub const NEIGHBOUR_SHARE: f64 = 0.25;
/// Short run-queue waits that add up to at least this share of the window (summed over the
/// server's threads) are a neighbour's work too, whatever their p99: the scheduler may hand the
/// CPU back and forth in slices far under RUNQ_P99_US while the neighbour takes half of it.
pub const NEIGHBOUR_WAIT_SHARE: f64 = 0.10;
/// The client kept fewer than this share of -c connections busy...
pub const CLIENT_CONCURRENCY_SHARE: f64 = 0.5;
/// ...while its busiest thread was at least this busy (so the client, not the server, fell short).
pub const CLIENT_CONCURRENCY_BUSY: f64 = 0.7;

/// The load generator was the bottleneck: a client thread that was always on a CPU or waiting for
/// one never waited for the server (kernel-measured on-CPU + run-queue time over wall time), or
/// the load generator's own CPU accounting says it saturated.
pub fn client_bound(r: &RunReport) -> Option<Finding> {
    let load = &r.load;
    let secs = r.server.duration_s.max(1e-9);
    let client_starved = r
        .client
        .threads
        .iter()
        .map(|t| ((t.oncpu_ns + t.runq_ns) as f64 / (secs * 1e9), t))
        .max_by(|a, b| a.0.total_cmp(&b.0));
    let client_busiest = load.client_cpu.max_thread_utilization;
    let starved_share = client_starved.map(|(share, _)| share).unwrap_or(0.0);
    if !(load.client_cpu.saturated
        || client_busiest >= CPU_SATURATED
        || starved_share >= CPU_SATURATED)
    {
        return None;
    }
    let waited = client_starved
        .map(|(_, t)| t.runq_ns as f64 / (secs * 1e9))
        .unwrap_or(0.0);
    let client = format!(
        "its busiest thread was on a CPU or waiting for one {:.0}% of the time ({:.0}% waiting in the run queue)",
        starved_share.max(client_busiest) * 100.0,
        waited * 100.0
    );
    let (server_busy, server_cpus) = server_busy_cpus(r);
    let server_share = server_busy / server_cpus.max(1) as f64;
    // On a CPU or waiting for one: on a busy host a server that never waits for work is at its
    // limit though a neighbour takes part of its CPU.
    let runnable: f64 = (r.server.threads.iter())
        .filter(|t| busy_share(r, t) >= WORKING_THREAD_SHARE)
        .map(|t| t.runq_ns as f64 / (secs * 1e9))
        .sum();
    let server_runnable = (server_busy + runnable) / server_cpus.max(1) as f64;
    // A server with no CPU to spare was at its limit whatever the client did: the throughput is
    // (about) the server's, only the latency also holds the client's own queueing.
    let (severity, summary) = if server_cpus > 0 && server_runnable >= SERVER_NEAR_LIMIT {
        (
            Severity::Warning,
            format!(
                "load generator CPU-bound as well as the server: {client}; the server used {:.0}% of the {server_cpus} CPU{} its working threads ran on ({:.0}% on it or waiting for it), so the throughput is near the server's limit, but the latency includes the load generator's own queueing (give it more CPU: --threads, --cpus)",
                server_share * 100.0,
                if server_cpus == 1 { "" } else { "s" },
                server_runnable * 100.0,
            ),
        )
    } else {
        (
            Severity::Critical,
            format!(
                "load generator CPU-bound: {client}; this run measured the client, not the server"
            ),
        )
    };
    Some(Finding::new(
        FindingKind::ClientBound,
        severity,
        summary,
        &[
            ("client_thread_busy_or_runnable_share", starved_share),
            ("client_thread_runq_share", waited),
            ("client_busiest_thread_utilization", client_busiest),
            ("client_cpu_utilization", load.client_cpu.cpu_utilization),
            ("server_cpu_share", server_share),
            ("server_busy_or_runnable_share", server_runnable),
            ("throughput_rps", load.throughput_rps),
        ],
    ))
}

/// A server thread that used at least this share of the window worked for the server's
/// throughput (the rest are helpers: loggers, timers, idle pool threads).
const WORKING_THREAD_SHARE: f64 = 0.05;

/// The CPUs' worth of time the server's threads used (user + sys over the window), and how many
/// CPUs they could have used: the fewer of its working threads and the CPUs those ran on.
fn server_busy_cpus(r: &RunReport) -> (f64, usize) {
    let share = |t: &ThreadReport| busy_share(r, t);
    let busy: f64 = r.server.threads.iter().map(share).sum();
    let working: Vec<_> = r
        .server
        .threads
        .iter()
        .filter(|t| share(t) >= WORKING_THREAD_SHARE)
        .collect();
    let mut cpus: Vec<u32> = working
        .iter()
        .flat_map(|t| t.cpus.iter().copied())
        .collect();
    cpus.sort_unstable();
    cpus.dedup();
    (busy, working.len().min(cpus.len()))
}

/// A server thread's user + sys time over the window.
fn busy_share(r: &RunReport, t: &ThreadReport) -> f64 {
    (t.user_ns + t.sys_ns) as f64 / (r.server.duration_s.max(1e-9) * 1e9)
}

/// The busiest server thread was at least CPU_SATURATED busy; says where its sys time went.
pub fn server_cpu_saturated(r: &RunReport) -> Option<Finding> {
    let t = r
        .server
        .threads
        .iter()
        .max_by_key(|t| t.user_ns + t.sys_ns)
        .filter(|t| busy_share(r, t) >= CPU_SATURATED)?;
    let busy = busy_share(r, t);
    let sys_share = t.sys_ns as f64 / (t.user_ns + t.sys_ns).max(1) as f64;
    let top: Vec<String> = r
        .server
        .syscalls
        .iter()
        .take(3)
        .map(|s| {
            // Sampled mode: the estimate says how closely it is known (when that rounds to 1 %
            // or more: "±0 %" would read as a count).
            let known = s
                .count_error
                .filter(|e| *e >= 0.005)
                .map(|e| format!(" ±{:.0} %", e * 100.0))
                .unwrap_or_default();
            format!(
                "{} {:.1}/req{known}",
                s.name,
                s.count as f64 / r.load.completed.max(1) as f64
            )
        })
        .collect();
    let sys_goes_to = if r.server.syscalls_off {
        "syscalls not recorded (--syscalls off)".to_string()
    } else {
        format!("sys goes to {}", top.join(", "))
    };
    Some(Finding::new(
        FindingKind::ServerCpuSaturated,
        Severity::Warning,
        format!(
            "server thread {} ({}) was {:.0}% busy: user {:.0}%, sys {:.0}% of its time; {sys_goes_to}",
            t.tid,
            t.comm,
            busy * 100.0,
            (1.0 - sys_share) * 100.0,
            sys_share * 100.0,
        ),
        &[
            ("busy_share", busy),
            ("sys_share", sys_share),
            ("tid", t.tid as f64),
        ],
    )
    // A request waits behind those of the other connections: at most one each, at the server's
    // CPU cost per request.
    .explaining(
        r.load.config.connections as f64 * r.per_request.server.cpu_us / 1e3,
        r.load.latency_us.p99 as f64 / 1e3,
    ))
}

/// Server threads waited for a CPU (run-queue p99 at least RUNQ_P99_US, or waits adding up to
/// NEIGHBOUR_WAIT_SHARE of the window), and a process that is neither the server nor srvprof held
/// that CPU for at least NEIGHBOUR_SHARE of the wait: names it, with its share, and the
/// fix.
pub fn noisy_neighbour(r: &RunReport) -> Option<Finding> {
    let runq = &r.server.runq_latency_us;
    let secs = r.server.duration_s.max(1e-9);
    let waited_ns: u64 = r.server.runq_holders.iter().map(|h| h.wait_ns).sum();
    let wait_share = waited_ns as f64 / (secs * 1e9);
    if (runq.p99 < RUNQ_P99_US && wait_share < NEIGHBOUR_WAIT_SHARE) || r.load.completed == 0 {
        return None;
    }
    let ours = |pid: u32| r.server.pids.contains(&pid) || r.client.pids.contains(&pid);
    let h = r
        .server
        .runq_holders
        .iter()
        .filter(|h| h.is_a_process() && !ours(h.pid))
        .find(|h| h.share >= NEIGHBOUR_SHARE)?;
    let p99_us = r.load.latency_us.p99 as f64;
    let per_request_us = h.wait_ns as f64 / 1e3 / r.load.completed as f64;
    Some(Finding::new(
        FindingKind::NoisyNeighbour,
        Severity::Warning,
        format!(
            "server threads waited for a CPU behind another process: {} (pid {}) held it for {:.0}% of their run-queue wait ({} waits, {:.1} ms in all, {:.1} us per request); run-queue p99 {:.1} ms, request p99 {:.1} ms. Fix: keep it off the server's CPUs (taskset, a cpuset), lower its priority (nice 19, SCHED_IDLE), or give the server CPUs of its own",
            h.comm,
            h.pid,
            h.share * 100.0,
            h.waits,
            h.wait_ns as f64 / 1e6,
            per_request_us,
            runq.p99 / 1000.0,
            p99_us / 1000.0
        ),
        &[
            ("holder_pid", h.pid as f64),
            ("share_of_wait", h.share),
            ("waits", h.waits as f64),
            ("wait_ms", h.wait_ns as f64 / 1e6),
            ("wait_us_per_request", per_request_us),
            ("runq_p99_us", runq.p99),
            ("p99_us", p99_us),
        ],
    )
    // Its share of the run-queue wait in the tail's wait for a CPU.
    .explaining(runq.p99 * h.share / 1e3, p99_us / 1e3))
}

/// Server threads waited for a CPU: run-queue p99 at least RUNQ_P99_US.
pub fn runq_tail(r: &RunReport) -> Option<Finding> {
    let runq = &r.server.runq_latency_us;
    let invol_per_req = r.per_request.server.involuntary_switches;
    let p99_us = r.load.latency_us.p99 as f64;
    (runq.p99 >= RUNQ_P99_US && r.load.completed > 0).then(|| {
        Finding::new(
            FindingKind::RunqTail,
            Severity::Warning,
            format!(
                "server threads waited for a CPU: run-queue p99 {:.1} ms (max {:.1} ms), {:.2} involuntary switches per request; request p99 {:.1} ms",
                runq.p99 / 1000.0,
                runq.max / 1000.0,
                invol_per_req,
                p99_us / 1000.0
            ),
            &[
                ("runq_p99_us", runq.p99),
                ("involuntary_switches_per_request", invol_per_req),
                ("p99_us", p99_us),
            ],
        )
        .explaining(runq.p99 / 1e3, p99_us / 1e3)
    })
}

/// Closed loop only: the client kept fewer than CLIENT_CONCURRENCY_SHARE of -c connections busy
/// (throughput x mean latency, Little's law) while its busiest thread was CLIENT_CONCURRENCY_BUSY.
pub fn client_concurrency_short(r: &RunReport) -> Option<Finding> {
    let load = &r.load;
    if load.config.rate.is_some() || load.completed == 0 {
        return None;
    }
    let mean_latency_s = load.latency_us.mean / 1e6;
    let achieved = load.throughput_rps * mean_latency_s;
    let wanted = load.config.connections as f64;
    (wanted > 0.0
        && achieved / wanted < CLIENT_CONCURRENCY_SHARE
        && load.client_cpu.max_thread_utilization >= CLIENT_CONCURRENCY_BUSY)
        .then(|| {
            Finding::new(
                FindingKind::ClientConcurrencyShort,
                Severity::Warning,
                format!(
                    "the load generator kept only {achieved:.0} of {wanted:.0} connections busy on average (throughput x mean latency): it could not drive the requested concurrency"
                ),
                &[
                    ("busy_connections", achieved),
                    ("requested_connections", wanted),
                ],
            )
        })
}

#[cfg(test)]
pub(super) mod tests {
    use srvprof_common::{GROUP_CLIENT, GROUP_SERVER, hist};

    use super::*;
    use crate::record::{CpuUse, RunqHolder, ThreadCounters};
    use crate::rules::test_support::*;

    tables!(
        client_bound_table,
        server_cpu_saturated_table,
        runq_tail_table,
        noisy_neighbour_table,
        client_concurrency_short_table
    );

    /// A recorded window in which the load generator's thread was on a CPU or waiting for one
    /// `share` of the time, a quarter of that in the run queue.
    fn client_starved(share: f64) -> RunReport {
        starved_in(Recording::window(), share)
    }

    /// [`client_starved`] beside a server whose one thread was `server` busy.
    fn client_starved_beside(server: f64, share: f64) -> RunReport {
        starved_in(busy_server(server, false), share)
    }

    /// The same, the server's thread on its CPU `server` of the time and waiting for it `waiting`
    /// (a neighbour took the rest).
    fn client_starved_beside_a_neighbour(server: f64, waiting: f64, share: f64) -> RunReport {
        let recording = busy_server(server, false).each(|s, k| {
            if let Some(t) = s.kernel.threads.iter_mut().find(|t| t.tid == 7) {
                t.runq_ns = grown(ns_of(waiting), k);
            }
        });
        starved_in(recording, share)
    }

    fn starved_in(recording: Recording, share: f64) -> RunReport {
        let ns = ns_of(share);
        recording
            .each(|s, k| {
                s.kernel.threads.push(ThreadCounters {
                    oncpu_ns: grown(ns - ns / 4, k),
                    runq_ns: grown(ns / 4, k),
                    ..thread(GROUP_CLIENT, 20, "srvprof-load", 1, k)
                })
            })
            .build()
    }

    /// A run whose load generator said its busiest thread was `busiest` busy, and whether it
    /// called itself saturated.
    fn client_says(busiest: f64, saturated: bool) -> RunReport {
        let mut run = quiet_run();
        run.load.client_cpu.max_thread_utilization = busiest;
        run.load.client_cpu.saturated = saturated;
        run
    }

    fn client_bound_table() -> Table {
        let starved = |share: f64| {
            finds(
                FindingKind::ClientBound,
                Severity::Critical,
                &[
                    ("client_thread_busy_or_runnable_share", share),
                    ("client_thread_runq_share", share / 4.0),
                ],
            )
        };
        let says = |busiest: f64| {
            finds(
                FindingKind::ClientBound,
                Severity::Critical,
                &[("client_busiest_thread_utilization", busiest)],
            )
        };
        let both = |share: f64, server: f64| {
            finds(
                FindingKind::ClientBound,
                Severity::Warning,
                &[
                    ("client_thread_busy_or_runnable_share", share),
                    ("server_cpu_share", server),
                ],
            )
        };
        let (below, at, above) = (CPU_SATURATED - 0.01, CPU_SATURATED, CPU_SATURATED + 0.01);
        #[rustfmt::skip]
        let cases = [
            ("recorded: client thread busy or runnable just below", client_starved(below), nothing()),
            ("recorded: client thread busy or runnable at CPU_SATURATED", client_starved(at), starved(at)),
            ("recorded: client thread busy or runnable just above", client_starved(above), starved(above)),
            ("load generator's busiest thread just below", client_says(below, false), nothing()),
            ("load generator's busiest thread at CPU_SATURATED", client_says(at, false), says(at)),
            ("load generator's busiest thread just above", client_says(above, false), says(above)),
            ("the load generator says it saturated", client_says(0.5, true), says(0.5)),
            ("client starved, server just below its limit", client_starved_beside(SERVER_NEAR_LIMIT - 0.01, 0.95), starved(0.95)),
            ("client starved, server at its limit too", client_starved_beside(SERVER_NEAR_LIMIT, 0.95), both(0.95, SERVER_NEAR_LIMIT)),
            ("client starved, server saturated too", client_starved_beside(at, 0.95), both(0.95, at)),
            ("client starved, server on its CPU 65 % and waiting for it 10 %", client_starved_beside_a_neighbour(0.65, 0.1, 0.95), starved(0.95)),
            ("client starved, server on its CPU 75 % and waiting for it 20 %", client_starved_beside_a_neighbour(0.75, 0.2, 0.95), both(0.95, 0.75)),
        ];
        Table::new(client_bound, cases)
    }

    fn server_cpu_saturated_table() -> Table {
        let saturated = |busy: f64, sys_share: f64, tid: f64| {
            finds(
                FindingKind::ServerCpuSaturated,
                Severity::Warning,
                &[("busy_share", busy), ("sys_share", sys_share), ("tid", tid)],
            )
        };
        let busy = |share: f64| busy_server(share, false).build();
        // Beside nginx's thread (half busy), thread 8 of `group`, busy `share` of the time in user.
        let beside = |share: f64, group: u32| {
            let ns = ns_of(share);
            busy_server(0.5, false)
                .each(|s, k| {
                    s.kernel.threads.push(thread(group, 8, "worker", 1, k));
                    s.thread_cpu.push(CpuUse {
                        tid: 8,
                        pid: 8,
                        user_ns: grown(ns, k),
                        ..Default::default()
                    });
                })
                .build()
        };
        let (below, at, above) = (CPU_SATURATED - 0.01, CPU_SATURATED, CPU_SATURATED + 0.01);
        #[rustfmt::skip]
        let cases = [
            ("recorded: busiest thread just below", busy(below), nothing()),
            ("recorded: busiest thread at CPU_SATURATED", busy(at), saturated(at, 0.6, 7.0)),
            ("recorded: busiest thread just above", busy(above), saturated(above, 0.6, 7.0)),
            ("recorded: the busier of two server threads", beside(above, GROUP_SERVER), saturated(above, 0.0, 8.0)),
            ("recorded: a busy client thread is not the server's", beside(above, GROUP_CLIENT), nothing()),
        ];
        Table::new(server_cpu_saturated, cases)
    }

    /// A run whose server threads' run-queue p99 was `us`.
    fn runq_p99(us: f64) -> RunReport {
        let mut run = quiet_run();
        run.server.runq_latency_us.p99 = us;
        run
    }

    /// A recorded window in which the server's thread waited in the run queue 100 times, every
    /// wait in histogram slot `slot`, and was switched out involuntarily 2,500 times.
    fn runq_waits_in(slot: u32) -> RunReport {
        Recording::window()
            .each(|s, k| {
                s.kernel.runq_hist[GROUP_SERVER as usize].slots[slot as usize] = grown(100, k);
                s.kernel.threads.push(ThreadCounters {
                    involuntary_switches: grown(2_500, k),
                    ..thread(GROUP_SERVER, 7, "server", 0, k)
                });
            })
            .build()
    }

    /// A recorded window in which the server's thread 7 waited 100 times in the run queue, every
    /// wait in histogram slot `slot`, each ending as one of `holders` (pid, name, ms of the
    /// window's waits) gave the CPU up.
    fn waits_behind(slot: u32, holders: &'static [(u32, &'static str, u64)]) -> RunReport {
        Recording::window()
            .each(|s, k| {
                s.kernel.runq_hist[GROUP_SERVER as usize].slots[slot as usize] = grown(100, k);
                s.kernel
                    .threads
                    .push(thread(GROUP_SERVER, 7, "nginx", 1, k));
                for &(pid, comm, ms) in holders {
                    s.kernel.runq_holders.push(RunqHolder {
                        holder_pid: pid,
                        holder_tid: pid,
                        holder_comm: comm.into(),
                        group: GROUP_SERVER,
                        waits: grown(10, k),
                        wait_ns: grown(ms * 1_000_000, k),
                    });
                }
            })
            .build()
    }

    fn noisy_neighbour_table() -> Table {
        let tail = hist::slot_of((RUNQ_P99_US * 1e3) as u64);
        let neighbour = |share: f64| {
            finds(
                FindingKind::NoisyNeighbour,
                Severity::Warning,
                &[
                    ("holder_pid", 4242.0),
                    ("share_of_wait", share),
                    ("waits", 10.0),
                ],
            )
        };
        #[rustfmt::skip]
        let cases = [
            ("a hog holds all the wait", waits_behind(tail, &[(4242, "hog", 100)]), neighbour(1.0)),
            ("at NEIGHBOUR_SHARE", waits_behind(tail, &[(4242, "hog", 25), (0, "swapper/1", 75)]), neighbour(0.25)),
            ("just under NEIGHBOUR_SHARE", waits_behind(tail, &[(4242, "hog", 24), (0, "swapper/1", 76)]), nothing()),
            ("no tail: waits in the slot below", waits_behind(tail - 1, &[(4242, "hog", 100)]), nothing()),
            ("no tail, but waits adding up to NEIGHBOUR_WAIT_SHARE", waits_behind(tail - 1, &[(4242, "hog", 1_000)]), neighbour(1.0)),
            ("no tail, waits just under NEIGHBOUR_WAIT_SHARE", waits_behind(tail - 1, &[(4242, "hog", 999)]), nothing()),
            ("the server's own thread held it", waits_behind(tail, &[(7, "nginx", 100)]), nothing()),
            ("the CPU was idle: wake-up latency", waits_behind(tail, &[(0, "swapper/1", 100)]), nothing()),
        ];
        Table::new(noisy_neighbour, cases)
    }

    #[test]
    fn the_neighbour_is_named_with_its_pid_and_the_fix() {
        let r = waits_behind(
            hist::slot_of((RUNQ_P99_US * 1e3) as u64),
            &[(4242, "hog", 100)],
        );
        let f = noisy_neighbour(&r).unwrap();
        for part in ["hog (pid 4242)", "100% of their run-queue wait", "taskset"] {
            assert!(f.summary.contains(part), "{part}: {}", f.summary);
        }
        // Ranked above the run-queue tail it causes.
        let kinds: Vec<FindingKind> = crate::rules::findings(&r).iter().map(|f| f.kind).collect();
        let at = |k| kinds.iter().position(|x| *x == k).unwrap();
        assert!(
            at(FindingKind::NoisyNeighbour) < at(FindingKind::RunqTail),
            "{kinds:?}"
        );
    }

    fn runq_tail_table() -> Table {
        let tail = |runq_p99_us: f64, switches_per_request: f64| {
            finds(
                FindingKind::RunqTail,
                Severity::Warning,
                &[
                    ("runq_p99_us", runq_p99_us),
                    ("involuntary_switches_per_request", switches_per_request),
                    ("p99_us", 1_000.0),
                ],
            )
        };
        let (below, at, above) = (RUNQ_P99_US - 1.0, RUNQ_P99_US, RUNQ_P99_US + 1.0);
        let mut none_completed = runq_p99(above);
        none_completed.load.completed = 0;
        // The histogram slot a wait of RUNQ_P99_US falls in; a p99 is read as its slot's upper bound.
        let slot = hist::slot_of((RUNQ_P99_US * 1e3) as u64);
        let read_as = |slot: u32| hist::slot_upper_bound(slot) as f64 / 1e3;
        // 2,500 involuntary switches over the window's requests.
        let switches = 2_500.0 / (RPS * WINDOW_S) as f64;
        #[rustfmt::skip]
        let cases = [
            ("run-queue p99 just below", runq_p99(below), nothing()),
            ("run-queue p99 at RUNQ_P99_US", runq_p99(at), tail(at, 0.0)),
            ("run-queue p99 just above", runq_p99(above), tail(above, 0.0)),
            ("no request completed", none_completed, nothing()),
            ("recorded: waits in the slot below RUNQ_P99_US's", runq_waits_in(slot - 1), nothing()),
            ("recorded: waits in RUNQ_P99_US's slot", runq_waits_in(slot), tail(read_as(slot), switches)),
            ("recorded: waits in the slot above", runq_waits_in(slot + 1), tail(read_as(slot + 1), switches)),
        ];
        Table::new(runq_tail, cases)
    }

    /// A closed-loop run whose load generator kept `share` of its connections busy (a mean
    /// latency of 1 s: throughput is the busy connections) while its busiest thread was `busiest`.
    fn concurrency(share: f64, busiest: f64) -> RunReport {
        let mut run = quiet_run();
        run.load.latency_us.mean = 1e6;
        run.load.throughput_rps = share * run.load.config.connections as f64;
        run.load.client_cpu.max_thread_utilization = busiest;
        run
    }

    fn client_concurrency_short_table() -> Table {
        let connections = quiet_run().load.config.connections as f64;
        let short = |share: f64| {
            finds(
                FindingKind::ClientConcurrencyShort,
                Severity::Warning,
                &[
                    ("busy_connections", share * connections),
                    ("requested_connections", connections),
                ],
            )
        };
        let share = CLIENT_CONCURRENCY_SHARE;
        let busy = CLIENT_CONCURRENCY_BUSY;
        let mut open_loop = concurrency(0.25, 1.0);
        open_loop.load.config.rate = Some(1_000.0);
        let mut none_completed = concurrency(0.25, 1.0);
        none_completed.load.completed = 0;
        let mut no_connections = concurrency(0.25, 1.0);
        no_connections.load.config.connections = 0;
        #[rustfmt::skip]
        let cases = [
            ("busy connections just below the share", concurrency(share - 0.01, 1.0), short(share - 0.01)),
            ("busy connections at CLIENT_CONCURRENCY_SHARE", concurrency(share, 1.0), nothing()),
            ("busy connections just above the share", concurrency(share + 0.01, 1.0), nothing()),
            ("busiest thread just below", concurrency(0.25, busy - 0.01), nothing()),
            ("busiest thread at CLIENT_CONCURRENCY_BUSY", concurrency(0.25, busy), short(0.25)),
            ("busiest thread just above", concurrency(0.25, busy + 0.01), short(0.25)),
            ("open loop", open_loop, nothing()),
            ("no request completed", none_completed, nothing()),
            ("no connection asked for", no_connections, nothing()),
        ];
        Table::new(client_concurrency_short, cases)
    }

    fn saturated(run: &RunReport) -> String {
        server_cpu_saturated(run)
            .expect("a 98% busy thread is saturated")
            .summary
    }

    #[test]
    fn a_saturated_server_names_its_syscalls_or_says_they_were_not_recorded() {
        assert!(
            saturated(&busy_server(0.98, false).build()).contains("sys goes to writev 1.0/req")
        );
        let off = saturated(&busy_server(0.98, true).build());
        assert!(
            off.contains("syscalls not recorded (--syscalls off)"),
            "{off}"
        );
        assert!(!off.contains("sys goes to"), "{off}");
    }

    #[test]
    fn a_saturated_servers_sampled_syscalls_say_how_closely_they_are_known() {
        let mut run = busy_server(0.98, false).build();
        run.server.syscalls[0].count_error = Some(0.123);
        let text = saturated(&run);
        assert!(text.contains("sys goes to writev 1.0/req ±12 %"), "{text}");
        // Below 1 %: "±0 %" would read as an exact count.
        run.server.syscalls[0].count_error = Some(0.004);
        let text = saturated(&run);
        assert!(
            text.contains("writev 1.0/req") && !text.contains('±'),
            "{text}"
        );
    }
}
