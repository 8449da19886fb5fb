//! The syscall programs (ebpf/src/syscalls.rs): counts and times per syscall, asleep or not.

names! {
    maps: [SYSCALLS],
    globals: [REGS_ORIG_AX_OFFSET],
}

use crate::*;

/// Syscall numbers counted one by one; higher numbers share the last slot.
pub const MAX_SYSCALL_NR: u32 = 512;

/// One group's syscalls, indexed by number: one map value, so userspace reads a group with one
/// lookup instead of one per syscall number.
#[repr(C)]
#[derive(Clone, Copy, Debug)]
pub struct SyscallTable {
    pub by_nr: [SyscallSlot; MAX_SYSCALL_NR as usize],
}

/// One syscall number's figures while the syscall programs were attached: every call that
/// returned (count) and the time of those timed (total_ns), and, for the estimate that adds
/// the always-counted blocked periods (BlockedTable), the timed calls that did not block and the
/// timed calls' time outside their blocked periods.
#[repr(C)]
#[derive(Clone, Copy, Debug, Default, PartialEq, Eq)]
pub struct SyscallSlot {
    pub count: u64,
    pub total_ns: u64,
    pub unblocked: u64,
    pub rest_ns: u64,
}

/// One group's voluntary off-CPU periods inside syscalls, indexed by syscall number: counted by
/// sched_switch all along, in sampled mode too.
#[repr(C)]
#[derive(Clone, Copy, Debug)]
pub struct BlockedTable {
    pub by_nr: [CountTime; MAX_SYSCALL_NR as usize],
}

pod!(SyscallTable, SyscallSlot, BlockedTable);
