//! Stop-the-world pauses of watched processes: the time from a runtime's function that stops
//! every thread of the process (Go's runtime.stopTheWorldWithSema, HotSpot's
//! SafepointSynchronize::begin) to the one that starts them again (startTheWorldWithSema,
//! SafepointSynchronize::end). Uprobes at both functions' entries, attached by userspace to the
//! processes whose binary or libjvm has them: no uretprobes (they break Go's stacks).

use aya_ebpf::{
    EbpfContext,
    bindings::BPF_NOEXIST,
    helpers::bpf_ktime_get_ns,
    macros::{map, uprobe},
    maps::{HashMap, PerCpuArray},
    programs::ProbeContext,
};
use srvprof_common::{HistSlots, MAX_TARGET_PROCESSES, NUM_GROUPS, PauseStats};

use crate::target::{group_of, record};

/// tgid -> when its world was stopped (absent: running).
#[map]
static PAUSE_START: HashMap<u32, u64> = HashMap::with_max_entries(MAX_TARGET_PROCESSES, 0);

/// tgid -> its pauses so far.
#[map]
static PAUSES: HashMap<u32, PauseStats> = HashMap::with_max_entries(MAX_TARGET_PROCESSES, 0);

/// Each group's pauses' lengths (ns, hist slots): how long a request that arrives in one waits.
#[map]
static PAUSE_HIST: PerCpuArray<HistSlots> = PerCpuArray::with_max_entries(NUM_GROUPS, 0);

#[uprobe]
pub fn world_stops(ctx: ProbeContext) -> u32 {
    let tgid = ctx.tgid();
    if group_of(tgid).is_some() {
        let now = unsafe { bpf_ktime_get_ns() };
        let _ = PAUSE_START.insert(&tgid, &now, 0);
    }
    0
}

#[uprobe]
pub fn world_starts(ctx: ProbeContext) -> u32 {
    let tgid = ctx.tgid();
    let Some(group) = group_of(tgid) else {
        return 0;
    };
    let Some(start) = (unsafe { PAUSE_START.get(&tgid) }).copied() else {
        return 0;
    };
    let _ = PAUSE_START.remove(&tgid);
    let paused = unsafe { bpf_ktime_get_ns() }.saturating_sub(start);
    record(&PAUSE_HIST, group, paused);
    if let Some(p) = PAUSES.get_ptr_mut(&tgid) {
        let p = unsafe { &mut *p };
        p.count += 1;
        p.total_ns += paused;
        if paused > p.max_ns {
            p.max_ns = paused;
        }
        return 0;
    }
    let first = PauseStats {
        count: 1,
        total_ns: paused,
        max_ns: paused,
        group,
        _pad: 0,
    };
    let _ = PAUSES.insert(&tgid, &first, BPF_NOEXIST as u64);
    0
}
