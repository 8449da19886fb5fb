//! Reads the scheduler probes: per-thread switches and times, off-CPU and run-queue histograms.
//!
//! A thread's on- and off-CPU time cover every instant of a reading's window: the programs add a
//! period when the thread next switches out (crates/ebpf/src/sched.rs), so each reading adds the
//! period in progress at its own time, and a thread of a watched process that was off-CPU since
//! before srvprof attached (no event named it yet) is entered at the reading as off-CPU since then.

use std::collections::BTreeSet;

use aya::{
    Ebpf,
    maps::{HashMap, MapData, PerCpuArray},
};
use srvprof_common::{
    CountTime, DiskWaitKey, HolderKey, HolderWait, LockWait, LockWaitKey, NUM_GROUPS, RunningSlot,
    ThreadStats, WakeCount, WakeKey, maps,
};

use super::family::{Attaching, FamilyReader};
use super::{map_error, map_mut, map_ref, read_histograms, target};
use crate::error::SrvprofError;
use crate::procfs;
use srvprof_analysis::record::{
    DiskWait, KernelCounters, LockWaitRecord, RunqHolder, ThreadCounters, WakePair,
};

/// The programs that track the targets, attached by the probes' loop, each to the BTF tracepoint
/// of its name.
pub const PROGRAMS: &[&str] = &[
    "sched_switch",
    "sched_wakeup",
    "sched_wakeup_new",
    "sched_waking",
    "task_rename",
    "sched_migrate_task",
    "sched_process_fork",
];

/// What the scheduler's readings keep from one to the next.
#[derive(Default)]
pub struct Reader {
    /// The threads of the watched processes have been listed from /proc once (`read`'s seed).
    threads_seeded: bool,
    /// The file each (process, descriptor) of a disk wait last named: a reading finds the
    /// descriptors a server opens per request closed more often than not.
    disk_paths: std::collections::HashMap<(u32, i32), String>,
}

impl FamilyReader for Reader {
    const PROGRAMS: &'static [&'static str] = PROGRAMS;

    fn attach(_: &mut Attaching<'_>) -> Result<Self, SrvprofError> {
        Ok(Self::default())
    }

    fn read(&mut self, ebpf: &mut Ebpf, counters: &mut KernelCounters) -> Result<(), SrvprofError> {
        read(ebpf, counters, !self.threads_seeded)?;
        self.threads_seeded = true;
        for w in &mut counters.disk_waits {
            if w.path.is_empty() {
                if let Some(path) = self.disk_paths.get(&(w.pid, w.fd)) {
                    w.path.clone_from(path);
                }
            } else {
                self.disk_paths.insert((w.pid, w.fd), w.path.clone());
            }
        }
        Ok(())
    }
}

/// `counters.monotonic_ns` is the reading's time (CLOCK_MONOTONIC, the programs' clock). With
/// `seed`, the threads of the watched processes no program has seen yet are listed from /proc
/// and get their entries; after that first reading, a thread starts by running, and the programs
/// see it then (listing /proc/PID/task at every reading took a server of 2,000 threads
/// milliseconds of kernel time in one piece).
pub fn read(
    ebpf: &mut Ebpf,
    counters: &mut KernelCounters,
    seed: bool,
) -> Result<(), SrvprofError> {
    let now = counters.monotonic_ns;
    let mut stats: Vec<(u32, ThreadStats)> = match threads_in_batches(ebpf) {
        Some(stats) => stats,
        None => {
            let threads: HashMap<&MapData, u32, ThreadStats> = map_ref(ebpf, maps::THREADS)?;
            // Two system calls a thread: thousands of threads take milliseconds.
            let mut pace = crate::realtime::Pace::new();
            (threads.iter())
                .inspect(|_| pace.tick())
                .filter_map(Result::ok)
                .collect()
        }
    };
    if seed {
        stats.extend(seed_unseen_threads(ebpf, &stats, now)?);
    }
    counters.threads = stats
        .iter()
        .map(|(tid, st)| thread_counters(*tid, st, now))
        .collect();
    counters.threads.sort_by_key(|t| t.tid);
    counters.wakeups = map_entries(ebpf, maps::WAKEUPS, |k: WakeKey, v: WakeCount| WakePair {
        waker_pid: v.waker_tgid,
        waker_tid: k.waker_tid,
        waker_comm: comm_string(&v.waker_comm),
        wakee_tid: k.wakee_tid,
        wakee_group: v.wakee_group,
        count: v.count,
    })?;
    counters.runq_holders =
        map_entries(ebpf, maps::RUNQ_HOLDERS, |k: HolderKey, v: HolderWait| {
            RunqHolder {
                holder_pid: v.holder_tgid,
                holder_tid: k.holder_tid,
                holder_comm: comm_string(&v.holder_comm),
                group: k.group,
                waits: v.waits,
                wait_ns: v.wait_ns,
            }
        })?;
    counters.disk_waits = map_entries(ebpf, maps::DISK_WAITS, |k: DiskWaitKey, v: CountTime| {
        DiskWait {
            pid: k.tgid,
            group: k.group,
            nr_slot: k.nr_slot,
            fd: k.fd,
            // Named while the descriptor is open; Probes::read names one closed by now by the file it
            // named at an earlier reading.
            path: (k.fd >= 0)
                .then(|| crate::procfs::fd_target(k.tgid, k.fd))
                .flatten()
                .unwrap_or_default(),
            count: v.count,
            total_ns: v.total_ns,
        }
    })?;
    counters.lock_waits = map_entries(ebpf, maps::LOCK_WAITS, |k: LockWaitKey, v: LockWait| {
        LockWaitRecord {
            pid: k.tgid,
            group: k.group,
            uaddr: k.uaddr,
            waiter_tid: k.waiter_tid,
            holder_tid: k.holder_tid,
            holder_pid: v.holder_tgid,
            lock_protocol: k.lock_protocol != 0,
            waits: v.waits,
            wait_ns: v.wait_ns,
            holder_slept_nr: v.holder_slept_nr,
            holder_slept_ns: v.holder_slept_ns,
        }
    })?;
    counters.offcpu_hist = read_histograms(ebpf, maps::OFFCPU_HIST, NUM_GROUPS)?;
    counters.runq_hist = read_histograms(ebpf, maps::RUNQ_HIST, NUM_GROUPS)?;
    counters.oncpu_run_hist = read_histograms(ebpf, maps::ONCPU_RUN_HIST, NUM_GROUPS)?;
    counters.run_wall_hist = read_histograms(ebpf, maps::RUN_WALL_HIST, NUM_GROUPS)?;
    counters.runq_preempted_hist = read_histograms(ebpf, maps::RUNQ_PREEMPTED_HIST, NUM_GROUPS)?;
    Ok(())
}

/// Every entry of THREADS, 256 to a system call (BPF_MAP_LOOKUP_BATCH, Linux 5.6; aya
/// has no call for it): iterated, each entry is two system calls, and a server of 2,000 threads
/// took 40 % of the sampler's time at each reading. None where the kernel refuses it.
fn threads_in_batches(ebpf: &Ebpf) -> Option<Vec<(u32, ThreadStats)>> {
    use std::os::fd::{AsFd, AsRawFd};
    /// bpf_attr's part for the BPF_MAP_*_BATCH commands.
    #[repr(C)]
    struct BatchAttr {
        in_batch: u64,
        out_batch: u64,
        keys: u64,
        values: u64,
        count: u32,
        map_fd: u32,
        elem_flags: u64,
        flags: u64,
    }
    const BPF_MAP_LOOKUP_BATCH: libc::c_long = 24;
    // Each call holds the CPU for as long as it copies: a breath between two.
    const BATCH: usize = 256;
    let Some(aya::maps::Map::HashMap(data)) = ebpf.map(maps::THREADS) else {
        return None;
    };
    let fd = data.fd().as_fd().as_raw_fd();
    let mut keys = vec![0u32; BATCH];
    let mut values = vec![ThreadStats::default(); BATCH];
    // A hash map's batch token is the bucket to go on from.
    let (mut token_in, mut token_out) = (0u32, 0u32);
    let mut out = Vec::new();
    for call in 0.. {
        let mut attr = BatchAttr {
            in_batch: if call == 0 {
                0
            } else {
                &token_in as *const u32 as u64
            },
            out_batch: &mut token_out as *mut u32 as u64,
            keys: keys.as_mut_ptr() as u64,
            values: values.as_mut_ptr() as u64,
            count: BATCH as u32,
            map_fd: fd as u32,
            elem_flags: 0,
            flags: 0,
        };
        // SAFETY: the kernel writes at most `count` keys and values of the map's sizes (u32 and
        // ThreadStats, the types the map was made with) into buffers of BATCH each, and a u32
        // token; every pointer outlives the call.
        let rc = unsafe {
            libc::syscall(
                libc::SYS_bpf,
                BPF_MAP_LOOKUP_BATCH,
                &mut attr as *mut BatchAttr,
                std::mem::size_of::<BatchAttr>() as u32,
            )
        };
        let error = (rc < 0).then(|| std::io::Error::last_os_error().raw_os_error());
        let n = (attr.count as usize).min(BATCH);
        out.extend(keys[..n].iter().copied().zip(values[..n].iter().copied()));
        match error {
            None => {
                token_in = token_out;
                crate::realtime::breathe();
            }
            // The end of the map, with the last entries in this call's.
            Some(Some(libc::ENOENT)) => return Some(out),
            Some(_) => return None,
        }
    }
    None
}

/// Every entry of the hash map `name`, each made into a T.
pub(super) fn map_entries<K: aya::Pod, V: aya::Pod, T>(
    ebpf: &Ebpf,
    name: &str,
    each: impl Fn(K, V) -> T,
) -> Result<Vec<T>, SrvprofError> {
    let map: HashMap<&MapData, K, V> = map_ref(ebpf, name)?;
    Ok(map
        .iter()
        .filter_map(Result::ok)
        .map(|(k, v)| each(k, v))
        .collect())
}

/// Context switches (voluntary and involuntary) of each group's threads so far, counted per group
/// by the programs: a window's edges read one slot per group and CPU.
pub fn group_switches(ebpf: &Ebpf) -> Result<[u64; NUM_GROUPS as usize], SrvprofError> {
    let switches: PerCpuArray<&MapData, u64> = map_ref(ebpf, maps::GROUP_SWITCHES)?;
    let mut out = [0u64; NUM_GROUPS as usize];
    for (group, n) in (0..NUM_GROUPS).zip(out.iter_mut()) {
        let per_cpu = switches
            .get(&group, 0)
            .map_err(|e| map_error(maps::GROUP_SWITCHES, e))?;
        *n = per_cpu.iter().sum();
    }
    Ok(out)
}

/// Each group's watched threads' time on a CPU so far: the programs' sum at switch-outs, plus
/// the slice so far of each thread running now (CLOCK_MONOTONIC, the programs' clock).
pub fn group_oncpu(ebpf: &Ebpf) -> Result<[u64; NUM_GROUPS as usize], SrvprofError> {
    let oncpu: PerCpuArray<&MapData, u64> = map_ref(ebpf, maps::GROUP_ONCPU)?;
    let running: PerCpuArray<&MapData, RunningSlot> = map_ref(ebpf, maps::RUNNING)?;
    let mut out = [0u64; NUM_GROUPS as usize];
    for (group, n) in (0..NUM_GROUPS).zip(out.iter_mut()) {
        let per_cpu = (oncpu.get(&group, 0)).map_err(|e| map_error(maps::GROUP_ONCPU, e))?;
        *n = per_cpu.iter().sum();
    }
    let slots = (running.get(&0, 0)).map_err(|e| map_error(maps::RUNNING, e))?;
    let now = crate::clock::monotonic_ns();
    for slot in slots.iter() {
        if let Some(n) = (slot.group_plus_one.checked_sub(1)).and_then(|g| out.get_mut(g as usize))
        {
            *n += now.saturating_sub(slot.since_ns);
        }
    }
    Ok(out)
}

/// Threads of the watched processes that no program has seen yet: off-CPU since before srvprof
/// attached (a running or woken thread would have been seen). Each gets its entry now, as if it
/// had switched out at `now` with the scheduler's on-CPU total of /proc/PID/task/TID/schedstat,
/// so its off-CPU time counts from this reading, not from its first switch-in. An entry a program
/// made meanwhile is kept (BPF_NOEXIST). A thread that was in fact running, without a switch since
/// the attach, has its next period split with a total up to a tick old.
fn seed_unseen_threads(
    ebpf: &mut Ebpf,
    known: &[(u32, ThreadStats)],
    now: u64,
) -> Result<Vec<(u32, ThreadStats)>, SrvprofError> {
    let known: BTreeSet<u32> = known.iter().map(|(tid, _)| *tid).collect();
    let mut fresh = Vec::new();
    for (pid, group) in target::watched(ebpf)? {
        for tid in procfs::thread_ids(pid) {
            if known.contains(&tid) {
                continue;
            }
            let Some(exec) = procfs::thread_oncpu_ns(pid, tid) else {
                continue;
            };
            let mut comm = [0u8; 16];
            let name = procfs::comm(pid, tid).unwrap_or_default();
            let n = name.len().min(15);
            comm[..n].copy_from_slice(&name.as_bytes()[..n]);
            fresh.push((
                tid,
                ThreadStats {
                    tgid: pid,
                    group,
                    comm,
                    last_switch_out_ns: now,
                    exec_at_switch_out_ns: exec,
                    ..ThreadStats::default()
                },
            ));
        }
    }
    if fresh.is_empty() {
        return Ok(fresh);
    }
    let mut threads: HashMap<&mut MapData, u32, ThreadStats> = map_mut(ebpf, maps::THREADS)?;
    // BPF_NOEXIST: a thread a program saw meanwhile keeps its own entry (and is read next time).
    fresh.retain(|(tid, st)| threads.insert(tid, st, 1).is_ok());
    Ok(fresh)
}

/// The on- and off-CPU time of the period in progress at `now` (ns), which the programs add only
/// when the thread next switches out: on-CPU since its last switch-in if it runs, else off-CPU
/// since its last switch-out (0 for one that exited, or never switched out).
pub fn period_in_progress(st: &ThreadStats, now: u64) -> (u64, u64) {
    if st.last_switch_in_ns != 0 {
        let off = if st.last_switch_out_ns != 0 {
            st.last_switch_in_ns.saturating_sub(st.last_switch_out_ns)
        } else {
            0
        };
        (now.saturating_sub(st.last_switch_in_ns), off)
    } else if st.last_switch_out_ns != 0 {
        (0, now.saturating_sub(st.last_switch_out_ns))
    } else {
        (0, 0)
    }
}

/// A thread's counters at `now`, the period in progress included.
pub fn thread_counters(tid: u32, st: &ThreadStats, now: u64) -> ThreadCounters {
    let (on, off) = period_in_progress(st, now);
    ThreadCounters {
        tid,
        pid: st.tgid,
        group: st.group,
        comm: comm_string(&st.comm),
        voluntary_switches: st.voluntary_switches,
        involuntary_switches: st.involuntary_switches,
        oncpu_ns: st.oncpu_ns + on,
        stamped_oncpu_ns: st.stamped_oncpu_ns + on,
        offcpu_ns: st.offcpu_ns + off,
        runq_ns: st.runq_ns,
        runq_count: st.runq_count,
        runq_preempted_ns: st.runq_preempted_ns,
        runq_preempted_count: st.runq_preempted_count,
        migrations: st.migrations,
        syscalls: st.syscalls,
        syscall_ns: st.syscall_ns,
        cpu_mask: st.cpu_mask,
        syscalls_blocked: st.syscalls_blocked,
        syscall_blocked_ns: st.syscall_blocked_ns,
        syscalls_unblocked: st.syscalls_unblocked,
        syscall_rest_ns: st.syscall_rest_ns,
        reclaims: st.reclaims,
        reclaim_ns: st.reclaim_ns,
    }
}

pub fn comm_string(comm: &[u8; 16]) -> String {
    let end = comm.iter().position(|b| *b == 0).unwrap_or(comm.len());
    String::from_utf8_lossy(&comm[..end]).into_owned()
}

#[cfg(test)]
mod tests {
    use super::*;

    fn stats(oncpu: u64, offcpu: u64, last_in: u64, last_out: u64) -> ThreadStats {
        ThreadStats {
            oncpu_ns: oncpu,
            offcpu_ns: offcpu,
            last_switch_in_ns: last_in,
            last_switch_out_ns: last_out,
            ..ThreadStats::default()
        }
    }

    #[test]
    fn a_reading_adds_the_period_in_progress() {
        // Off-CPU since 1,000: 500 more of it at 1,500.
        let c = thread_counters(7, &stats(10, 20, 0, 1_000), 1_500);
        assert_eq!((c.oncpu_ns, c.offcpu_ns), (10, 520));
        // Switched out at 1,000, in at 1,200, running at 1,500: the programs have added neither.
        let c = thread_counters(7, &stats(10, 20, 1_200, 1_000), 1_500);
        assert_eq!((c.oncpu_ns, c.offcpu_ns), (310, 220));
        // First seen switching in: no off-CPU period known before it.
        let c = thread_counters(7, &stats(0, 0, 1_200, 0), 1_500);
        assert_eq!((c.oncpu_ns, c.offcpu_ns), (300, 0));
        // Exited (its last switch-out cleared the time): nothing runs on.
        let c = thread_counters(7, &stats(10, 20, 0, 0), 1_500);
        assert_eq!((c.oncpu_ns, c.offcpu_ns), (10, 20));
        // A switch-out after the reading's clock was read: nothing negative.
        let c = thread_counters(7, &stats(10, 20, 0, 1_600), 1_500);
        assert_eq!((c.oncpu_ns, c.offcpu_ns), (10, 20));
    }

    #[test]
    fn schedstat_gives_the_first_field() {
        let pid = std::process::id();
        let exec = procfs::thread_oncpu_ns(pid, pid).expect("this process's schedstat");
        assert!(exec > 0);
        assert_eq!(procfs::thread_oncpu_ns(pid, u32::MAX), None);
    }
}
