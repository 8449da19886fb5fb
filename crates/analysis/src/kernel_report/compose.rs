//! The composer: one side's KernelReport between two samples, from the deltas of every counter.

use std::collections::BTreeMap;

use srvprof_common::lost;

use super::deltas::{scaled, syscall_deltas};
use super::irq::{hardirq_deltas, softirq_deltas};
use super::sampling::{
    Basis, MIN_TRACED_SWITCHES, group_switches, traced_fraction, traced_share_by, traced_syscalls,
};
use super::tcp::{host_tcp_report, tcp_report};
use super::{
    KernelReport, LatencyUs, SyscallReport, TOP_WAKERS, TOP_WAKEUPS, ThreadReport, WakerReport,
    WakeupReport,
};
use crate::names::syscall_name;
use crate::record::{CpuUse, ExitRecord, Reading, ThreadCounters};

fn wakeup_deltas(
    start: &Reading,
    end: &Reading,
    group: u32,
    threads: &[ThreadReport],
) -> Vec<WakeupReport> {
    let before: BTreeMap<(u32, u32), u64> = start
        .kernel
        .wakeups
        .iter()
        .map(|w| ((w.waker_tid, w.wakee_tid), w.count))
        .collect();
    let comm_of = |tid: u32| {
        threads
            .iter()
            .find(|t| t.tid == tid)
            .map(|t| t.comm.clone())
            .or_else(|| {
                end.kernel
                    .threads
                    .iter()
                    .find(|t| t.tid == tid)
                    .map(|t| t.comm.clone())
            })
            .unwrap_or_default()
    };
    let mut out: Vec<WakeupReport> = end
        .kernel
        .wakeups
        .iter()
        .filter(|w| w.wakee_group == group)
        .filter_map(|w| {
            let count = w.count.saturating_sub(
                before
                    .get(&(w.waker_tid, w.wakee_tid))
                    .copied()
                    .unwrap_or(0),
            );
            (count > 0).then(|| WakeupReport {
                waker_pid: w.waker_pid,
                waker_tid: w.waker_tid,
                waker_comm: w.waker_comm.clone(),
                wakee_tid: w.wakee_tid,
                wakee_comm: comm_of(w.wakee_tid),
                count,
            })
        })
        .collect();
    out.sort_by(|a, b| {
        b.count
            .cmp(&a.count)
            .then(a.waker_tid.cmp(&b.waker_tid))
            .then(a.wakee_tid.cmp(&b.wakee_tid))
    });
    out
}

/// Every pair's wakeups summed by the waker's name and the woken thread's name, but a thread's
/// by its siblings of its own name (workers passing a lock on): `pid_of` a watched thread.
fn wakers_of(pairs: &[WakeupReport], pid_of: impl Fn(u32) -> Option<u32>) -> Vec<WakerReport> {
    let mut by: BTreeMap<(&str, &str), BTreeMap<u32, u64>> = BTreeMap::new();
    let sibling =
        |w: &WakeupReport| w.waker_comm == w.wakee_comm && pid_of(w.wakee_tid) == Some(w.waker_pid);
    for w in pairs.iter().filter(|w| !sibling(w)) {
        let pids = by.entry((&w.waker_comm, &w.wakee_comm)).or_default();
        *pids.entry(w.waker_pid).or_default() += w.count;
    }
    let mut out: Vec<WakerReport> = (by.into_iter())
        .map(|((waker, wakee), pids)| WakerReport {
            waker_pid: (pids.iter())
                .max_by_key(|(_, n)| **n)
                .map_or(0, |(p, _)| *p),
            waker_comm: waker.to_string(),
            wakee_comm: wakee.to_string(),
            count: pids.values().sum(),
            processes: pids.len() as u64,
        })
        .collect();
    out.sort_by_key(|w| std::cmp::Reverse(w.count));
    out.truncate(TOP_WAKERS);
    out
}

/// Of a thread's charged on-CPU time, what the scheduler charged before its switch-ins (0 when no
/// switch was stamped, as for counters of an older recording).
fn precharged(d: &ThreadCounters) -> u64 {
    match d.stamped_oncpu_ns {
        0 => 0,
        stamped => d.oncpu_ns.saturating_sub(stamped),
    }
}

fn thread_delta(end: &ThreadCounters, start: Option<&ThreadCounters>) -> ThreadCounters {
    let Some(s) = start else { return end.clone() };
    ThreadCounters {
        voluntary_switches: end.voluntary_switches.saturating_sub(s.voluntary_switches),
        involuntary_switches: end
            .involuntary_switches
            .saturating_sub(s.involuntary_switches),
        oncpu_ns: end.oncpu_ns.saturating_sub(s.oncpu_ns),
        stamped_oncpu_ns: end.stamped_oncpu_ns.saturating_sub(s.stamped_oncpu_ns),
        offcpu_ns: end.offcpu_ns.saturating_sub(s.offcpu_ns),
        runq_ns: end.runq_ns.saturating_sub(s.runq_ns),
        runq_count: end.runq_count.saturating_sub(s.runq_count),
        migrations: end.migrations.saturating_sub(s.migrations),
        syscalls: end.syscalls.saturating_sub(s.syscalls),
        syscall_ns: end.syscall_ns.saturating_sub(s.syscall_ns),
        syscalls_blocked: end.syscalls_blocked.saturating_sub(s.syscalls_blocked),
        syscall_blocked_ns: end.syscall_blocked_ns.saturating_sub(s.syscall_blocked_ns),
        syscalls_unblocked: end.syscalls_unblocked.saturating_sub(s.syscalls_unblocked),
        syscall_rest_ns: end.syscall_rest_ns.saturating_sub(s.syscall_rest_ns),
        reclaims: end.reclaims.saturating_sub(s.reclaims),
        reclaim_ns: end.reclaim_ns.saturating_sub(s.reclaim_ns),
        runq_preempted_ns: end.runq_preempted_ns.saturating_sub(s.runq_preempted_ns),
        runq_preempted_count: end
            .runq_preempted_count
            .saturating_sub(s.runq_preempted_count),
        ..end.clone()
    }
}

fn cpu_delta(end: Option<&CpuUse>, start: Option<&CpuUse>) -> (u64, u64) {
    match (end, start) {
        (Some(e), Some(s)) => (
            e.user_ns.saturating_sub(s.user_ns),
            e.sys_ns.saturating_sub(s.sys_ns),
        ),
        (Some(e), None) => (e.user_ns, e.sys_ns),
        _ => (0, 0),
    }
}

/// The report for `group` between two samples. Threads and processes first seen after `start`
/// count from zero (they were born in the window).
pub fn kernel_report<'a>(
    start: &'a Reading,
    end: &'a Reading,
    group: u32,
    exits: &[ExitRecord],
) -> KernelReport {
    let duration_s = end.monotonic_ns.saturating_sub(start.monotonic_ns) as f64 / 1e9;
    let share = traced_share_by(start, end, group);
    let fraction = share.map(|(share, _)| share);
    let mut r = KernelReport {
        duration_s,
        syscalls_off: end.kernel.syscalls_off,
        traced_fraction: traced_fraction(start, end),
        traced_share: fraction,
        scaled_by: share.map(|(_, basis)| basis.name().to_string()),
        // Busy, yet nothing in the windows: a burst they all missed, not an idle group.
        syscalls_missed: matches!(share, Some((_, Basis::Time)))
            && traced_syscalls(start, end, group) == 0
            && group_switches(start, end, group) >= MIN_TRACED_SWITCHES,
        ..Default::default()
    };

    // Sampled mode with the sleeps counted apart (not in older recordings): a syscall's sleeps
    // are exact, only the rest is scaled from the windows.
    let split = fraction.is_some() && end.kernel.sleeps_apart();
    let start_threads: BTreeMap<u32, &ThreadCounters> =
        start.kernel.threads.iter().map(|t| (t.tid, t)).collect();
    // By tid: a server of thousands of threads made a search per thread cost milliseconds.
    let by_tid = |cpu: &'a [CpuUse]| -> BTreeMap<u32, &'a CpuUse> {
        cpu.iter().map(|c| (c.tid, c)).collect()
    };
    let (end_cpu, start_cpu) = (by_tid(&end.thread_cpu), by_tid(&start.thread_cpu));
    for t in end.kernel.threads.iter().filter(|t| t.group == group) {
        let d = thread_delta(t, start_threads.get(&t.tid).copied());
        r.memory.reclaims += d.reclaims;
        r.memory.reclaim_ns += d.reclaim_ns;
        let (user_ns, sys_ns) =
            cpu_delta(end_cpu.get(&t.tid).copied(), start_cpu.get(&t.tid).copied());
        let comm = (end_cpu.get(&t.tid))
            .map(|c| c.comm.clone())
            .filter(|c| !c.is_empty())
            .unwrap_or_else(|| d.comm.clone());
        r.threads.push(ThreadReport {
            tid: d.tid,
            pid: d.pid,
            comm,
            voluntary_switches: d.voluntary_switches,
            involuntary_switches: d.involuntary_switches,
            oncpu_ns: d.oncpu_ns,
            precharged_ns: precharged(&d),
            offcpu_ns: d.offcpu_ns,
            user_ns,
            sys_ns,
            runq_ns: d.runq_ns,
            runq_waits: d.runq_count,
            runq_preempted_ns: d.runq_preempted_ns,
            runq_preempted_waits: d.runq_preempted_count,
            migrations: d.migrations,
            syscalls: if split {
                d.syscalls_blocked + scaled(d.syscalls_unblocked, fraction)
            } else {
                scaled(d.syscalls, fraction)
            },
            syscall_ns: if split {
                d.syscall_blocked_ns + scaled(d.syscall_rest_ns, fraction)
            } else {
                scaled(d.syscall_ns, fraction)
            },
            cpus: (0..64).filter(|c| d.cpu_mask & (1u64 << c) != 0).collect(),
        });
    }
    // A thread that did nothing in the window is noise in a report about the window: only its
    // name is kept (an idle worker is a finding).
    let (busy, quiet): (Vec<ThreadReport>, Vec<ThreadReport>) =
        std::mem::take(&mut r.threads).into_iter().partition(|t| {
            t.voluntary_switches + t.involuntary_switches + t.syscalls + t.user_ns + t.sys_ns > 0
        });
    r.threads = busy;
    r.quiet_threads = quiet
        .into_iter()
        .map(|t| super::QuietThread {
            tid: t.tid,
            pid: t.pid,
            comm: t.comm,
        })
        .collect();

    let mut pids: Vec<u32> = end
        .process_cpu
        .iter()
        .filter(|p| p.group == group)
        .map(|p| p.pid)
        .collect();
    pids.extend(
        end.kernel
            .threads
            .iter()
            .filter(|t| t.group == group)
            .map(|t| t.pid),
    );
    pids.sort_unstable();
    pids.dedup();
    for t in &r.threads {
        r.totals.voluntary_switches += t.voluntary_switches;
        r.totals.involuntary_switches += t.involuntary_switches;
        r.totals.migrations += t.migrations;
        r.totals.syscalls += t.syscalls;
        r.totals.oncpu_ns += t.oncpu_ns;
        r.totals.precharged_ns += t.precharged_ns;
        r.totals.offcpu_ns += t.offcpu_ns;
    }
    // Process CPU time from /proc/PID/stat includes threads that exited in the window.
    for pid in &pids {
        let of = |r: &'a Reading| r.process_cpu.iter().find(|c| c.pid == *pid);
        let (u, s) = cpu_delta(of(end), of(start));
        r.totals.user_ns += u;
        r.totals.sys_ns += s;
    }
    r.parents = pids
        .iter()
        .filter_map(|p| end.parents.get(p).map(|pp| (*p, *pp)))
        .collect();
    r.totals.threads = r.threads.len();
    r.totals.processes = pids.len();
    r.pids = pids;

    let g = group as usize;
    if let (Some(e), Some(s)) = (end.kernel.runq_hist.get(g), start.kernel.runq_hist.get(g)) {
        r.runq_latency_us = LatencyUs::from_hist(&e.minus(s));
    }
    if let (Some(e), Some(s)) = (
        end.kernel.offcpu_hist.get(g),
        start.kernel.offcpu_hist.get(g),
    ) {
        r.offcpu_us = LatencyUs::from_hist(&e.minus(s));
    }

    let seen = syscall_deltas(start, end, group, |k| Some(&k.syscalls));
    if split {
        let asleep = syscall_deltas(start, end, group, |k| k.blocked_syscalls.as_ref());
        let awake = syscall_deltas(start, end, group, |k| k.unblocked_syscalls.as_ref());
        let mut nrs: Vec<u32> = seen.keys().chain(asleep.keys()).copied().collect();
        nrs.sort_unstable();
        nrs.dedup();
        for nr in nrs {
            let b = asleep.get(&nr).copied().unwrap_or_default();
            let a = awake.get(&nr).copied().unwrap_or_default();
            let count = b.count + scaled(a.count, fraction);
            if count == 0 {
                continue;
            }
            r.syscalls.push(SyscallReport {
                name: syscall_name(nr),
                nr,
                count,
                total_ns: b.total_ns + scaled(a.total_ns, fraction),
                blocked: Some(b.count),
                blocked_ns: Some(b.total_ns),
                ..Default::default()
            });
        }
        r.syscalls_blocked = Some(asleep.values().map(|c| c.count).sum());
        r.syscall_blocked_ns = Some(asleep.values().map(|c| c.total_ns).sum());
    } else {
        for (nr, d) in seen {
            r.syscalls.push(SyscallReport {
                name: syscall_name(nr),
                nr,
                count: scaled(d.count, fraction),
                total_ns: scaled(d.total_ns, fraction),
                ..Default::default()
            });
        }
    }
    r.syscalls
        .sort_by(|a, b| b.count.cmp(&a.count).then(a.nr.cmp(&b.nr)));

    r.wakeups = wakeup_deltas(start, end, group, &r.threads);
    let pids: BTreeMap<u32, u32> = (end.kernel.threads.iter())
        .map(|t| (t.tid, t.pid))
        .collect();
    r.wakers = wakers_of(&r.wakeups, |tid| pids.get(&tid).copied());
    r.wakeups.truncate(TOP_WAKEUPS);
    r.softirqs = softirq_deltas(start, end);
    r.hardirqs = hardirq_deltas(start, end);
    r.exits = exits.iter().filter(|e| e.group == group).cloned().collect();
    r.cpu_limits = super::cpu_limits::cpu_limit_deltas(start, end, group);
    r.runq_holders = super::runq_holders::holder_deltas(start, end, group);
    r.disk_waits = super::disk_waits::disk_wait_deltas(start, end, group);
    r.locks = super::locks::lock_deltas(start, end, group, &r.threads);
    super::memory::fault_deltas(start, end, group, &mut r.memory);
    r.families = super::family_figures(start, end, group);
    if group == srvprof_common::GROUP_SERVER {
        let mut outbound = end.outbound.clone().unwrap_or_default();
        // Waits are the span's: those before it are the start's.
        for o in &mut outbound {
            let before = (start.outbound.iter().flatten()).find(|b| b.remote == o.remote);
            if let Some(b) = before {
                o.waits = o.waits.saturating_sub(b.waits);
                o.wait_ns = o.wait_ns.saturating_sub(b.wait_ns);
                o.answers = o.answers.saturating_sub(b.answers);
                o.answer_ns = o.answer_ns.saturating_sub(b.answer_ns);
                if let (Some(end), Some(start)) = (&o.answer_lengths, &b.answer_lengths) {
                    o.answer_lengths = Some(end.minus(start)).filter(|h| h.total() > 0);
                }
            }
        }
        outbound.sort_by_key(|o| std::cmp::Reverse(o.max_connections));
        r.outbound = outbound;
    }

    r.tcp = tcp_report(start, end, group);
    r.host_tcp = host_tcp_report(start, end);
    for (i, name) in lost::losses() {
        r.lost_events.insert(
            name.to_ascii_lowercase(),
            end.kernel.lost.get(i as usize).copied().unwrap_or(0),
        );
    }
    // Counted in the same per-CPU array, but not losses: reported for the window.
    let in_window = |i: u32| {
        let at = |s: &Reading| s.kernel.lost.get(i as usize).copied().unwrap_or(0);
        at(end).saturating_sub(at(start))
    };
    r.switch_ins_unseen = in_window(lost::SWITCH_INS_UNSEEN);
    r.stack_ids_collided = in_window(lost::STACK_TRACES_FULL);
    r.user_stack_ring_full = in_window(lost::USER_STACK_RING_FULL);
    r.oncpu_untimed_samples = in_window(lost::oncpu_untimed(group));
    r.oncpu_ticks = super::OncpuTicks {
        at_switch: in_window(lost::ONCPU_TICK_AT_SWITCH),
        not_theirs: in_window(lost::ONCPU_TICK_NOT_THEIRS),
        skipped: in_window(lost::ONCPU_TICKS_SKIPPED),
        restarted: in_window(lost::ONCPU_TIMER_RESTARTED),
    };
    r
}
