//! Syscall counts and time per syscall number, for watched threads.
//!
//! Every syscall on the machine passes through here, so the path is kept short: one lookup of
//! the process, then the thread's own slot holds the syscall in flight (no map insert or delete
//! per call), and the totals go to a per-CPU array indexed by group and syscall number.

use aya_ebpf::{
    helpers::bpf_ktime_get_ns,
    macros::{btf_tracepoint, map},
    maps::PerCpuArray,
    programs::BtfTracePointContext,
};
use srvprof_common::{CountTime, MAX_SYSCALL_NR, NUM_GROUPS};

use crate::target::watched_thread_current;

/// [group * MAX_SYSCALL_NR + nr] -> count and total time.
#[map]
static SYSCALLS: PerCpuArray<CountTime> =
    PerCpuArray::with_max_entries(MAX_SYSCALL_NR * NUM_GROUPS, 0);

/// sys_enter(struct pt_regs *regs, long id)
#[btf_tracepoint(function = "sys_enter")]
pub fn sys_enter(ctx: BtfTracePointContext) -> i32 {
    let Some(st) = watched_thread_current() else {
        return 0;
    };
    let nr: i64 = ctx.arg(1);
    st.syscall_nr = nr as u64;
    st.syscall_start_ns = unsafe { bpf_ktime_get_ns() };
    0
}

/// sys_exit(struct pt_regs *regs, long ret). Syscalls that never return (exit, exit_group) are not counted.
#[btf_tracepoint(function = "sys_exit")]
pub fn sys_exit(_ctx: BtfTracePointContext) -> i32 {
    let Some(st) = watched_thread_current() else {
        return 0;
    };
    if st.syscall_start_ns == 0 {
        return 0;
    }
    let elapsed = unsafe { bpf_ktime_get_ns() }.saturating_sub(st.syscall_start_ns);
    st.syscall_start_ns = 0;
    st.syscalls += 1;
    st.syscall_ns += elapsed;
    let nr = if st.syscall_nr < MAX_SYSCALL_NR as u64 {
        st.syscall_nr as u32
    } else {
        MAX_SYSCALL_NR - 1
    };
    if let Some(ct) = SYSCALLS.get_ptr_mut(st.group * MAX_SYSCALL_NR + nr) {
        unsafe {
            (*ct).count += 1;
            (*ct).total_ns += elapsed;
        }
    }
    0
}
