//! Record layouts shared by the BPF programs (crates/ebpf) and userspace (crates/profiler).
//!
//! Everything a map holds or a ring buffer carries is defined here once, `#[repr(C)]`,
//! so both sides agree on the bytes.
#![no_std]

pub mod hist;

/// Which side of a run a watched process belongs to.
pub const GROUP_SERVER: u32 = 0;
pub const GROUP_CLIENT: u32 = 1;
pub const NUM_GROUPS: u32 = 2;

/// Upper bounds on map sizes.
/// TARGET_BITMAP words: one bit per tgid below 64 * 65536 = 4194304 (the largest pid_max).
pub const TARGET_BITMAP_WORDS: u32 = 65536;
pub const MAX_TARGET_PROCESSES: u32 = 4096;
pub const MAX_THREADS: u32 = 65536;
/// Syscall numbers counted one by one; higher numbers share the last slot.
pub const MAX_SYSCALL_NR: u32 = 512;
/// Distinct (waker thread, woken thread) pairs kept per run.
pub const MAX_WAKE_PAIRS: u32 = 16384;
pub const MAX_IRQS: u32 = 1024;
pub const MAX_PORTS: u32 = 64;
pub const EXIT_RING_BYTES: u32 = 256 * 1024;
/// Distinct stacks (user and kernel together) the STACK_TRACES map can hold.
pub const MAX_STACK_TRACES: u32 = 8192;
/// Distinct (process, thread name, user stack, kernel stack) keys per stack-count map.
pub const MAX_STACK_KEYS: u32 = 16384;
/// Frames kept per stack (the kernel's PERF_MAX_STACK_DEPTH).
pub const MAX_STACK_DEPTH: usize = 127;
/// At most this many bytes of a sampled thread's user stack are copied from its stack pointer
/// up, for unwinding in user space from the binary's CFI (.eh_frame): frames whose part of the
/// stack lies beyond are cut off (the stack is then reported as not reaching the thread's
/// start). Fewer once the thread's stacks are known to need fewer (StackCopyHint).
pub const USER_STACK_BYTES: usize = 65536;
/// The ring the on-CPU samples with their stack copies go through: room for 250 whole copies,
/// 1.3 s of on-CPU samples at 99 Hz on 2 CPUs, between two drains (srvprof drains it every
/// 20 ms).
pub const USER_STACK_RING_BYTES: u32 = 16 * 1024 * 1024;

/// Number of softirq vectors (HI, TIMER, NET_TX, NET_RX, BLOCK, IRQ_POLL, TASKLET, SCHED, HRTIMER, RCU).
pub const NR_SOFTIRQS: u32 = 10;
pub const SOFTIRQ_NAMES: [&str; NR_SOFTIRQS as usize] = [
    "HI", "TIMER", "NET_TX", "NET_RX", "BLOCK", "IRQ_POLL", "TASKLET", "SCHED", "HRTIMER", "RCU",
];

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
        /// The groups whose stacks are taken, a bit per group (1 << GROUP_SERVER ...).
        STACK_GROUPS,
    );
}

/// Names of the maps: userspace finds the ones it reads by them; the rest are the programs' own.
pub mod maps {
    names!(
        TARGET_TGIDS,
        TARGET_BITMAP,
        THREADS,
        GROUP_SWITCHES,
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
        TCP_RESETS,
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

/// Per-thread scheduler and syscall figures, cumulative since the thread was first seen,
/// plus the timestamps the programs need between events.
#[repr(C)]
#[derive(Clone, Copy, Debug, Default, PartialEq, Eq)]
pub struct ThreadStats {
    pub tgid: u32,
    pub group: u32,
    pub voluntary_switches: u64,
    pub involuntary_switches: u64,
    pub oncpu_ns: u64,
    pub offcpu_ns: u64,
    pub runq_ns: u64,
    pub runq_count: u64,
    pub migrations: u64,
    pub syscalls: u64,
    pub syscall_ns: u64,
    /// Bit n set: the thread ran on CPU n (CPUs 0..63).
    pub cpu_mask: u64,
    pub last_switch_in_ns: u64,
    pub last_switch_out_ns: u64,
    /// When the thread became runnable and started waiting for a CPU; 0 when not waiting.
    pub runnable_since_ns: u64,
    /// The task's sum_exec_runtime at its last switch-out (0: not yet read).
    pub exec_at_switch_out_ns: u64,
    /// The syscall in flight: when it was entered (0: none) and its number.
    pub syscall_start_ns: u64,
    pub syscall_nr: u64,
    /// Always counted (sched_switch): the thread's voluntary off-CPU periods inside a syscall
    /// (switched out asleep with a syscall's number in its user registers), and their time from
    /// switch-out to switch-in. Counted at the switch-in, so with the syscall's return, as a
    /// syscall tracer would count it.
    pub syscalls_blocked: u64,
    pub syscall_blocked_ns: u64,
    /// The syscall the thread went to sleep in at its last switch-out, plus one (0: it was not
    /// asleep in a syscall).
    pub blocked_nr: u64,
    /// Sampled windows: syscall_blocked_ns when the syscall in flight was entered.
    pub blocked_ns_at_enter: u64,
    /// Sampled windows: the timed syscalls that did not block, and every timed syscall's time
    /// outside its blocked periods (weighted as window::weighted weights the whole call).
    pub syscalls_unblocked: u64,
    pub syscall_rest_ns: u64,
    /// Off-CPU stacks: user stack walks in a row that failed, finding no frame or a stack that
    /// collided in the map (a binary built without frame pointers, like Debian's nginx, gives
    /// either). Past USER_STACK_MISS_LIMIT only one walk in USER_STACK_RETRY_EVERY is tried:
    /// each failed walk costs ~2 us at every switch-out.
    pub user_stack_misses: u64,
    /// Set when the thread last switched out in uninterruptible sleep (TASK_UNINTERRUPTIBLE: disk
    /// I/O, a page fault's read, a kernel lock), with the file descriptor its syscall was given
    /// (-1: none, or not in a syscall): its time until the switch-in goes to DISK_WAITS.
    pub uninterruptible: u32,
    pub blocked_fd: i32,
    /// Set when the thread last switched out asleep in futex(2): the futex word's address (the
    /// syscall's first argument; 0: not in a futex wait). The thread charged with the wait is
    /// set when it is woken (futex_holder, 0: not yet), and its wait goes to LOCK_WAITS at the
    /// switch-in.
    pub futex_uaddr: u64,
    pub futex_holder: u32,
    pub futex_holder_tgid: u32,
    /// 1 when that wait followed a lock's protocol (futex_lock_protocol), else 0.
    pub futex_lock: u32,
    pub _pad_futex: u32,
    /// The thread its last futex wait was charged to (0: it has slept otherwise since; a
    /// preemption keeps it), when that wait ended and the thread's run-queue total then. A
    /// thread that passes a lock on within LOCK_CONVOY_NS of running after getting it passes
    /// this on, so a queue of waiters behind one long holder is charged to that holder.
    pub lock_root: u32,
    pub lock_root_tgid: u32,
    pub lock_root_since_ns: u64,
    pub lock_root_runq_ns: u64,
    /// Memory reclaimed by the thread itself (direct or memcg reclaim): how often, for how long,
    /// and when the one in progress began (0: none).
    pub reclaims: u64,
    pub reclaim_ns: u64,
    pub reclaim_start_ns: u64,
    pub comm: [u8; 16],
}

/// A thread woken from a futex wait that wakes another waiter within this long of running since
/// (the wall time less its run-queue waits) only passed the lock on (took it, did a little, let
/// it go): the new waiter's wait is charged to whoever the first one's wait was.
pub const LOCK_CONVOY_NS: u64 = 50_000;

/// futex(2)'s number on x86-64, plus one (ThreadStats.blocked_nr's encoding).
pub const FUTEX_SLOT: u64 = 202 + 1;

/// Whether a futex(2) call with operation `op` (its second argument) and value `val` (its third)
/// waits the way a lock's waiters do: FUTEX_WAIT or FUTEX_WAIT_BITSET on the value 2 ("locked,
/// with waiters", the contended state of glibc's pthread mutexes, Rust's std Mutex and Go's
/// runtime locks alike), or FUTEX_LOCK_PI / FUTEX_LOCK_PI2 (priority-inheritance mutexes).
/// A condition variable's, a parked thread's or an event's wait uses other values.
pub fn futex_lock_protocol(op: u64, val: u64) -> bool {
    const CMD_MASK: u64 = 0x7f;
    const FUTEX_WAIT: u64 = 0;
    const FUTEX_LOCK_PI: u64 = 6;
    const FUTEX_WAIT_BITSET: u64 = 9;
    const FUTEX_LOCK_PI2: u64 = 13;
    match op & CMD_MASK {
        FUTEX_WAIT | FUTEX_WAIT_BITSET => val as u32 == 2,
        FUTEX_LOCK_PI | FUTEX_LOCK_PI2 => true,
        _ => false,
    }
}

pub const USER_STACK_MISS_LIMIT: u64 = 16;
pub const USER_STACK_RETRY_EVERY: u64 = 64;

/// Who woke a watched thread: the task running when the wakeup was issued (sched_waking fires in
/// the waker's context; an interrupt's wakeup names the task it interrupted, often the idle task).
#[repr(C)]
#[derive(Clone, Copy, Debug, Default, PartialEq, Eq, Hash)]
pub struct WakeKey {
    pub waker_tid: u32,
    pub wakee_tid: u32,
}

#[repr(C)]
#[derive(Clone, Copy, Debug, Default, PartialEq, Eq)]
pub struct WakeCount {
    pub count: u64,
    pub waker_tgid: u32,
    /// The woken thread's group (server or client).
    pub wakee_group: u32,
    pub waker_comm: [u8; 16],
}

/// Who held a CPU when a watched thread's wait for it ended: the task switched out as the thread
/// switched in (sched_switch's prev), keyed with the waiting thread's group.
#[repr(C)]
#[derive(Clone, Copy, Debug, Default, PartialEq, Eq, Hash)]
pub struct HolderKey {
    pub holder_tid: u32,
    pub group: u32,
}

#[repr(C)]
#[derive(Clone, Copy, Debug, Default, PartialEq, Eq)]
pub struct HolderWait {
    /// Waits that ended with this task giving up the CPU, and their summed length (ns).
    pub waits: u64,
    pub wait_ns: u64,
    pub holder_tgid: u32,
    pub _pad: u32,
    pub holder_comm: [u8; 16],
}

pub const MAX_RUNQ_HOLDERS: u32 = 4096;

/// A watched process's uninterruptible sleeps: in which syscall (its number plus one; 0 when not
/// in a syscall, as in a page fault) on which file descriptor (-1 when the syscall takes none).
#[repr(C)]
#[derive(Clone, Copy, Debug, Default, PartialEq, Eq, Hash)]
pub struct DiskWaitKey {
    pub tgid: u32,
    pub group: u32,
    pub nr_slot: u32,
    pub fd: i32,
}

pub const MAX_DISK_WAITS: u32 = 4096;

/// A watched thread's futex waits: on which futex word, charged to which thread (the one that
/// woke it, or the holder at the head of the queue it waited in: ThreadStats.lock_root).
#[repr(C)]
#[derive(Clone, Copy, Debug, Default, PartialEq, Eq, Hash)]
pub struct LockWaitKey {
    pub tgid: u32,
    pub group: u32,
    pub uaddr: u64,
    pub waiter_tid: u32,
    pub holder_tid: u32,
    /// 1: the waits followed a lock's protocol (futex_lock_protocol).
    pub lock_protocol: u32,
    pub _pad: u32,
}

#[repr(C)]
#[derive(Clone, Copy, Debug, Default, PartialEq, Eq)]
pub struct LockWait {
    /// Waits and their summed length (ns, switch-out to switch-in).
    pub waits: u64,
    pub wait_ns: u64,
    pub holder_tgid: u32,
    pub _pad: u32,
}

pub const MAX_LOCK_WAITS: u32 = 4096;

/// A watched process's stop-the-world pauses so far (pauses.rs): how many, their summed and
/// longest length (ns).
#[repr(C)]
#[derive(Clone, Copy, Debug, Default, PartialEq, Eq)]
pub struct PauseStats {
    pub count: u64,
    pub total_ns: u64,
    pub max_ns: u64,
    pub group: u32,
    pub _pad: u32,
}

/// Count and total time of one event kind (a syscall, an interrupt vector or line).
#[repr(C)]
#[derive(Clone, Copy, Debug, Default, PartialEq, Eq)]
pub struct CountTime {
    pub count: u64,
    pub total_ns: u64,
}

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

/// One group's log-linear histogram (hist slots): one map value, read with one lookup.
#[repr(C)]
#[derive(Clone, Copy, Debug)]
pub struct HistSlots {
    pub slots: [u64; hist::SLOTS as usize],
}

/// One softirq vector on one CPU: count and time, and when the running one started (0: none).
#[repr(C)]
#[derive(Clone, Copy, Debug, Default, PartialEq, Eq)]
pub struct SoftirqSlot {
    pub count: u64,
    pub total_ns: u64,
    pub start_ns: u64,
}

/// TCP counters by side. A socket's side comes from the watched ports (TCP_PORTS, the server's
/// listening ports): its own (local) port watched is the server's side, its peer's (remote) port
/// watched is a client's (the load generator's in `srvprof run`), neither is OTHER.
pub mod tcp {
    use super::{GROUP_CLIENT, GROUP_SERVER};

    pub const SIDE_SERVER: u32 = GROUP_SERVER;
    pub const SIDE_CLIENT: u32 = GROUP_CLIENT;
    /// Neither port watched (every socket when no port is), or a reset with no socket.
    pub const SIDE_OTHER: u32 = 2;
    pub const SIDES: u32 = 3;

    /// Counters of one side; TCP_COUNTERS holds them at `index(side, counter)`.
    pub const RETRANSMITS: u32 = 0;
    pub const SYN_RETRANSMITS: u32 = 1;
    pub const SYNACK_RETRANSMITS: u32 = 2;
    pub const RESETS_SENT: u32 = 3;
    pub const RESETS_RECEIVED: u32 = 4;
    pub const COUNT: u32 = 5;

    pub const fn index(side: u32, counter: u32) -> u32 {
        side * COUNT + counter
    }

    /// TcpResetKey::direction.
    pub const SENT: u8 = 0;
    pub const RECEIVED: u8 = 1;
    /// TcpResetKey::state of a reset sent with no socket (the kernel's states start at 1).
    pub const STATE_NO_SOCKET: u8 = 0;
    /// TcpResetKey::reason of a received reset (the kernel gives no reason for those).
    pub const REASON_NONE: u32 = u32::MAX;
    /// Distinct (side, direction, state, reason) keys TCP_RESETS holds (server and client sides).
    pub const MAX_RESET_KEYS: u32 = 1024;
}

/// A TCP_RESETS key: resets a side sent or received, by the socket's TCP state (the kernel's
/// numbers) and, for sent ones, the kernel's enum sk_rst_reason (numbers named from BTF).
#[repr(C)]
#[derive(Clone, Copy, Debug, Default, PartialEq, Eq, Hash, PartialOrd, Ord)]
pub struct TcpResetKey {
    pub side: u8,
    pub direction: u8,
    pub state: u8,
    pub pad: u8,
    pub reason: u32,
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
    pub const COUNT: u32 = 12;
}

/// A watched thread exited. `exit_code` is the kernel's task->exit_code:
/// the low 7 bits are the killing signal, bits 8..15 the exit status.
#[repr(C)]
#[derive(Clone, Copy, Debug, Default)]
pub struct ExitEvent {
    pub ts_ns: u64,
    pub tid: u32,
    pub tgid: u32,
    pub group: u32,
    pub exit_code: u32,
    pub comm: [u8; 16],
}

/// Where samples or off-CPU time are counted: one process's thread name and its two stacks.
/// A stack id is an index into STACK_TRACES, negative when the kernel could not take that stack:
/// -1 when there was none to take (a sample in user mode has no kernel stack),
/// [`STACK_ID_COLLIDED`] when it was taken but its bucket held another stack.
#[repr(C)]
#[derive(Clone, Copy, Debug, Default, PartialEq, Eq, Hash)]
pub struct StackKey {
    pub tgid: u32,
    pub group: u32,
    pub user_stack_id: i32,
    pub kernel_stack_id: i32,
    pub comm: [u8; 16],
}

/// A stack the kernel walked but could not keep: STACK_TRACES is a hash table of one stack per
/// bucket, and this stack's bucket held another. Shown as a kernel frame saying so, so that a
/// sample taken in the kernel is not put under the user code it interrupted.
pub const STACK_ID_COLLIDED: i32 = -2;

/// An on-CPU sample of a watched thread, for unwinding in user space: its kernel stack's frames
/// (on-CPU) or id (off-CPU), its user registers at the moment it was interrupted or entered the
/// kernel, and a copy of its user stack from `sp` up.
#[repr(C)]
#[derive(Clone, Copy)]
pub struct UserStackSample {
    pub key: StackKey,
    pub tid: u32,
    /// Bytes of `stack` filled, from `sp` up (0 when the first page could not be read).
    pub stack_len: u32,
    /// Frames of `kernel` filled, leaf first: an on-CPU sample's kernel stack, carried here
    /// rather than interned in STACK_TRACES, whose buckets collide as distinct stacks pile up
    /// (measured: 43 of 428 samples of a TLS server lost their kernel stack that way). 0 for a
    /// sample taken in user mode, and for an off-CPU period, whose key holds its kernel stack's id.
    pub kernel_len: u32,
    pub _pad: u32,
    pub kernel: [u64; MAX_STACK_DEPTH],
    pub ip: u64,
    pub sp: u64,
    pub bp: u64,
    /// 0 for an on-CPU sample; else this off-CPU period's id, which its OffcpuTime names when
    /// the period ends.
    pub seq: u64,
    /// When it was taken (the sample's interrupt, or the switch-out), CLOCK_MONOTONIC ns.
    pub time_ns: u64,
    pub stack: [u8; USER_STACK_BYTES],
}

/// How much of a thread's user stack a sample copies, as user space learned it from the thread's
/// unwound stacks (absent: USER_STACK_BYTES from the stack pointer up).
#[repr(C)]
#[derive(Clone, Copy, Debug, Default, PartialEq, Eq)]
pub struct StackCopyHint {
    /// At most this many bytes from the stack pointer up: the deepest its unwinding has read,
    /// with a margin.
    pub bytes: u32,
    pub _pad: u32,
    /// Nonzero: the address just past the outermost frame its complete stacks reached (main,
    /// start_thread), with a margin. A copy from a stack pointer below it ends there, not `bytes`
    /// up: what lies above is the thread's start (argv and the environment for the main thread),
    /// not frames. 0 for a thread seen on more than one stack (a runtime that switches stacks).
    pub end: u64,
}

/// The end of an off-CPU period whose stacks were sent as a UserStackSample (same ring, told
/// apart by its size): its time off the CPU, and how many of the thread's periods it stands for
/// (the inverse of the chance it had to be sent).
#[repr(C)]
#[derive(Clone, Copy, Debug, Default)]
pub struct OffcpuTime {
    pub seq: u64,
    pub off_ns: u64,
    pub weight: u64,
    /// When the period ended (the switch-in's first switch-out after), CLOCK_MONOTONIC ns.
    pub end_ns: u64,
}

/// A watched thread's off-CPU stacks are taken (the kernel's, and a copy of the user stack for
/// unwinding) for about this many periods per second at most: each period with probability
/// 1/N, N set from the thread's switch rate over the last OFFCPU_RATE_WINDOW_NS (1 for a thread
/// that switches less often: every period), each drawn one standing for N. A draw, not the
/// first switch-out after a pause: that one follows a long run, and a preempted thread that ran
/// long waits long (measured: 3x its off-CPU time).
pub const OFFCPU_UNWIND_PER_S: u64 = 50;
pub const OFFCPU_RATE_WINDOW_NS: u64 = 20_000_000;
/// N for a thread's first rate window, before its rate is known.
pub const OFFCPU_UNWIND_FIRST_EVERY: u64 = 4;

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
}

#[cfg(test)]
mod tests {
    use super::futex_lock_protocol;

    #[test]
    fn a_lock_waits_on_its_contended_value_a_condvar_on_others() {
        const PRIVATE: u64 = 128;
        // glibc's __lll_lock_wait: FUTEX_WAIT_PRIVATE on 2; Rust's std Mutex: FUTEX_WAIT_BITSET.
        assert!(futex_lock_protocol(PRIVATE, 2));
        assert!(futex_lock_protocol(9 | PRIVATE, 2));
        // FUTEX_LOCK_PI takes no value.
        assert!(futex_lock_protocol(6 | PRIVATE, 0));
        // Go's notesleep waits on 0; a condvar on its sequence number; FUTEX_WAKE is no wait.
        assert!(!futex_lock_protocol(PRIVATE, 0));
        assert!(!futex_lock_protocol(9 | PRIVATE, 7));
        assert!(!futex_lock_protocol(1 | PRIVATE, 2));
    }
}
