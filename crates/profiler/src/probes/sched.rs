//! Reads the scheduler probes: per-thread switches and times, off-CPU and run-queue histograms.

use aya::{
    Ebpf,
    maps::{HashMap, MapData, PerCpuArray},
};
use srvprof_common::{HistSlots, NUM_GROUPS, ThreadStats, WakeCount, WakeKey, maps};

use super::{map_error, map_ref};
use crate::error::SrvprofError;
use srvprof_analysis::record::{KernelCounters, NsHistogram, ThreadCounters, WakePair};

pub fn read(ebpf: &Ebpf, counters: &mut KernelCounters) -> Result<(), SrvprofError> {
    let threads: HashMap<&MapData, u32, ThreadStats> = map_ref(ebpf, maps::THREADS)?;
    counters.threads = threads
        .iter()
        .filter_map(Result::ok)
        .map(|(tid, st)| thread_counters(tid, &st))
        .collect();
    counters.threads.sort_by_key(|t| t.tid);
    let wakeups: HashMap<&MapData, WakeKey, WakeCount> = map_ref(ebpf, maps::WAKEUPS)?;
    counters.wakeups = wakeups
        .iter()
        .filter_map(Result::ok)
        .map(|(k, v)| WakePair {
            waker_pid: v.waker_tgid,
            waker_tid: k.waker_tid,
            waker_comm: comm_string(&v.waker_comm),
            wakee_tid: k.wakee_tid,
            wakee_group: v.wakee_group,
            count: v.count,
        })
        .collect();
    counters.offcpu_hist = read_hist(ebpf, maps::OFFCPU_HIST)?;
    counters.runq_hist = read_hist(ebpf, maps::RUNQ_HIST)?;
    Ok(())
}

/// Context switches (voluntary and involuntary) of each group's threads so far: one walk of the
/// thread map, cheap enough for each window's edges.
pub fn group_switches(ebpf: &Ebpf) -> Result<[u64; NUM_GROUPS as usize], SrvprofError> {
    let threads: HashMap<&MapData, u32, ThreadStats> = map_ref(ebpf, maps::THREADS)?;
    let mut out = [0u64; NUM_GROUPS as usize];
    for (_, st) in threads.iter().filter_map(Result::ok) {
        if let Some(n) = out.get_mut(st.group as usize) {
            *n += st.voluntary_switches + st.involuntary_switches;
        }
    }
    Ok(out)
}

pub fn thread_counters(tid: u32, st: &ThreadStats) -> ThreadCounters {
    ThreadCounters {
        tid,
        pid: st.tgid,
        group: st.group,
        comm: comm_string(&st.comm),
        voluntary_switches: st.voluntary_switches,
        involuntary_switches: st.involuntary_switches,
        oncpu_ns: st.oncpu_ns,
        offcpu_ns: st.offcpu_ns,
        runq_ns: st.runq_ns,
        runq_count: st.runq_count,
        migrations: st.migrations,
        syscalls: st.syscalls,
        syscall_ns: st.syscall_ns,
        cpu_mask: st.cpu_mask,
    }
}

pub fn comm_string(comm: &[u8; 16]) -> String {
    let end = comm.iter().position(|b| *b == 0).unwrap_or(comm.len());
    String::from_utf8_lossy(&comm[..end]).into_owned()
}

fn read_hist(ebpf: &Ebpf, name: &str) -> Result<Vec<NsHistogram>, SrvprofError> {
    let map: PerCpuArray<&MapData, HistSlots> = map_ref(ebpf, name)?;
    let mut out = vec![NsHistogram::default(); NUM_GROUPS as usize];
    for (group, hist) in out.iter_mut().enumerate() {
        let per_cpu = map
            .get(&(group as u32), 0)
            .map_err(|e| map_error(name, e))?;
        for cpu in per_cpu.iter() {
            for (sum, n) in hist.slots.iter_mut().zip(&cpu.slots) {
                *sum += n;
            }
        }
    }
    Ok(out)
}
