//! Record layouts shared by the BPF programs (crates/ebpf) and userspace (crates/profiler).
//!
//! Everything a map holds or a ring buffer carries is defined here once, `#[repr(C)]`,
//! so both sides agree on the bytes: each probe family's in the file named as its BPF
//! programs' (sched.rs, syscalls.rs, irq.rs, tcp.rs, exits.rs, stacks.rs, pauses.rs), what
//! they share here (groups, targets, map and global names, the trace window, lost events).
#![no_std]

pub mod hist;

mod exits;
mod irq;
mod pauses;
mod sched;
mod stacks;
mod syscalls;
pub mod tcp;

pub use exits::*;
pub use irq::*;
pub use pauses::*;
pub use sched::*;
pub use stacks::*;
pub use syscalls::*;
pub use tcp::{
    AcceptCount, FdKey, MAX_PORTS, OutboundCount, OutboundFd, OutboundKey, OutboundSocket,
    TcpResetKey,
};

/// Which side of a run a watched process belongs to.
pub const GROUP_SERVER: u32 = 0;
pub const GROUP_CLIENT: u32 = 1;
pub const NUM_GROUPS: u32 = 2;

/// Upper bounds on map sizes.
/// TARGET_BITMAP words: one bit per tgid below 64 * 65536 = 4194304 (the largest pid_max).
pub const TARGET_BITMAP_WORDS: u32 = 65536;
pub const MAX_TARGET_PROCESSES: u32 = 4096;
pub const MAX_THREADS: u32 = 65536;

/// Declares each name as a `&str` equal to its identifier, the name of the BPF side's static it
/// stands for, and ALL, every one of them: a name is written once, and a unit test in the
/// profiler checks ALL against the built object.
macro_rules! names {
    ($($(#[$doc:meta])* $name:ident),* $(,)?) => {
        $($(#[$doc])* pub const $name: &str = stringify!($name);)*
        /// Every name of this module.
        pub const ALL: &[&str] = &[$($name),*];
    };
}

/// Names of the globals userspace sets before loading: field offsets read from the kernel's BTF,
/// because these programs have no CO-RE relocation support.
pub mod globals {
    names!(
        TASK_PID_OFFSET,
        TASK_TGID_OFFSET,
        TASK_COMM_OFFSET,
        TASK_EXIT_CODE_OFFSET,
        TASK_EXEC_RUNTIME_OFFSET,
        REGS_ORIG_AX_OFFSET,
        SOCK_STATE_OFFSET,
        SOCK_NUM_OFFSET,
        SOCK_DPORT_OFFSET,
        /// inet_sock.inet_sport: a full socket's own port, kept after close zeroes skc_num.
        INET_SPORT_OFFSET,
        /// sk_buff.data: where a received segment's TCP header starts when tcp_send_reset has no
        /// socket.
        SKB_DATA_OFFSET,
        /// The kernel's TCP_SYN_SENT state number (from its BTF enum of TCP states).
        TCP_STATE_SYN_SENT,
        /// The kernel's TCP_CLOSE state number.
        TCP_STATE_CLOSE,
        /// The kernel's TCP_ESTABLISHED and TCP_SYN_RECV state numbers: a passive open's
        /// handshake ends (its connection joins the accept queue) on that move.
        TCP_STATE_ESTABLISHED,
        TCP_STATE_SYN_RECV,
        /// sock_common's skc_family, skc_daddr and skc_v6_daddr: where a socket connects to.
        SOCK_FAMILY_OFFSET,
        SOCK_DADDR_OFFSET,
        SOCK_V6_DADDR_OFFSET,
        /// task_struct.files, files_struct.fdt, fdtable.max_fds and .fd, file.f_inode and
        /// .private_data, inode.i_mode, socket.sk: from a file descriptor to its socket.
        TASK_FILES_OFFSET,
        FILES_FDT_OFFSET,
        FDTABLE_MAX_FDS_OFFSET,
        FDTABLE_FD_OFFSET,
        FILE_INODE_OFFSET,
        INODE_MODE_OFFSET,
        FILE_PRIVATE_DATA_OFFSET,
        SOCKET_SK_OFFSET,
        /// The groups whose stacks are taken, a bit per group (1 << GROUP_SERVER ...).
        STACK_GROUPS,
        /// Non-zero: the windowed syscall and softirq programs return at once (a measurement of
        /// what the kernel's traced path and the programs' dispatch cost alone).
        WINDOW_PROGRAMS_EMPTY,
    );
}

/// Names of the maps: userspace finds the ones it reads by them; the rest are the programs' own.
pub mod maps {
    names!(
        TARGET_TGIDS,
        TARGET_BITMAP,
        THREADS,
        GROUP_SWITCHES,
        GROUP_ONCPU,
        RUNNING,
        OFFCPU_HIST,
        RUNQ_HIST,
        SYSCALLS,
        BLOCKED_SYSCALLS,
        WAKEUPS,
        RUNQ_HOLDERS,
        DISK_WAITS,
        LOCK_WAITS,
        PAUSES,
        PAUSE_START,
        SOFTIRQS,
        HARDIRQS,
        HARDIRQ_START,
        TCP_COUNTERS,
        TCP_PORTS,
        TCP_PORT_BITS,
        TCP_RESETS,
        OUTBOUND,
        OUTBOUND_SOCKETS,
        OUTBOUND_FDS,
        ACCEPT_QUEUE,
        ACCEPT_PENDING,
        ACCEPT_PENDING_COUNT,
        ACCEPT_TIMED_SINCE,
        ACCEPT_HIST,
        EXITS,
        LOST_EVENTS,
        STACK_TRACES,
        ONCPU_STACKS,
        OFFCPU_STACKS,
        OFFCPU_START,
        USER_STACK_SAMPLES,
        STACK_COPY_HINTS,
        TRACE_WINDOW,
    );
}

/// Indexes into TRACE_WINDOW, which userspace writes before it attaches the syscall and softirq
/// programs for a window (sampled mode; in exact mode both stay 0: attached all along).
pub mod window {
    /// bpf_ktime_get_ns() when the window's syscall count began, right before userspace read
    /// what the counts are scaled by: a syscall that returns before it is not counted, one that
    /// began before it is counted but not timed (its start was not seen). u64::MAX while the
    /// programs are being attached.
    pub const START_NS: u32 = 0;
    /// The window's length; 0 in exact mode.
    pub const LEN_NS: u32 = 1;
    /// The softirqs timed are those that begin in [SOFTIRQ_FROM_NS, SOFTIRQ_UNTIL_NS) (0: no
    /// end), the span over which userspace counts the packets they are divided by: the programs
    /// are attached a few hundred microseconds before it and detached after it.
    pub const SOFTIRQ_FROM_NS: u32 = 2;
    pub const SOFTIRQ_UNTIL_NS: u32 = 3;
    pub const COUNT: u32 = 4;
}

/// Count and total time of one event kind (a syscall, an interrupt vector or line).
#[repr(C)]
#[derive(Clone, Copy, Debug, Default, PartialEq, Eq)]
pub struct CountTime {
    pub count: u64,
    pub total_ns: u64,
}

/// One group's log-linear histogram (hist slots): one map value, read with one lookup.
#[repr(C)]
#[derive(Clone, Copy, Debug)]
pub struct HistSlots {
    pub slots: [u64; hist::SLOTS as usize],
}

/// Indexes into LOST_EVENTS: records the kernel could not hand over.
pub mod lost {
    pub const EXIT_RING_FULL: u32 = 0;
    pub const THREADS_MAP_FULL: u32 = 1;
    /// A stack whose hash bucket in STACK_TRACES held another stack (off-CPU stacks, and on-CPU
    /// samples the ring had no room for): shown as a frame saying so. Reported apart from the
    /// losses (stack_ids_collided): the sample itself is kept.
    pub const STACK_TRACES_FULL: u32 = 2;
    /// A new (process, thread name, stacks) key found ONCPU_STACKS or OFFCPU_STACKS full.
    pub const STACK_KEYS_FULL: u32 = 3;
    /// A switched-out thread found OFFCPU_START full: that off-CPU period has no stack.
    pub const OFFCPU_START_FULL: u32 = 4;
    pub const WAKEUPS_MAP_FULL: u32 = 5;
    /// A watched thread ran without a sched_switch event naming it as next (the kernel does not
    /// always emit one; bpftrace sees the same). Its on- and off-CPU time were then taken from the
    /// scheduler's sum_exec_runtime instead: nothing is lost, this counts how often.
    pub const SWITCH_INS_UNSEEN: u32 = 6;
    /// A new (side, direction, state, reason) key found TCP_RESETS full: that reset is in the
    /// side's total (TCP_COUNTERS) but not in the breakdown.
    pub const TCP_RESETS_MAP_FULL: u32 = 7;
    /// An on-CPU sample found the user-stack ring full: it is counted in the kernel with the
    /// frame-pointer walk of its user stack instead (not a loss: the unwind quality shows it).
    pub const USER_STACK_RING_FULL: u32 = 8;
    /// A new (CPU holder, group) key found RUNQ_HOLDERS full: that wait is in the run-queue
    /// figures but not in who held the CPU.
    pub const RUNQ_HOLDERS_MAP_FULL: u32 = 9;
    /// A new (process, syscall, fd) key found DISK_WAITS full: that uninterruptible sleep is in
    /// the off-CPU figures but not in the disk waits.
    pub const DISK_WAITS_MAP_FULL: u32 = 10;
    /// A new (process, futex word, waiter, holder) key found LOCK_WAITS full: that wait is in
    /// the off-CPU figures but not in the lock waits.
    pub const LOCK_WAITS_MAP_FULL: u32 = 11;
    /// A server's connect() found OUTBOUND or OUTBOUND_SOCKETS full: that connection is not
    /// among its outbound ones.
    pub const OUTBOUND_MAP_FULL: u32 = 12;
    /// A new connection found ACCEPT_PENDING full, or its first read ACCEPT_QUEUE full: that
    /// connection's wait to be taken is not counted.
    pub const ACCEPT_MAP_FULL: u32 = 13;
    pub const COUNT: u32 = 14;
}

#[cfg(feature = "user")]
mod pod {
    use super::*;
    // SAFETY: all are #[repr(C)] plain integers and byte arrays with no padding holes read as values.
    unsafe impl aya::Pod for ThreadStats {}
    unsafe impl aya::Pod for StackCopyHint {}
    unsafe impl aya::Pod for CountTime {}
    unsafe impl aya::Pod for SyscallTable {}
    unsafe impl aya::Pod for SyscallSlot {}
    unsafe impl aya::Pod for BlockedTable {}
    unsafe impl aya::Pod for HistSlots {}
    unsafe impl aya::Pod for WakeKey {}
    unsafe impl aya::Pod for WakeCount {}
    unsafe impl aya::Pod for HolderKey {}
    unsafe impl aya::Pod for RunningSlot {}
    unsafe impl aya::Pod for OutboundKey {}
    unsafe impl aya::Pod for OutboundCount {}
    unsafe impl aya::Pod for FdKey {}
    unsafe impl aya::Pod for OutboundFd {}
    unsafe impl aya::Pod for HolderWait {}
    unsafe impl aya::Pod for DiskWaitKey {}
    unsafe impl aya::Pod for LockWaitKey {}
    unsafe impl aya::Pod for LockWait {}
    unsafe impl aya::Pod for PauseStats {}
    unsafe impl aya::Pod for SoftirqSlot {}
    unsafe impl aya::Pod for ExitEvent {}
    unsafe impl aya::Pod for StackKey {}
    unsafe impl aya::Pod for UserStackSample {}
    unsafe impl aya::Pod for OffcpuTime {}
    unsafe impl aya::Pod for TcpResetKey {}
    unsafe impl aya::Pod for AcceptCount {}
}
