//! Syscall counts and time per syscall number, for watched threads.
//!
//! Every syscall on the machine passes through here, so the path is kept short: one lookup of
//! the process, then the thread's own slot holds the syscall in flight (no map insert or delete
//! per call), and the totals go to a per-CPU array indexed by group and syscall number.
//!
//! A syscall is counted when it returns. One that began before the programs were attached (at
//! start, or before a sampled window opened) is counted with its number from the registers, but
//! not timed: its start was not seen.
//!
//! The time a syscall spends asleep is counted all along by sched_switch (sched.rs, the
//! BLOCKED_SYSCALLS table), in sampled mode too; so beside each call's count and time these
//! programs record what sampled mode scales up: the timed calls that did not block, and the
//! timed calls' time outside their blocked periods.

use aya_ebpf::{
    helpers::bpf_ktime_get_ns,
    macros::{btf_tracepoint, map},
    maps::PerCpuArray,
    programs::BtfTracePointContext,
};
use srvprof_common::{MAX_SYSCALL_NR, NUM_GROUPS, SyscallTable};

use crate::target::{global, read_field, watched_thread_current};
use crate::window;

/// [group].by_nr[nr] -> count and total time.
#[map]
static SYSCALLS: PerCpuArray<SyscallTable> = PerCpuArray::with_max_entries(NUM_GROUPS, 0);

/// Offset of pt_regs.orig_ax (the syscall number), set by userspace from BTF.
#[unsafe(no_mangle)]
static REGS_ORIG_AX_OFFSET: u64 = 0;

/// sys_enter(struct pt_regs *regs, long id)
#[btf_tracepoint(function = "sys_enter")]
pub fn sys_enter(ctx: BtfTracePointContext) -> i32 {
    if window::programs_empty() {
        return 0;
    }
    let Some(st) = watched_thread_current() else {
        return 0;
    };
    let nr: i64 = ctx.arg(1);
    st.syscall_nr = nr as u64;
    st.blocked_ns_at_enter = st.syscall_blocked_ns;
    st.syscall_start_ns = unsafe { bpf_ktime_get_ns() };
    0
}

/// sys_exit(struct pt_regs *regs, long ret). Syscalls that never return (exit, exit_group) are not counted.
#[btf_tracepoint(function = "sys_exit")]
pub fn sys_exit(ctx: BtfTracePointContext) -> i32 {
    if window::programs_empty() {
        return 0;
    }
    let Some(st) = watched_thread_current() else {
        return 0;
    };
    let start = st.syscall_start_ns;
    st.syscall_start_ns = 0;
    let now = unsafe { bpf_ktime_get_ns() };
    let from = window::start_ns();
    if now < from {
        return 0;
    }
    // (number, weighted time, did not block, weighted time outside its blocked periods)
    let (nr, elapsed, unblocked, rest) = if start != 0 && start >= from {
        let d = now.saturating_sub(start);
        let blocked = st.syscall_blocked_ns.saturating_sub(st.blocked_ns_at_enter);
        let (elapsed, rest) = window::weighted_with_part(d, d.saturating_sub(blocked));
        (st.syscall_nr, elapsed, (blocked == 0) as u64, rest)
    } else {
        let regs: *const u8 = ctx.arg(0);
        let nr: i64 = read_field(regs, global(&REGS_ORIG_AX_OFFSET)).unwrap_or(-1);
        (nr as u64, 0, 0, 0)
    };
    st.syscalls += 1;
    st.syscall_ns += elapsed;
    st.syscalls_unblocked += unblocked;
    st.syscall_rest_ns += rest;
    let nr = if nr < MAX_SYSCALL_NR as u64 {
        nr as u32
    } else {
        MAX_SYSCALL_NR - 1
    };
    if let Some(table) = SYSCALLS.get_ptr_mut(st.group) {
        if let Some(slot) = unsafe { (*table).by_nr.get_mut(nr as usize) } {
            slot.count += 1;
            slot.total_ns += elapsed;
            slot.unblocked += unblocked;
            slot.rest_ns += rest;
        }
    }
    0
}
