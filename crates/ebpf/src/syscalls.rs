//! Syscall counts and time per syscall number, for watched threads.

use aya_ebpf::{
    EbpfContext,
    helpers::bpf_ktime_get_ns,
    macros::{btf_tracepoint, map},
    maps::{HashMap, PerCpuHashMap},
    programs::BtfTracePointContext,
};
use srvprof_common::{CountTime, MAX_SYSCALL_KEYS, MAX_THREADS, SyscallKey, SyscallStart, lost};

use crate::target::{THREADS, count_lost, group_of};

/// tid -> the syscall it is in.
#[map]
static SYSCALL_START: HashMap<u32, SyscallStart> = HashMap::with_max_entries(MAX_THREADS, 0);

/// (group, syscall number) -> count and total time.
#[map]
static SYSCALLS: PerCpuHashMap<SyscallKey, CountTime> =
    PerCpuHashMap::with_max_entries(MAX_SYSCALL_KEYS, 0);

/// sys_enter(struct pt_regs *regs, long id)
#[btf_tracepoint(function = "sys_enter")]
pub fn sys_enter(ctx: BtfTracePointContext) -> i32 {
    let Some(group) = group_of(ctx.tgid()) else {
        return 0;
    };
    let nr: i64 = ctx.arg(1);
    let start = SyscallStart {
        start_ns: unsafe { bpf_ktime_get_ns() },
        nr: nr as u32,
        group,
    };
    if SYSCALL_START.insert(&ctx.pid(), &start, 0).is_err() {
        count_lost(lost::SYSCALL_MAP_FULL);
    }
    0
}

/// sys_exit(struct pt_regs *regs, long ret). Syscalls that never return (exit, exit_group) are not counted.
#[btf_tracepoint(function = "sys_exit")]
pub fn sys_exit(ctx: BtfTracePointContext) -> i32 {
    let tid = ctx.pid();
    let Some(start) = (unsafe { SYSCALL_START.get(&tid) }).copied() else {
        return 0;
    };
    let _ = SYSCALL_START.remove(&tid);
    let elapsed = unsafe { bpf_ktime_get_ns() }.saturating_sub(start.start_ns);
    let key = SyscallKey {
        group: start.group,
        nr: start.nr,
    };
    match SYSCALLS.get_ptr_mut(&key) {
        Some(ct) => unsafe {
            (*ct).count += 1;
            (*ct).total_ns += elapsed;
        },
        None => {
            let _ = SYSCALLS.insert(
                &key,
                &CountTime {
                    count: 1,
                    total_ns: elapsed,
                },
                0,
            );
        }
    }
    if let Some(st) = THREADS.get_ptr_mut(&tid) {
        unsafe {
            (*st).syscalls += 1;
            (*st).syscall_ns += elapsed;
        }
    }
    0
}
