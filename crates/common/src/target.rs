//! The watched processes and threads (ebpf/src/target.rs), shared by every program: which
//! processes are targets and in which group, each thread's figures, the events lost.

names! {
    maps: [TARGET_TGIDS, TARGET_BITMAP, THREADS, ZERO_THREAD, LOST_EVENTS],
    globals: [
        TASK_PID_OFFSET,
        TASK_TGID_OFFSET,
        TASK_COMM_OFFSET,
        TASK_EXIT_CODE_OFFSET,
        TASK_EXEC_RUNTIME_OFFSET,
        /// The groups whose stacks are taken, a bit per group (1 << GROUP_SERVER ...).
        STACK_GROUPS,
    ],
}

/// Upper bounds on map sizes.
/// TARGET_BITMAP words: one bit per tgid below 64 * 65536 = 4194304 (the largest pid_max).
pub const TARGET_BITMAP_WORDS: u32 = 65536;
pub const MAX_TARGET_PROCESSES: u32 = 4096;
pub const MAX_THREADS: u32 = 65536;
