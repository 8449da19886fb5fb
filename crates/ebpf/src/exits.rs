//! Watched threads that exit, with the exit code or the signal that killed them.

use aya_ebpf::{
    EbpfContext,
    helpers::bpf_ktime_get_ns,
    macros::{btf_tracepoint, map},
    maps::RingBuf,
    programs::BtfTracePointContext,
};
use srvprof_common::{EXIT_RING_BYTES, ExitEvent, lost};

use crate::target::{count_lost, current_comm, group_of, task_exit_code};

/// One record per exit: the event itself is the data, so a ring buffer, not a map.
#[map]
static EXITS: RingBuf = RingBuf::with_byte_size(EXIT_RING_BYTES, 0);

/// sched_process_exit(struct task_struct *p, ...): runs in the exiting task, after do_exit set exit_code.
#[btf_tracepoint(function = "sched_process_exit")]
pub fn sched_process_exit(ctx: BtfTracePointContext) -> i32 {
    let tgid = ctx.tgid();
    let Some(group) = group_of(tgid) else {
        return 0;
    };
    let task: *const u8 = ctx.arg(0);
    let event = ExitEvent {
        ts_ns: unsafe { bpf_ktime_get_ns() },
        tid: ctx.pid(),
        tgid,
        group,
        exit_code: task_exit_code(task).unwrap_or(0) as u32,
        comm: current_comm(),
    };
    if EXITS.output::<ExitEvent>(&event, 0).is_err() {
        count_lost(lost::EXIT_RING_FULL);
    }
    0
}
